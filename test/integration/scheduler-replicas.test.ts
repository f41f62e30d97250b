/**
 * Three `berth scheduler serve` processes on one PostgreSQL database (issue
 * 13), two simulated hosts whose agents list the schedulers in different
 * orders. Each host's agent link is leased to one scheduler; any scheduler
 * answers any call (a bind through one that does not follow the host asks the
 * agent to record it directly; a release through it is cleaned by the host's
 * follower); and when a scheduler is SIGKILLed — in a bind storm, or while it
 * follows a cleanup — every acknowledged bind survives, the cleanup finishes
 * under the same job id through another scheduler without being run again,
 * and the host is followed again within 10 s.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SchedulerClient } from '../../src/client/sdk.js';
import { CleanupOutcome } from '../../src/gen/berth/scheduler/v1/device.js';
import { buildSimHost, demoHostDefinition, type SimHost } from '../../src/sim/host.js';
import { plantTenantData, readableTenantData, spreadTenantWrites } from '../../src/sim/nvme-cli/index.js';
import {
  createAndBind,
  createClassProfile,
  createNvmeProfile,
  getDevice,
  listChecked,
  settledDevice,
  stateName,
  VF_CLASS,
  vfHostDefinition,
} from '../helpers/invariants.js';
import { type Gate, nvmeGate } from '../helpers/nvme-gate.js';
import { type PostgresServer, startPostgres } from '../helpers/postgres.js';
import { available, postgresServer } from '../helpers/prerequisites.js';
import {
  agentProcess,
  type BerthProcess,
  freePort,
  schedulerProcess,
  stopAllProcesses,
} from '../helpers/processes.js';
import { eventually } from '../helpers/wait.js';

const usable = available(postgresServer(), 'scheduler replicas on PostgreSQL');

const NVME_HOST = 'replica-nvme-host';
const VF_HOST = 'replica-vf-host';
const VFS = 24;
/** The bound: a host whose scheduler died is followed again within this. */
const TAKEOVER_MS = 10_000;

describe.skipIf(!usable)('three scheduler replicas on one PostgreSQL database (child processes)', () => {
  let pgServer: PostgresServer;
  let dir: string;
  const replicas: Record<'A' | 'B' | 'C', BerthProcess> = {} as never;
  const clients: Partial<Record<'A' | 'B' | 'C', SchedulerClient>> = {};
  let nvmeSim: SimHost;
  let vfSim: SimHost;
  let vfAgent: BerthProcess;
  let gate: Gate;
  const endpoints = (order: Array<'A' | 'B' | 'C'>) => order.map((n) => replicas[n].endpoint);
  const client = (name: 'A' | 'B' | 'C') => clients[name]!;
  const idOf = (name: 'A' | 'B' | 'C') => String(replicas[name].listening.scheduler_id);
  /** The scheduler following `host`, as any live scheduler reports it. */
  const followerOf = async (host: string, via: 'A' | 'B' | 'C') =>
    (await client(via).hosts.getHost({ name: host })).host;

  beforeAll(async () => {
    pgServer = await startPostgres();
    const url = await pgServer.createDatabase(
      `berth_${createHash('sha256').update('replicas').digest('hex').slice(0, 12)}`,
    );
    dir = mkdtempSync(join(tmpdir(), 'berth-replicas-'));
    for (const name of ['A', 'B', 'C'] as const) {
      replicas[name] = await schedulerProcess(url, await freePort(), `scheduler ${name}`);
      await replicas[name].start();
      clients[name] = new SchedulerClient({ endpoint: replicas[name].endpoint, timeoutMs: 20_000 });
    }
    const def = demoHostDefinition(NVME_HOST);
    for (const n of def.nvme) n.sanitizeMs = 300;
    nvmeSim = await buildSimHost(join(dir, 'nvme'), def);
    gate = await nvmeGate(join(dir, 'gate'), nvmeSim.nvmeCli, 'sanitize');
    vfSim = await buildSimHost(join(dir, 'vf'), vfHostDefinition(VF_HOST, VFS));
    // The two agents list the schedulers in different orders: A follows one host, C the other.
    const nvmeAgent = await agentProcess(nvmeSim, {
      scheduler: endpoints(['A', 'B', 'C']),
      config: { nvme: { nvme_cli: gate.nvmeCli, cleanup_timeout: 120 } },
    });
    vfAgent = await agentProcess(vfSim, { scheduler: endpoints(['C', 'B', 'A']) });
    await Promise.all([nvmeAgent.start(), vfAgent.start()]);
    for (const [host, count] of [
      [NVME_HOST, 9],
      [VF_HOST, VFS],
    ] as const) {
      await eventually(
        () =>
          client('B').devices.listDevices({
            filter: { host, type: 0, state: 0, resourceClass: '' },
            pageSize: 0,
            pageToken: '',
          }),
        (r) => r.devices.length === count,
        30_000,
      );
    }
  }, 180_000);

  afterAll(async () => {
    for (const c of Object.values(clients)) c?.close();
    await stopAllProcesses();
    await pgServer?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('each host is followed by exactly one scheduler; a bind and a release through the others are recorded and cleaned', async () => {
    // Every scheduler names the same follower: the first live one in the agent's list.
    for (const via of ['A', 'B', 'C'] as const) {
      expect((await followerOf(NVME_HOST, via))?.followedBy).toBe(idOf('A'));
      expect((await followerOf(VF_HOST, via))?.followedBy).toBe(idOf('C'));
      expect((await followerOf(NVME_HOST, via))?.connected).toBe(true);
    }
    // Bound through B, which does not follow the host: B asks the agent itself to record it.
    const profile = await createNvmeProfile(client('B'), 'nvme0');
    const arq = await createAndBind(client('B'), profile, 'vm-through-b', NVME_HOST);
    expect(await plantTenantData(nvmeSim.nvmeStatePath, 'nvme0', spreadTenantWrites(1))).not.toEqual([]);
    // Released through C: A (the follower) hears of it from the database and dispatches the cleanup.
    await client('C').arqs.deleteAcceleratorRequests({ uuids: [arq.uuid], instanceUuid: '' });
    const d = await settledDevice(client('B'), NVME_HOST, arq.deviceAddress);
    expect(stateName(d.deviceState), d.errorReason).toBe('DEVICE_STATE_AVAILABLE');
    expect(d.lastCleanup?.outcome).toBe(CleanupOutcome.CLEANUP_OUTCOME_SUCCEEDED);
    expect(d.lastCleanup?.proof?.method).toBeTruthy();
    expect(await readableTenantData(nvmeSim.nvmeStatePath, 'nvme0')).toEqual([]);
  }, 90_000);

  it('an agent that comes back on another port, registering with a scheduler that does not follow it, is followed there by its follower', async () => {
    const before = await followerOf(VF_HOST, 'A');
    expect(before?.followedBy).toBe(idOf('C'));
    await vfAgent.kill('SIGKILL');
    await eventually(
      () => followerOf(VF_HOST, 'A'),
      (h) => h?.connected === false,
    );
    // Same host and state, a new port, and B first in its list: B stores the new
    // endpoint; C, which holds the lease, dials it at its next look.
    vfAgent = await agentProcess(vfSim, { scheduler: endpoints(['B', 'C', 'A']) });
    await vfAgent.start();
    expect(vfAgent.endpoint).not.toBe(before?.endpoint);
    const after = await eventually(
      () => followerOf(VF_HOST, 'B'),
      (h) => h?.connected === true && h.endpoint === vfAgent.endpoint,
      30_000,
    );
    expect(after?.followedBy).toBe(idOf('C'));
    expect(await listChecked(client('B'), VF_HOST)).toHaveLength(VFS);
  }, 60_000);

  it('kill -9 of a scheduler in a bind storm: every acknowledged bind survives, none twice, its host followed again within 10 s', async () => {
    await createClassProfile(client('A'), 'vf', VF_CLASS);
    const order = ['A', 'B', 'C'] as const;
    let acknowledged = 0;
    let killedAt = 0;
    let killed: Promise<unknown> | null = null;
    const results = await Promise.allSettled(
      Array.from({ length: 64 }, async (_, i) => {
        const bound = await createAndBind(client(order[i % 3]!), 'vf', `storm-${i}`, VF_HOST);
        // C (the VF host's follower) dies after the 4th acknowledgement, with binds still in flight.
        if (++acknowledged === 4) {
          killedAt = Date.now();
          killed = replicas.C.kill('SIGKILL');
        }
        return bound;
      }),
    );
    expect(killed).not.toBeNull();
    await killed;
    const acked = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    expect(acked.length).toBeGreaterThanOrEqual(4);
    expect(acked.length).toBeLessThanOrEqual(VFS);
    // Every acknowledged bind is in the database, as the survivors read it.
    for (const a of acked) {
      const got = (await client('A').arqs.getAcceleratorRequest({ uuid: a.uuid })).acceleratorRequest;
      expect(got?.deviceUuid, `ARQ ${a.uuid}`).toBe(a.deviceUuid);
    }
    const devices = await listChecked(client('B'), VF_HOST);
    const bound = devices.filter((d) => d.arqUuid !== '');
    expect(new Set(bound.map((d) => d.arqUuid)).size).toBe(bound.length);
    expect(new Set(acked.map((a) => a.deviceUuid)).size).toBe(acked.length);
    for (const a of acked) expect(bound.find((d) => d.uuid === a.deviceUuid)?.arqUuid).toBe(a.uuid);
    // C followed the VF host: A or B follows it again, within 10 s of the kill.
    const host = await eventually(
      () => followerOf(VF_HOST, 'A'),
      (h) => h?.connected === true && (h.followedBy === idOf('A') || h.followedBy === idOf('B')),
      30_000,
    );
    const takeover = Date.now() - killedAt;
    expect(host?.followedBy).not.toBe(idOf('C'));
    expect(takeover, `followed again ${takeover} ms after the kill`).toBeLessThan(TAKEOVER_MS);
  }, 120_000);

  it('kill -9 of the scheduler following a cleanup: another re-attaches it by job id, it runs once, the host is followed again within 10 s', async () => {
    expect((await followerOf(NVME_HOST, 'B'))?.followedBy).toBe(idOf('A'));
    const profile = await createNvmeProfile(client('B'), 'nvme1');
    const arq = await createAndBind(client('B'), profile, 'vm-cleanup-kill', NVME_HOST);
    expect(await plantTenantData(nvmeSim.nvmeStatePath, 'nvme1', spreadTenantWrites(1))).not.toEqual([]);
    const callsBefore = gate.calls();
    gate.close();
    await client('B').arqs.deleteAcceleratorRequests({ uuids: [arq.uuid], instanceUuid: '' });
    // The agent is inside the sanitize, dispatched by A.
    await gate.reached();
    const cleaning = await eventually(
      () => getDevice(client('B'), NVME_HOST, arq.deviceAddress),
      (d) => stateName(d.deviceState) === 'DEVICE_STATE_CLEANING',
    );
    const jobId = cleaning.lastCleanup?.jobId;
    expect(jobId).toBeTruthy();
    const killedAt = Date.now();
    await replicas.A.kill('SIGKILL');
    // B (the only one left) adopts the host once A's lease runs out.
    const host = await eventually(
      () => followerOf(NVME_HOST, 'B'),
      (h) => h?.connected === true && h.followedBy === idOf('B'),
      30_000,
    );
    const takeover = Date.now() - killedAt;
    expect(host?.followedBy).toBe(idOf('B'));
    expect(takeover, `followed again ${takeover} ms after the kill`).toBeLessThan(TAKEOVER_MS);
    gate.open();
    const d = await settledDevice(client('B'), NVME_HOST, arq.deviceAddress, 60_000);
    expect(stateName(d.deviceState), d.errorReason).toBe('DEVICE_STATE_AVAILABLE');
    expect(d.lastCleanup?.jobId).toBe(jobId);
    expect(d.lastCleanup?.outcome).toBe(CleanupOutcome.CLEANUP_OUTCOME_SUCCEEDED);
    expect(d.lastCleanup?.proof?.method).toBeTruthy();
    // Re-attached, never restarted: the sanitize ran once.
    expect(gate.calls() - callsBefore).toBe(1);
    expect(await readableTenantData(nvmeSim.nvmeStatePath, 'nvme1')).toEqual([]);
  }, 120_000);
});
