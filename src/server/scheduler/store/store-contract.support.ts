/**
 * The one contract every backend must pass, through the use cases over it
 * (style practice 3). A backend's test file calls `runStoreContract` with a
 * factory; the suite reopens the store on the same path (close + open) to
 * prove that what was acknowledged persisted.
 */

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BerthError } from '../../../errors.js';
import type { ArqBinding } from '../domain/arq.js';
import type { CleanupEvent } from '../domain/cleanup.js';
import { allocatable, type DeviceFacts } from '../domain/device-state.js';
import { facts, hostName, instanceId, PROOF, pciFacts, tags, testUuid } from '../domain/fixtures.support.js';
import type { HostRegistration } from '../domain/host.js';
import { validateProfile } from '../domain/profile.js';
import type { UseCases } from '../usecases/use-cases.js';
import { certifying } from './certifying.support.js';

/** Opens the backend on `path`; `now` is the store's clock (retention tests move it). */
export type OpenStore = (path: string, options?: { now?: () => Date }) => Promise<UseCases>;

const reg = (name: string, agentEpoch = 'e1'): HostRegistration => ({
  name: hostName(name),
  endpoint: `${name}:7071`,
  bootId: 'boot-1',
  agentEpoch,
  agentVersion: '0.1.0',
  features: ['cleanup.v1'],
  drivers: ['pci', 'nvme'],
});

/** The BerthError a promise rejects with (fails the test when it resolves). */
export async function rejection(p: Promise<unknown>): Promise<BerthError> {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(BerthError);
    return e as BerthError;
  }
  throw new Error('expected the promise to reject');
}

/** An agent's cleanup event for `job` on `address` (a success carries the proof of erasure). */
const cleanupEvent = (
  job: { jobId: string },
  address: string,
  sequence: number,
  phase: CleanupEvent['phase'],
  time = new Date(),
): CleanupEvent => ({
  jobId: job.jobId,
  address,
  action: 'sanitize-crypto',
  phase,
  step: '',
  percent: 0,
  bytesDone: 0,
  bytesTotal: 0,
  message: '',
  time: time.toISOString(),
  sequence,
  ...(phase === 'succeeded' ? { proof: PROOF } : {}),
});

const nvmeProfile = validateProfile({ name: 'nvme', groups: [{ resourceClass: 'CUSTOM_NVME_144D_A808' }] });

export function runStoreContract(name: string, open: OpenStore): void {
  describe(`Store contract: ${name}`, () => {
    let dir: string;
    let path: string;
    let store: UseCases;
    /** The store's clock: real time unless a test sets `clockAt`. */
    let clockAt: Date | null = null;
    const now = () => clockAt ?? new Date();
    const reopen = async () => {
      await store.close();
      store = certifying(await open(path, { now }));
      return store;
    };

    beforeEach(async () => {
      dir = mkdtempSync(join(tmpdir(), 'berth-store-'));
      path = join(dir, 'scheduler.db');
      clockAt = null;
      store = certifying(await open(path, { now }));
    });
    afterEach(async () => {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    });

    async function host(name: string, devices: DeviceFacts[]) {
      await store.registerHost(reg(name));
      return store.upsertInventory(hostName(name), { kind: 'snapshot', revision: 1, devices });
    }

    /** A bind as its workflow runs it (app/binding.ts): the bind's unit, then the unit that records a failure. */
    async function bindRecordingFailure(bindings: ArqBinding[]) {
      try {
        return await store.bindArqs(bindings);
      } catch (e) {
        await store.recordBindFailure(bindings, e);
        throw e;
      }
    }

    async function bindOne(instance: string, name: string, profile = 'nvme') {
      const [arq] = await store.createArqs({ profileName: profile });
      return bindRecordingFailure([
        { arqUuid: arq!.uuid, instanceUuid: instanceId(instance), host: hostName(name) },
      ]);
    }

    it('applies schema migrations once and keeps data across a reopen', async () => {
      const v = await store.schemaVersion();
      expect(v).toBeGreaterThan(0);
      await host('h1', [facts({ index: 0 })]);
      await store.createProfile(nvmeProfile);
      await reopen();
      expect(await store.schemaVersion()).toBe(v);
      const { devices } = await store.listDevices({ host: hostName('h1') });
      expect(devices.map((d) => [d.address, d.resourceProvider, d.deviceState])).toEqual([
        ['0000:10:00.0', 'h1_0000:10:00.0', 'available'],
      ]);
      expect((await store.getProfile('nvme')).groups).toEqual(nvmeProfile.groups);
      expect((await store.getHost(hostName('h1'))).deviceCount).toBe(1);
    });

    it('hosts are walked a page at a time by name, to the end', async () => {
      for (const name of ['h3', 'h1', 'h5', 'h2', 'h4']) await store.registerHost(reg(name));
      const names: string[][] = [];
      for (let after = '', page = await store.hostsPage(after, 2); page.length > 0; ) {
        names.push(page.map((h) => h.name));
        after = page[page.length - 1]!.name;
        page = await store.hostsPage(after, 2);
      }
      expect(names).toEqual([['h1', 'h2'], ['h3', 'h4'], ['h5']]);
      expect((await store.hostsPage('h4', 0)).map((h) => h.name)).toEqual(['h5']);
    });

    it('ListHosts pages by name with device counts, and refuses a token it did not issue', async () => {
      for (const name of ['h3', 'h1', 'h2']) await store.registerHost(reg(name));
      await host('h2', [pciFacts({ index: 0 }), pciFacts({ index: 1 })]);
      const first = await store.listHosts({ pageSize: 2 });
      expect(first.hosts.map((h) => [h.name, h.deviceCount])).toEqual([
        ['h1', 0],
        ['h2', 2],
      ]);
      const rest = await store.listHosts({ pageSize: 2, pageToken: first.nextPageToken });
      expect(rest.hosts.map((h) => h.name)).toEqual(['h3']);
      expect(rest.nextPageToken).toBe('');
      expect((await store.listHosts()).hosts).toHaveLength(3);
      const refused = await rejection(store.listHosts({ pageToken: 'not-a-token' }));
      expect([refused.code, refused.message]).toEqual([
        'INVALID_ARGUMENT',
        expect.stringContaining('page_token'),
      ]);
    });

    it('64 concurrent binds race for 10 devices: exactly 10 win, no device twice, the rest fail clearly', async () => {
      await host(
        'h1',
        Array.from({ length: 10 }, (_, i) => facts({ index: i })),
      );
      await host('h2', [facts({ index: 0 })]); // another host's device must never be picked
      await store.createProfile(nvmeProfile);
      const results = await Promise.allSettled(
        Array.from({ length: 64 }, (_, i) => bindOne(`inst-${i}`, 'h1')),
      );
      const won = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value.devices[0]!] : []));
      const lost = results.flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []));
      expect(won).toHaveLength(10);
      expect(new Set(won.map((d) => d.uuid)).size).toBe(10);
      expect(won.every((d) => d.host === 'h1')).toBe(true);
      for (const e of lost) {
        expect(e).toBeInstanceOf(BerthError);
        expect((e as BerthError).code).toBe('FAILED_PRECONDITION');
        expect((e as BerthError).reason).toBe('NO_ALLOCATABLE_DEVICE');
        expect((e as BerthError).message).toMatch(/no allocatable device on host h1/);
      }
      await reopen();
      const devices = (await store.listDevices({ host: hostName('h1') })).devices;
      expect(devices.every((d) => d.deviceState === 'allocated' && d.reserved === 1)).toBe(true);
      const arqs = await store.listArqs();
      expect(arqs.filter((a) => a.state === 'bound')).toHaveLength(10);
      expect(arqs.filter((a) => a.state === 'bind_failed')).toHaveLength(54);
      expect(arqs.find((a) => a.state === 'bind_failed')?.error).toMatch(/no allocatable device/);
    });

    it('a retried identical bind returns the same device; a different binding is refused', async () => {
      await host('h1', [facts({ index: 0 }), facts({ index: 1 })]);
      await store.createProfile(nvmeProfile);
      const [arq] = await store.createArqs({ profileName: 'nvme', tags: tags('scratch') });
      const b = { arqUuid: arq!.uuid, instanceUuid: instanceId('i1'), host: hostName('h1') };
      const first = await store.bindArqs([b]);
      const again = await store.bindArqs([b]);
      expect(again.devices[0]!.uuid).toBe(first.devices[0]!.uuid);
      expect(again.devices[0]!.generation).toBe(first.devices[0]!.generation);
      expect(first.arqs[0]).toMatchObject({
        state: 'bound',
        tag: 'scratch',
        deviceAddress: first.devices[0]!.address,
        attachHandle: {
          domain: '0000',
          bus: first.devices[0]!.address.slice(5, 7),
          device: '00',
          function: '0',
          managed: true,
        },
      });
      const e = await rejection(store.bindArqs([{ ...b, instanceUuid: instanceId('i2') }]));
      expect(e.reason).toBe('ARQ_ALREADY_BOUND');
      // Its failure is not recorded on the ARQ: it stays bound as it was.
      await store.recordBindFailure(
        [{ ...b, instanceUuid: instanceId('i2'), notifyNova: { holder: 's1', holdMs: 60_000 } }],
        e,
      );
      expect(await store.getArq(arq!.uuid)).toMatchObject({ state: 'bound', instanceUuid: 'i1', error: '' });
      expect((await store.listDevices({ state: 'allocated' })).devices).toHaveLength(1);
    });

    it('a multi-ARQ bind is all or nothing', async () => {
      await host('h1', [facts({ index: 0 })]);
      const two = validateProfile({
        name: 'two',
        groups: [{ resourceClass: 'CUSTOM_NVME_144D_A808', count: 2 }],
      });
      await store.createProfile(two);
      const arqs = await store.createArqs({ profileName: 'two' });
      const e = await rejection(
        bindRecordingFailure(
          arqs.map((a) => ({ arqUuid: a.uuid, instanceUuid: instanceId('i1'), host: hostName('h1') })),
        ),
      );
      expect(e.code).toBe('FAILED_PRECONDITION');
      const [d] = (await store.listDevices({ host: hostName('h1') })).devices;
      expect([d!.deviceState, d!.reserved, d!.arqUuid]).toEqual(['available', 0, null]);
      expect((await store.listArqs()).map((a) => a.state)).toEqual(['bind_failed', 'bind_failed']);
    });

    it('one tag scope for every passthrough device of an instance, PCI and NVMe alike', async () => {
      await host('h1', [facts({ index: 0 }), pciFacts({ index: 1 })]);
      await store.createProfile(nvmeProfile);
      await store.createProfile(
        validateProfile({ name: 'gpu', groups: [{ vendorId: '10de', productId: '25b6' }] }),
      );
      const [nvme] = await store.createArqs({ profileName: 'nvme', tags: tags('data') });
      const [gpu] = await store.createArqs({ profileName: 'gpu', tags: tags('data') });
      const bound = await store.bindArqs([
        { arqUuid: nvme!.uuid, instanceUuid: instanceId('i1'), host: hostName('h1') },
      ]);
      expect(bound.devices[0]!.type).toBe('NVME');
      const e = await rejection(
        store.bindArqs([{ arqUuid: gpu!.uuid, instanceUuid: instanceId('i1'), host: hostName('h1') }]),
      );
      expect(e.code).toBe('INVALID_ARGUMENT');
      expect(e.message).toMatch(/tag "data" is already used by ARQ .* for a passthrough of this instance/);
      const other = await store.bindArqs([
        { arqUuid: gpu!.uuid, instanceUuid: instanceId('i1'), host: hostName('h1'), tag: tags('gpu')[0] },
      ]);
      expect(other.devices[0]!.type).toBe('PCI');
    });

    it('tags are unique within (instance, device type)', async () => {
      await host('h1', [facts({ index: 0 }), facts({ index: 1 })]);
      await store.createProfile(nvmeProfile);
      const [a1] = await store.createArqs({ profileName: 'nvme', tags: tags('db') });
      const [a2] = await store.createArqs({ profileName: 'nvme', tags: tags('db') });
      await store.bindArqs([{ arqUuid: a1!.uuid, instanceUuid: instanceId('i1'), host: hostName('h1') }]);
      const e = await rejection(
        store.bindArqs([{ arqUuid: a2!.uuid, instanceUuid: instanceId('i1'), host: hostName('h1') }]),
      );
      expect(e.code).toBe('INVALID_ARGUMENT');
      expect(e.message).toMatch(/tag "db"/);
      await store.bindArqs([
        { arqUuid: a2!.uuid, instanceUuid: instanceId('i1'), host: hostName('h1'), tag: tags('logs')[0] },
      ]);
    });

    it('createArqs and CleanDevice are idempotent by request id', async () => {
      await store.createProfile(nvmeProfile);
      expect(await store.createProfile(nvmeProfile)).toEqual(await store.getProfile('nvme'));
      const other = validateProfile({ name: 'nvme', groups: [{ resourceClass: 'CUSTOM_OTHER' }] });
      expect((await rejection(store.createProfile(other))).code).toBe('ALREADY_EXISTS');
      const a = await store.createArqs({ profileName: 'nvme', requestId: 'r1' });
      await reopen();
      const b = await store.createArqs({ profileName: 'nvme', requestId: 'r1' });
      expect(b.map((x) => x.uuid)).toEqual(a.map((x) => x.uuid));
      expect(await store.listArqs()).toHaveLength(1);
      const e = await rejection(store.createArqs({ profileName: 'nvme', requestId: 'r1', tags: tags('x') }));
      expect(e.code).toBe('INVALID_ARGUMENT');
    });

    it('a stale generation is ABORTED and changes nothing', async () => {
      const { added } = await host('h1', [facts({ index: 0 })]);
      const d = added[0]!;
      const m = await store.setDeviceStatus({ uuid: d.uuid }, 'maintaining', d.generation);
      expect([m.status, m.reserved, m.generation]).toEqual(['maintaining', 1, d.generation + 1]);
      const e = await rejection(
        store.setDeviceStatus({ host: hostName('h1'), address: d.address }, 'enabled', d.generation),
      );
      expect(e.code).toBe('ABORTED');
      expect(e.message).toContain(String(d.generation));
      await reopen();
      expect(await store.getDevice({ uuid: d.uuid })).toMatchObject({
        status: 'maintaining',
        generation: m.generation,
      });
      expect((await rejection(store.getDevice({ uuid: testUuid('nope') }))).code).toBe('NOT_FOUND');
    });

    it('delete → pending_cleaning → cleaning → available, driven by agent events; duplicates ignored', async () => {
      await host('h1', [facts({ index: 0 })]);
      await store.createProfile(nvmeProfile);
      const bound = await bindOne('i1', 'h1');
      const { deletedUuids, released } = await store.deleteArqs({ instanceUuid: instanceId('i1') });
      expect(deletedUuids).toEqual([bound.arqs[0]!.uuid]);
      expect(released[0]!.deviceState).toBe('pending_cleaning');
      expect(await store.deleteArqs({ instanceUuid: instanceId('i1') })).toEqual({
        deletedUuids: [],
        released: [],
      });
      const [entry] = await store.cleanupBacklog(hostName('h1'));
      const { job, device } = entry!;
      expect(job).toMatchObject({ state: 'queued', action: 'sanitize-crypto', origin: 'release' });
      await store.markCleanupDispatched(job.jobId);
      const ev = (sequence: number, phase: CleanupEvent['phase']) =>
        cleanupEvent(job, device.address, sequence, phase);
      expect((await store.applyCleanupEvent(ev(1, 'sanitizing'))).device.deviceState).toBe('cleaning');
      expect((await store.applyCleanupEvent(ev(1, 'sanitizing'))).applied).toBe(false);
      // Bind is refused while cleaning.
      const [arq] = await store.createArqs({ profileName: 'nvme' });
      await rejection(
        store.bindArqs([{ arqUuid: arq!.uuid, instanceUuid: instanceId('i2'), host: hostName('h1') }]),
      );
      const done = await store.applyCleanupEvent(ev(2, 'succeeded'));
      expect([done.device.deviceState, done.device.reserved, done.job.state]).toEqual([
        'available',
        0,
        'succeeded',
      ]);
      await reopen();
      expect((await store.cleanupEvents(job.jobId)).map((e) => e.sequence)).toEqual([1, 2]);
      expect((await store.cleanupEvents(job.jobId, 1)).map((e) => e.phase)).toEqual(['succeeded']);
      expect((await store.latestCleanupJob(done.device.uuid))?.jobId).toBe(job.jobId);
    });

    it('registration: a heartbeat writes only lastSeen; a new epoch, endpoint or link is a registration', async () => {
      expect((await store.registerHost(reg('h1'))).change).toBe('new');
      const beat = await store.registerHost(reg('h1'), { opensLink: false });
      expect([beat.change, beat.host.registrations]).toEqual(['heartbeat', 1]);
      expect((await store.registerHost(reg('h1'))).change).toBe('relinked');
      expect(
        (await store.registerHost({ ...reg('h1'), endpoint: 'h1:7072' }, { opensLink: false })).change,
      ).toBe('moved');
      const restarted = await store.registerHost(reg('h1', 'e2'), { opensLink: false });
      expect([restarted.change, restarted.host.registrations, restarted.host.inventoryRevision]).toEqual([
        'restarted',
        4,
        0,
      ]);
    });

    it('invariant 10: two first registrations of one host by different principals race; exactly one is pinned', async () => {
      // Twenty hosts, each registered at once by its own name and by its certificate's.
      const hosts = Array.from({ length: 20 }, (_, i) => `h${i}`);
      const outcomes = await Promise.all(
        hosts.map((h) =>
          Promise.allSettled([
            store.registerHost({ ...reg(h), principal: h }),
            store.registerHost({ ...reg(h, 'e2'), principal: `cert:${h}` }),
          ]),
        ),
      );
      for (const [i, pair] of outcomes.entries()) {
        const won = pair.flatMap((o) => (o.status === 'fulfilled' ? [o.value.host.principal] : []));
        const refused = pair.flatMap((o) => (o.status === 'rejected' ? [o.reason as BerthError] : []));
        expect(won).toHaveLength(1);
        expect(refused.map((e) => [e.code, e.reason])).toEqual([
          ['PERMISSION_DENIED', 'HOST_PINNED_TO_ANOTHER_PRINCIPAL'],
        ]);
        expect((await store.getHost(hostName(hosts[i]!))).principal).toBe(won[0]);
      }
      // The pinned principal registers again; a registration without one (authentication off) keeps the pin.
      const pinned = (await store.getHost(hostName('h0'))).principal!;
      await store.registerHost({ ...reg('h0', 'e3'), principal: pinned });
      expect((await store.registerHost(reg('h0', 'e4'))).host.principal).toBe(pinned);
    });

    it('agent restart: cleaning → error (job interrupted), pending_cleaning is kept for re-dispatch', async () => {
      await host('h1', [facts({ index: 0 }), facts({ index: 1 })]);
      await store.createProfile(nvmeProfile);
      await bindOne('i1', 'h1');
      await bindOne('i2', 'h1');
      await store.deleteArqs({ instanceUuid: instanceId('i1') });
      await store.deleteArqs({ instanceUuid: instanceId('i2') });
      const [a, b] = await store.cleanupBacklog(hostName('h1'));
      await store.applyCleanupEvent(cleanupEvent(a!.job, a!.device.address, 1, 'preparing'));
      const { change, interrupted, toDispatch } = await store.registerHost(reg('h1', 'e2'));
      expect(change).toBe('restarted');
      expect(interrupted.map((d) => [d.uuid, d.deviceState, d.reserved])).toEqual([
        [a!.device.uuid, 'error', 1],
      ]);
      expect(toDispatch.map((d) => d.uuid)).toEqual([b!.device.uuid]);
      expect((await store.getCleanupJob(a!.job.jobId)).state).toBe('interrupted');
      // An operator re-clean of the errored device goes through a new job, idempotent by request id.
      const c1 = await store.requestClean(
        { uuid: a!.device.uuid },
        { requestId: 'op-1', agentCanClean: true },
      );
      const c2 = await store.requestClean(
        { uuid: a!.device.uuid },
        { requestId: 'op-1', agentCanClean: true },
      );
      expect(c2.job.jobId).toBe(c1.job.jobId);
      expect(c1.device.deviceState).toBe('pending_cleaning');
      const e = await rejection(store.requestClean({ uuid: b!.device.uuid }, { agentCanClean: true }));
      expect(e.reason).toBe('CLEANUP_IN_PROGRESS');
    });

    it('a one-time-use device is burned at bind and only ReleaseDevice un-burns it', async () => {
      await host('h1', [pciFacts({ index: 0, oneTimeUse: true })]);
      await store.createProfile(
        validateProfile({ name: 'gpu', groups: [{ vendorId: '10de', productId: '25b6' }] }),
      );
      const { devices } = await bindOne('i1', 'h1', 'gpu');
      expect(devices[0]!.burned).toBe(true);
      expect((await store.deleteArqs({ instanceUuid: instanceId('i1') })).released[0]).toMatchObject({
        deviceState: 'available',
        burned: true,
        reserved: 1,
      });
      expect((await rejection(bindOne('i2', 'h1', 'gpu'))).reason).toBe('NO_ALLOCATABLE_DEVICE');
      const freed = await store.releaseDevice({ uuid: devices[0]!.uuid });
      expect([freed.burned, freed.reserved, allocatable(freed)]).toEqual([false, 0, true]);
    });

    it('inventory: missing devices turn unhealthy (never deleted), the cleanup action stays locked while held', async () => {
      await host('h1', [facts({ index: 0 }), facts({ index: 1 })]);
      await store.createProfile(nvmeProfile);
      const { devices } = await bindOne('i1', 'h1');
      const held = devices[0]!;
      const r = await store.upsertInventory(hostName('h1'), {
        kind: 'snapshot',
        revision: 2,
        devices: [
          { ...facts({ index: held.address === '0000:10:00.0' ? 0 : 1 }), cleanupAction: 'write-zeroes' },
        ],
      });
      expect(r.missing).toHaveLength(1);
      expect(r.missing[0]).toMatchObject({ present: false, health: 'unhealthy', reserved: 1 });
      expect((await store.getDevice({ uuid: held.uuid })).cleanupAction).toBe('sanitize-crypto');
      expect((await store.listDevices({ host: hostName('h1') })).devices).toHaveLength(2);
      // A retried (old) delta changes nothing; a new one brings the device back.
      const stale = await store.upsertInventory(hostName('h1'), {
        kind: 'delta',
        revision: 2,
        added: [facts({ index: 5 })],
        changed: [],
        removed: [],
      });
      expect(stale.added).toHaveLength(0);
      const back = await store.upsertInventory(hostName('h1'), {
        kind: 'delta',
        revision: 3,
        added: [facts({ index: held.address === '0000:10:00.0' ? 1 : 0 })],
        changed: [],
        removed: [],
      });
      expect(back.changed[0]).toMatchObject({ present: true, health: 'healthy', reserved: 0 });
      expect(
        (
          await rejection(
            store.upsertInventory(hostName('nope'), { kind: 'snapshot', revision: 1, devices: [] }),
          )
        ).code,
      ).toBe('NOT_FOUND');
    });

    it('the event log has strictly increasing revisions and resumes from any revision', async () => {
      const r0 = await store.currentRevision();
      await host('h1', [facts({ index: 0 }), facts({ index: 1 })]);
      await store.createProfile(nvmeProfile);
      const snap = await store.snapshot({ host: hostName('h1') });
      expect(snap.devices).toHaveLength(2);
      await bindOne('i1', 'h1');
      await store.deleteArqs({ instanceUuid: instanceId('i1') });
      await reopen();
      const all = await store.eventsSince(r0, 1000);
      const revs = all.map((e) => e.revision);
      expect(revs.every((r, i) => i === 0 || r > revs[i - 1]!)).toBe(true);
      const after = await store.eventsSince(snap.revision, 1000);
      expect(after.map((e) => e.device.deviceState)).toEqual(['allocated', 'pending_cleaning']);
      const paged = [
        ...(await store.eventsSince(r0, 2)),
        ...(await store.eventsSince((await store.eventsSince(r0, 2))[1]!.revision, 1000)),
      ];
      expect(paged.map((e) => e.revision)).toEqual(revs);
      expect(await store.currentRevision()).toBe(revs[revs.length - 1]);
    });

    it('lists devices in pages ordered by host and address', async () => {
      await host(
        'h1',
        Array.from({ length: 5 }, (_, i) => facts({ index: i })),
      );
      const p1 = await store.listDevices({}, { pageSize: 2 });
      const p2 = await store.listDevices({}, { pageSize: 2, pageToken: p1.nextPageToken });
      const p3 = await store.listDevices({}, { pageSize: 2, pageToken: p2.nextPageToken });
      expect([...p1.devices, ...p2.devices, ...p3.devices].map((d) => d.address)).toEqual(
        (await store.listDevices()).devices.map((d) => d.address),
      );
      expect(p3.nextPageToken).toBe('');
      expect((await rejection(store.listDevices({}, { pageToken: 'garbage' }))).code).toBe(
        'INVALID_ARGUMENT',
      );
    });

    it('counts devices by type, state and resource class, not by host', async () => {
      await host('h1', [facts({ index: 0 }), facts({ index: 1 }), pciFacts({ index: 2 })]);
      await host('h2', [pciFacts({ index: 0 }), facts({ index: 3 })]);
      await store.createProfile(nvmeProfile);
      await bindOne('vm-count', 'h1');
      const counts = await store.deviceCounts();
      const key = (c: { type: string; state: string; resourceClass: string }) =>
        `${c.type}/${c.state}/${c.resourceClass}`;
      // One row per (type, state, class): two hosts' devices of one kind are one series.
      expect(new Set(counts.map(key)).size).toBe(counts.length);
      const byKey = Object.fromEntries(counts.map((c) => [key(c), c.count]));
      const nvme = Object.entries(byKey).filter(([k]) => k.startsWith('NVME/'));
      expect(nvme.reduce((n, [, v]) => n + v, 0)).toBe(3);
      expect(byKey['NVME/allocated/CUSTOM_NVME_144D_A808']).toBe(1);
      const pci = counts.filter((c) => c.type === 'PCI');
      expect(pci.reduce((n, c) => n + c.count, 0)).toBe(2);
      expect(counts.reduce((n, c) => n + c.count, 0)).toBe(5);
    });

    it('plans, commits and aborts live migrations atomically', async () => {
      const mig = (i: number) => pciFacts({ index: i, liveMigratable: true });
      await host('src', [mig(0), pciFacts({ index: 1 }), mig(2)]);
      await host('dst', [mig(0), mig(1)]);
      await store.createProfile(
        validateProfile({
          name: 'lm',
          groups: [{ vendorId: '10de', productId: '25b6', liveMigratable: 'yes' }],
        }),
      );
      await store.createProfile(
        validateProfile({
          name: 'fixed',
          groups: [{ vendorId: '10de', productId: '25b6', liveMigratable: 'no' }],
        }),
      );
      await store.createProfile(
        validateProfile({ name: 'any', groups: [{ vendorId: '10de', productId: '25b6' }] }),
      );
      const bound = await bindOne('i1', 'src', 'lm');
      await bindOne('i2', 'src', 'fixed');
      const e = await rejection(
        store.planMigration({ instanceUuid: instanceId('i2'), destinationHost: hostName('dst') }),
      );
      expect([e.reason, e.message.includes('0000:11:00.0 (profile fixed, live_migratable no)')]).toEqual([
        'PROFILE_NOT_LIVE_MIGRATABLE',
        true,
      ]);
      // Unset: the device it got can move, but the profile did not ask, so the guest stays.
      const any = await bindOne('i3', 'src', 'any');
      expect(any.devices[0]!.liveMigratable).toBe(true);
      const unset = await rejection(
        store.planMigration({ instanceUuid: instanceId('i3'), destinationHost: hostName('dst') }),
      );
      expect([unset.code, unset.reason]).toEqual(['FAILED_PRECONDITION', 'PROFILE_NOT_LIVE_MIGRATABLE']);
      expect(unset.message).toContain('live_migratable unset');
      const plan = await store.planMigration({
        instanceUuid: instanceId('i1'),
        destinationHost: hostName('dst'),
        requestId: 'm1',
      });
      expect(
        await store.planMigration({
          instanceUuid: instanceId('i1'),
          destinationHost: hostName('dst'),
          requestId: 'm1',
        }),
      ).toEqual(plan);
      expect(plan.addressMap).toEqual({ '0000:10:00.0': '0000:10:00.0' });
      const aborted = await store.abortMigration(plan.uuid);
      expect(aborted.released.map((d) => d.deviceState)).toEqual(['available']);
      const plan2 = await store.planMigration({
        instanceUuid: instanceId('i1'),
        destinationHost: hostName('dst'),
      });
      const committed = await store.commitMigration(plan2.uuid);
      expect(committed.released.map((d) => [d.host, d.deviceState])).toEqual([['src', 'available']]);
      expect((await store.commitMigration(plan2.uuid)).released).toEqual([]);
      const arq = await store.getArq(bound.arqs[0]!.uuid);
      expect([arq.host, arq.state, arq.deviceUuid]).toEqual([
        'dst',
        'bound',
        plan2.claims[bound.devices[0]!.uuid],
      ]);
      const dest = await store.getDevice({ uuid: arq.deviceUuid! });
      expect([dest.arqUuid, dest.migrationUuid, dest.instanceUuid]).toEqual([arq.uuid, null, 'i1']);
    });

    it('deleting an instance with a planned migration aborts it and frees the destination claims', async () => {
      const mig = (i: number) => pciFacts({ index: i, liveMigratable: true });
      await host('src', [mig(0)]);
      await host('dst', [mig(0)]);
      await store.createProfile(
        validateProfile({
          name: 'lm',
          groups: [{ vendorId: '10de', productId: '25b6', liveMigratable: 'yes' }],
        }),
      );
      await bindOne('i1', 'src', 'lm');
      const plan = await store.planMigration({
        instanceUuid: instanceId('i1'),
        destinationHost: hostName('dst'),
      });
      const claimed = await store.getDevice({ uuid: Object.values(plan.claims)[0]! });
      expect(claimed.deviceState).toBe('allocated');
      const deleted = await store.deleteArqs({ instanceUuid: instanceId('i1') });
      expect(deleted.released.map((d) => [d.host, d.deviceState]).sort()).toEqual([
        ['dst', 'available'],
        ['src', 'available'],
      ]);
      expect((await store.getMigration(plan.uuid)).state).toBe('aborted');
      const freed = await store.getDevice({ uuid: claimed.uuid });
      expect([freed.deviceState, freed.reserved, freed.migrationUuid]).toEqual(['available', 0, null]);
    });

    it('guest addresses: assigned around the NICs/disks, stable across reads, reopen and migration, freed on delete', async () => {
      const mig = (i: number) => pciFacts({ index: i, liveMigratable: true });
      await host('src', [mig(0), mig(1), mig(2)]);
      await host('dst', [mig(0), mig(1)]);
      await store.createProfile(
        validateProfile({
          name: 'lm',
          groups: [{ vendorId: '10de', productId: '25b6', liveMigratable: 'yes' }],
        }),
      );
      // A NIC on Berth's first slot: the hostdevs must go around it.
      const nic = {
        mac: '52:54:00:AA:BB:01',
        address: '0000:00:10.0',
        tag: 'net',
        vlan: 7,
        model: 'virtio',
        devname: 'eth0',
      };
      const stored = await store.registerInstanceDevices('i1', { nics: [nic], disks: [] });
      expect(stored.nics[0]).toMatchObject({ mac: '52:54:00:aa:bb:01', devname: 'eth0' });
      expect(await store.getInstanceDevices('i1')).toEqual(stored);
      const first = await bindOne('i1', 'src', 'lm');
      const second = await bindOne('i1', 'src', 'lm');
      expect((await store.getArq(first.arqs[0]!.uuid)).guestAddress).toBeNull();
      const assigned = await store.assignGuestAddresses('i1');
      expect(assigned.map((b) => [b.arq.uuid, b.arq.guestAddress, b.device.uuid])).toEqual([
        [first.arqs[0]!.uuid, '0000:00:11.0', first.devices[0]!.uuid],
        [second.arqs[0]!.uuid, '0000:00:12.0', second.devices[0]!.uuid],
      ]);
      expect(await store.assignGuestAddresses('i1')).toEqual(assigned);
      await reopen();
      expect(await store.getInstanceDevices('i1')).toEqual(stored);
      expect((await store.getArq(second.arqs[0]!.uuid)).guestAddress).toBe('0000:00:12.0');
      expect(await store.assignGuestAddresses('i1')).toEqual(assigned);

      // A NIC may not be registered on an assigned hostdev slot; nothing is stored then.
      const clash = await rejection(
        store.registerInstanceDevices('i1', { nics: [{ ...nic, address: '0000:00:12.0' }], disks: [] }),
      );
      expect(clash.code).toBe('INVALID_ARGUMENT');
      expect(clash.fieldViolations.map((v) => v.field)).toEqual(['nics[0].address']);
      expect(clash.message).toContain('0000:00:12.0');
      expect(await store.getInstanceDevices('i1')).toEqual(stored);

      // Deleting an ARQ frees its slot; the survivor keeps its address, the newcomer takes the lowest free one.
      await store.deleteArqs({ uuids: [first.arqs[0]!.uuid] });
      const third = await bindOne('i1', 'src', 'lm');
      const after = await store.assignGuestAddresses('i1');
      expect(after.map((b) => [b.arq.uuid, b.arq.guestAddress])).toEqual([
        [second.arqs[0]!.uuid, '0000:00:12.0'],
        [third.arqs[0]!.uuid, '0000:00:11.0'],
      ]);

      // A committed migration moves the bindings and keeps every guest address.
      const plan = await store.planMigration({
        instanceUuid: instanceId('i1'),
        destinationHost: hostName('dst'),
      });
      await store.commitMigration(plan.uuid);
      const moved = await store.assignGuestAddresses('i1');
      expect(moved.map((b) => [b.arq.uuid, b.arq.guestAddress, b.device.host])).toEqual([
        [second.arqs[0]!.uuid, '0000:00:12.0', 'dst'],
        [third.arqs[0]!.uuid, '0000:00:11.0', 'dst'],
      ]);
      expect(moved.map((b) => b.device.uuid)).toEqual([
        plan.claims[second.devices[0]!.uuid],
        plan.claims[third.devices[0]!.uuid],
      ]);
      // An instance without bindings has nothing to place.
      expect(await store.assignGuestAddresses('nobody')).toEqual([]);
    });

    /** One tenant cycle at the store's clock: bind, delete, a cleanup with its proof. Returns the job id. */
    async function tenantCycle(instance: string, requestId: string): Promise<string> {
      const [arq] = await store.createArqs({ profileName: 'nvme', requestId });
      await store.bindArqs([
        { arqUuid: arq!.uuid, instanceUuid: instanceId(instance), host: hostName('h1') },
      ]);
      await store.deleteArqs({ instanceUuid: instanceId(instance) });
      const [entry] = await store.cleanupBacklog(hostName('h1'));
      const { job, device } = entry!;
      await store.markCleanupDispatched(job.jobId);
      for (const [sequence, phase] of [
        [1, 'sanitizing'],
        [2, 'succeeded'],
      ] as const) {
        await store.applyCleanupEvent(cleanupEvent(job, device.address, sequence, phase, now()));
      }
      return job.jobId;
    }

    it('retention: old events, cleanups and request ids go in small units; the newest event and each device’s last cleanup stay', async () => {
      const t0 = Date.parse('2026-01-01T00:00:00Z');
      clockAt = new Date(t0);
      await host('h1', [facts({ index: 0 })]);
      await store.createProfile(nvmeProfile);
      const jobs: string[] = [];
      for (let k = 0; k < 5; k++) {
        clockAt = new Date(t0 + k * 3_600_000);
        jobs.push(await tenantCycle(`i${k}`, `r${k}`));
      }
      // A request id whose ARQ is gone is refused by name, not NOT_FOUND about the old ARQ.
      const spent = await rejection(store.createArqs({ profileName: 'nvme', requestId: 'r1' }));
      expect([spent.code, spent.reason]).toEqual(['FAILED_PRECONDITION', 'REQUEST_ID_SPENT']);
      expect(spent.message).toMatch(/request id "r1" already made ARQs .* no longer exists/);

      const newest = await store.currentRevision();
      expect(newest).toBeGreaterThan(10);
      clockAt = new Date(t0 + 10 * 86_400_000);
      let units = 0;
      const counts = await store.pruneHistory(
        { historyMs: 7 * 86_400_000, maxRows: 1_000, requestIdMs: 86_400_000 },
        { batch: 2, between: async () => void units++ },
      );
      expect(counts).toEqual({
        deviceEvents: newest - 1,
        cleanupJobs: 4,
        idempotencyKeys: 5,
        certificates: 0,
      });
      expect(units).toBeGreaterThan(counts.deviceEvents / 2 - 1);
      await reopen();
      // The current revision survives; a resume from before what went is told to re-list.
      expect(await store.currentRevision()).toBe(newest);
      expect((await store.eventsSince(newest - 1, 10)).map((e) => e.revision)).toEqual([newest]);
      const old = await rejection(store.eventsSince(3, 10));
      expect([old.code, old.reason]).toEqual(['FAILED_PRECONDITION', 'REVISION_COMPACTED']);
      expect(old.message).toMatch(
        new RegExp(`from_revision 3 is older than the oldest device event kept \\(${newest}\\)`),
      );
      // The device's last cleanup stays with its events (device show reports its proof).
      const device = (await store.listDevices({ host: hostName('h1') })).devices[0]!;
      expect((await store.latestCleanupJob(device.uuid))?.jobId).toBe(jobs[4]);
      expect((await store.cleanupEvents(jobs[4]!)).map((e) => e.phase)).toEqual(['sanitizing', 'succeeded']);
      expect((await rejection(store.getCleanupJob(jobs[0]!))).code).toBe('NOT_FOUND');
      // Past its window a request id makes a new request.
      const [fresh] = await store.createArqs({ profileName: 'nvme', requestId: 'r1' });
      expect(fresh!.state).toBe('initial');
      // Nothing left to remove: a second pass removes nothing.
      expect(
        await store.pruneHistory({ historyMs: 7 * 86_400_000, maxRows: 1_000, requestIdMs: 86_400_000 }),
      ).toEqual({ deviceEvents: 0, cleanupJobs: 0, idempotencyKeys: 0, certificates: 0 });
    });

    it('retention: the row cap holds whatever the age', async () => {
      await host('h1', [facts({ index: 0 })]);
      await store.createProfile(nvmeProfile);
      for (let k = 0; k < 4; k++) await tenantCycle(`i${k}`, `r${k}`);
      const newest = await store.currentRevision();
      const counts = await store.pruneHistory({
        historyMs: 365 * 86_400_000,
        maxRows: 3,
        requestIdMs: 86_400_000,
      });
      expect(counts.deviceEvents).toBe(newest - 3);
      expect(counts.idempotencyKeys).toBe(1);
      expect(counts.cleanupJobs).toBe(1);
      expect((await store.eventsSince(newest - 3, 10)).map((e) => e.revision)).toEqual([
        newest - 2,
        newest - 1,
        newest,
      ]);
      expect((await rejection(store.eventsSince(newest - 4, 10))).reason).toBe('REVISION_COMPACTED');
    });

    it('deleteHost: refused while connected or a device is in use; then the host and its devices go, logged as removed', async () => {
      await host('h1', [facts({ index: 0 }), facts({ index: 1 })]);
      await store.createProfile(nvmeProfile);
      expect((await rejection(store.deleteHost(hostName('nope')))).code).toBe('NOT_FOUND');
      await store.setHostConnected(hostName('h1'), true);
      const connected = await rejection(store.deleteHost(hostName('h1')));
      expect([connected.code, connected.reason]).toEqual(['FAILED_PRECONDITION', 'HOST_CONNECTED']);
      await store.setHostConnected(hostName('h1'), false);
      const bound = await bindOne('i1', 'h1');
      const inUse = await rejection(store.deleteHost(hostName('h1')));
      expect([inUse.code, inUse.reason]).toEqual(['FAILED_PRECONDITION', 'HOST_HAS_DEVICES_IN_USE']);
      expect(inUse.message).toContain(`${bound.devices[0]!.address} (allocated)`);
      // Released but not yet cleaned: it still holds the tenant's data.
      await store.deleteArqs({ instanceUuid: instanceId('i1') });
      expect((await rejection(store.deleteHost(hostName('h1')))).message).toContain('(pending_cleaning)');
      const [entry] = await store.cleanupBacklog(hostName('h1'));
      await store.markCleanupDispatched(entry!.job.jobId);
      await store.applyCleanupEvent(cleanupEvent(entry!.job, entry!.device.address, 1, 'succeeded'));
      const before = await store.currentRevision();
      const removed = await store.deleteHost(hostName('h1'));
      expect(removed.map((d) => d.address).sort()).toEqual(['0000:10:00.0', '0000:11:00.0'].sort());
      await reopen();
      expect((await rejection(store.getHost(hostName('h1')))).code).toBe('NOT_FOUND');
      expect((await store.listDevices({ host: hostName('h1') })).devices).toEqual([]);
      const events = await store.eventsSince(before, 10);
      expect(events.map((e) => [e.device.address, e.removed])).toEqual(removed.map((d) => [d.address, true]));
      // The host may come back; its devices are new records.
      const again = await host('h1', [facts({ index: 0 })]);
      expect(again.added[0]!.uuid).not.toBe(removed[0]!.uuid);
    });

    it("reconcileHeldDevices: an agent's report older than the device's last successful cleanup is stale; a newer one is not", async () => {
      await host('h1', [facts({ index: 0 })]);
      await store.createProfile(nvmeProfile);
      const bound = await bindOne('i1', 'h1');
      const device = bound.devices[0]!;
      await store.deleteArqs({ instanceUuid: instanceId('i1') });
      const [entry] = await store.cleanupBacklog(hostName('h1'));
      await store.markCleanupDispatched(entry!.job.jobId);
      const cleanedAt = new Date('2026-03-01T12:00:00.000Z');
      await store.applyCleanupEvent(cleanupEvent(entry!.job, device.address, 1, 'succeeded', cleanedAt));
      const report = (since: string) => [
        { address: device.address, arqUuid: bound.arqs[0]!.uuid, instanceUuid: instanceId('i1'), since },
      ];
      // Recorded before that cleanup finished (a heartbeat composed just before the agent cleared it).
      expect(await store.reconcileHeldDevices(hostName('h1'), report('2026-03-01T11:59:59.000Z'))).toEqual(
        [],
      );
      expect((await store.getDevice({ uuid: device.uuid })).deviceState).toBe('available');
      // Recorded after it (a binding this database lost): cleaned before it is offered.
      const moved = await store.reconcileHeldDevices(hostName('h1'), report('2026-03-01T12:00:01.000Z'));
      expect(moved.map((d) => [d.uuid, d.deviceState])).toEqual([[device.uuid, 'pending_cleaning']]);
    });
  });
}
