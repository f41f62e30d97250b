/** Use cases: inventory from the agents, and devices as clients and operators see them. */

import { invalidArgument } from '../../../errors.js';
import { type HostName, newUuid, type PciAddress } from '../../../identifiers.js';
import {
  DEVICE_STATUSES,
  type DeviceFacts,
  type DeviceRecord,
  type DeviceStatus,
  newDevice,
  operatorRelease,
  rediscovered,
  setStatus,
  vanished,
} from '../domain/device-state.js';
import type {
  DeviceFilter,
  DevicePage,
  DeviceRef,
  InventoryResult,
  InventoryUpdate,
  PageRequest,
} from '../domain/inventory.js';
import { mediaKeyOf, mediaUnburned } from '../domain/media.js';
import { pageKeyOf, pageSizeOf, pageTokenAfter } from '../domain/pages.js';
import { read, type Tx, type UseCaseDeps } from './context.js';
import { checkGeneration, mustDevice, mustHost, writeDevice, writeHost } from './records.js';
import { write } from './unit.js';
import { type DeviceQuery, FOR_UPDATE, NAMES_PER_QUERY } from './unit-of-work.js';

/**
 * Apply an agent snapshot or delta: insert new devices, update changed ones
 * (rediscovery, invariant 6), mark missing ones unhealthy. Never deletes.
 */
export async function upsertInventory(
  deps: UseCaseDeps,
  host: HostName,
  update: InventoryUpdate,
): Promise<InventoryResult> {
  const incoming = update.kind === 'snapshot' ? update.devices : [...update.added, ...update.changed];
  const addresses = new Set<PciAddress>();
  // The addresses were parsed where the agent's message was decoded (convert.ts factsFromAgent).
  incoming.forEach((f, i) => {
    if (addresses.has(f.address)) {
      throw invalidArgument(`devices[${i}].address`, `"${f.address}" is reported twice in one update`);
    }
    addresses.add(f.address);
  });
  return write(deps, async (tx) => {
    const h = await mustHost(tx.uow, host, FOR_UPDATE);
    const result: InventoryResult = { added: [], changed: [], missing: [] };
    // A delta the scheduler already applied (a retried delivery) changes nothing.
    if (update.kind === 'delta' && update.revision <= h.inventoryRevision) return result;
    const now = tx.now();
    // A snapshot is measured against every device of the host; a delta reads only the
    // devices it names (a burst of 256 VFs on a 4,368-function host read all of them, decision 87).
    const named = update.kind === 'snapshot' ? null : [...addresses, ...update.removed];
    const existing = new Map((await hostDevices(tx, host, named)).map((d) => [d.address, d]));
    const upsert = async (f: DeviceFacts) => {
      const key = f.media?.key;
      if (key && f.agentMedia) {
        // The agent's journal record of the media goes to the media's record, not the device's.
        const reports = tx.agentReports.get(key) ?? [];
        reports.push({ host, address: f.address, record: f.agentMedia });
        tx.agentReports.set(key, reports);
        // A report of dirt or a burn may change the media; a clean one matters
        // only to media seen for the first time, whose device is written anyway.
        const c = f.agentMedia.condition;
        if (c === 'held' || c === 'dirty' || f.agentMedia.burned) tx.touchedMedia.add(key);
      }
      const prev = existing.get(f.address);
      if (!prev) {
        result.added.push(await writeDevice(tx, null, newDevice(host, f, newUuid(), now)));
        return;
      }
      const next = await writeDevice(tx, prev, rediscovered(prev, f));
      if (next !== prev) result.changed.push(next);
    };
    const gone = async (d: DeviceRecord) => {
      if (!d.present) return;
      result.missing.push(await writeDevice(tx, d, vanished(d, 'no longer reported by the host agent')));
    };
    if (update.kind === 'snapshot') {
      const seen = new Set(update.devices.map((f) => f.address));
      for (const f of update.devices) await upsert(f);
      for (const d of existing.values()) if (!seen.has(d.address)) await gone(d);
    } else {
      for (const f of [...update.added, ...update.changed]) await upsert(f);
      for (const address of update.removed) {
        const d = existing.get(address);
        if (d) await gone(d);
      }
    }
    await writeHost(tx, { ...h, inventoryRevision: update.revision, lastSeen: now });
    return result;
  });
}

/** The host's devices, locked: all of them, or those at `addresses` (a query per NAMES_PER_QUERY). */
async function hostDevices(
  tx: Tx,
  host: HostName,
  addresses: readonly PciAddress[] | null,
): Promise<DeviceRecord[]> {
  if (addresses === null) return tx.uow.devices({ host }, FOR_UPDATE);
  // In address order, as a full read locks them.
  const unique = [...new Set(addresses)].sort();
  const out: DeviceRecord[] = [];
  for (let i = 0; i < unique.length; i += NAMES_PER_QUERY) {
    const chunk = unique.slice(i, i + NAMES_PER_QUERY);
    out.push(...(await tx.uow.devices({ host, addresses: chunk }, FOR_UPDATE)));
  }
  return out;
}

export async function getDevice(deps: UseCaseDeps, ref: DeviceRef): Promise<DeviceRecord> {
  return read(deps, (r) => mustDevice(r, ref));
}

export async function listDevices(
  deps: UseCaseDeps,
  filter: DeviceFilter = {},
  page: PageRequest = {},
): Promise<DevicePage> {
  const size = pageSizeOf(page);
  const query: DeviceQuery = { ...filter, limit: size + 1 };
  if (page.pageToken) {
    const [host, address] = pageKeyOf(page.pageToken, 2) as [string, string];
    query.after = { host, address };
  }
  return read(deps, async (r) => {
    const rows = await r.devices(query);
    const devices = rows.slice(0, size);
    const last = devices[devices.length - 1];
    const nextPageToken = rows.length > size && last ? pageTokenAfter(last) : '';
    return { devices, nextPageToken };
  });
}

/** The page token that continues a listing after `d` (a page cut short, e.g. by size). */
/** ABORTED (nothing changed) when expectedGeneration is given and stale. */
export async function setDeviceStatus(
  deps: UseCaseDeps,
  ref: DeviceRef,
  status: DeviceStatus,
  expectedGeneration?: number,
): Promise<DeviceRecord> {
  if (!DEVICE_STATUSES.includes(status)) {
    throw invalidArgument('status', `"${status}" is not enabled or maintaining`);
  }
  return transitionDevice(deps, ref, expectedGeneration, (d) => setStatus(d, status));
}

/**
 * Operator un-burn (ReleaseDevice), after the device's agent cleared its own
 * record of the burn: the device, every other device of its media, and the
 * scheduler's record of the media.
 */
export async function releaseBurn(
  deps: UseCaseDeps,
  ref: DeviceRef,
  expectedGeneration?: number,
): Promise<DeviceRecord> {
  return write(deps, async (tx) => {
    const d = await mustDevice(tx.uow, ref, FOR_UPDATE);
    checkGeneration(d, expectedGeneration);
    const released = await writeDevice(tx, d, operatorRelease(d));
    const key = mediaKeyOf(d);
    if (!key) return released;
    const m = await tx.uow.media(key, FOR_UPDATE);
    if (m?.burned) await tx.uow.putMedia(mediaUnburned(m, tx.now()));
    for (const other of await tx.uow.devices({ mediaKey: key }, FOR_UPDATE)) {
      if (other.uuid !== d.uuid && other.burned) await writeDevice(tx, other, operatorRelease(other));
    }
    return released;
  });
}

async function transitionDevice(
  deps: UseCaseDeps,
  ref: DeviceRef,
  expectedGeneration: number | undefined,
  transition: (d: DeviceRecord) => DeviceRecord,
): Promise<DeviceRecord> {
  return write(deps, async (tx) => {
    const d = await mustDevice(tx.uow, ref, FOR_UPDATE);
    checkGeneration(d, expectedGeneration);
    return writeDevice(tx, d, transition(d));
  });
}
