/**
 * Devices as the scheduler's queries and its change feed name them: a
 * reference, a filter, a page, what an agent's inventory stream delivers and
 * what applying it changed, and one entry of the device event log.
 */

import type { HostName, PciAddress, ResourceClass, Uuid } from '../../../identifiers.js';
import type { DeviceType } from '../../../plugins/types.js';
import type { DeviceFacts, DeviceRecord, DeviceState } from './device-state.js';

/** A device named by uuid, or by host and PCI address (proto DeviceRef). */
export type DeviceRef = { uuid: Uuid } | { host: HostName; address: PciAddress };

export interface DeviceFilter {
  host?: HostName;
  type?: DeviceType;
  state?: DeviceState;
  resourceClass?: ResourceClass;
}

export function matchesFilter(d: DeviceRecord, f: DeviceFilter): boolean {
  return (
    (!f.host || d.host === f.host) &&
    (!f.type || d.type === f.type) &&
    (!f.state || d.deviceState === f.state) &&
    (!f.resourceClass || d.resourceClass === f.resourceClass)
  );
}

export interface PageRequest {
  /** 0/undefined = 500; at most 5000. */
  pageSize?: number;
  pageToken?: string;
}

export interface DevicePage {
  devices: DeviceRecord[];
  /** '' on the last page. */
  nextPageToken: string;
}

/** What an agent's WatchInventory stream delivered. */
export type InventoryUpdate =
  | { kind: 'snapshot'; revision: number; devices: DeviceFacts[] }
  | { kind: 'delta'; revision: number; added: DeviceFacts[]; changed: DeviceFacts[]; removed: PciAddress[] };

export interface InventoryResult {
  added: DeviceRecord[];
  changed: DeviceRecord[];
  /** Devices marked unhealthy because the host no longer reports them (never deleted). */
  missing: DeviceRecord[];
}

/** One entry of the device event log; revisions strictly increase. */
export interface DeviceEvent {
  revision: number;
  device: DeviceRecord;
  removed: boolean;
}
