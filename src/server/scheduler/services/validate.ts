/** Request validation shared by the scheduler's handlers: every rejection names the field and the value. */

import { invalidArgument, show } from '../../../errors.js';
import type { DeviceRef as DeviceRefPb } from '../../../gen/berth/scheduler/v1/device_service.js';
import {
  type HostName,
  parseHostName,
  parseInstanceId,
  parsePciAddress,
  parseUuid,
} from '../../../identifiers.js';
import type { DeviceRef } from '../domain/inventory.js';

const ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** The identifiers' parsers (src/identifiers.ts) under the names the services use. */
export const requireUuid = parseUuid;
export const requireHost = parseHostName;

export function optionalHost(field: string, v: string): HostName | undefined {
  return v === '' ? undefined : requireHost(field, v);
}

export const requireInstance = parseInstanceId;

export function optionalRequestId(field: string, v: string): string | undefined {
  if (v === '') return undefined;
  if (!ID.test(v)) throw invalidArgument(field, `${show(v)} must be 1-128 characters of [A-Za-z0-9._:-]`);
  return v;
}

export function deviceRef(field: string, ref: DeviceRefPb | undefined): DeviceRef {
  const r = ref?.ref;
  if (!r) throw invalidArgument(field, 'is required: give a uuid, or a host and an address');
  if (r.$case === 'uuid') return { uuid: requireUuid(`${field}.uuid`, r.value) };
  return {
    host: requireHost(`${field}.host_address.host`, r.value.host),
    address: parsePciAddress(`${field}.host_address.address`, r.value.address),
  };
}

export function maxItems<T>(field: string, items: readonly T[], max: number): readonly T[] {
  if (items.length > max) throw invalidArgument(field, `${items.length} items; at most ${max}`);
  return items;
}

/**
 * A media key (docs/media-identity.md): a kind prefix, then printable ASCII, spaces included (the
 * kernel's fallback NQN holds the space-padded serial and model), at most 512 characters in all,
 * as the agent accepts from its drivers (src/plugins/pci/media-identity.ts).
 */
const MEDIA_KEY = /^(?=[\x20-\x7e]{1,512}$)[a-z][a-z0-9-]*:[\x21-\x7e][\x20-\x7e]*$/;

export function requireMediaKey(field: string, v: string): string {
  if (!MEDIA_KEY.test(v)) {
    throw invalidArgument(
      field,
      `${JSON.stringify(v.slice(0, 300))} is not a media key (a kind prefix, then 1-512 printable ASCII characters in all)`,
    );
  }
  return v;
}
