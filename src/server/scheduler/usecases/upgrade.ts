/**
 * Records written by an older scheduler, brought up to date in ONE place for
 * every backend. A store keeps each record as the JSON it was written as
 * (store/sql/schema.ts), so a field added later is absent from older rows;
 * every read the use cases make goes through `upgrading`, which completes
 * such records before any use case or domain rule sees them. Backends return
 * records as stored and know nothing of this.
 *
 * A field added to a record that may be read back from an older database gets
 * its default here (and a case in the store contract's "older scheduler" test).
 */

import type { Arq } from '../domain/arq.js';
import type { DeviceRecord } from '../domain/device-state.js';
import type { InstanceDevices } from '../domain/instance.js';
import type { DeviceEvent } from '../domain/inventory.js';
import type { MediaState } from '../domain/media.js';
import type { ReadUnit, UnitOfWork } from './unit-of-work.js';

/**
 * A device record of any age as today's. Media were followed later than
 * devices (media, mediaReason; a record of that time may still carry the
 * agent's journal record, which now lives on the media's record and is
 * dropped), and proofs of erasure came after cleanups (lastCleanup.proof).
 * Completed in place: a read returns a copy.
 */
export function upgradeDevice(d: DeviceRecord): DeviceRecord {
  d.media ??= null;
  d.mediaReason ??= '';
  delete (d as { agentMedia?: unknown }).agentMedia;
  if (d.lastCleanup) d.lastCleanup.proof ??= null;
  return d;
}

/**
 * Media recorded before custody (decision 62) name no custodian: the host
 * where a device of it was last seen is the one that held it.
 */
export function upgradeMedia(m: MediaState): MediaState {
  m.burnReason ??= '';
  m.custodians ??= m.host ? [m.host] : [];
  return m;
}

/** ARQs written before guest addresses were kept (store migration 2) have none yet. */
export function upgradeArq(a: Arq): Arq {
  a.guestAddress ??= null;
  return a;
}

/** NICs registered before they had a devname have none. */
export function upgradeInstanceDevices(i: InstanceDevices): InstanceDevices {
  for (const n of i.nics) n.devname ??= null;
  return i;
}

/** Completes each record of a list in place. */
const each =
  <T>(upgrade: (t: T) => unknown) =>
  (list: T[]): T[] => {
    for (const t of list) upgrade(t);
    return list;
  };

type Result<K extends keyof UnitOfWork> = Awaited<ReturnType<UnitOfWork[K]>>;

/**
 * Every port method, with what completes its result (null: it returns no
 * record of an older shape). Written as a table so that a method added to
 * the port must be placed here too (the type requires every key).
 */
const UPGRADES: { [K in keyof UnitOfWork]: ((result: Result<K>) => Result<K>) | null } = {
  host: null,
  hosts: null,
  deviceCount: null,
  device: (d) => d && upgradeDevice(d),
  devices: each(upgradeDevice),
  allocationCandidates: each(upgradeDevice),
  busyIommuGroups: null,
  deviceCounts: null,
  media: (m) => m && upgradeMedia(m),
  reportedMediaCount: null,
  mediaForgotten: null,
  agentKeys: null,
  lastCertificate: null,
  certificate: null,
  certificateAt: null,
  certificates: null,
  instanceOwner: null,
  oldestCertificates: null,
  cleanupJob: null,
  latestCleanupJob: null,
  cleanupEvents: null,
  profile: null,
  profiles: null,
  arq: (a) => a && upgradeArq(a),
  arqs: each(upgradeArq),
  novaEventClaimant: null,
  novaEventsOwedCount: null,
  claimNovaEvents: each(upgradeArq),
  holdNovaEvent: null,
  releaseNovaEvent: null,
  releaseNovaEventClaims: null,
  migration: null,
  plannedMigrations: null,
  instanceDevices: (i) => i && upgradeInstanceDevices(i),
  idempotencyKey: null,
  currentRevision: null,
  eventsSince: each((e: DeviceEvent) => upgradeDevice(e.device)),
  compactedRevision: null,
  oldestDeviceEvents: null,
  finishedCleanupJobCount: null,
  finishedCleanupJobs: null,
  idempotencyKeyCount: null,
  oldestIdempotencyKeys: null,
  lockInstance: null,
  putHost: null,
  putDevice: null,
  appendDeviceEvent: null,
  putMedia: null,
  forgetMedia: null,
  deleteDevice: null,
  deleteHost: null,
  putAgentKey: null,
  putCertificate: null,
  deleteCertificate: null,
  putInstanceOwner: null,
  putCleanupJob: null,
  addCleanupEvent: null,
  insertProfile: null,
  deleteProfile: null,
  putArq: null,
  deleteArq: null,
  putMigration: null,
  putInstanceDevices: null,
  putIdempotencyKey: null,
  deleteDeviceEventsThrough: null,
  deleteCleanupJob: null,
  deleteIdempotencyKey: null,
};

/** A port method; none takes more than three arguments. */
type Method = (a?: unknown, b?: unknown, c?: unknown) => Promise<unknown>;

/** A unit whose reads return up-to-date records; every call goes to `unit`. */
class UpgradingUnit {
  constructor(readonly unit: UnitOfWork) {}
}

// One forwarder per port method on the prototype, built once: a call costs
// one more function call, and a `then` only where a record may be old.
for (const [name, upgrade] of Object.entries(UPGRADES) as Array<[string, ((r: unknown) => unknown) | null]>) {
  const method = (u: UnitOfWork) => (u as unknown as Record<string, Method>)[name]!;
  Object.defineProperty(UpgradingUnit.prototype, name, {
    value: upgrade
      ? function (this: UpgradingUnit, a?: unknown, b?: unknown, c?: unknown) {
          return method(this.unit).call(this.unit, a, b, c).then(upgrade);
        }
      : function (this: UpgradingUnit, a?: unknown, b?: unknown, c?: unknown) {
          return method(this.unit).call(this.unit, a, b, c);
        },
  });
}

/** The unit as the use cases see it: its records up to date (a read-only unit stays read-only). */
export function upgrading(unit: UnitOfWork): UnitOfWork;
export function upgrading(unit: ReadUnit): ReadUnit;
export function upgrading(unit: ReadUnit): ReadUnit {
  return new UpgradingUnit(unit as UnitOfWork) as unknown as UnitOfWork;
}
