/** Request validation shared by the scheduler's handlers: every rejection names the field and the value. */

import { invalidArgument } from '../../../errors.js';
import type { DeviceRef as DeviceRefPb } from '../../../gen/berth/scheduler/v1/device_service.js';
import type { DeviceRef } from '../domain/inventory.js';

const UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;
export const PCI_ADDRESS = /^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$/;
const HOST = /^[A-Za-z0-9]([A-Za-z0-9._-]{0,252}[A-Za-z0-9])?$/;
const ID = /^[A-Za-z0-9._:-]{1,128}$/;
/** Instance ids come from the orchestration layer: uuids in practice, any safe id accepted. */
const INSTANCE = /^[A-Za-z0-9._:-]{1,255}$/;

const show = (v: string) => JSON.stringify(v.length > 80 ? `${v.slice(0, 80)}…` : v);

export function requireUuid(field: string, v: string): string {
  if (!UUID.test(v)) throw invalidArgument(field, `${show(v)} is not a UUID`);
  return v.toLowerCase();
}

export function requireHost(field: string, v: string): string {
  if (!HOST.test(v)) throw invalidArgument(field, `${show(v)} is not a host name`);
  return v;
}

export function optionalHost(field: string, v: string): string | undefined {
  return v === '' ? undefined : requireHost(field, v);
}

export function requireInstance(field: string, v: string): string {
  if (!INSTANCE.test(v)) {
    throw invalidArgument(field, `${show(v)} is not an instance id (1-255 characters of [A-Za-z0-9._:-])`);
  }
  return v;
}

export function optionalRequestId(field: string, v: string): string | undefined {
  if (v === '') return undefined;
  if (!ID.test(v)) throw invalidArgument(field, `${show(v)} must be 1-128 characters of [A-Za-z0-9._:-]`);
  return v;
}

export function requirePciAddress(field: string, v: string): string {
  if (!PCI_ADDRESS.test(v)) throw invalidArgument(field, `${show(v)} is not a PCI address like 0000:3b:02.0`);
  return v;
}

export function deviceRef(field: string, ref: DeviceRefPb | undefined): DeviceRef {
  const r = ref?.ref;
  if (!r) throw invalidArgument(field, 'is required: give a uuid, or a host and an address');
  if (r.$case === 'uuid') return { uuid: requireUuid(`${field}.uuid`, r.value) };
  return {
    host: requireHost(`${field}.host_address.host`, r.value.host),
    address: requirePciAddress(`${field}.host_address.address`, r.value.address),
  };
}

export function maxItems<T>(field: string, items: readonly T[], max: number): readonly T[] {
  if (items.length > max) throw invalidArgument(field, `${items.length} items; at most ${max}`);
  return items;
}
