/**
 * How a command names records: a device by uuid, host/address or a uuid
 * prefix, ARQs by uuid or prefix; and the listings a prefix is looked up in.
 */
import { BerthError, notFoundReason, type RecordKind } from '../../errors.js';
import type { Device } from '../../gen/berth/scheduler/v1/device.js';
import type { DeviceFilter, DeviceRef } from '../../gen/berth/scheduler/v1/device_service.js';
import type { Host } from '../../gen/berth/scheduler/v1/host.js';
import { isUuid } from '../../identifiers.js';
import type { SchedulerClient } from '../sdk.js';
import { UsageError } from '../usage-error.js';

/** A full uuid in either case (the server takes either; the rule is src/identifiers.ts's). */
const isFullUuid = (s: string): boolean => isUuid(s.toLowerCase());
/** What may abbreviate a uuid: at least 4 of its leading characters. */
const UUID_PREFIX = /^[0-9a-fA-F][0-9a-fA-F-]{3,35}$/;

/**
 * A PCI address as the tables show it (`0000:3d:00.0`), from the full form in
 * any case or lspci's short one without the domain (`3d:00.0`); anything else
 * is passed on for the server to refuse with the field named.
 */
export function normalizePciAddress(address: string): string {
  const m = /^(?:([0-9a-f]{1,4}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])$/i.exec(address.trim());
  if (!m) return address;
  const [, domain = '0', bus, slot, fn] = m;
  return `${domain.padStart(4, '0')}:${bus!.padStart(2, '0')}:${slot!.padStart(2, '0')}.${fn}`.toLowerCase();
}

/**
 * A device named by its uuid or as `host/address`, the address in full
 * (`sim-host-1/0000:3d:00.0`) or as lspci prints it (`sim-host-1/3d:00.0`).
 * A uuid prefix needs the device list: see resolveDeviceRef.
 */
export function parseDeviceRef(name: string): DeviceRef {
  if (isFullUuid(name)) return { ref: { $case: 'uuid', value: name.toLowerCase() } };
  const slash = name.lastIndexOf('/');
  if (slash > 0 && slash < name.length - 1) {
    return {
      ref: {
        $case: 'hostAddress',
        value: { host: name.slice(0, slash), address: normalizePciAddress(name.slice(slash + 1)) },
      },
    };
  }
  throw new UsageError(
    `device ${JSON.stringify(name)}: give a uuid (or its first characters, as the tables show it) or host/address (e.g. sim-host-1/0000:3d:00.0 or sim-host-1/3d:00.0)`,
  );
}

/**
 * The one id among `ids` that starts with `prefix`: NOT_FOUND when none
 * does, a usage error listing them when several do.
 */
export function matchPrefix(what: RecordKind, prefix: string, ids: readonly string[]): string {
  const p = prefix.toLowerCase();
  const hits = [...new Set(ids.filter((id) => id.startsWith(p)))];
  if (hits.length === 1) return hits[0]!;
  if (hits.length === 0) {
    throw new BerthError('NOT_FOUND', `no ${what} uuid starts with ${JSON.stringify(prefix)}`, {
      reason: notFoundReason(what),
    });
  }
  throw new UsageError(
    `${JSON.stringify(prefix)} is the start of ${hits.length} ${what} uuids (${hits.slice(0, 5).join(', ')}${hits.length > 5 ? ', …' : ''}): give more characters`,
  );
}

/** Every page of ListDevices. */
export async function listAllDevices(
  client: SchedulerClient,
  filter: DeviceFilter | undefined,
): Promise<Device[]> {
  const out: Device[] = [];
  let pageToken = '';
  do {
    const res = await client.devices.listDevices({ filter, pageSize: 0, pageToken });
    out.push(...res.devices);
    pageToken = res.nextPageToken;
  } while (pageToken);
  return out;
}

/** Every page of ListHosts. */
export async function listAllHosts(client: SchedulerClient): Promise<Host[]> {
  const out: Host[] = [];
  let pageToken = '';
  do {
    const res = await client.hosts.listHosts({ pageSize: 0, pageToken });
    out.push(...res.hosts);
    pageToken = res.nextPageToken;
  } while (pageToken);
  return out;
}

/** parseDeviceRef, plus a unique prefix of a device uuid (looked up in the device list). */
export async function resolveDeviceRef(client: SchedulerClient, name: string): Promise<DeviceRef> {
  if (!isFullUuid(name) && !name.includes('/') && UUID_PREFIX.test(name)) {
    const all = await listAllDevices(client, undefined);
    const uuid = matchPrefix(
      'device',
      name,
      all.map((d) => d.uuid),
    );
    return { ref: { $case: 'uuid', value: uuid } };
  }
  return parseDeviceRef(name);
}

/** ARQ uuids, each in full or as a unique prefix (looked up in the ARQ list once, when needed). */
export async function resolveArqUuids(client: SchedulerClient, names: readonly string[]): Promise<string[]> {
  let all: string[] | undefined;
  const out: string[] = [];
  for (const n of names) {
    if (isFullUuid(n) || !UUID_PREFIX.test(n)) {
      // A full uuid as the server stores it; anything else for the server to refuse, as given.
      out.push(isFullUuid(n) ? n.toLowerCase() : n);
      continue;
    }
    all ??= (await client.arqs.listAcceleratorRequests({ instanceUuid: '' })).acceleratorRequests.map(
      (a) => a.uuid,
    );
    out.push(matchPrefix('accelerator request', n, all));
  }
  return out;
}
