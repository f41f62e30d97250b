/**
 * Invariants 2-5 when processes die: the real `berth scheduler serve` and
 * `berth agent serve` run as child processes (test/helpers/processes.ts) so
 * they can be SIGKILLed mid-operation and restarted on the same port, state
 * dir and database, the way a host or a scheduler crashes in production.
 * The scheduler reaches the agent through a gRPC proxy that records every
 * call (test/helpers/agent-proxy.ts): what the scheduler asked of the agent
 * is what the checks that nothing happened wait on.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentClient, BerthClientError, SchedulerClient } from '../../src/client/sdk.js';
import { CleanupPhase } from '../../src/gen/berth/agent/v1/agent.js';
import { ArqState } from '../../src/gen/berth/scheduler/v1/accelerator_request.js';
import { CleanupOutcome, DeviceState } from '../../src/gen/berth/scheduler/v1/device.js';
import {
  buildSimHost,
  demoHostDefinition,
  type SimHost,
  type SimHostDefinition,
} from '../../src/sim/host.js';
import { tempDir } from '../helpers/agent.js';
import { type AgentProxy, startAgentProxy } from '../helpers/agent-proxy.js';
import {
  createAndBind,
  createClassProfile,
  createNvmeProfile,
  expectInvariant1,
  getDevice,
  listChecked,
  settledDevice,
  stateName,
  uuidRef,
  VF_CLASS,
  vfHostDefinition,
} from '../helpers/invariants.js';
import {
  agentProcess,
  type BerthProcess,
  freePort,
  schedulerProcess,
  stopAllProcesses,
} from '../helpers/processes.js';
import { eventually, sleep } from '../helpers/wait.js';

const HOST = 'crash-host';
/** 4 VFs + GPU + 4 NVMe controllers. */
const DEMO_DEVICES = 9;

async function waitForHost(client: SchedulerClient, host: string, devices: number, timeoutMs = 20_000) {
  await eventually(
    async () => (await client.hosts.listHosts({})).hosts.find((h) => h.name === host),
    (h) => h?.connected === true,
    timeoutMs,
  );
  await eventually(
    () =>
      client.devices.listDevices({
        filter: { host, type: 0, state: 0, resourceClass: '' },
        pageSize: 0,
        pageToken: '',
      }),
    (r) => r.devices.length === devices,
    timeoutMs,
  );
}

describe('agent and scheduler crashes around cleanups (child processes)', () => {
  let dir: { path: string; cleanup: () => Promise<void> };
  let sim: SimHost;
  let scheduler: BerthProcess;
  let agent: BerthProcess;
  let client: SchedulerClient;
  let proxy: AgentProxy;
  /** Every CleanupDevice the scheduler sent the agent (through the proxy), in order. */
  const cleanupCalls: { address: string; jobId: string }[] = [];
  const cleanupCallsFor = (address: string, since = 0) =>
    cleanupCalls.slice(since).filter((c) => c.address === address);
  const nvmeAddress: Record<string, string> = {};

  const explain = () => `${scheduler?.output() ?? ''}\n${agent?.output() ?? ''}`;

  beforeAll(async () => {
    dir = await tempDir('berth-crash-');
    const def: SimHostDefinition = demoHostDefinition(HOST);
    // nvme1 (sanitize-block) sanitizes slowly, so a scheduler can die and come
    // back while the agent is still working on it.
    def.nvme[1]!.sanitizeMs = 5_000;
    sim = await buildSimHost(join(dir.path, HOST), def);
    for (const n of def.nvme) nvmeAddress[n.controller] = n.address;
    scheduler = await schedulerProcess(join(dir.path, 'scheduler.db'));
    const schedEndpoint = await scheduler.start();
    client = new SchedulerClient({ endpoint: schedEndpoint, timeoutMs: 10_000 });
    const agentPort = await freePort();
    proxy = await startAgentProxy(`127.0.0.1:${agentPort}`, undefined, (method, _md, request) => {
      if (method === 'cleanupDevice') cleanupCalls.push(request as { address: string; jobId: string });
    });
    agent = await agentProcess(sim, {
      scheduler: schedEndpoint,
      port: agentPort,
      config: { advertise: proxy.address },
    });
    await agent.start();
    await waitForHost(client, HOST, DEMO_DEVICES);
    for (const ctrl of ['nvme0', 'nvme1', 'nvme2', 'nvme3'] as const) await createNvmeProfile(client, ctrl);
  }, 90_000);

  afterAll(async () => {
    client?.close();
    await stopAllProcesses();
    await proxy?.stop();
    await dir?.cleanup();
  });

  it('agent SIGKILLed mid-cleanup: the device goes to error (interrupted), never available; CleanDevice then cleans it for real', async () => {
    const address = nvmeAddress.nvme0!;
    // The sanitize command hangs, so the device is provably `cleaning` when the agent dies.
    await sim.setFault('nvme0', 'sanitize', { mode: 'hang' });
    const bound = await createAndBind(client, 'pick-nvme0', 'vm-killed-agent', HOST);
    expect(bound.deviceAddress).toBe(address);
    // A witness: another device, released while the agent is down, so that its
    // cleanup is dispatched when the agent returns — by the same look at the
    // backlog that would retry nvme0's (what the check below waits for).
    const witness = await createAndBind(client, 'pick-nvme2', 'vm-witness', HOST);
    await client.arqs.deleteAcceleratorRequests({ uuids: [bound.uuid], instanceUuid: '' });
    const cleaning = await eventually(
      () => getDevice(client, HOST, address),
      (d) => d.deviceState === DeviceState.DEVICE_STATE_CLEANING,
      15_000,
    );
    const jobId = cleaning.lastCleanup!.jobId;
    expect(jobId).not.toBe('');

    const killed = await agent.kill('SIGKILL');
    expect(killed.signal).toBe('SIGKILL');
    // While the agent is dead the device is still held back.
    const held = await getDevice(client, HOST, address);
    expect(held.deviceState, explain()).not.toBe(DeviceState.DEVICE_STATE_AVAILABLE);
    expect(held.reserved).toBe(1);
    await client.arqs.deleteAcceleratorRequests({ uuids: [witness.uuid], instanceUuid: '' });

    // The "hardware" is fine again; only the interrupted job is in doubt.
    await sim.setFault('nvme0', 'sanitize', null);
    const callsBeforeRestart = cleanupCalls.length;
    await agent.restart();
    const err = await eventually(
      () => getDevice(client, HOST, address),
      (d) => d.deviceState !== DeviceState.DEVICE_STATE_CLEANING,
      20_000,
    );
    expect(stateName(err.deviceState), explain()).toBe('DEVICE_STATE_ERROR');
    expect(err.reserved).toBe(1);
    expect(err.allocatable).toBe(false);
    expect(err.lastCleanup?.jobId).toBe(jobId);
    expect(err.lastCleanup?.outcome).toBe(CleanupOutcome.CLEANUP_OUTCOME_INTERRUPTED);
    expect(err.errorReason).toMatch(/interrupted|restarted/);
    // It stays in error: nothing retries a cleanup that may have half-run. The
    // witness's cleanup, queued while the agent was away, went out with the
    // scheduler's look at the backlog after the restart and has finished; a
    // retry of nvme0 would have gone out with it.
    const witnessClean = await settledDevice(client, HOST, witness.deviceAddress, 30_000);
    expect(stateName(witnessClean.deviceState), witnessClean.errorReason).toBe('DEVICE_STATE_AVAILABLE');
    expect(cleanupCallsFor(witness.deviceAddress, callsBeforeRestart).length).toBeGreaterThan(0);
    const still = await getDevice(client, HOST, address);
    expect(stateName(still.deviceState)).toBe('DEVICE_STATE_ERROR');
    expect(still.lastCleanup?.jobId).toBe(jobId);
    expect(cleanupCallsFor(address, callsBeforeRestart)).toEqual([]);

    const { jobId: operatorJob } = await client.devices.cleanDevice({
      device: uuidRef(err.uuid),
      requestId: '',
    });
    expect(operatorJob).not.toBe(jobId);
    const clean = await settledDevice(client, HOST, address, 20_000);
    expect(stateName(clean.deviceState), clean.errorReason).toBe('DEVICE_STATE_AVAILABLE');
    expect(clean.lastCleanup?.jobId).toBe(operatorJob);
    expect(clean.lastCleanup?.outcome).toBe(CleanupOutcome.CLEANUP_OUTCOME_SUCCEEDED);
    expect(clean.lastCleanup?.action).toBe('sanitize-crypto');
    expect(clean.reserved).toBe(0);
    await listChecked(client, HOST);
  }, 90_000);

  it('a cleanup dispatched to a frozen agent that then dies is dispatched again, never failed, when the agent returns', async () => {
    const address = nvmeAddress.nvme3!;
    const bound = await createAndBind(client, 'pick-nvme3', 'vm-frozen-agent', HOST);
    expect(bound.deviceAddress).toBe(address);
    // The agent is frozen: it still holds its connections, so the scheduler
    // dispatches the cleanup, but the agent never reads the request.
    agent.signal('SIGSTOP');
    const callsBefore = cleanupCalls.length;
    try {
      await client.arqs.deleteAcceleratorRequests({ uuids: [bound.uuid], instanceUuid: '' });
      // The scheduler has sent the cleanup; the frozen agent never answers it.
      await eventually(
        () => cleanupCallsFor(address, callsBefore).length,
        (n) => n > 0,
        15_000,
      );
      const pending = await getDevice(client, HOST, address);
      expect(stateName(pending.deviceState)).toBe('DEVICE_STATE_PENDING_CLEANING');
      // nvme3 was never cleaned before: no cleanup has started on it.
      expect(pending.lastCleanup).toBeUndefined();
    } finally {
      await agent.kill('SIGKILL');
    }
    const before = await getDevice(client, HOST, address);
    expect(stateName(before.deviceState)).toBe('DEVICE_STATE_PENDING_CLEANING');
    await agent.restart();
    const clean = await settledDevice(client, HOST, address, 30_000);
    expect(stateName(clean.deviceState), `${clean.errorReason}\n${explain()}`).toBe('DEVICE_STATE_AVAILABLE');
    expect(clean.lastCleanup?.outcome).toBe(CleanupOutcome.CLEANUP_OUTCOME_SUCCEEDED);
    expect(clean.lastCleanup?.action).toBe('shred');
    await listChecked(client, HOST);
  }, 90_000);

  it('agent down at release: the device stays reserved (pending_cleaning) and is cleaned when the agent returns', async () => {
    const address = nvmeAddress.nvme2!;
    const bound = await createAndBind(client, 'pick-nvme2', 'vm-agent-down', HOST);
    expect(bound.deviceAddress).toBe(address);

    await agent.stop();
    await eventually(
      async () => (await client.hosts.getHost({ name: HOST })).host,
      (h) => h?.connected === false,
      15_000,
    );
    await client.arqs.deleteAcceleratorRequests({ uuids: [bound.uuid], instanceUuid: '' });
    const pending = await getDevice(client, HOST, address);
    expect(stateName(pending.deviceState)).toBe('DEVICE_STATE_PENDING_CLEANING');
    expect(pending.reserved).toBe(1);
    expect(pending.arqUuid).toBe('');
    // Nobody can clean it, so nothing changes however long the agent stays away:
    // the scheduler has looked at the cleanup and decided it waits.
    await scheduler.waitForLog(
      (l) => l.address === address && l.msg.startsWith('agent not connected; the cleanup waits for it'),
      { what: 'the cleanup of nvme2 waiting for its agent' },
    );
    const still = await getDevice(client, HOST, address);
    expect(stateName(still.deviceState)).toBe('DEVICE_STATE_PENDING_CLEANING');
    // And a bind cannot take it meanwhile.
    const [arq] = (
      await client.arqs.createAcceleratorRequests({ profileName: 'pick-nvme2', requestId: '', tags: [] })
    ).acceleratorRequests;
    const refused = await client.arqs
      .bindAcceleratorRequests({
        bindings: [{ arqUuid: arq!.uuid, instanceUuid: 'vm-thief', host: HOST, tag: '' }],
      })
      .then(
        () => null,
        (e: unknown) => e,
      );
    expect(refused).toBeInstanceOf(BerthClientError);
    expect((refused as BerthClientError).codeName).toBe('FAILED_PRECONDITION');
    await client.arqs.deleteAcceleratorRequests({ uuids: [arq!.uuid], instanceUuid: '' });

    await agent.restart();
    const clean = await settledDevice(client, HOST, address, 30_000);
    expect(stateName(clean.deviceState), `${clean.errorReason}\n${explain()}`).toBe('DEVICE_STATE_AVAILABLE');
    expect(clean.lastCleanup?.outcome).toBe(CleanupOutcome.CLEANUP_OUTCOME_SUCCEEDED);
    expect(clean.lastCleanup?.action).toBe('write-zeroes');
    expect(clean.reserved).toBe(0);
    await listChecked(client, HOST);
  }, 90_000);

  it('scheduler SIGKILLed mid-cleanup: the agent finishes the job alone and the outcome is delivered after the restart', async () => {
    const address = nvmeAddress.nvme1!;
    const bound = await createAndBind(client, 'pick-nvme1', 'vm-sched-crash', HOST);
    expect(bound.deviceAddress).toBe(address);
    await client.arqs.deleteAcceleratorRequests({ uuids: [bound.uuid], instanceUuid: '' });
    const cleaning = await eventually(
      () => getDevice(client, HOST, address),
      (d) => d.deviceState === DeviceState.DEVICE_STATE_CLEANING,
      15_000,
    );
    const jobId = cleaning.lastCleanup!.jobId;

    await scheduler.kill('SIGKILL');
    // Ask the agent itself (re-attaching by job id, as the scheduler would):
    // the job runs to success while no scheduler is listening.
    const agentClient = new AgentClient({ endpoint: agent.endpoint, timeoutMs: 10_000 });
    const phases: CleanupPhase[] = [];
    try {
      for await (const m of agentClient.cleanupDevice({ address, jobId })) {
        if (m.event) phases.push(m.event.phase);
      }
    } finally {
      agentClient.close();
    }
    expect(phases.at(-1), agent.output()).toBe(CleanupPhase.CLEANUP_PHASE_SUCCEEDED);

    await scheduler.restart();
    client.close();
    client = new SchedulerClient({ endpoint: scheduler.endpoint, timeoutMs: 10_000 });
    // Before the agent re-registers the scheduler only knows the job was running.
    const done = await settledDevice(client, HOST, address, 20_000);
    expect(stateName(done.deviceState), `${done.errorReason}\n${explain()}`).toBe('DEVICE_STATE_AVAILABLE');
    // The same job delivered its outcome: no second cleanup was started.
    expect(done.lastCleanup?.jobId).toBe(jobId);
    expect(done.lastCleanup?.outcome).toBe(CleanupOutcome.CLEANUP_OUTCOME_SUCCEEDED);
    expect(done.lastCleanup?.action).toBe('sanitize-block');
    expect(done.reserved).toBe(0);
    await waitForHost(client, HOST, DEMO_DEVICES);
    await listChecked(client, HOST);
  }, 90_000);
});

describe('scheduler kill -9 during a bind storm (child processes)', () => {
  const STORM_HOST = 'storm-host';
  const VFS = 24;
  const WORKERS = 8;
  const ITERATIONS = 200;
  let dir: { path: string; cleanup: () => Promise<void> };
  let scheduler: BerthProcess;
  let agent: BerthProcess;

  beforeAll(async () => {
    dir = await tempDir('berth-storm-');
    const sim = await buildSimHost(join(dir.path, STORM_HOST), vfHostDefinition(STORM_HOST, VFS));
    scheduler = await schedulerProcess(join(dir.path, 'scheduler.db'));
    await scheduler.start();
    agent = await agentProcess(sim, { scheduler: scheduler.endpoint });
    await agent.start();
  }, 90_000);

  afterAll(async () => {
    await stopAllProcesses();
    await dir?.cleanup();
  });

  it('every bind acknowledged before the crash is still bound after the restart; no device is bound twice', async () => {
    let client = new SchedulerClient({ endpoint: scheduler.endpoint, timeoutMs: 5_000 });
    await waitForHost(client, STORM_HOST, VFS);
    await createClassProfile(client, 'storm-vf', VF_CLASS);

    type Tracked = { arq: string; device: string; instance: string; state: 'bound' | 'deleting' | 'deleted' };
    const tracked: Tracked[] = [];
    const unexpected: string[] = [];
    let stop = false;
    let acked = 0;
    /** Calls that met the dead scheduler: proof the kill landed mid-storm. */
    let unavailable = 0;
    const deadline = Date.now() + 60_000;

    // Each worker: create + bind (acknowledged binds are recorded), and delete its
    // oldest binding once it holds two, so the storm never runs out of devices.
    const worker = async (w: number) => {
      const mine: Tracked[] = [];
      for (let i = 0; i < ITERATIONS && !stop && Date.now() < deadline; i++) {
        try {
          const [arq] = (
            await client.arqs.createAcceleratorRequests({
              profileName: 'storm-vf',
              requestId: `storm-${w}-${i}`,
              tags: [],
            })
          ).acceleratorRequests;
          const instance = `storm-vm-${w}-${i}`;
          const [b] = (
            await client.arqs.bindAcceleratorRequests({
              bindings: [{ arqUuid: arq!.uuid, instanceUuid: instance, host: STORM_HOST, tag: '' }],
            })
          ).acceleratorRequests;
          const t: Tracked = { arq: b!.uuid, device: b!.deviceUuid, instance, state: 'bound' };
          tracked.push(t);
          mine.push(t);
          acked++;
          if (mine.length >= 2) {
            const old = mine.shift()!;
            old.state = 'deleting';
            await client.arqs.deleteAcceleratorRequests({ uuids: [old.arq], instanceUuid: '' });
            old.state = 'deleted';
          }
        } catch (err) {
          if (!(err instanceof BerthClientError)) throw err;
          if (['UNAVAILABLE', 'DEADLINE_EXCEEDED', 'CANCELLED'].includes(err.codeName)) {
            unavailable++;
            await sleep(50);
          } else if (err.codeName === 'FAILED_PRECONDITION') {
            await sleep(10);
          } else {
            unexpected.push(`${err.method}: ${err.codeName} ${err.message}`);
          }
        }
      }
    };
    const storm = Promise.all(Array.from({ length: WORKERS }, (_, w) => worker(w)));
    try {
      await eventually(
        () => acked,
        (n) => n >= 40,
        30_000,
      );
      await scheduler.kill('SIGKILL');
      const ackedAtCrash = acked;
      await scheduler.restart();
      const old = client;
      client = new SchedulerClient({ endpoint: scheduler.endpoint, timeoutMs: 5_000 });
      old.close();
      // The storm goes on against the restarted scheduler for a while.
      await eventually(
        () => acked,
        (n) => n >= ackedAtCrash + 20,
        30_000,
      );
    } finally {
      stop = true;
      await storm;
    }
    expect(unexpected, scheduler.output()).toEqual([]);
    expect(unavailable).toBeGreaterThan(0);
    expect(tracked.filter((t) => t.state === 'bound').length).toBeGreaterThan(0);

    const arqs = (await client.arqs.listAcceleratorRequests({ instanceUuid: '' })).acceleratorRequests;
    const byUuid = new Map(arqs.map((a) => [a.uuid, a]));
    const devices = await listChecked(client, STORM_HOST);
    const deviceByUuid = new Map(devices.map((d) => [d.uuid, d]));

    // Durability: every acknowledged bind whose ARQ was not (maybe) deleted is there.
    for (const t of tracked.filter((x) => x.state === 'bound')) {
      const a = byUuid.get(t.arq);
      expect(a, `acknowledged ARQ ${t.arq} lost\n${scheduler.output()}`).toBeDefined();
      expect(a!.state).toBe(ArqState.ARQ_STATE_BOUND);
      expect(a!.deviceUuid).toBe(t.device);
      expect(a!.instanceUuid).toBe(t.instance);
      const d = deviceByUuid.get(t.device)!;
      expect(stateName(d.deviceState)).toBe('DEVICE_STATE_ALLOCATED');
      expect(d.arqUuid).toBe(t.arq);
    }
    // An acknowledged delete is not undone by the crash either.
    for (const t of tracked.filter((x) => x.state === 'deleted')) {
      expect(byUuid.has(t.arq), `deleted ARQ ${t.arq} came back`).toBe(false);
    }
    // Invariant 5: one device per bound ARQ, one bound ARQ per allocated device.
    const bound = arqs.filter((a) => a.state === ArqState.ARQ_STATE_BOUND);
    const boundDevices = bound.map((a) => a.deviceUuid);
    expect(new Set(boundDevices).size).toBe(boundDevices.length);
    const allocated = devices.filter((d) => d.deviceState === DeviceState.DEVICE_STATE_ALLOCATED);
    expect(allocated.length).toBe(bound.length);
    for (const d of allocated) {
      const a = byUuid.get(d.arqUuid);
      expect(a?.state, `device ${d.address} held by ARQ ${d.arqUuid}`).toBe(ArqState.ARQ_STATE_BOUND);
      expect(a?.deviceUuid).toBe(d.uuid);
    }
    expectInvariant1(devices);
    client.close();
  }, 150_000);
});
