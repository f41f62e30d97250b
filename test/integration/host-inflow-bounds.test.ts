/**
 * One host cannot exhaust the scheduler (docs/media-identity.md): a host with a valid agent credential that reports thousands of
 * fat devices and then a stream of changes gets what is beyond its bounds
 * refused — with a reason in the log and a metric — while the scheduler's
 * database stays bounded and another host's inventory keeps flowing.
 */
import { statSync } from 'node:fs';
import { join } from 'node:path';
import type { ServerWritableStream } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SchedulerClient } from '../../src/client/sdk.js';
import type { WatchInventoryRequest, WatchInventoryResponse } from '../../src/gen/berth/agent/v1/agent.js';
import type { Device } from '../../src/gen/berth/agent/v1/device.js';
import { hostName, pci } from '../../src/server/scheduler/domain/fixtures.support.js';
import { Scheduler } from '../../src/server/scheduler/scheduler.js';
import { SMALL_HOST, startSimAgent, tempDir } from '../helpers/agent.js';
import {
  agentVf,
  registerScriptedAgent,
  serveScriptedAgent,
  type WatchInventoryHandler,
} from '../helpers/scripted-agent.js';
import { eventually } from '../helpers/wait.js';

const LIMITS = { storedBytes: 1 << 20, burstBytes: 2 << 20, bytesPerSecond: 128 << 10 };

/** A fat device: 30 attributes of 200 characters, as the attacker sent them. */
function fat(i: number, generation: number): Device {
  const address = `0001:${((i >> 8) & 0xff).toString(16).padStart(2, '0')}:${((i >> 3) & 0x1f).toString(16).padStart(2, '0')}.${i & 7}`;
  return agentVf(address, {
    iommuGroup: i,
    traits: ['OWNER_BERTH'],
    attributes: Object.fromEntries(
      Array.from({ length: 30 }, (_, k) => [`attr${k}`, `${generation}`.padEnd(200, 'x')]),
    ),
  });
}

/**
 * An agent that floods: a snapshot of 8,000 fat devices (about 50 MB, beyond
 * the largest message the scheduler decodes), then, on the next streams, one
 * of 3,000 (beyond what one host may store) followed by `changed` events as
 * fast as the stream takes them.
 */
async function startFloodingAgent(): Promise<{
  address: string;
  sent: () => number;
  stop: () => Promise<void>;
}> {
  let sent = 0;
  let connections = 0;
  const streams = new Set<ServerWritableStream<WatchInventoryRequest, WatchInventoryResponse>>();
  const watch: WatchInventoryHandler = (call) => {
    streams.add(call);
    let live = true;
    call.on('cancelled', () => {
      live = false;
    });
    call.on('close', () => {
      live = false;
      streams.delete(call);
    });
    let revision = 1;
    connections += 1;
    const devices = Array.from({ length: connections === 1 ? 8000 : 3000 }, (_, i) => fat(i, 0));
    call.write({ epoch: 'flood', revision, event: { $case: 'snapshot', value: { devices } } });
    const pump = () => {
      while (live) {
        revision += 1;
        sent += 1;
        const ok = call.write({
          epoch: 'flood',
          revision,
          event: { $case: 'changed', value: fat(revision % 3000, revision) },
        });
        if (!ok) {
          call.once('drain', pump);
          return;
        }
      }
    };
    pump();
  };
  const agent = await serveScriptedAgent(watch);
  return {
    address: agent.address,
    sent: () => sent,
    stop: () =>
      agent.stop(() => {
        for (const s of streams) s.end();
      }),
  };
}

describe('one host cannot exhaust the scheduler', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let scheduler: Scheduler;
  let client: SchedulerClient;
  let flood: Awaited<ReturnType<typeof startFloodingAgent>>;
  let honest: Awaited<ReturnType<typeof startSimAgent>>;

  beforeAll(async () => {
    dir = await tempDir('berth-flood-');
    scheduler = await Scheduler.start({
      db: join(dir.path, 'scheduler.db'),
      listen: '127.0.0.1:0',
      heartbeatSeconds: 1,
      auth: { mode: 'none' },
      inventoryInflow: LIMITS,
    });
    client = new SchedulerClient({ endpoint: scheduler.address });
    flood = await startFloodingAgent();
    await registerScriptedAgent(scheduler.address, hostName('flood'), flood.address, 'flood');
    honest = await startSimAgent(SMALL_HOST, {
      host: hostName('honest'),
      scheduler: scheduler.address,
      enabled_drivers: ['pci'],
      pci: { device_spec: [{ vendor_id: '*' }] },
    });
  }, 60_000);

  afterAll(async () => {
    client?.close();
    await honest?.stop();
    await flood?.stop();
    await scheduler?.stop();
    await dir?.cleanup();
  });

  const metric = async (reason: string) => {
    const text = await scheduler.metrics.registry.metrics();
    const line = text.split('\n').find((l) => l.includes('host="flood"') && l.includes(`reason="${reason}"`));
    return line ? Number(line.split(' ').at(-1)) : 0;
  };

  it('decodes no message beyond its size, stores no more of a host than its byte bound, refuses changes beyond its rate, and says so', async () => {
    // The 50 MB snapshot is refused undecoded…
    await eventually(
      () => metric('message_bytes'),
      (n) => n >= 1,
      20_000,
    );
    // …the flood of changes after the next snapshot is refused at its rate (the stream is dropped and resumed later)…
    await eventually(
      () => metric('inflow_rate'),
      (n) => n >= 2,
      30_000,
    );
    // …and what that snapshot held beyond the byte bound was not stored.
    expect(await metric('device_bound')).toBeGreaterThan(1000);
    const stored = await scheduler.useCases.listDevices({ host: hostName('flood') }, { pageSize: 5000 });
    const bytes = stored.devices.reduce((n, d) => n + JSON.stringify(d.attributes).length, 0);
    expect(stored.devices.length).toBeGreaterThan(0);
    expect(stored.devices.length).toBeLessThan(8000);
    expect(bytes).toBeLessThanOrEqual(LIMITS.storedBytes);
    expect(flood.sent()).toBeGreaterThan(stored.devices.length);
  });

  it("another host's inventory keeps flowing while the flood goes on", async () => {
    await eventually(
      () => scheduler.useCases.listDevices({ host: hostName('honest') }),
      (p) => p.devices.length > 0,
      20_000,
    );
    // A device hot-plugged on the honest host reaches the scheduler.
    await honest.sysfs.addFunction({
      address: '0000:d8:00.0',
      vendorId: '15b3',
      productId: '1017',
      driver: 'mlx5_core',
    });
    await honest.agent.rediscover();
    await eventually(
      () =>
        scheduler.useCases
          .getDevice({ host: hostName('honest'), address: pci('0000:d8:00.0') })
          .catch(() => null),
      (d) => d !== null,
      20_000,
    );
    expect(await metric('inflow_rate')).toBeGreaterThan(0);
  });

  it("the scheduler's database stays bounded", async () => {
    const db = join(dir.path, 'scheduler.db');
    const size = (p: string) => {
      try {
        return statSync(p).size;
      } catch {
        return 0;
      }
    };
    // Records and their events for the stored bytes, plus what the rate let through since.
    expect(size(db) + size(`${db}-wal`)).toBeLessThan(48 << 20);
  });
});
