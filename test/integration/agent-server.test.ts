/**
 * The agent on loopback, on a simulated host: health, reflection (buf curl),
 * inventory with hotplug events, its lifecycle, and the start-up refusals.
 */
import { execFile } from 'node:child_process';
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { credentials, loadPackageDefinition } from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import { protoPath as healthProtoPath } from 'grpc-health-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/errors.js';
import { AgentServiceClient, type WatchInventoryResponse } from '../../src/gen/berth/agent/v1/agent.js';
import { FunctionKind } from '../../src/gen/berth/agent/v1/device.js';
import { DuplicateClaimError } from '../../src/server/agent/plugin-host.js';
import { type SimAgent, SMALL_HOST, startSimAgent, tempDir } from '../helpers/agent.js';
import { call, collect } from '../helpers/grpc.js';
import { waitFor } from '../helpers/wait.js';

const run = promisify(execFile);

/** The agent service's status by grpc.health.v1. */
async function healthOf(address: string): Promise<string> {
  const pkg = loadPackageDefinition(loadSync(healthProtoPath, { enums: String })) as unknown as {
    grpc: {
      health: {
        v1: {
          Health: new (
            a: string,
            c: unknown,
          ) => {
            check(req: { service: string }, cb: (e: Error | null, r: { status: string }) => void): void;
            close(): void;
          };
        };
      };
    };
  };
  const health = new pkg.grpc.health.v1.Health(address, credentials.createInsecure());
  try {
    const res = await new Promise<{ status: string }>((resolve, reject) =>
      health.check({ service: 'berth.agent.v1.AgentService' }, (e: Error | null, r: { status: string }) =>
        e ? reject(e) : resolve(r),
      ),
    );
    return res.status;
  } finally {
    health.close();
  }
}
const PCI_CONFIG = {
  enabled_drivers: ['pci'],
  pci: { device_spec: [{ vendor_id: '8086' }, { vendor_id: '10de', managed: 'no' }] },
};

describe('agent server on a simulated host', () => {
  let sim: SimAgent;
  let client: AgentServiceClient;

  beforeAll(async () => {
    sim = await startSimAgent(SMALL_HOST, PCI_CONFIG);
    client = new AgentServiceClient(sim.agent.address, credentials.createInsecure());
  });
  afterAll(async () => {
    client?.close();
    await sim?.stop();
  });

  it('reports itself with its drivers and features', async () => {
    const info = await call(client, client.getAgentInfo, {});
    expect(info.host).toBe('sim-host');
    expect(info.drivers.map((d) => d.name)).toEqual(['pci']);
    expect(info.features).toContain('cleanup.v1');
    expect(info.epoch).toBe(sim.agent.inventory.epoch);
  });

  it('serves grpc.health.v1 as SERVING', async () => {
    expect(await healthOf(sim.agent.address)).toBe('SERVING');
  });

  it('answers reflection: buf curl lists the agent methods without .proto files', async () => {
    const { stdout } = await run(
      join(process.cwd(), 'node_modules/.bin/buf'),
      [
        'curl',
        '--protocol',
        'grpc',
        '--http2-prior-knowledge',
        '--list-methods',
        `http://${sim.agent.address}`,
      ],
      { timeout: 20_000 },
    );
    const methods = stdout.trim().split('\n');
    expect(methods).toEqual(
      expect.arrayContaining([
        'berth.agent.v1.AgentService/GetAgentInfo',
        'berth.agent.v1.AgentService/WatchInventory',
        'berth.agent.v1.AgentService/CleanupDevice',
        'berth.agent.v1.AgentService/PrepareMigration',
      ]),
    );
  });

  it('lists VFs of a PF with VFs enabled, never the PF itself', async () => {
    const res = await call(client, client.listDevices, {});
    const addrs = res.devices.map((d) => d.address).sort();
    expect(addrs).toEqual(['0000:3b:02.0', '0000:3b:02.1', '0000:5e:00.0', '0000:af:00.0']);
    const vf = res.devices.find((d) => d.address === '0000:3b:02.0')!;
    expect(vf.functionKind).toBe(FunctionKind.FUNCTION_KIND_VF);
    expect(vf.physfn).toBe('0000:3b:00.0');
    expect(vf.resourceClass).toBe('CUSTOM_PCI_8086_154C');
    expect(vf.traits).toContain('OWNER_BERTH');
    const gpu = res.devices.find((d) => d.address === '0000:af:00.0')!;
    expect(gpu.managed).toBe(false);
    expect(gpu.numaNode).toBe(1);
  });

  it('streams a snapshot, then an added event when a VF appears and a removed one when it goes', async () => {
    const stream = client.watchInventory({ epoch: '', fromRevision: 0 });
    const seen: WatchInventoryResponse[] = [];
    const done = collect<WatchInventoryResponse>(stream, (msgs) => {
      seen.splice(0, seen.length, ...msgs);
      return msgs.some((m) => m.event?.$case === 'removed');
    });
    await waitFor(() => seen.length >= 1);
    expect(seen[0]!.event?.$case).toBe('snapshot');
    const snapRev = seen[0]!.revision;

    await sim.sysfs.setNumVfs('0000:3b:00.0', 3);
    const diff = await call(client, client.rediscover, {});
    expect(diff.added.map((d) => d.address)).toEqual(['0000:3b:02.2']);
    await waitFor(() => seen.some((m) => m.event?.$case === 'added'));

    await sim.sysfs.setNumVfs('0000:3b:00.0', 2);
    await call(client, client.rediscover, {});
    const msgs = await done;
    const added = msgs.find((m) => m.event?.$case === 'added')!;
    const removed = msgs.find((m) => m.event?.$case === 'removed')!;
    expect(added.event?.$case === 'added' && added.event.value.address).toBe('0000:3b:02.2');
    expect(removed.event?.$case === 'removed' && removed.event.value.address).toBe('0000:3b:02.2');
    expect(added.revision).toBeGreaterThan(snapRev);
    expect(removed.revision).toBeGreaterThan(added.revision);
  });

  it('resumes a watch from a revision without a new snapshot', async () => {
    const before = await call(client, client.listDevices, {});
    await sim.sysfs.setNumVfs('0000:3b:00.0', 4);
    await call(client, client.rediscover, {});
    const stream = client.watchInventory({ epoch: before.epoch, fromRevision: before.revision });
    const msgs = await collect<WatchInventoryResponse>(stream, (m) => m.length >= 2);
    expect(msgs.map((m) => m.event?.$case)).toEqual(['added', 'added']);
    expect(msgs[0]!.revision).toBe(before.revision + 1);
    await sim.sysfs.setNumVfs('0000:3b:00.0', 2);
    await call(client, client.rediscover, {});
  });

  it('marks a device that lost its kernel driver unhealthy, and healthy again when it returns', async () => {
    await sim.sysfs.setDriver('0000:5e:00.0', null);
    let res = await call(client, client.rediscover, {});
    expect(res.changed.find((d) => d.address === '0000:5e:00.0')?.healthReason).toMatch(/no kernel driver/);
    await sim.sysfs.setDriver('0000:5e:00.0', 'ixgbe');
    res = await call(client, client.rediscover, {});
    expect(res.changed.find((d) => d.address === '0000:5e:00.0')?.healthReason).toBe('');
  });
});

describe("the agent's lifecycle", () => {
  it('a driver whose discovery fails degrades the agent (health still SERVING) until it discovers again', async () => {
    const sim = await startSimAgent(SMALL_HOST, {
      enabled_drivers: [join(process.cwd(), 'test/fixtures/drivers/flaky-discovery.ts')],
      'flaky-discovery': { device_spec: { vendor_id: '10de' } },
    });
    try {
      expect(sim.agent.state).toEqual({ kind: 'serving' });
      const flag = join(sim.agent.config.stateDir, 'flaky-fail');
      await writeFile(flag, '');
      await sim.agent.rediscover();
      expect(sim.agent.state).toEqual({
        kind: 'degraded',
        reason: 'drivers_failing',
        detail: 'flaky-discovery',
      });
      // Its devices are kept as they were, and the agent still answers.
      expect(sim.agent.inventory.list().map((d) => d.address)).toEqual(['0000:af:00.0']);
      expect(await healthOf(sim.agent.address)).toBe('SERVING');
      await rm(flag);
      await sim.agent.rediscover();
      expect(sim.agent.state).toEqual({ kind: 'serving' });
    } finally {
      await sim.stop();
    }
    expect(sim.agent.state).toEqual({ kind: 'stopped' });
  });
});

describe('agent start-up refusals', () => {
  it('refuses to start when two drivers claim one device', async () => {
    const dir = await tempDir();
    await expect(
      startSimAgent(
        SMALL_HOST,
        {
          enabled_drivers: ['pci', join(process.cwd(), 'test/fixtures/drivers/pci-copy.ts')],
          pci: { device_spec: { vendor_id: '10de' } },
          'pci-copy': { device_spec: { address: '0000:af:00.0' } },
        },
        { root: dir.path },
      ),
    ).rejects.toThrowError(DuplicateClaimError);
    await dir.cleanup();
  });

  it('refuses to start when a driver fails initHost, naming the driver and the reason', async () => {
    const dir = await tempDir();
    await expect(
      startSimAgent(
        SMALL_HOST,
        { enabled_drivers: [join(process.cwd(), 'test/fixtures/drivers/init-fails.ts')] },
        { root: dir.path },
      ),
    ).rejects.toThrowError(
      /driver "init-fails" failed to initialise the host: vendor tool \/opt\/acme\/bin\/acmectl is missing/,
    );
    await dir.cleanup();
  });

  it('refuses a driver written for another driver API version', async () => {
    const dir = await tempDir();
    const err = await startSimAgent(
      SMALL_HOST,
      { enabled_drivers: [join(process.cwd(), 'test/fixtures/drivers/future-api.ts')] },
      { root: dir.path },
    ).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as Error).message).toMatch(
      /driver API version "4.0"; this agent speaks version 3 \(and 2, deprecated\)/,
    );
    await dir.cleanup();
  });

  it('refuses an unknown driver name with the list of built-in drivers', async () => {
    const dir = await tempDir();
    await expect(
      startSimAgent(SMALL_HOST, { enabled_drivers: ['pcie'] }, { root: dir.path }),
    ).rejects.toThrowError(/cannot load driver "pcie" \(built-in drivers: pci, nvme, nvme-vendor-example/);
    await dir.cleanup();
  });
});
