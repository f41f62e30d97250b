/**
 * The whole-fleet watch of the fleet bench (issue 42 item 1): one
 * WatchDevices with no filter from revision 0, read to `synced` and checked.
 *
 * While the initial state streams, the watcher stops reading four times (at
 * its first device and at a quarter, half and three quarters of the fleet;
 * the server's stream waits on HTTP/2 flow control meanwhile, between its
 * pages) and changes the status of devices spread over the uuid order — some
 * in pages already sent, some in pages still to come, some twice. Then:
 *
 * - every device of the fleet came exactly once as `initial` (counted);
 * - a device's generation only goes up, message after message: a change
 *   told twice, or told after a page already showed it, fails;
 * - every change arrives (none lost): at `synced` already, at the large
 *   sizes (the last pages were read after every change, and some changes
 *   must have been told before `synced`: their pages were sent before them);
 *   after it at the small ones, where the scheduler may have read the whole
 *   fleet before the first change. One change made after `synced` arrives too.
 *
 * Any of these failing throws: the figure is not reported.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { SchedulerClient } from '../src/client/sdk.js';
import { DeviceStatus } from '../src/gen/berth/scheduler/v1/device.js';
import { hostName } from './bind-harness.js';
import { nowMs } from './lib.js';

export interface FleetWatch {
  /** From the call to `synced`. */
  synced_ms: number;
  /** Distinct devices in the initial state (= the fleet). */
  initial_devices: number;
  /** Status changes made while the initial state streamed. */
  changes_during: number;
  /** `change` messages before `synced` (the changes whose page had already been sent). */
  changes_before_synced: number;
}

const uuidRef = (uuid: string) => ({ ref: { $case: 'uuid' as const, value: uuid } });
const ALL = { host: '', type: 0, state: 0, resourceClass: '' };
/**
 * From this many devices the stream is surely held mid-read at each stop (the
 * flow-control window holds a few hundred devices, the scheduler reads 1,000 a
 * page); below it, the scheduler may have read the whole fleet and sent
 * `synced` before the changes, which then follow it.
 */
const LARGE = 50_000;

/** Devices to change: a page of devices from 8 hosts spread over the fleet (their uuids are random). */
async function targets(client: SchedulerClient, hosts: number, n: number): Promise<string[]> {
  const out = new Set<string>();
  for (let k = 0; k < 8 && out.size < n; k++) {
    const host = hostName(Math.floor((k * hosts) / 8));
    const page = await client.devices.listDevices({ filter: { ...ALL, host }, pageSize: 500, pageToken: '' });
    for (const d of page.devices) if (out.size < n) out.add(d.uuid);
  }
  if (out.size < n) throw new Error(`fleet watch: ${out.size} devices to change, ${n} wanted`);
  return [...out];
}

export async function wholeFleetWatch(
  client: SchedulerClient,
  hosts: number,
  expected: number,
): Promise<FleetWatch> {
  const uuids = await targets(client, hosts, 31);
  /** The generation each changed device must have once the watcher is synced. */
  const want = new Map<string, number>();
  let status = DeviceStatus.DEVICE_STATUS_MAINTAINING;
  let changesDuring = 0;
  const change = async (uuid: string) => {
    const r = await client.devices.setDeviceStatus({ device: uuidRef(uuid), status });
    want.set(uuid, r.device!.generation);
    changesDuring++;
  };
  // Stop points: the first device, then each quarter; at each, 10 devices change (the first 10 twice).
  const stops = [1, Math.floor(expected / 4), Math.floor(expected / 2), Math.floor((3 * expected) / 4)];
  const batches = [uuids.slice(0, 10), uuids.slice(10, 20), uuids.slice(20, 30), uuids.slice(0, 10)];

  const gen = new Map<string, number>();
  let initial = 0;
  let changesBeforeSynced = 0;
  const fail = (why: string): never => {
    throw new Error(`fleet watch: ${why}`);
  };
  const ac = new AbortController();
  const t0 = nowMs();
  let syncedMs = -1;
  let after: string | null = null;
  try {
    for await (const m of client.watchDevices({ filter: ALL, fromRevision: 0 }, ac.signal)) {
      if (m.synced) {
        syncedMs = nowMs() - t0;
        if (initial !== expected) fail(`${initial} devices in the initial state, the fleet has ${expected}`);
        if (expected >= LARGE) {
          // The stream was held mid-read at each stop, so the last pages were read after every change.
          for (const [uuid, g] of want) {
            if (gen.get(uuid) !== g) {
              fail(`at synced device ${uuid} is at generation ${gen.get(uuid)}, its last change made ${g}`);
            }
          }
          if (changesBeforeSynced === 0)
            fail('no change was told before synced: the pages were not read around them');
        }
        // What has not arrived a minute after synced is lost (checked below).
        setTimeout(() => ac.abort(), 60_000).unref();
        // One change after synced must arrive as a change.
        after = uuids[30]!;
        status = DeviceStatus.DEVICE_STATUS_MAINTAINING;
        await change(after);
        continue;
      }
      const d = m.device;
      if (!d) fail(`message without a device at revision ${m.revision}`);
      const uuid = d!.uuid;
      const before = gen.get(uuid);
      if (m.initial) {
        if (syncedMs >= 0) fail(`initial message for ${uuid} after synced`);
        if (before !== undefined) fail(`device ${uuid} came twice in the initial state`);
        initial++;
      } else {
        if (before !== undefined && d!.generation <= before) {
          fail(
            `change of ${uuid} to generation ${d!.generation} after ${before}: told twice or out of order`,
          );
        }
        if (syncedMs < 0) changesBeforeSynced++;
      }
      gen.set(uuid, d!.generation);
      if (after !== null && [...want].every(([u, g]) => gen.get(u) === g)) break;
      const stop = stops.indexOf(initial);
      if (m.initial && stop >= 0) {
        // The server's stream waits on flow control while these commit; give it a moment to fill up.
        await sleep(50);
        status = stop === 3 ? DeviceStatus.DEVICE_STATUS_ENABLED : DeviceStatus.DEVICE_STATUS_MAINTAINING;
        for (const u of batches[stop]!) await change(u);
      }
    }
  } catch (err) {
    if (!ac.signal.aborted) throw err;
  } finally {
    ac.abort();
  }
  if (syncedMs < 0) fail('the stream ended before synced');
  for (const [uuid, g] of want) {
    if (gen.get(uuid) !== g)
      fail(`the change of ${uuid} to generation ${g} never arrived (${gen.get(uuid)})`);
  }
  // Put the fleet back as it was (every device enabled) for what follows.
  status = DeviceStatus.DEVICE_STATUS_ENABLED;
  for (const u of uuids.slice(0, 31)) await client.devices.setDeviceStatus({ device: uuidRef(u), status });
  return {
    synced_ms: syncedMs,
    initial_devices: initial,
    changes_during: changesDuring - 1,
    changes_before_synced: changesBeforeSynced,
  };
}
