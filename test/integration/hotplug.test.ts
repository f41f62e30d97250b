/**
 * Hotplug through the kernel's events (decision 56), end to end: a scheduler
 * and a real agent on a simulated host whose sysfs changes come with the
 * kernel's uevents, printed by the simulated udevadm the agent runs as it runs
 * the real one. The agent's poll is an hour away (the cluster's
 * discovery_interval), so whatever reaches the scheduler here came through an
 * event; its counters say which functions were re-read.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { credentials, loadPackageDefinition, Metadata } from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import { protoPath as healthProtoPath } from 'grpc-health-check';
import { afterEach, describe, expect, it } from 'vitest';
import { HotplugState } from '../../src/gen/berth/agent/v1/agent.js';
import { type Device, Health } from '../../src/gen/berth/scheduler/v1/device.js';
import {
  DeviceServiceClient,
  type WatchDevicesResponse,
} from '../../src/gen/berth/scheduler/v1/device_service.js';
import type { Agent } from '../../src/server/agent/agent.js';
import { demoHostDefinition, type SimHostDefinition } from '../../src/sim/host.js';
import { writeSimHostUse } from '../../src/sim/host-use.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import { eventually } from '../helpers/grpc.js';

const HOST = 'hotplug-host';
/** A virtio NIC the operator lists by vendor: plugged and pulled by the tests. */
const PLUG = '0000:50:00.0';
const PF = '0000:3b:00.0';

function definition(): SimHostDefinition {
  const def = demoHostDefinition(HOST);
  def.pciDeviceSpec = [...def.pciDeviceSpec, { vendor_id: '1af4' }];
  return def;
}

/** Every device record the scheduler's WatchDevices sends from now on. */
function watch(endpoint: string) {
  const seen: { device: Device; removed: boolean; at: number }[] = [];
  const waiters: (() => void)[] = [];
  const raw = new DeviceServiceClient(endpoint, credentials.createInsecure());
  const stream = raw.watchDevices({ filter: undefined, fromRevision: 0 });
  stream.on('data', (m: WatchDevicesResponse) => {
    if (m.device && m.device.host === HOST)
      seen.push({ device: m.device, removed: m.removed, at: Date.now() });
    for (const w of waiters.splice(0)) w();
  });
  stream.on('error', () => {});
  return {
    seen,
    /** Resolves with the first record from index `from` on that `test` accepts. */
    async until(test: (d: Device, removed: boolean) => boolean, from = 0) {
      for (;;) {
        const hit = seen.slice(from).find((s) => test(s.device, s.removed));
        if (hit) return hit;
        await new Promise<void>((r) => waiters.push(r));
      }
    },
    stop() {
      stream.cancel();
      raw.close();
    },
  };
}

function health(endpoint: string, service: string): Promise<string> {
  const pkg = loadPackageDefinition(loadSync(healthProtoPath, { enums: String })) as unknown as {
    grpc: {
      health: {
        v1: {
          Health: new (
            a: string,
            c: ReturnType<typeof credentials.createInsecure>,
          ) => {
            check(
              r: { service: string },
              md: Metadata,
              cb: (e: (Error & { details?: string }) | null, r: { status: string }) => void,
            ): void;
            close(): void;
          };
        };
      };
    };
  };
  const client = new pkg.grpc.health.v1.Health(endpoint, credentials.createInsecure());
  return new Promise((resolve, reject) =>
    client.check({ service }, new Metadata(), (e, r) => {
      client.close();
      if (e) reject(e);
      else resolve(r.status);
    }),
  );
}

const following = (a: Agent) =>
  eventually(
    () => a.info().hotplug!,
    (h) => h.state === HotplugState.HOTPLUG_STATE_FOLLOWING,
    30_000,
  );

describe('hotplug through kernel events', () => {
  let c: Cluster | undefined;
  afterEach(async () => {
    await c?.stop();
    c = undefined;
  });

  it('a function plugged or pulled reaches the scheduler through its event, and only it is re-read', async () => {
    c = await startCluster([definition()]);
    await c.waitForDevices(HOST, 9);
    const agent = c.host(HOST).agent!;
    const sim = c.host(HOST).sim;
    await following(agent);
    // The pass that covers what changed before the source listened, and anything queued.
    await agent.hotplugSettled();
    expect(await health(agent.address, 'berth.agent.v1.Hotplug')).toBe('SERVING');
    const w = watch(c.scheduler.address);
    try {
      await w.until((_d, _r) => true);
      const before = { ...agent.counts };

      await sim.sysfs.addFunction({
        address: PLUG,
        vendorId: '1af4',
        productId: '1041',
        driver: 'vfio-pci',
        numaNode: 0,
      });
      const plugged = await w.until((d) => d.address === PLUG && d.health === Health.HEALTH_HEALTHY);
      expect(plugged.device).toMatchObject({ vendorId: '1af4', productId: '1041', kernelDriver: 'vfio-pci' });
      await agent.hotplugSettled();
      let now = agent.counts;
      expect(now.fullPasses).toBe(before.fullPasses);
      expect(now.partialPasses).toBeGreaterThan(before.partialPasses);
      // add + bind: one function (alone in its IOMMU group), read once or twice.
      expect(now.functionsReread - before.functionsReread).toBeGreaterThanOrEqual(1);
      expect(now.functionsReread - before.functionsReread).toBeLessThanOrEqual(2);

      const mark = w.seen.length;
      const b = { ...now };
      await sim.sysfs.removeFunction(PLUG);
      const pulled = await w.until((d) => d.address === PLUG && d.health === Health.HEALTH_UNHEALTHY, mark);
      expect(pulled.device.allocatable).toBe(false);
      await agent.hotplugSettled();
      now = agent.counts;
      expect(now.fullPasses).toBe(b.fullPasses);
      expect(now.functionsReread - b.functionsReread).toBeLessThanOrEqual(2);
      // What a full pass would make of it: the same as the event made.
      const full = await agent.rediscover();
      expect([full.added, full.changed, full.removed]).toEqual([[], [], []]);
    } finally {
      w.stop();
    }
  }, 120_000);

  it('VFs enabled in a burst: a few passes, not one per event, and nothing a full pass would change', async () => {
    c = await startCluster([definition()]);
    await c.waitForDevices(HOST, 9);
    const agent = c.host(HOST).agent!;
    await following(agent);
    await agent.hotplugSettled();
    const before = { ...agent.counts };
    const w = watch(c.scheduler.address);
    try {
      // 4 VFs more: 4 add and 4 bind events.
      const vfs = await c.host(HOST).sim.sysfs.setNumVfs(PF, 8);
      for (const vf of vfs.slice(4)) await w.until((d) => d.address === vf);
      await agent.hotplugSettled();
      const now = agent.counts;
      expect(now.events - before.events).toBe(8);
      expect(now.fullPasses).toBe(before.fullPasses);
      expect(now.partialPasses - before.partialPasses).toBeLessThan(8);
      const full = await agent.rediscover();
      expect([full.added, full.changed, full.removed]).toEqual([[], [], []]);
    } finally {
      w.stop();
    }
  }, 120_000);

  it('an NVMe drive moved to another slot: the new controller is identified and gets its locked-in action like any', async () => {
    c = await startCluster([definition()]);
    await c.waitForDevices(HOST, 9);
    const agent = c.host(HOST).agent!;
    const sim = c.host(HOST).sim;
    await following(agent);
    await agent.hotplugSettled();
    const w = watch(c.scheduler.address);
    try {
      const first = await w.until((d) => d.attributes.nvme_controller === 'nvme1');
      const from = first.device.address;
      const before = { ...agent.counts };
      await sim.moveNvme('nvme1', '0000:51:00.0', 'nvme7');
      const moved = await w.until((d) => d.address === '0000:51:00.0' && d.health === Health.HEALTH_HEALTHY);
      expect(moved.device.cleanupAction).toBe(first.device.cleanupAction);
      expect(moved.device.cleanupAction).toBe('sanitize-block');
      expect(moved.device.attributes).toMatchObject({
        nvme_controller: 'nvme7',
        serial: first.device.attributes.serial,
      });
      expect(moved.device.media?.key).toBeTruthy();
      expect(moved.device.media?.key).toBe(first.device.media?.key);
      await w.until((d) => d.address === from && d.health === Health.HEALTH_UNHEALTHY);
      await agent.hotplugSettled();
      expect(agent.counts.fullPasses).toBe(before.fullPasses);
      const full = await agent.rediscover();
      expect([full.added, full.changed, full.removed]).toEqual([[], [], []]);
    } finally {
      w.stop();
    }
  }, 120_000);

  it('what the host starts to use comes with no event: it is looked at every discovery_interval, and only those functions re-read', async () => {
    c = await startCluster([definition()], {
      agentConfig: (raw) => ({ ...raw, discovery_interval: 0.5 }),
    });
    await c.waitForDevices(HOST, 9);
    const agent = c.host(HOST).agent!;
    const sim = c.host(HOST).sim;
    await following(agent);
    await agent.hotplugSettled();
    const w = watch(c.scheduler.address);
    try {
      const drive = await w.until((d) => d.attributes.nvme_controller === 'nvme2');
      const before = { ...agent.counts };
      // The host mounts a file system on the drive's namespace: no uevent says so.
      await writeSimHostUse(sim, { mounts: [{ device: '/dev/nvme2n1', mountpoint: '/srv' }] });
      const used = await w.until(
        (d, removed) => d.address === drive.device.address && (removed || !d.allocatable),
      );
      expect(used.device.health).toBe(Health.HEALTH_UNHEALTHY);
      await agent.hotplugSettled();
      expect(agent.counts.fullPasses).toBe(before.fullPasses);
      expect(agent.counts.events).toBe(before.events);
      expect(agent.counts.functionsReread - before.functionsReread).toBe(1);
      expect(agent.inventory.get(drive.device.address)).toBeUndefined();
    } finally {
      w.stop();
    }
  }, 120_000);

  it('the event source killed: health says so, the agent polls, and events come back with the source', async () => {
    c = await startCluster([definition()], {
      agentConfig: (raw) => ({ ...raw, discovery_interval: 0.5, metrics_listen: '127.0.0.1:0' }),
    });
    await c.waitForDevices(HOST, 9);
    const agent = c.host(HOST).agent!;
    const sim = c.host(HOST).sim;
    await following(agent);
    await agent.hotplugSettled();
    const metric = async () => {
      const text = await (await fetch(`http://${agent.metricsAddress}/metrics`)).text();
      return /^berth_agent_hotplug_following\{[^}]*\} (\d)$/m.exec(text)?.[1];
    };
    expect(await metric()).toBe('1');
    expect(agent.info().hotplug!.fullRescanIntervalSeconds).toBe(300);

    // The next starts of the source fail too, until the wrapper is put back.
    const wrapper = await readFile(sim.udevadm, 'utf8');
    await writeFile(sim.udevadm, '#!/bin/sh\necho "udevadm: simulated breakage" >&2\nexit 1\n');
    process.kill(agent.hotplugSourcePid!, 'SIGKILL');
    const failed = await eventually(
      () => agent.info().hotplug!,
      (h) => h.state === HotplugState.HOTPLUG_STATE_FAILED,
      30_000,
    );
    expect(failed.message).toMatch(/was killed by SIGKILL|exited with code 1: udevadm: simulated breakage/);
    expect(failed.fullRescanIntervalSeconds).toBe(0.5);
    expect(await health(agent.address, 'berth.agent.v1.Hotplug')).toBe('NOT_SERVING');
    expect(await metric()).toBe('0');

    // Polling: a change without an event that reaches the agent (the source is down) is found by a full pass.
    const w = watch(c.scheduler.address);
    try {
      const full = agent.counts.fullPasses;
      const partial = agent.counts.partialPasses;
      await sim.sysfs.addFunction({ address: PLUG, vendorId: '1af4', productId: '1041', driver: 'vfio-pci' });
      await w.until((d) => d.address === PLUG && d.health === Health.HEALTH_HEALTHY);
      expect(agent.counts.fullPasses).toBeGreaterThan(full);
      expect(agent.counts.partialPasses).toBe(partial);

      // The source runs again: following, SERVING, and a change comes through its event.
      await writeFile(sim.udevadm, wrapper);
      const back = await following(agent);
      expect(back.sourceRestarts).toBeGreaterThanOrEqual(1);
      expect(back.fullRescanIntervalSeconds).toBe(300);
      expect(await health(agent.address, 'berth.agent.v1.Hotplug')).toBe('SERVING');
      await agent.hotplugSettled();
      const mark = w.seen.length;
      const p = agent.counts.partialPasses;
      await sim.sysfs.removeFunction(PLUG);
      await w.until((d) => d.address === PLUG && d.health === Health.HEALTH_UNHEALTHY, mark);
      expect(agent.counts.partialPasses).toBeGreaterThan(p);
    } finally {
      w.stop();
    }
  }, 120_000);

  it('a source that cannot start: the agent starts all the same, says why, and polls', async () => {
    c = await startCluster([definition()], {
      agentConfig: (raw) => ({
        ...raw,
        discovery_interval: 0.5,
        hotplug: { source: 'udevadm', udevadm: '/nonexistent/udevadm' },
      }),
    });
    await c.waitForDevices(HOST, 9);
    const agent = c.host(HOST).agent!;
    const h = await eventually(
      () => agent.info().hotplug!,
      (x) => x.state === HotplugState.HOTPLUG_STATE_FAILED,
      30_000,
    );
    expect(h).toMatchObject({ source: 'udevadm', message: 'cannot run /nonexistent/udevadm: ENOENT' });
    expect(await health(agent.address, 'berth.agent.v1.Hotplug')).toBe('NOT_SERVING');
    const w = watch(c.scheduler.address);
    try {
      await c
        .host(HOST)
        .sim.sysfs.addFunction({ address: PLUG, vendorId: '1af4', productId: '1041', driver: 'vfio-pci' });
      await w.until((d) => d.address === PLUG);
    } finally {
      w.stop();
    }
  }, 120_000);
});
