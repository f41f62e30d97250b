/**
 * A burst of inventory changes reaches the store in a bounded number of units
 * and every device's WatchDevices event once per change (decisions 73, 87).
 * The agent here is scripted, to send what the simulator does not: within one
 * burst, functions that appear and disappear again, and functions of the
 * snapshot that go and come back, all written at once.
 */
import { join } from 'node:path';
import type { ServerWritableStream } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { type WatchInventoryRequest, WatchInventoryResponse } from '../../src/gen/berth/agent/v1/agent.js';
import type { Device } from '../../src/gen/berth/agent/v1/device.js';
import { Health as SchedulerHealth } from '../../src/gen/berth/scheduler/v1/device.js';
import {
  DeviceServiceClient,
  type WatchDevicesResponse,
} from '../../src/gen/berth/scheduler/v1/device_service.js';
import { hostName } from '../../src/server/scheduler/domain/fixtures.support.js';
import { Scheduler } from '../../src/server/scheduler/scheduler.js';
import { tempDir } from '../helpers/agent.js';
import { insecure } from '../helpers/grpc.js';
import {
  agentVf,
  registerScriptedAgent,
  serveScriptedAgent,
  type WatchInventoryHandler,
} from '../helpers/scripted-agent.js';
import { waitFor } from '../helpers/wait.js';

const HOST = hostName('burst');
const EPOCH = 'burst-epoch';

const vf = (address: string): Device => agentVf(address, { physfn: '0000:3b:00.0' });

const at = (bus: number, i: number) =>
  `0000:${bus.toString(16).padStart(2, '0')}:${(i >> 3).toString(16).padStart(2, '0')}.${i & 7}`;

/** In the snapshot: 16 functions on bus 3c; the burst adds 256 on bus 3d. */
const BEFORE = Array.from({ length: 16 }, (_, i) => at(0x3c, i));
const NEW = Array.from({ length: 256 }, (_, i) => at(0x3d, i));
/** Added by the burst and removed again within it. */
const FLASH = NEW.slice(0, 8);
/** Of the snapshot: removed by the burst; the first two come back within it. */
const GONE = BEFORE.slice(0, 4);
const BACK = GONE.slice(0, 2);
/** Changed after the burst: its event says every event of the burst came before. */
const SENTINEL = BEFORE[15]!;

type Event = WatchInventoryResponse['event'];

/** The burst, in the order the agent sends it. */
function burst(): Event[] {
  return [
    ...NEW.map((a) => ({ $case: 'added', value: vf(a) }) as const),
    ...GONE.map((a) => ({ $case: 'removed', value: { address: a } }) as const),
    ...FLASH.map((a) => ({ $case: 'removed', value: { address: a } }) as const),
    ...BACK.map((a) => ({ $case: 'added', value: vf(a) }) as const),
  ];
}

/** An agent that sends a snapshot, then on `send` writes its events all at once. */
async function startScriptedAgent() {
  let stream: ServerWritableStream<WatchInventoryRequest, WatchInventoryResponse> | null = null;
  let revision = 1;
  const watch: WatchInventoryHandler = (c) => {
    stream = c;
    c.write({
      epoch: EPOCH,
      revision,
      event: { $case: 'snapshot', value: { devices: BEFORE.map(vf) } },
    });
  };
  const agent = await serveScriptedAgent(watch);
  return {
    address: agent.address,
    connected: () => stream !== null,
    send(events: Event[]) {
      for (const event of events) {
        revision += 1;
        stream!.write({ epoch: EPOCH, revision, event });
      }
    },
    stop: () =>
      agent.stop(() =>
        (stream as ServerWritableStream<WatchInventoryRequest, WatchInventoryResponse> | null)?.end(),
      ),
  };
}

describe('a burst of inventory changes', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let scheduler: Scheduler;
  let agent: Awaited<ReturnType<typeof startScriptedAgent>>;

  beforeAll(async () => {
    dir = await tempDir('berth-burst-');
    scheduler = await Scheduler.start({
      db: join(dir.path, 'scheduler.db'),
      listen: '127.0.0.1:0',
      auth: { mode: 'none' },
    });
    agent = await startScriptedAgent();
    await registerScriptedAgent(scheduler.address, HOST, agent.address, EPOCH);
  }, 60_000);

  afterAll(async () => {
    await agent?.stop();
    await scheduler?.stop();
    await dir?.cleanup();
  });

  it('is a bounded number of units, cut only where an address comes again, with every change one event', async () => {
    const upsert = scheduler.useCases.upsertInventory.bind(scheduler.useCases);
    const units = vi.spyOn(scheduler.useCases, 'upsertInventory');
    // What the link decodes of the agent's stream (only the link reads WatchInventory here).
    const decoded = vi.spyOn(WatchInventoryResponse, 'decode');
    const devices = new DeviceServiceClient(scheduler.address, insecure());
    const events: WatchDevicesResponse[] = [];
    const watch = devices.watchDevices({ filter: undefined, fromRevision: 0 });
    watch.on('data', (m: WatchDevicesResponse) => events.push(m));
    watch.on('error', () => {});
    try {
      // The snapshot applied and the watch past its initial state.
      const present = new Set<string>();
      await waitFor(
        () => {
          for (const e of events) if (e.device?.host === HOST) present.add(e.device.address);
          return events.some((e) => e.synced) && BEFORE.every((a) => present.has(a));
        },
        30_000,
        "the snapshot's 16 devices in WatchDevices",
      );
      const from = events.length;
      const snapshotUnits = units.mock.calls.length;
      const sent = burst();
      // The burst's first unit waits until the link has decoded every message
      // of it: what then waits in the link's queue is one batch whatever the
      // machine's load, so the units are counted without a race on the clock
      // (a batch otherwise gathers for 40 ms at most, decision 97).
      const decodedBefore = decoded.mock.calls.length;
      let allDecoded!: () => void;
      const gate = new Promise<void>((resolve) => {
        allDecoded = resolve;
      });
      units.mockImplementationOnce(async (...args) => {
        await gate;
        return upsert(...args);
      });
      agent.send(sent);
      // The sentinel's event comes after every event of the burst (units apply in order).
      agent.send([{ $case: 'removed', value: { address: SENTINEL } }]);
      await waitFor(
        () => decoded.mock.calls.length - decodedBefore >= sent.length + 1,
        30_000,
        'every message of the burst decoded by the link',
      );
      allDecoded();
      const sentinelGone = (e: WatchDevicesResponse) =>
        e.device?.address === SENTINEL && e.device.health === SchedulerHealth.HEALTH_UNHEALTHY;
      await waitFor(() => events.slice(from).some(sentinelGone), 30_000, "the sentinel's removal");

      // Every address's events, in order: healthy (present) or unhealthy (gone).
      const seen = new Map<string, string[]>();
      for (const e of events.slice(from)) {
        const d = e.device!;
        if (d.address === SENTINEL) continue;
        const list = seen.get(d.address) ?? [];
        list.push(d.health === SchedulerHealth.HEALTH_HEALTHY ? 'present' : 'gone');
        seen.set(d.address, list);
      }
      const expected = new Map<string, string[]>();
      for (const a of NEW) expected.set(a, FLASH.includes(a) ? ['present', 'gone'] : ['present']);
      for (const a of GONE) expected.set(a, BACK.includes(a) ? ['gone', 'present'] : ['gone']);
      expect(Object.fromEntries(seen)).toEqual(Object.fromEntries(expected));

      // Units: the first batch (what came before the link's first unit), then
      // every other message as one batch, cut where an address comes again
      // (the flashes' removals, the returns): at least two, at most six.
      // Batches of the stream's 16 buffered messages made 17 or more of these
      // 272 (decision 87).
      const burstUnits = units.mock.calls.slice(snapshotUnits);
      const applied = burstUnits.flatMap(([, u]) =>
        u.kind === 'delta' ? [...u.added.map((f) => `+${f.address}`), ...u.removed.map((a) => `-${a}`)] : [],
      );
      expect(burstUnits.every(([, u]) => u.kind === 'delta')).toBe(true);
      expect(applied).toHaveLength(sent.length + 1);
      expect(burstUnits.length).toBeGreaterThanOrEqual(2);
      expect(burstUnits.length).toBeLessThanOrEqual(6);
      // No unit holds two changes of one address.
      for (const [, u] of burstUnits) {
        if (u.kind !== 'delta') continue;
        const addresses = [...u.added.map((f) => f.address), ...u.removed];
        expect(new Set(addresses).size).toBe(addresses.length);
      }
    } finally {
      watch.cancel();
      devices.close();
      units.mockRestore();
      decoded.mockRestore();
    }
  }, 60_000);
});
