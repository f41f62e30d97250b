/**
 * The media part of the store contract (docs/media-identity.md, DESIGN
 * invariants 11–13), run against every backend: tenant data is followed by
 * the identity of the media, not by a PCI address or one database.
 */

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { CleanupEvent } from '../domain/cleanup.js';
import { allocatable, type DeviceFacts, type DeviceRecord } from '../domain/device-state.js';
import { facts, hostName, instanceId, nvmeMedia, PROOF, pci, pciFacts } from '../domain/fixtures.support.js';
import type { HostRegistration } from '../domain/host.js';
import { validateProfile } from '../domain/profile.js';
import type { UseCases } from '../usecases/use-cases.js';
import { certifying } from './certifying.support.js';
import { rejection } from './store-contract.support.js';

export type OpenStore = (path: string, options?: { now?: () => Date }) => Promise<UseCases>;

const reg = (name: string): HostRegistration => ({
  name: hostName(name),
  endpoint: `${name}:7071`,
  bootId: 'boot-1',
  agentEpoch: 'e1',
  agentVersion: '0.1.0',
  features: ['cleanup.v1', 'binding.v1'],
  drivers: ['pci', 'nvme'],
});

const nvmeProfile = validateProfile({ name: 'nvme', groups: [{ resourceClass: 'CUSTOM_NVME_144D_A808' }] });
const gpuProfile = validateProfile({ name: 'gpu', groups: [{ vendorId: '10de', productId: '25b6' }] });

/** A controller of subsystem `nqn` at bus index `index`, with its agent's record. */
const ctrl = (index: number, nqn: string, record: Parameters<typeof nvmeMedia>[1] = {}): DeviceFacts =>
  facts({ index, ...nvmeMedia(nqn, record) });

export function runMediaContract(name: string, open: OpenStore): void {
  describe(`Store contract, media: ${name}`, () => {
    let dir: string;
    let path: string;
    let store: UseCases;
    const revisions = new Map<string, number>();

    beforeEach(async () => {
      dir = mkdtempSync(join(tmpdir(), 'berth-media-'));
      path = join(dir, 'scheduler.db');
      store = certifying(await open(path));
      revisions.clear();
      await store.createProfile(nvmeProfile);
      await store.createProfile(gpuProfile);
    });
    afterEach(async () => {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    });

    /** The host's agent sends a snapshot of `devices`. */
    async function snapshot(host: string, devices: DeviceFacts[]) {
      if (!revisions.has(host)) await store.registerHost(reg(host));
      const revision = (revisions.get(host) ?? 0) + 1;
      revisions.set(host, revision);
      return store.upsertInventory(hostName(host), { kind: 'snapshot', revision, devices });
    }

    const device = (host: string, address: string) =>
      store.getDevice({ host: hostName(host), address: pci(address) });

    async function bind(instance: string, host: string, profile = 'nvme') {
      const [arq] = await store.createArqs({ profileName: profile });
      return store.bindArqs([
        { arqUuid: arq!.uuid, instanceUuid: instanceId(instance), host: hostName(host) },
      ]);
    }

    /** Runs the device's queued cleanup to the end the agent reports. */
    async function clean(d: DeviceRecord, outcome: 'succeeded' | 'failed' = 'succeeded', at = new Date()) {
      const current = await store.getDevice({ uuid: d.uuid });
      const job = await store.getCleanupJob(current.cleanupJobId!);
      const ev = (sequence: number, phase: CleanupEvent['phase']): CleanupEvent => ({
        jobId: job.jobId,
        address: current.address,
        action: current.cleanupAction ?? '',
        phase,
        step: '',
        percent: 0,
        bytesDone: 0,
        bytesTotal: 0,
        message: phase === 'failed' ? 'the sanitize log says it failed' : '',
        time: at.toISOString(),
        sequence,
        ...(phase === 'succeeded' ? { proof: PROOF } : {}),
      });
      await store.applyCleanupEvent(ev(1, 'sanitizing'));
      return (await store.applyCleanupEvent(ev(2, outcome))).device;
    }

    it('a cleanable device Berth never cleaned is cleaned before its first offer; declared clean or cleaned by the agent, it is offered', async () => {
      await snapshot('h1', [
        ctrl(0, 'nqn.test:never', { condition: 'dirty' }),
        ctrl(1, 'nqn.test:declared', { condition: 'declared_clean' }),
        ctrl(2, 'nqn.test:journal', { condition: 'clean' }),
        ctrl(3, 'nqn.test:old-agent', null),
        pciFacts({ index: 4, ...nvmeMedia('nqn.test:gpu', { condition: 'not_cleanable' }) }),
      ]);
      const states = await Promise.all(
        ['0000:10:00.0', '0000:11:00.0', '0000:12:00.0', '0000:13:00.0', '0000:14:00.0'].map(async (a) => {
          const d = await device('h1', a);
          return [a, d.deviceState, d.reserved];
        }),
      );
      expect(states).toEqual([
        ['0000:10:00.0', 'pending_cleaning', 1],
        ['0000:11:00.0', 'available', 0],
        ['0000:12:00.0', 'available', 0],
        ['0000:13:00.0', 'pending_cleaning', 1],
        ['0000:14:00.0', 'available', 0],
      ]);
      const backlog = await store.cleanupBacklog(hostName('h1'));
      expect(backlog.map((b) => [b.device.address, b.job.origin, b.waitsFor])).toEqual([
        ['0000:10:00.0', 'media', null],
        ['0000:13:00.0', 'media', null],
      ]);
      // Cleaned once, it is offered and stays so at the next snapshot.
      const cleaned = await clean(await device('h1', '0000:10:00.0'));
      expect([cleaned.deviceState, allocatable(cleaned)]).toEqual(['available', true]);
    });

    it('two controllers of one NVM subsystem are held by one tenant at a time, and cleaned only once neither is allocated', async () => {
      const nqn = 'nqn.test:dual-port';
      await snapshot('h1', [ctrl(0, nqn), ctrl(1, nqn)]);
      const first = (await bind('tenant-1', 'h1')).devices[0]!;
      const other = first.address === '0000:10:00.0' ? '0000:11:00.0' : '0000:10:00.0';
      const sibling = await device('h1', other);
      expect(allocatable(sibling)).toBe(false);
      expect(sibling.reserved).toBe(1);
      expect(sibling.mediaReason).toContain(`held through h1 ${first.address}`);
      expect((await rejection(bind('tenant-2', 'h1'))).reason).toBe('NO_ALLOCATABLE_DEVICE');
      // Released: the media is cleaned through the released controller; the other waits for it.
      const { released } = await store.deleteArqs({ instanceUuid: instanceId('tenant-1') });
      expect(released[0]!.deviceState).toBe('pending_cleaning');
      expect((await device('h1', other)).mediaReason).toContain('pending cleaning');
      expect((await rejection(bind('tenant-2', 'h1'))).reason).toBe('NO_ALLOCATABLE_DEVICE');
      await clean(released[0]!);
      expect(allocatable(await device('h1', other))).toBe(true);
      expect(allocatable(await device('h1', first.address))).toBe(true);
    });

    it('controllers of one media on two hosts: binds racing for both give the media to exactly one tenant', async () => {
      const nqn = 'nqn.test:shared-enclosure';
      await snapshot('h1', [ctrl(0, nqn)]);
      await snapshot('h2', [ctrl(1, nqn)]);
      const outcomes = await Promise.allSettled([bind('a', 'h1'), bind('b', 'h2')]);
      expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(1);
      const failed = outcomes.find((o) => o.status === 'rejected') as PromiseRejectedResult;
      expect((failed.reason as { reason?: string }).reason).toBe('NO_ALLOCATABLE_DEVICE');
    });

    it('a cleanup of shared media waits while another controller of it is allocated', async () => {
      const nqn = 'nqn.test:stale';
      await snapshot('h1', [ctrl(0, nqn)]);
      await bind('tenant-1', 'h1');
      // The same media shows up through a second controller, reported dirty by its agent: it is not
      // offered, and no cleanup starts under the running tenant.
      await snapshot('h1', [ctrl(0, nqn), ctrl(1, nqn, { condition: 'dirty', since: Date.now() })]);
      const second = await device('h1', '0000:11:00.0');
      expect(second.deviceState).toBe('available');
      expect(allocatable(second)).toBe(false);
      expect(second.mediaReason).toContain('held through h1 0000:10:00.0');
      await store.deleteArqs({ instanceUuid: instanceId('tenant-1') });
      const backlog = await store.cleanupBacklog(hostName('h1'));
      expect(backlog.map((b) => [b.device.address, b.waitsFor])).toEqual([['0000:10:00.0', null]]);
    });

    it('a dirty drive moved to another slot while its host was down comes up pending cleaning, and is cleaned there', async () => {
      const nqn = 'nqn.test:SER-A';
      await snapshot('h1', [ctrl(0, nqn)]);
      await bind('tenant-1', 'h1');
      // The tenant's instance goes away while the host is down: released, queued for cleaning at 01:00.0.
      await store.deleteArqs({ instanceUuid: instanceId('tenant-1') });
      // The host comes back with the drive in another slot; the old slot is empty. Its agent's
      // journal lost nothing in this case, but the scheduler alone must already refuse it.
      await snapshot('h1', [ctrl(6, nqn, { condition: 'clean', since: 1 })]);
      const moved = await device('h1', '0000:16:00.0');
      expect(moved.deviceState).toBe('pending_cleaning');
      expect(allocatable(moved)).toBe(false);
      expect((await store.latestCleanupJob(moved.uuid))?.origin).toBe('media');
      expect((await rejection(bind('tenant-2', 'h1'))).reason).toBe('NO_ALLOCATABLE_DEVICE');
      const cleaned = await clean(moved);
      expect(allocatable(cleaned)).toBe(true);
    });

    it('a drive moved while its tenant still holds it is not offered at its new address', async () => {
      const nqn = 'nqn.test:SER-B';
      await snapshot('h1', [ctrl(0, nqn)]);
      await bind('tenant-1', 'h1');
      await snapshot('h2', [ctrl(3, nqn, { condition: 'clean', since: 1 })]);
      const there = await device('h2', '0000:13:00.0');
      expect(allocatable(there)).toBe(false);
      expect(there.mediaReason).toContain('held through h1 0000:10:00.0');
    });

    it("after the scheduler's database is lost, the agent's journal brings back dirt and burns, present or not", async () => {
      await store.close();
      rmSync(path, { force: true });
      for (const suffix of ['-wal', '-shm']) rmSync(`${path}${suffix}`, { force: true });
      store = certifying(await open(join(dir, 'new.db')));
      await store.createProfile(nvmeProfile);
      await store.createProfile(gpuProfile);
      revisions.clear();
      const t = Date.now();
      // The host registers: its journal says a pulled-out drive holds tenant 1's data and a
      // GPU that is elsewhere now was burned.
      await store.registerHost(reg('h1'));
      const changed = await store.reconcileMediaRecords(hostName('h1'), [
        {
          key: 'nvme:nqn.test:pulled',
          condition: 'held',
          burned: false,
          since: t,
          lastAddress: '0000:20:00.0',
          arqUuid: 'a1',
          instanceUuid: instanceId('i1'),
          reason: '',
        },
        {
          key: 'pci-dsn:10de:00-11-22-33-44-55-66-77',
          condition: 'not_cleanable',
          burned: true,
          since: t,
          lastAddress: '0000:21:00.0',
          arqUuid: '',
          instanceUuid: '',
          reason: '',
        },
        {
          key: 'nvme:nqn.test:fine',
          condition: 'clean',
          burned: false,
          since: t,
          lastAddress: '0000:22:00.0',
          arqUuid: '',
          instanceUuid: '',
          reason: '',
        },
      ]);
      expect(changed.changed.sort()).toEqual([
        'nvme:nqn.test:pulled',
        'pci-dsn:10de:00-11-22-33-44-55-66-77',
      ]);
      expect(changed.refused).toEqual([]);
      // Both come back, on another host, whose agent knows nothing of them.
      const gpu = pciFacts({
        index: 5,
        oneTimeUse: true,
        media: { ...nvmeMedia('x').media!, key: 'pci-dsn:10de:00-11-22-33-44-55-66-77', kind: 'PCI_DSN' },
        agentMedia: null,
      });
      await snapshot('h2', [ctrl(4, 'nqn.test:pulled', { condition: 'declared_clean' }), gpu]);
      expect((await device('h2', '0000:14:00.0')).deviceState).toBe('pending_cleaning');
      const g = await device('h2', '0000:15:00.0');
      expect([g.burned, allocatable(g)]).toEqual([true, false]);
      expect((await rejection(bind('x', 'h2', 'gpu'))).reason).toBe('NO_ALLOCATABLE_DEVICE');
    });

    it("an agent's report of dirt older than the last accepted cleanup is stale; a newer one is not", async () => {
      const nqn = 'nqn.test:race';
      await snapshot('h1', [ctrl(0, nqn, { condition: 'clean' })]);
      await bind('tenant-1', 'h1');
      const heldAt = Date.now() - 60_000;
      const { released } = await store.deleteArqs({ instanceUuid: instanceId('tenant-1') });
      await clean(released[0]!, 'succeeded', new Date(heldAt + 30_000));
      // The delta that carried "held" arrives late.
      await snapshot('h1', [ctrl(0, nqn, { condition: 'held', since: heldAt })]);
      expect(allocatable(await device('h1', '0000:10:00.0'))).toBe(true);
      // A hold the agent recorded after that cleanup is not stale: the database missed a bind.
      await snapshot('h1', [ctrl(0, nqn, { condition: 'held', since: heldAt + 45_000 })]);
      expect((await device('h1', '0000:10:00.0')).deviceState).toBe('pending_cleaning');
    });

    it('a burn follows the media: the same GPU under another address is burned, and ReleaseDevice clears every record', async () => {
      const media = {
        ...nvmeMedia('x').media!,
        key: 'pci-dsn:10de:aa-bb-cc-dd-ee-ff-00-11',
        kind: 'PCI_DSN' as const,
      };
      await snapshot('h1', [pciFacts({ index: 0, oneTimeUse: true, media, agentMedia: null })]);
      const { devices } = await bind('i1', 'h1', 'gpu');
      expect(devices[0]!.burned).toBe(true);
      await store.deleteArqs({ instanceUuid: instanceId('i1') });
      // Moved to another slot: a new record at the new address, burned.
      await snapshot('h1', [pciFacts({ index: 7, oneTimeUse: true, media, agentMedia: null })]);
      const moved = await device('h1', '0000:17:00.0');
      expect([moved.burned, allocatable(moved)]).toEqual([true, false]);
      const freed = await store.releaseDevice({ uuid: moved.uuid });
      expect([freed.burned, allocatable(freed)]).toEqual([false, true]);
      expect((await device('h1', '0000:10:00.0')).burned).toBe(false);
      // And it stays released across another snapshot.
      await snapshot('h1', [pciFacts({ index: 7, oneTimeUse: true, media, agentMedia: null })]);
      expect((await device('h1', '0000:17:00.0')).burned).toBe(false);
    });

    it("a host's records of media another host holds are refused; a forgotten media is nobody's until it comes back", async () => {
      const key = 'pci-dsn:10de:0f-0f-0f-0f-0f-0f-0f-0f';
      const media = { ...nvmeMedia('x').media!, key, kind: 'PCI_DSN' as const };
      const gpu = (index: number) => pciFacts({ index, oneTimeUse: true, media, agentMedia: null });
      const burnedRecord = (since: number) => ({
        key,
        condition: 'not_cleanable' as const,
        burned: true,
        since,
        lastAddress: '0000:30:00.0',
        arqUuid: '',
        instanceUuid: '',
        reason: '',
      });
      await snapshot('h1', [gpu(0)]);
      await store.registerHost(reg('h2'));
      // h1 presents it: h2's burn of it is refused.
      const presented = await store.reconcileMediaRecords(hostName('h2'), [burnedRecord(Date.now())]);
      expect(presented).toEqual({
        changed: [],
        refused: [{ key, reason: 'other_host_presents', holder: 'h1' }],
      });
      expect(allocatable(await device('h1', '0000:10:00.0'))).toBe(true);
      await expect(store.forgetMedia(key, 'note')).rejects.toMatchObject({ reason: 'MEDIA_PRESENT' });
      // Pulled from h1: last seen there, still not h2's.
      await snapshot('h1', []);
      const lastSaw = await store.reconcileMediaRecords(hostName('h2'), [burnedRecord(Date.now())]);
      expect(lastSaw.refused).toEqual([{ key, reason: 'other_host_last_saw', holder: 'h1' }]);
      // h1's own journal record of it counts.
      const own = await store.reconcileMediaRecords(hostName('h1'), [burnedRecord(Date.now())]);
      expect(own).toEqual({ changed: [key], refused: [] });
      // Forgotten: its vanished device goes, and no journal's record of it counts any more…
      const forgotten = await store.forgetMedia(key, '{"by":"ops"}');
      expect([
        forgotten.removed.map((d) => d.address),
        forgotten.media.burned,
        forgotten.alreadyForgotten,
      ]).toEqual([['0000:10:00.0'], true, false]);
      expect((await store.forgetMedia(key, 'again')).alreadyForgotten).toBe(true);
      await expect(store.forgetMedia('pci-dsn:10de:unknown', 'x')).rejects.toMatchObject({
        reason: 'MEDIA_NOT_FOUND',
      });
      const dirt = { ...burnedRecord(Date.now() + 1000), condition: 'held' as const, burned: false };
      expect((await store.reconcileMediaRecords(hostName('h1'), [dirt])).refused).toEqual([
        { key, reason: 'forgotten', holder: '' },
      ]);
      // …until a device of it comes back: burned still (forgetting is not releasing), and no longer forgotten.
      await snapshot('h2', [gpu(5)]);
      const back = await device('h2', '0000:15:00.0');
      expect([back.burned, allocatable(back)]).toEqual([true, false]);
      expect((await store.reconcileMediaRecords(hostName('h2'), [dirt])).refused).toEqual([]);
    });

    it('custody: media a host presents after another host did is cleaned first (a drive) or held for an operator (a GPU), whatever its agent says; a host joining while another still presents it is not a break', async () => {
      const gpuMedia = {
        ...nvmeMedia('x').media!,
        key: 'pci-dsn:10de:aa-bb-cc-dd-ee-ff-00-22',
        kind: 'PCI_DSN' as const,
      };
      const gpuAt = (index: number) =>
        pciFacts({
          index,
          oneTimeUse: true,
          media: gpuMedia,
          agentMedia: { ...nvmeMedia('x', { condition: 'not_cleanable' }).agentMedia!, key: gpuMedia.key },
        });
      const clean = { condition: 'clean' as const, since: 1 };
      await snapshot('h1', [ctrl(0, 'nqn.test:moves', clean), gpuAt(1), ctrl(2, 'nqn.test:dual', clean)]);
      // h2 sees the dual-port drive too while h1 still does: one drive, two hosts, no break.
      await snapshot('h2', [ctrl(5, 'nqn.test:dual', clean)]);
      expect(allocatable(await device('h2', '0000:15:00.0'))).toBe(true);
      // The drive and the GPU leave h1 and show up in h2, whose agent says they are clean and unused.
      await snapshot('h1', [ctrl(2, 'nqn.test:dual', clean)]);
      await snapshot('h2', [ctrl(5, 'nqn.test:dual', clean), ctrl(3, 'nqn.test:moves', clean), gpuAt(4)]);
      const moved = await device('h2', '0000:13:00.0');
      expect(moved.deviceState).toBe('pending_cleaning');
      expect((await store.latestCleanupJob(moved.uuid))?.origin).toBe('media');
      const gpu = await device('h2', '0000:14:00.0');
      expect([gpu.burned, allocatable(gpu)]).toEqual([true, false]);
      expect(gpu.mediaReason).toContain("held for an operator's release");
      expect(gpu.mediaReason).toContain('custody changed: h2 reports it after h1 did');
      expect((await rejection(bind('tenant-2', 'h2', 'gpu'))).reason).toBe('NO_ALLOCATABLE_DEVICE');
      await store.releaseDevice({ uuid: gpu.uuid });
      const freed = await device('h2', '0000:14:00.0');
      expect([freed.burned, allocatable(freed), freed.mediaReason]).toEqual([false, true, '']);
      expect(allocatable(await device('h2', '0000:15:00.0'))).toBe(true);
    });

    it('two media claiming one key at once (a cloned NQN, another serial): both held with a reason naming both, neither cleaned; the one left is cleaned', async () => {
      const nqn = 'nqn.test:cloned';
      await snapshot('h1', [ctrl(0, nqn, { condition: 'clean', since: 1 })]);
      const twin = ctrl(1, nqn, { condition: 'clean', since: 1 });
      await snapshot('h2', [{ ...twin, media: { ...twin.media!, serial: 'OTHER' } }]);
      for (const [host, address] of [
        ['h1', '0000:10:00.0'],
        ['h2', '0000:11:00.0'],
      ] as const) {
        const d = await device(host, address);
        expect([d.deviceState, allocatable(d)]).toEqual(['available', false]);
        expect(d.mediaReason).toContain(
          'h1 0000:10:00.0 and h2 0000:11:00.0 differ in serial cloned and OTHER',
        );
      }
      expect(await store.cleanupBacklog(hostName('h1'))).toEqual([]);
      await snapshot('h2', []);
      expect((await device('h1', '0000:10:00.0')).deviceState).toBe('pending_cleaning');
    });
  });
}
