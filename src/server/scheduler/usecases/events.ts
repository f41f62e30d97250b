/** Use cases: the device event log (WatchDevices) and device counts (metrics). */

import type { DeviceRecord } from '../domain/device-state.js';
import type { DeviceEvent, DeviceFilter } from '../domain/inventory.js';
import { read, type UseCaseDeps } from './context.js';
import { revisionCompacted } from './retention.js';
import type { DeviceCount, ReadUnitOptions } from './unit-of-work.js';

/** These units read the event log: their snapshot must hold every event up to the revision they see. */
const EVENT_LOG: ReadUnitOptions = { eventLog: true };

export async function currentRevision(deps: UseCaseDeps): Promise<number> {
  return read(deps, (r) => r.currentRevision(), EVENT_LOG);
}

/** Events with revision > `revision`, oldest first, at most `limit`. */
export async function eventsSince(
  deps: UseCaseDeps,
  revision: number,
  limit: number,
): Promise<DeviceEvent[]> {
  return read(
    deps,
    async (r) => {
      const compacted = await r.compactedRevision();
      if (revision < compacted) throw revisionCompacted(revision, compacted);
      return r.eventsSince(revision, Math.max(1, Math.trunc(limit)));
    },
    EVENT_LOG,
  );
}

/** Matching devices and the revision they are consistent with, read in one unit. */
export async function snapshot(
  deps: UseCaseDeps,
  filter: DeviceFilter = {},
): Promise<{ revision: number; devices: DeviceRecord[] }> {
  return read(
    deps,
    async (r) => ({ revision: await r.currentRevision(), devices: await r.devices(filter) }),
    EVENT_LOG,
  );
}

/**
 * One page of matching devices in uuid order after the uuid `after` ('' for
 * the first), and the revision that page is consistent with, read in one unit:
 * a snapshot of a fleet of any size, a page at a time (app/devices.ts puts the
 * pages together).
 */
export async function snapshotPage(
  deps: UseCaseDeps,
  filter: DeviceFilter,
  after: string,
  limit: number,
): Promise<{ revision: number; devices: DeviceRecord[] }> {
  const query = { ...filter, limit: Math.max(1, Math.trunc(limit)), afterUuid: after };
  return read(
    deps,
    async (r) => ({ revision: await r.currentRevision(), devices: await r.devices(query) }),
    EVENT_LOG,
  );
}

/** Devices counted by type, state and resource class. */
export async function deviceCounts(deps: UseCaseDeps): Promise<DeviceCount[]> {
  return read(deps, (r) => r.deviceCounts());
}
