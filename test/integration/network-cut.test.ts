/**
 * Network partitions on loopback. A TCP proxy (test/helpers/tcp-proxy.ts) sits
 * on each path between the scheduler and host A's agent:
 *
 *   scheduler ──▶ proxyA ──▶ agent A     (the agent advertises proxyA as its endpoint)
 *   agent A   ──▶ proxyS ──▶ scheduler   (the agent's `--scheduler` is proxyS)
 *
 * and `cut()` resets every connection on a path and refuses new ones until
 * `restore()`, as a partition does (no GOAWAY, no orderly close). Host B's
 * agent is connected directly and must not notice anything. Real child
 * processes, so the keepalive, reconnect and backoff settings in use are the
 * shipped ones.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentClient, SchedulerClient } from '../../src/client/sdk.js';
import { CleanupPhase } from '../../src/gen/berth/agent/v1/agent.js';
import { CleanupOutcome, DeviceState } from '../../src/gen/berth/scheduler/v1/device.js';
import {
  buildSimHost,
  demoHostDefinition,
  type SimHost,
  type SimHostDefinition,
} from '../../src/sim/host.js';
import { tempDir } from '../helpers/agent.js';
import {
  createAndBind,
  createNvmeProfile,
  getDevice,
  listChecked,
  settledDevice,
  stateName,
} from '../helpers/invariants.js';
import {
  agentProcess,
  type BerthProcess,
  freePort,
  schedulerProcess,
  stopAllProcesses,
} from '../helpers/processes.js';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js';
import { eventually } from '../helpers/wait.js';

const HOST_A = 'cut-host-a';
const HOST_B = 'cut-host-b';
/** 4 VFs + GPU + 4 NVMe controllers. */
const DEMO_DEVICES = 9;

describe('network cuts between the scheduler and an agent (TCP proxy, child processes)', () => {
  let dir: { path: string; cleanup: () => Promise<void> };
  let simA: SimHost;
  let scheduler: BerthProcess;
  let agentA: BerthProcess;
  let agentB: BerthProcess;
  let proxyA: TcpProxy;
  let proxyS: TcpProxy;
  let client: SchedulerClient;
  let agentAPort: number;

  const explain = () => `${scheduler?.output() ?? ''}\n${agentA?.output() ?? ''}`;
  const hostOf = async (name: string) => (await client.hosts.getHost({ name })).host;
  const devicesOf = async (host: string) =>
    (
      await client.devices.listDevices({
        filter: { host, type: 0, state: 0, resourceClass: '' },
        pageSize: 0,
        pageToken: '',
      })
    ).devices;

  beforeAll(async () => {
    dir = await tempDir('berth-netcut-');
    const defA: SimHostDefinition = demoHostDefinition(HOST_A);
    // nvme1 (sanitize-block) sanitizes for long enough to cut the link mid-job.
    defA.nvme[1]!.sanitizeMs = 6_000;
    simA = await buildSimHost(join(dir.path, HOST_A), defA);
    const simB = await buildSimHost(join(dir.path, HOST_B), demoHostDefinition(HOST_B, 0x81));

    const schedPort = await freePort();
    scheduler = await schedulerProcess(join(dir.path, 'scheduler.db'), schedPort);
    await scheduler.start();
    client = new SchedulerClient({ endpoint: scheduler.endpoint, timeoutMs: 10_000 });
    proxyS = await startTcpProxy(scheduler.endpoint);

    agentAPort = await freePort();
    proxyA = await startTcpProxy(`127.0.0.1:${agentAPort}`);
    agentA = await agentProcess(simA, {
      scheduler: proxyS.address,
      port: agentAPort,
      config: { advertise: proxyA.address },
    });
    await agentA.start();
    agentB = await agentProcess(simB, { scheduler: scheduler.endpoint });
    await agentB.start();
    for (const h of [HOST_A, HOST_B]) {
      await eventually(
        () => hostOf(h),
        (x) => x?.connected === true,
        30_000,
      );
      await eventually(
        () => devicesOf(h),
        (d) => d.length === DEMO_DEVICES,
        30_000,
      );
    }
    expect((await hostOf(HOST_A))?.endpoint).toBe(proxyA.address);
    for (const ctrl of ['nvme0', 'nvme1', 'nvme2', 'nvme3'] as const) await createNvmeProfile(client, ctrl);
  }, 120_000);

  afterAll(async () => {
    client?.close();
    await proxyA?.close();
    await proxyS?.close();
    await stopAllProcesses();
    await dir?.cleanup();
  });

  it('a cut during a cleanup: the stream re-attaches after restore and the same job delivers success; never available meanwhile', async () => {
    const address = simA.definition.nvme[1]!.address;
    const bound = await createAndBind(client, 'pick-nvme1', 'vm-cut-cleanup', HOST_A);
    expect(bound.deviceAddress).toBe(address);
    await client.arqs.deleteAcceleratorRequests({ uuids: [bound.uuid], instanceUuid: '' });
    const cleaning = await eventually(
      () => getDevice(client, HOST_A, address),
      (d) => d.deviceState === DeviceState.DEVICE_STATE_CLEANING,
      15_000,
    );
    const jobId = cleaning.lastCleanup!.jobId;
    const connectionsBefore = proxyA.forwarded;

    proxyA.cut();
    // The scheduler notices the partition (its streams to the agent were reset).
    await eventually(
      () => hostOf(HOST_A),
      (h) => h?.connected === false,
      10_000,
    );
    // While cut off, the device stays held back however the job is doing: even
    // once the agent (asked directly, re-attaching by job id) has finished it.
    const agentClient = new AgentClient({ endpoint: `127.0.0.1:${agentAPort}`, timeoutMs: 30_000 });
    const phases: CleanupPhase[] = [];
    try {
      for await (const m of agentClient.cleanupDevice({ address, jobId })) {
        if (m.event) phases.push(m.event.phase);
      }
    } finally {
      agentClient.close();
    }
    expect(phases.at(-1), explain()).toBe(CleanupPhase.CLEANUP_PHASE_SUCCEEDED);
    const held = await getDevice(client, HOST_A, address);
    expect(stateName(held.deviceState), explain()).not.toBe('DEVICE_STATE_AVAILABLE');
    expect(held.reserved).toBe(1);
    expect((await hostOf(HOST_A))?.connected).toBe(false);
    proxyA.restore();

    const done = await settledDevice(client, HOST_A, address, 30_000);
    expect(stateName(done.deviceState), `${done.errorReason}\n${explain()}`).toBe('DEVICE_STATE_AVAILABLE');
    // The same job: re-attached by job id, not cleaned a second time.
    expect(done.lastCleanup?.jobId).toBe(jobId);
    expect(done.lastCleanup?.outcome).toBe(CleanupOutcome.CLEANUP_OUTCOME_SUCCEEDED);
    expect(done.lastCleanup?.action).toBe('sanitize-block');
    // ...over a new connection through the proxy.
    expect(proxyA.forwarded).toBeGreaterThan(connectionsBefore);
    await eventually(
      () => hostOf(HOST_A),
      (h) => h?.connected === true,
      15_000,
    );
    await listChecked(client, HOST_A);
  }, 90_000);

  it('a cut while idle, a hotplug during it: after restore the inventory catches up (WatchInventory resumes)', async () => {
    const before = await devicesOf(HOST_A);
    expect(before.length).toBe(DEMO_DEVICES);
    proxyA.cut();
    await eventually(
      () => hostOf(HOST_A),
      (h) => h?.connected === false,
      10_000,
    );

    // A fifth VF appears on host A while the scheduler cannot see it; the
    // agent (reached directly, not through the proxy) rediscovers it.
    const pf = simA.definition.pci.pfs?.[0]?.address ?? '';
    await simA.sysfs.setNumVfs(pf, 5);
    const agentClient = new AgentClient({ endpoint: `127.0.0.1:${agentAPort}`, timeoutMs: 10_000 });
    try {
      await agentClient.agent.rediscover({});
      const onAgent = await agentClient.agent.listDevices({});
      expect(onAgent.devices.length).toBe(DEMO_DEVICES + 1);
    } finally {
      agentClient.close();
    }
    // Nothing reaches the scheduler while cut: it tried to follow the agent
    // again since the change (twice) and was refused.
    const refused = proxyA.refused;
    await eventually(
      () => proxyA.refused,
      (n) => n >= refused + 2,
      30_000,
    );
    expect((await devicesOf(HOST_A)).length).toBe(DEMO_DEVICES);

    proxyA.restore();
    const after = await eventually(
      () => devicesOf(HOST_A),
      (d) => d.length === DEMO_DEVICES + 1,
      30_000,
    );
    const added = after.filter((d) => !before.some((b) => b.address === d.address));
    expect(added.length).toBe(1);
    expect(added[0]!.physfn).toBe(pf);
    expect(added[0]!.allocatable).toBe(true);
    await eventually(
      () => hostOf(HOST_A),
      (h) => h?.connected === true,
      15_000,
    );
    await listChecked(client, HOST_A);
  }, 90_000);

  it('while host A is cut off, the scheduler keeps serving host B: a bind, a release and its cleanup complete', async () => {
    proxyA.cut();
    try {
      await eventually(
        () => hostOf(HOST_A),
        (h) => h?.connected === false,
        10_000,
      );
      const started = Date.now();
      const bound = await createAndBind(client, 'pick-nvme2', 'vm-host-b', HOST_B);
      await client.arqs.deleteAcceleratorRequests({ uuids: [bound.uuid], instanceUuid: '' });
      const clean = await eventually(
        () => getDevice(client, HOST_B, bound.deviceAddress),
        (d) =>
          d.deviceState === DeviceState.DEVICE_STATE_AVAILABLE ||
          d.deviceState === DeviceState.DEVICE_STATE_ERROR,
        30_000,
      );
      expect(stateName(clean.deviceState), clean.errorReason).toBe('DEVICE_STATE_AVAILABLE');
      expect(clean.lastCleanup?.action).toBe('write-zeroes');
      expect(clean.lastCleanup?.outcome).toBe(CleanupOutcome.CLEANUP_OUTCOME_SUCCEEDED);
      expect((await hostOf(HOST_B))?.connected).toBe(true);
      // A cut-off host is not where a bind can land.
      expect(Date.now() - started).toBeLessThan(30_000);
      expect((await hostOf(HOST_A))?.connected).toBe(false);
    } finally {
      proxyA.restore();
    }
    await eventually(
      () => hostOf(HOST_A),
      (h) => h?.connected === true,
      15_000,
    );
  }, 90_000);

  it('the agent re-registers soon after a long cut of its path to a scheduler that restarted meanwhile', async () => {
    // The agent cannot reach the scheduler; the scheduler restarts and so
    // knows host A only from its database (disconnected) until A registers.
    const refusedAtCut = proxyS.refused;
    proxyS.cut();
    await scheduler.kill('SIGKILL');
    await scheduler.restart();
    client.close();
    client = new SchedulerClient({ endpoint: scheduler.endpoint, timeoutMs: 10_000 });
    await eventually(
      () => hostOf(HOST_B),
      (h) => h?.connected === true,
      15_000,
    );
    expect((await hostOf(HOST_A))?.connected).toBe(false);
    // A long outage, counted in the agent's refused attempts to reach the
    // scheduler: after eight, gRPC's default reconnect backoff (1 s growing
    // by 1.6 up to 120 s) would wait about half a minute before the next; the
    // shipped one (200 ms up to 5 s) is at its cap.
    await eventually(
      () => proxyS.refused,
      (n) => n >= refusedAtCut + 8,
      60_000,
    );
    expect((await hostOf(HOST_A))?.connected).toBe(false);

    proxyS.restore();
    const restored = Date.now();
    await eventually(
      () => hostOf(HOST_A),
      (h) => h?.connected === true,
      60_000,
    );
    const took = Date.now() - restored;
    // Register interval 0.5 s; the reconnect backoff is capped at 5 s (+20 % jitter).
    expect(took, `re-registered ${took} ms after the restore\n${explain()}`).toBeLessThan(9_000);
    expect((await devicesOf(HOST_A)).length).toBe(DEMO_DEVICES + 1);
    await listChecked(client, HOST_A);
  }, 150_000);
});
