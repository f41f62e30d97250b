/**
 * Invariants 2-5 when processes die: the real `berth scheduler serve` and
 * `berth agent serve` run as child processes (test/helpers/processes.ts) so
 * they can be SIGKILLed mid-operation and restarted on the same port, state
 * dir and database, the way a host or a scheduler crashes in production.
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
import { eventually } from '../helpers/grpc.js';
import {
  createAndBind,
  createClassProfile,
  createNvmeProfile,
  expectInvariant1,
  getDevice,
  listChecked,
  stateName,
  uuidRef,
} from '../helpers/invariants.js';
import { agentProcess, type BerthProcess, schedulerProcess, stopAllProcesses } from '../helpers/processes.js';

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
    agent = await agentProcess(sim, { scheduler: schedEndpoint });
    await agent.start();
    await waitForHost(client, HOST, DEMO_DEVICES);
    for (const ctrl of ['nvme0', 'nvme1', 'nvme2'] as const) await createNvmeProfile(client, ctrl);
  }, 90_000);

  afterAll(async () => {
    client?.close();
    await stopAllProcesses();
    await dir?.cleanup();
  });

  it('agent SIGKILLed mid-cleanup: the device goes to error (interrupted), never available; CleanDevice then cleans it for real', async () => {
    const address = nvmeAddress.nvme0!;
    // The sanitize command hangs, so the device is provably `cleaning` when the agent dies.
    await sim.setFault('nvme0', 'sanitize', { mode: 'hang' });
    const bound = await createAndBind(client, 'pick-nvme0', 'vm-killed-agent', HOST);
    expect(bound.deviceAddress).toBe(address);
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

    // The "hardware" is fine again; only the interrupted job is in doubt.
    await sim.setFault('nvme0', 'sanitize', null);
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
    // It stays in error: nothing retries a cleanup that may have half-run.
    await new Promise((r) => setTimeout(r, 1_500));
    expect((await getDevice(client, HOST, address)).deviceState).toBe(DeviceState.DEVICE_STATE_ERROR);

    const { jobId: operatorJob } = await client.devices.cleanDevice({
      device: uuidRef(err.uuid),
      requestId: '',
    });
    expect(operatorJob).not.toBe(jobId);
    const clean = await eventually(
      () => getDevice(client, HOST, address),
      (d) =>
        d.deviceState === DeviceState.DEVICE_STATE_AVAILABLE ||
        d.deviceState === DeviceState.DEVICE_STATE_ERROR,
      20_000,
    );
    expect(stateName(clean.deviceState), clean.errorReason).toBe('DEVICE_STATE_AVAILABLE');
    expect(clean.lastCleanup?.jobId).toBe(operatorJob);
    expect(clean.lastCleanup?.outcome).toBe(CleanupOutcome.CLEANUP_OUTCOME_SUCCEEDED);
    expect(clean.lastCleanup?.action).toBe('sanitize-crypto');
    expect(clean.reserved).toBe(0);
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
    // Nobody can clean it, so nothing changes however long the agent stays away.
    await new Promise((r) => setTimeout(r, 2_000));
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
    const clean = await eventually(
      () => getDevice(client, HOST, address),
      (d) =>
        d.deviceState === DeviceState.DEVICE_STATE_AVAILABLE ||
        d.deviceState === DeviceState.DEVICE_STATE_ERROR,
      30_000,
    );
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
    const done = await eventually(
      () => getDevice(client, HOST, address),
      (d) =>
        d.deviceState === DeviceState.DEVICE_STATE_AVAILABLE ||
        d.deviceState === DeviceState.DEVICE_STATE_ERROR,
      20_000,
    );
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
