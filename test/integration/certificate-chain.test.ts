/**
 * One certificate chain per media, across hosts (decision 63,
 * docs/erasure-certificates.md): a real scheduler and two real agents on
 * simulated hosts, on loopback. A drive is carried from one host to the
 * other (taken out of one simulated tree and put in the other's), with
 * inputs the simulator would not produce by itself: a host that claims an
 * unknown history where the scheduler holds a link, a database lost while
 * the media's last holder is down. The media is judged from its backing
 * files; the chain offline, by the CLI and by Python's `cryptography`.
 *
 * - hostb cleans its drive (link 1, unknown history: the media was never
 *   seen); the drive moves to hosta; a cleanup on hosta that claims an
 *   unknown history (a compromised agent dropping the dispatched link) is
 *   refused and the device stays out of the pool; the honest one continues
 *   hostb's link (seq 2, prev = hostb's hash), and a tenant's use after it
 *   seq 3; `berth cleanup verify --previous` shows the handover;
 * - the database lost while hosta (the last holder of its own drive) is
 *   down, the drive carried to hostb: hostb's certificate is an
 *   unknown-history link, shown as a gap; hosta's older links of that media,
 *   re-supplied when it returns, are refused, not stored;
 * - a database restored from an older copy while the media's agent holds a
 *   later link: the next cleanup's certificate follows that later link
 *   (src/erasure/chain.test.ts pins the agent's side of it deterministically).
 */
import { execFileSync } from 'node:child_process';
import { copyFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeCertificate } from '../../src/erasure/certificate.js';
import type { ErasureCertificate } from '../../src/gen/berth/scheduler/v1/certificate.js';
import { DeviceState } from '../../src/gen/berth/scheduler/v1/device.js';
import { CleanupRunner } from '../../src/server/agent/cleanup-runner.js';
import type { SimHostDefinition } from '../../src/sim/host.js';
import {
  plantTenantData,
  readableTenantData,
  spreadTenantWrites,
  withStateLock,
} from '../../src/sim/nvme-cli/index.js';
import { berth, cliEnv } from '../helpers/berth-cli.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import {
  createAndBind,
  createNvmeProfile,
  getDevice,
  settledDevice,
  stateName,
  uuidRef,
} from '../helpers/invariants.js';
import { type CapturedLogs, captureLogs } from '../helpers/logs.js';
import { available, PYTHON, pythonCryptography } from '../helpers/prerequisites.js';
import { eventually } from '../helpers/wait.js';

const MIB = 1 << 20;
const SLOT = '0000:01:00.0';
/** Where each drive goes on the other host. */
const ARRIVED = '0000:02:00.0';

/** One drive; hostb's has crypto erase (trait HW_NVME_CES), which singles it out wherever it goes. */
function definition(host: string, serial: string, ces: boolean): SimHostDefinition {
  return {
    host,
    pci: { functions: [] },
    pciDeviceSpec: [],
    // Managed, and not declared clean: a drive never seen is cleaned before its first offer.
    nvmeDeviceSpec: [{ vendor_id: '144d' }],
    nvme: [
      {
        address: SLOT,
        vendorId: '144d',
        productId: 'a824',
        controller: 'nvme0',
        serial,
        model: 'PM1733 (simulated)',
        caps: { ces, bes: true },
        sanitizeMs: 200,
        namespaces: [{ nsid: 1, sizeBytes: MIB }],
      },
    ],
  };
}

describe('one certificate chain per media, across hosts', () => {
  let c: Cluster;
  let logs: CapturedLogs;
  /** The travelling drive's links, as the scheduler listed them. */
  let onB: ErasureCertificate;
  let onA: ErasureCertificate;

  const certificatesOf = async (deviceUuid: string) =>
    (
      await c.client.certificates.listErasureCertificates({
        of: { $case: 'device', value: uuidRef(deviceUuid) },
      })
    ).certificates;

  /** Takes the drive out of one host (its agent down meanwhile) and puts it in the other, whose agent then sees it. */
  async function carry(from: string, to: string, opts: { restartFrom?: boolean } = {}): Promise<void> {
    await c.host(from).stop();
    const drive = await c.host(from).sim.detachNvme('nvme0');
    if (opts.restartFrom !== false) await c.host(from).start();
    await c.host(to).stop();
    await c.host(to).sim.insertNvme(drive, { address: ARRIVED, controller: 'nvme1' });
    await c.host(to).start();
  }

  /** Waits until the scheduler refuses, at a registration, the certificate `hash` for `reason`. */
  const refusedAtRegistration = (hash: string, reason: RegExp) =>
    logs.waitFor(
      (l) =>
        l.msg.startsWith('erasure certificates the agent supplied were refused') &&
        (l['refused'] as { hash: string; reason: string }[]).some(
          (r) => r.hash === hash && reason.test(r.reason),
        ),
      { what: `the refusal of ${hash}`, timeoutMs: 20_000 },
    );

  beforeAll(async () => {
    logs = captureLogs('info');
    c = await startCluster([definition('hosta', 'SER-A', false), definition('hostb', 'SER-B', true)], {
      scheduler: { logger: logs.logger },
    });
    await c.waitForDevices('hosta', 1);
    await c.waitForDevices('hostb', 1);
  }, 60_000);

  afterAll(async () => {
    CleanupRunner.prototype.startOrAttach = honestStart;
    await c?.stop();
  });

  const honestStart = CleanupRunner.prototype.startOrAttach;

  it("a drive cleaned on hostb, carried to hosta: hosta's certificate continues hostb's link; one that claims an unknown history is refused", async () => {
    // Never seen before: cleaned on hostb before its first offer, link 1 of unknown history.
    const first = await settledDevice(c.client, 'hostb', SLOT);
    expect(stateName(first.deviceState), first.errorReason).toBe('DEVICE_STATE_AVAILABLE');
    onB = (await certificatesOf(first.uuid))[0]!;
    const b1 = decodeCertificate(onB.jws).claims;
    expect([b1.host, b1.seq, b1.prev, b1.history]).toEqual(['hostb', 1, null, 'unknown']);

    // hosta's agent is compromised: it drops the link the scheduler dispatched and claims a gap.
    CleanupRunner.prototype.startOrAttach = function (address, jobId) {
      return honestStart.call(this, address, jobId, null);
    };
    try {
      await carry('hostb', 'hosta');
      const refused = await settledDevice(c.client, 'hosta', ARRIVED, 60_000);
      expect(stateName(refused.deviceState)).toBe('DEVICE_STATE_ERROR');
      expect(refused.allocatable).toBe(false);
      expect(refused.errorReason).toMatch(
        /is an unknown-history link .*holds link 1 \(sha256:[0-9a-f]{64}, signed by host hostb\)/,
      );
      expect(refused.errorReason).toContain(onB.hash);
    } finally {
      CleanupRunner.prototype.startOrAttach = honestStart;
    }
    // The agent keeps its link and re-supplies it at its registrations: refused each time, never stored.
    const claimed = c.host('hosta').agent!.journal.mediaCertificates(first.media!.key);
    expect(claimed.map((x) => decodeCertificate(x.jws).claims.history)).toEqual(['unknown']);
    await refusedAtRegistration(claimed[0]!.hash, /is an unknown-history link/);
    const arrived = await getDevice(c.client, 'hosta', ARRIVED);
    expect(await certificatesOf(arrived.uuid)).toEqual([]);

    // The honest agent: a new cleanup continues hostb's link.
    await c.client.devices.cleanDevice({ device: uuidRef(arrived.uuid), requestId: '' });
    const cleaned = await eventually(
      () => getDevice(c.client, 'hosta', ARRIVED),
      (d) => d.deviceState === DeviceState.DEVICE_STATE_AVAILABLE,
      60_000,
    );
    expect(cleaned.media?.key).toBe(first.media?.key);
    onA = (await certificatesOf(cleaned.uuid))[0]!;
    const a2 = decodeCertificate(onA.jws).claims;
    expect([a2.host, a2.seq, a2.prev, a2.history]).toEqual(['hosta', 2, onB.hash, undefined]);

    // A tenant on hosta, then released: its data is erased and the chain goes on from hosta's link.
    const profile = await createNvmeProfile(c.client, 'nvme0');
    const bound = await createAndBind(c.client, profile, 'vm-on-hosta', 'hosta');
    expect(bound.deviceAddress).toBe(ARRIVED);
    expect(
      await plantTenantData(c.host('hosta').sim.nvmeStatePath, 'nvme1', spreadTenantWrites(1)),
    ).not.toEqual([]);
    await c.client.arqs.deleteAcceleratorRequests({ uuids: [bound.uuid], instanceUuid: '' });
    const released = await settledDevice(c.client, 'hosta', ARRIVED, 60_000);
    expect(stateName(released.deviceState), released.errorReason).toBe('DEVICE_STATE_AVAILABLE');
    expect(await readableTenantData(c.host('hosta').sim.nvmeStatePath, 'nvme1')).toEqual([]);
    const chain = await certificatesOf(released.uuid);
    expect(chain.map((x) => Number(x.seq))).toEqual([2, 3]);
    const a3 = decodeCertificate(chain[1]!.jws).claims;
    expect([a3.prev, a3.tenant?.instance_uuid]).toEqual([onA.hash, 'vm-on-hosta']);
  }, 180_000);

  it('offline, the chain shows the handover and the gap: berth cleanup verify and the Python example', async () => {
    const dir = c.root;
    const env = cliEnv(join(dir, 'cli-config.yaml'), { BERTH_ENDPOINT: c.scheduler.address });
    const keys = join(dir, 'keys.json');
    const b1 = join(dir, 'b1.jws');
    const a2 = join(dir, 'a2.jws');
    await writeFile(b1, `${onB.jws}\n`);
    await writeFile(a2, `${onA.jws}\n`);
    const saved = await berth(['host', 'keys', '--save', keys], env);
    expect(saved.code, saved.stderr).toBe(0);
    const handover = await berth(['cleanup', 'verify', a2, '--keys', keys, '--previous', b1], env);
    expect(handover.code, handover.stderr).toBe(0);
    expect(handover.stdout).toContain('handover: hostb -> hosta');
    expect(handover.stdout).not.toContain('gap:');
    const asJson = await berth(
      ['cleanup', 'verify', a2, '--keys', keys, '--previous', b1, '-o', 'json'],
      env,
    );
    expect(JSON.parse(asJson.stdout)).toMatchObject({
      seq: 2,
      prev: onB.hash,
      handover: { from: 'hostb', to: 'hosta' },
      gap: false,
    });
    const gap = await berth(['cleanup', 'verify', b1, '--keys', keys], env);
    expect(gap.code, gap.stderr).toBe(0);
    expect(gap.stdout).toContain('gap: unknown history before this link');
    if (available(pythonCryptography(), 'the Python verification example')) {
      const script = join(__dirname, '../../examples/verify-erasure-certificate.py');
      const out = JSON.parse(execFileSync(PYTHON, [script, a2, keys, b1], { encoding: 'utf8' }));
      expect(out).toMatchObject({ valid: true, seq: 2, handover: 'hostb -> hosta', gap: false });
      const head = JSON.parse(execFileSync(PYTHON, [script, b1, keys], { encoding: 'utf8' }));
      expect(head).toMatchObject({ valid: true, seq: 1, handover: null, gap: true });
    }
  }, 60_000);

  it("the database lost while the media's last holder is down: the next host's certificate is an unknown-history link; the old links are refused when their host returns", async () => {
    const own = await getDevice(c.client, 'hosta', SLOT);
    const [a1] = await certificatesOf(own.uuid);
    expect(a1).toBeDefined();
    // hosta, which holds SER-A's only chain, goes down; the database is lost; SER-A is carried to hostb.
    await c.host('hosta').stop();
    await c.scheduler.stop();
    for (const f of ['', '-wal', '-shm']) await rm(`${c.dbPath}${f}`, { force: true });
    await c.restartScheduler();
    await carry('hosta', 'hostb', { restartFrom: false });
    const there = await settledDevice(c.client, 'hostb', ARRIVED, 60_000);
    expect(stateName(there.deviceState), there.errorReason).toBe('DEVICE_STATE_AVAILABLE');
    expect(there.media?.key).toBe(own.media?.key);
    const [u] = await certificatesOf(there.uuid);
    const claims = decodeCertificate(u!.jws).claims;
    expect([claims.host, claims.seq, claims.prev, claims.history]).toEqual(['hostb', 1, null, 'unknown']);
    const file = join(c.root, 'unknown.jws');
    await writeFile(file, `${u!.jws}\n`);
    const keys = join(c.root, 'keys-after-loss.json');
    const env = cliEnv(join(c.root, 'cli-config.yaml'), { BERTH_ENDPOINT: c.scheduler.address });
    expect((await berth(['host', 'keys', '--save', keys], env)).code).toBe(0);
    const shown = await berth(['cleanup', 'verify', file, '--keys', keys], env);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toContain('gap: unknown history before this link');

    // hosta returns (without the drive): its older link of SER-A does not continue hostb's; refused, not stored.
    await c.host('hosta').start();
    await refusedAtRegistration(a1!.hash, /is an unknown-history link .*signed by host hostb/);
    expect(
      (await c.client.certificates.listErasureCertificates({ of: { $case: 'jobId', value: a1!.jobId } }))
        .certificates,
    ).toEqual([]);
    // The travelling drive's chain (hostb's link 1, hosta's links 2 and 3) is re-supplied and stored whole.
    const byJob = async (jobId: string) =>
      (await c.client.certificates.listErasureCertificates({ of: { $case: 'jobId', value: jobId } }))
        .certificates;
    for (const link of [onB, onA]) {
      const stored = await eventually(
        () => byJob(link.jobId),
        (l) => l.length === 1,
        20_000,
      );
      expect(stored[0]!.hash).toBe(link.hash);
    }
  }, 180_000);

  it("a restored database holds an older link than the agent: the next certificate follows the agent's later link (re-supplied first, or continued by the agent from its journal); one chain, no refusal", async () => {
    const before = await getDevice(c.client, 'hostb', ARRIVED);
    const key = before.media!.key;
    // SER-A (block erase, no crypto erase) is the only drive this profile picks.
    const profile = await createNvmeProfile(c.client, 'nvme1');
    // A copy of the database while SER-A's chain is hostb's link 1 (a clean stop checkpoints it).
    await c.restartScheduler();
    for (const f of ['', '-wal', '-shm'])
      await copyFile(`${c.dbPath}${f}`, `${c.dbPath}${f}.saved`).catch(() => {});
    await c.waitForDevices('hostb', 1);
    const first = await createAndBind(c.client, profile, 'vm-before-restore', 'hostb');
    expect(first.deviceAddress).toBe(ARRIVED);
    await c.client.arqs.deleteAcceleratorRequests({ uuids: [first.uuid], instanceUuid: '' });
    const cleaned = await settledDevice(c.client, 'hostb', ARRIVED, 60_000);
    expect(stateName(cleaned.deviceState), cleaned.errorReason).toBe('DEVICE_STATE_AVAILABLE');
    const second = (await certificatesOf(cleaned.uuid)).find((x) => Number(x.seq) === 2);
    expect(second).toBeDefined();
    // A next tenant writes to it; then the copy is restored (it knows neither tenant nor link 2)
    // while the agent is down. The agent's record brings the device to a cleanup at its first
    // registration, dispatched with link 1; its sanitize is slow enough that the agent's
    // re-supply of link 2 (at the registration right after) lands before the cleanup ends.
    const next = await createAndBind(c.client, profile, 'vm-lost-by-restore', 'hostb');
    expect(next.deviceAddress).toBe(ARRIVED);
    const sim = c.host('hostb').sim;
    expect(await plantTenantData(sim.nvmeStatePath, 'nvme1', spreadTenantWrites(1))).not.toEqual([]);
    await c.host('hostb').stop();
    await c.scheduler.stop();
    for (const f of ['', '-wal', '-shm']) {
      await rm(`${c.dbPath}${f}`, { force: true });
      await copyFile(`${c.dbPath}${f}.saved`, `${c.dbPath}${f}`).catch(() => {});
    }
    await c.restartScheduler();
    const restored = await eventually(
      () => getDevice(c.client, 'hostb', ARRIVED).catch(() => null),
      (d) => d !== null,
      15_000,
    );
    expect((await certificatesOf(restored!.uuid)).map((x) => Number(x.seq))).toEqual([1]);
    await withStateLock(sim.nvmeStatePath, (state) => {
      state.controllers.find((x) => x.name === 'nvme1')!.sanitize.durationMs = 4_000;
      return { changed: true, result: undefined };
    });
    const agentLogs = captureLogs('info');
    await c.host('hostb').start({ logger: agentLogs.logger });
    const after = await eventually(
      () => getDevice(c.client, 'hostb', ARRIVED),
      (d) =>
        d.lastCleanup !== undefined &&
        d.lastCleanup.jobId !== restored!.lastCleanup?.jobId &&
        (d.deviceState === DeviceState.DEVICE_STATE_AVAILABLE ||
          d.deviceState === DeviceState.DEVICE_STATE_ERROR),
      60_000,
    );
    expect(stateName(after.deviceState), after.errorReason).toBe('DEVICE_STATE_AVAILABLE');
    expect(await readableTenantData(sim.nvmeStatePath, 'nvme1')).toEqual([]);
    const third = await c.client.certificates.listErasureCertificates({
      of: { $case: 'jobId', value: after.lastCleanup!.jobId },
    });
    const claims = decodeCertificate(third.certificates[0]!.jws).claims;
    // Not a fork after link 1: it follows the agent's link 2, which the restored scheduler now holds too.
    expect([claims.media.key, claims.seq, claims.prev, claims.tenant?.instance_uuid]).toEqual([
      key,
      3,
      second!.hash,
      'vm-lost-by-restore',
    ]);
    // Whichever came first — the dispatch (stating link 1: the agent goes on from its own link 2
    // and says so) or the re-supply (the dispatch states link 2) — the chain is one, with no refusal.
    const said = agentLogs.matching((l) =>
      l.msg.startsWith('the scheduler stated an older link of this media'),
    );
    for (const l of said) expect([(l['stated'] as { seq: number }).seq, l['seq']]).toEqual([1, 3]);
    expect(
      logs.matching(
        (l) =>
          l.msg.startsWith('erasure certificates the agent supplied were refused') && l['host'] === 'hostb',
      ),
    ).toEqual([]);
  }, 180_000);
});
