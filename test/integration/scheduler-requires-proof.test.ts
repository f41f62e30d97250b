/**
 * The scheduler believes a cleanup's success only with the agent's proof of
 * erasure. An agent older than the scheduler (or one that lies by omission)
 * reports CLEANUP_PHASE_SUCCEEDED without a proof: the device must go to error,
 * never back to available. A gRPC proxy in front of a real agent strips the
 * proof, which Berth's own agent never does (test/helpers/agent-proxy.ts).
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SchedulerClient } from '../../src/client/sdk.js';
import type { CleanupDeviceResponse } from '../../src/gen/berth/agent/v1/agent.js';
import { CleanupOutcome, DeviceState } from '../../src/gen/berth/scheduler/v1/device.js';
import type { Agent } from '../../src/server/agent/agent.js';
import { Scheduler } from '../../src/server/scheduler/scheduler.js';
import { tempDir } from '../helpers/agent.js';
import { type AgentProxy, startAgentBehindProxy } from '../helpers/agent-proxy.js';
import {
  createAndBind,
  createNvmeProfile,
  listChecked,
  type NvmeName,
  settledDevice,
  stateName,
} from '../helpers/invariants.js';

const HOST = 'proofless-host';

describe('a cleanup success without a proof of erasure', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let scheduler: Scheduler;
  let agent: Agent;
  let proxy: AgentProxy;
  let client: SchedulerClient;
  /** Whether the proxy strips the proof from the agent's cleanup events. */
  let strip = false;

  beforeAll(async () => {
    dir = await tempDir('berth-proofless-');
    scheduler = await Scheduler.start({
      db: join(dir.path, 'scheduler.db'),
      listen: '127.0.0.1:0',
      heartbeatSeconds: 1,
      auth: { mode: 'none' },
    });
    client = new SchedulerClient({ endpoint: scheduler.address, timeoutMs: 15_000 });
    ({ agent, proxy } = await startAgentBehindProxy({
      scheduler,
      client,
      dir: dir.path,
      host: HOST,
      rewrite: (method, message) => {
        const r = message as CleanupDeviceResponse;
        if (method !== 'cleanupDevice' || !strip || !r.event?.proof) return r;
        const { proof: _dropped, ...event } = r.event;
        return { event: { ...event, proof: undefined } };
      },
    }));
  }, 60_000);

  afterAll(async () => {
    client?.close();
    await agent?.stop();
    await proxy?.stop();
    await scheduler?.stop();
    await dir?.cleanup();
  });

  async function useAndRelease(ctrl: NvmeName, instance: string) {
    const profile = await createNvmeProfile(client, ctrl);
    const bound = await createAndBind(client, profile, instance, HOST);
    const device = (await listChecked(client, HOST)).find((d) => d.instanceUuid === instance);
    expect(device, `no device bound to ${instance}`).toBeDefined();
    await client.arqs.deleteAcceleratorRequests({ uuids: [bound.uuid], instanceUuid: '' });
    return settledDevice(client, HOST, device!.address);
  }

  it('through the same proxy, a success with its proof makes the device available (the control)', async () => {
    strip = false;
    const d = await useAndRelease('nvme0', 'vm-current-agent');
    expect(stateName(d.deviceState), d.errorReason).toBe('DEVICE_STATE_AVAILABLE');
    expect(d.lastCleanup?.outcome).toBe(CleanupOutcome.CLEANUP_OUTCOME_SUCCEEDED);
    expect(d.lastCleanup?.proof?.method).toBeTruthy();
  }, 60_000);

  it('is not believed: the device goes to error with the reason, and is not allocatable', async () => {
    strip = true;
    const d = await useAndRelease('nvme1', 'vm-old-agent');
    expect(d.deviceState).toBe(DeviceState.DEVICE_STATE_ERROR);
    expect(d.errorReason).toContain('without a proof of erasure');
    expect(d.allocatable).toBe(false);
    expect(d.lastCleanup?.outcome).toBe(CleanupOutcome.CLEANUP_OUTCOME_FAILED);
  }, 60_000);
});
