/**
 * The unit-of-work port: the only thing a store backend implements.
 *
 * Every atomic operation of the scheduler (bind, release, inventory upsert,
 * cleanup events, migrations, retention…) is written ONCE, in this
 * directory, against this port; a backend provides rows, locks and one
 * transaction per unit, and nothing else — no validation, no decisions. The
 * port belongs to the use cases: a backend imports it, the use cases import no
 * backend. It is implemented once in SQL (../store/sql/unit.ts) over a small
 * dialect; SQLite and PostgreSQL each add only their runner
 * (../store/sqlite-store.ts, ../store/pg-store.ts).
 *
 * Rules a backend must keep (and how PostgreSQL keeps them: docs/decisions.md 13):
 *
 * - `run(fn)` gives `fn` a UnitOfWork inside ONE transaction and resolves only
 *   after that transaction committed durably; if `fn` throws, nothing it wrote
 *   stays. A unit awaits only this port (no timers, no RPCs), so a backend may
 *   hold locks for the whole unit. A backend may run `fn` again after a
 *   transient conflict (deadlock, serialization failure, a racing insert of the
 *   same key): units have no effect outside the port until they resolve.
 * - Reads given `FOR_UPDATE` lock what they return until the unit ends
 *   (PostgreSQL: `SELECT … FOR UPDATE`). A unit reads with `FOR_UPDATE` every
 *   row it may write from what it read; it locks a host before it allocates on
 *   that host (allocation reads the host's other devices and IOMMU groups) and
 *   takes `lockInstance` before a decision over an instance's set of ARQs (tag
 *   uniqueness, an open migration, guest addresses). Locks are taken in the
 *   order instance → migration → ARQ → host → device → cleanup job where a use
 *   case can; a backend that can deadlock detects it and re-runs the unit.
 * - Calls a unit makes together (without awaiting one before the next, as in
 *   `Promise.all`) run in the order they were made, each as a statement of
 *   its own: a read made after a locking read sees what the lock's holder
 *   committed. A backend may send them in one round trip (PostgreSQL does:
 *   decision 95); a failure of one fails the unit.
 * - `putDevice` is a compare-and-set on the device generation: a row that is
 *   not at `previousGeneration` is refused with ABORTED (reason
 *   CONCURRENT_UPDATE), nothing written. Allocation candidates are read
 *   without row locks (under the host lock) and rely on it.
 * - `appendDeviceEvent` assigns the revision itself, in COMMIT order: a watcher
 *   that read every event up to revision R never later finds a committed event
 *   with a revision ≤ R. The unit never learns the revision, and does not
 *   read its own events back (a backend may write them as the unit ends).
 * - Reads return copies: mutating a returned record changes nothing stored.
 *   Records come back as they were written; one written by an older
 *   scheduler is completed by the use-case layer (./upgrade.ts).
 * - Errors are BerthErrors with codes (../../../errors.ts); a unit's own
 *   BerthError passes through unchanged.
 */

import type { HostName } from '../../../identifiers.js';
import type { CandidateQuery } from '../domain/allocation.js';
import type { Arq } from '../domain/arq.js';
import type { AgentKeyRecord, CertificateRecord } from '../domain/certificate.js';
import type { CleanupEvent, CleanupJob } from '../domain/cleanup.js';
import type { DeviceRecord, DeviceState } from '../domain/device-state.js';
import type { HostRecord } from '../domain/host.js';
import type { InstanceDevices } from '../domain/instance.js';
import type { DeviceEvent, DeviceFilter, DeviceRef } from '../domain/inventory.js';
import type { MediaState } from '../domain/media.js';
import type { MigrationRecord } from '../domain/migration.js';
import type { Profile } from '../domain/profile.js';

/** How a read locks what it returns (nothing, unless `forUpdate`). */
export interface ReadOptions {
  /** Lock the rows returned until the unit ends: they are about to be written. */
  forUpdate?: boolean;
}

export const FOR_UPDATE: ReadOptions = Object.freeze({ forUpdate: true });

/** Devices of a query, always ordered by (host, address). */
/** Addresses or media keys one query may name (its SQL parameters stay far below any backend's limit). */
export const NAMES_PER_QUERY = 500;

export interface DeviceQuery extends DeviceFilter {
  /** device_state IN states (with `state`, both must hold). */
  states?: readonly DeviceState[];
  /** Devices whose media has this key (domain/media.ts), on any host. */
  mediaKey?: string;
  /**
   * Only these addresses (with `host`: the devices one inventory delta names).
   * At most NAMES_PER_QUERY of them; none matches nothing.
   */
  addresses?: readonly string[];
  /** Devices whose media has one of these keys, on any host (at most NAMES_PER_QUERY; none matches nothing). */
  mediaKeys?: readonly string[];
  /** Keyset paging: only devices after this (host, address). */
  after?: { host: string; address: string };
  /**
   * Keyset paging by uuid instead, in uuid order: only devices whose uuid is
   * after this one ('' for the first page). Canonical UUIDs order the same
   * under any collation, so a caller may compare them itself.
   */
  afterUuid?: string;
  limit?: number;
}

/** Devices of one type, state and resource class (the metrics gauge: not by host, decision 70). */
export interface DeviceCount {
  type: string;
  state: string;
  resourceClass: string;
  count: number;
}

/** A stored idempotency key: what the request looked like and what it returned (both JSON). */
export interface IdempotencyRecord {
  fingerprint: string;
  result: string;
}

/** What a read-only unit may do: read a consistent view, lock nothing. */
export interface ReadUnit {
  // hosts
  /** The stored host; its `deviceCount` is not maintained by the backend (see `deviceCount`). */
  host(name: string, opts?: ReadOptions): Promise<HostRecord | null>;
  /** Every host, by name; or a page of them: the first `limit` after the name `after`. */
  hosts(page?: { after: string; limit: number }): Promise<HostRecord[]>;
  deviceCount(host: string): Promise<number>;

  // devices
  device(ref: DeviceRef, opts?: ReadOptions): Promise<DeviceRecord | null>;
  devices(query: DeviceQuery, opts?: ReadOptions): Promise<DeviceRecord[]>;
  /** The host's `available` devices of one resource class (or vendor/product), by address. */
  allocationCandidates(query: CandidateQuery, opts?: ReadOptions): Promise<DeviceRecord[]>;
  /** IOMMU groups of the host with a device allocated, pending_cleaning or cleaning. */
  busyIommuGroups(host: string): Promise<number[]>;
  deviceCounts(): Promise<DeviceCount[]>;

  // media (docs/media-identity.md)
  /** The scheduler's record of a media, by key. */
  media(key: string, opts?: ReadOptions): Promise<MediaState | null>;
  /** The records of the media with these keys (those the scheduler has), in key order; at most NAMES_PER_QUERY. */
  mediaByKeys(keys: readonly string[], opts?: ReadOptions): Promise<MediaState[]>;
  /**
   * How many media records the scheduler keeps that only `host` reported: its
   * rows last seen or reported on that host, not forgotten, of which no device
   * is known on any host (domain/media-reports.ts, the per-host bound).
   */
  reportedMediaCount(host: string): Promise<number>;
  /** The operator's note on a forgotten media (berth media forget), or null when it is not forgotten. */
  mediaForgotten(key: string): Promise<string | null>;

  // cleanup
  cleanupJob(jobId: string, opts?: ReadOptions): Promise<CleanupJob | null>;
  /** The device's most recently created job. */
  latestCleanupJob(deviceUuid: string): Promise<CleanupJob | null>;
  /** Events with sequence > afterSequence, by sequence. */
  cleanupEvents(jobId: string, afterSequence: number): Promise<CleanupEvent[]>;

  // erasure certificates (docs/erasure-certificates.md)
  /** The keys of one host's agent (or every host's), by host and pinning time. */
  agentKeys(host?: string): Promise<AgentKeyRecord[]>;
  /** The certificate with the highest seq of a media, or null. */
  lastCertificate(mediaKey: string, opts?: ReadOptions): Promise<CertificateRecord | null>;
  certificate(hash: string): Promise<CertificateRecord | null>;
  /** The certificate at one link of a media's chain, or null. */
  certificateAt(mediaKey: string, seq: number): Promise<CertificateRecord | null>;
  /** The certificates of a device, a job or an instance (the filters combine), by media and seq. */
  certificates(filter: {
    deviceUuid?: string;
    jobId?: string;
    instanceUuid?: string;
  }): Promise<CertificateRecord[]>;
  /** The principal that created the instance's first ARQ, or null. */
  instanceOwner(instanceUuid: string): Promise<string | null>;
  /** Certificates received before `before`, oldest first, at most `limit` (retention). */
  oldestCertificates(
    before: string,
    limit: number,
  ): Promise<{ hash: string; mediaKey: string; seq: number }[]>;

  // profiles
  /** By name or uuid. */
  profile(nameOrUuid: string, opts?: ReadOptions): Promise<Profile | null>;
  /** By name. */
  profiles(): Promise<Profile[]>;

  // accelerator requests
  arq(uuid: string, opts?: ReadOptions): Promise<Arq | null>;
  /**
   * All ARQs, or one instance's, in creation order; or (`bindClaimFor`) those
   * whose bind claim, live or expired, is for that instance (its ARQs may not
   * name it yet: their bind has not committed).
   */
  arqs(filter: { instanceUuid?: string; bindClaimFor?: string }, opts?: ReadOptions): Promise<Arq[]>;
  /**
   * The database's time now (ISO): what bind claims are written and judged by,
   * as Nova's events' claims are, so no scheduler's clock decides (docs/decisions.md 89).
   */
  databaseNow(): Promise<string>;
  /** Who claims the event ARQ `uuid` owes Nova (`claimNovaEvents`), live or expired; null: nobody. */
  novaEventClaimant(uuid: string, opts?: ReadOptions): Promise<string | null>;
  /** How many ARQs owe Nova an event, claimed or not. */
  novaEventsOwedCount(): Promise<number>;

  // migrations
  migration(uuid: string, opts?: ReadOptions): Promise<MigrationRecord | null>;
  /** The instance's migrations in state `planned`. */
  plannedMigrations(instanceUuid: string, opts?: ReadOptions): Promise<MigrationRecord[]>;

  // instances
  instanceDevices(instanceUuid: string, opts?: ReadOptions): Promise<InstanceDevices | null>;

  // idempotency keys
  idempotencyKey(key: string, opts?: ReadOptions): Promise<IdempotencyRecord | null>;

  // device event log
  /** The highest committed revision (0 when the log is empty). */
  currentRevision(): Promise<number>;
  /** Events with revision > `revision`, oldest first, at most `limit`. */
  eventsSince(revision: number, limit: number): Promise<DeviceEvent[]>;
  /** The highest revision retention removed from the log (0 when none was): older resumes cannot be served. */
  compactedRevision(): Promise<number>;

  // what retention looks at (usecases/retention.ts decides what goes)
  /** The oldest events of the log, oldest first, at most `limit`. */
  oldestDeviceEvents(limit: number): Promise<EventAge[]>;
  finishedCleanupJobCount(): Promise<number>;
  /** Finished cleanup jobs after `after` in (finishedAt, position) order, at most `limit`. */
  finishedCleanupJobs(after: FinishedJobKey | null, limit: number): Promise<FinishedJob[]>;
  idempotencyKeyCount(): Promise<number>;
  /** The oldest idempotency keys, oldest first, at most `limit`. */
  oldestIdempotencyKeys(limit: number): Promise<IdempotencyKeyAge[]>;
}

/** A device event's revision and time. */
export interface EventAge {
  revision: number;
  at: string;
}

/** Where a finished cleanup job stands in the order retention reads them. */
export interface FinishedJobKey {
  finishedAt: string;
  /** The job's creation order (unique). */
  position: number;
}

export interface FinishedJob extends FinishedJobKey {
  jobId: string;
  /** Whether it is the most recently created job of its device. */
  latestOfDevice: boolean;
}

export interface IdempotencyKeyAge {
  key: string;
  createdAt: string;
}

/** One transaction's reads and writes. */
export interface UnitOfWork extends ReadUnit {
  /**
   * Serialise this unit with every other unit that locks the same instance, until
   * it ends (PostgreSQL: `pg_advisory_xact_lock`). A lock on rows cannot do it:
   * the rows a decision must see may not exist yet (an ARQ being bound to it).
   */
  lockInstance(instanceUuid: string): Promise<void>;
  putHost(host: HostRecord): Promise<void>;
  /**
   * Insert (`previousGeneration` null) or replace a device. ABORTED when the
   * stored row is not at `previousGeneration` (or exists, for an insert).
   */
  putDevice(device: DeviceRecord, previousGeneration: number | null): Promise<void>;
  /** Log the device as it now is (or, `removed`, that it is gone); the backend numbers it in commit order. */
  appendDeviceEvent(device: DeviceRecord, removed?: boolean): Promise<void>;
  /** Insert or replace the record of a media (a forgotten one is remembered again). */
  putMedia(media: MediaState): Promise<void>;
  /** Mark a media forgotten, with the operator's note (its record stays: what it knew of dirt and burns). */
  forgetMedia(key: string, note: string): Promise<void>;
  /** Remove a device row (a deleted host's); its events and cleanup jobs stay until retention. */
  deleteDevice(uuid: string): Promise<void>;
  /** Remove a host row. */
  deleteHost(name: string): Promise<void>;

  /** Insert or replace a key of a host's agent (by host and kid). */
  putAgentKey(key: AgentKeyRecord): Promise<void>;
  /** Insert a certificate; false when one with its hash is stored (nothing written). */
  putCertificate(cert: CertificateRecord): Promise<boolean>;
  /** How many went (0 or 1). */
  deleteCertificate(hash: string): Promise<number>;
  /** Record who created an instance's first ARQ; a later call for the instance changes nothing. */
  putInstanceOwner(instanceUuid: string, subject: string, at: string): Promise<void>;

  putCleanupJob(job: CleanupJob): Promise<void>;
  /** false when the job already has an event with this sequence (nothing written). */
  addCleanupEvent(event: CleanupEvent): Promise<boolean>;

  /** A new profile; its name and uuid are free (the unit checked under lock). */
  insertProfile(profile: Profile): Promise<void>;
  /** false when there was none. */
  deleteProfile(name: string): Promise<boolean>;

  /**
   * Insert or replace an ARQ. When the event it owes Nova (`novaEvent`) is
   * not the one stored, the claim on the stored one goes with it.
   */
  putArq(arq: Arq): Promise<void>;
  deleteArq(uuid: string): Promise<void>;

  // Claims on the events Nova is owed (docs/decisions.md 77): which replica
  // tells Nova. A claim is held by one owner (a scheduler's id) until it
  // expires; times are the database's, so the schedulers' clocks do not matter.
  /**
   * Claims for `owner`, until `ttlMs` from now, up to `limit` owed events that
   * no live claim holds (unclaimed ones first, oldest ARQ first; then the
   * longest expired); the ARQs
   * claimed. Of two units claiming at once, each event goes to one.
   */
  claimNovaEvents(owner: string, ttlMs: number, limit: number): Promise<Arq[]>;
  /** Claims ARQ `uuid`'s event for `owner` until `ttlMs` from now, whoever held it (the bind that owes it). */
  holdNovaEvent(uuid: string, owner: string, ttlMs: number): Promise<void>;
  /** Lets go of `owner`'s claim on ARQ `uuid`'s event; another owner's stays. */
  releaseNovaEvent(uuid: string, owner: string): Promise<void>;
  /** Lets go of every claim that is not `owner`'s (a scheduler alone on its database); how many. */
  releaseNovaEventClaims(owner: string): Promise<number>;

  putMigration(migration: MigrationRecord): Promise<void>;

  putInstanceDevices(instanceUuid: string, devices: InstanceDevices): Promise<void>;

  /** A new key (a racing insert of the same key is a transient conflict). */
  putIdempotencyKey(key: string, record: IdempotencyRecord, createdAt: string): Promise<void>;

  // retention: deletes by key; what may go is decided by usecases/retention.ts
  /**
   * Remove the device events with revision ≤ `revision` and record it as
   * compacted (`compactedRevision` never goes down). Returns how many went.
   */
  deleteDeviceEventsThrough(revision: number): Promise<number>;
  /** Remove a cleanup job and its events; how many jobs went (0 or 1). */
  deleteCleanupJob(jobId: string): Promise<number>;
  /** How many keys went (0 or 1). */
  deleteIdempotencyKey(key: string): Promise<number>;
}

/** How a read-only unit is run. */
export interface ReadUnitOptions {
  /**
   * The unit reads the device event log (`currentRevision`, `eventsSince`): its
   * snapshot must hold every event numbered at or below the highest revision it
   * sees, so that a watcher resuming from that revision misses nothing. Where
   * writers number events concurrently (PostgreSQL, decision 59) the snapshot is
   * taken while no unit is between numbering its events and committing; where
   * one writer numbers them in commit order (SQLite) every snapshot already is.
   */
  eventLog?: boolean;
}

/** Runs units of work; one per backend connection (pool). */
export interface TransactionRunner {
  /** A read-write unit in one transaction; resolves after COMMIT. */
  run<T>(fn: (uow: UnitOfWork) => Promise<T>): Promise<T>;
  /** A read-only unit: one consistent snapshot, no locks, no writes. */
  read<T>(fn: (uow: ReadUnit) => Promise<T>, opts?: ReadUnitOptions): Promise<T>;
  /** Highest schema migration applied. */
  schemaVersion(): Promise<number>;
  /** Units already accepted finish (and commit) first; later ones are refused. */
  close(): Promise<void>;
  /**
   * Calls `listener` once when the backend finds its database damaged (at once
   * if it already is); from then on every unit is refused (STORE_DAMAGED).
   */
  onDamage?(listener: (why: string) => void): void;
  /**
   * Backends that several schedulers share: calls `listener` after any unit
   * (this process's or another's) committed a change, so watches wake.
   */
  onChange?(listener: () => void): void;
  /** Link leases (below), on backends several schedulers share. */
  readonly leases?: LinkLeases;
}

/** A host whose agent link is leased, with what a scheduler needs to dial it. */
export interface LeasedHost {
  host: HostName;
  endpoint: string;
  features: string[];
  /** Whether the database says its follower is connected to it. */
  connected: boolean;
  /** When the agent last registered or sent a heartbeat (to any scheduler). */
  lastSeen: string;
}

/**
 * Which scheduler follows each host's agent when several share one database
 * (docs/decisions.md 37). A lease is held by one owner (a scheduler's id)
 * until it expires; times are the database's, so the schedulers' clocks do
 * not matter. Only a registration creates a lease: a host never registered
 * through a replica is never dialled by one.
 */
export interface LinkLeases {
  /** Takes the lease on `host` for `owner` (or extends it) unless another owner's is live; whether `owner` holds it. */
  claim(host: string, owner: string, ttlMs: number): Promise<boolean>;
  /** Extends `owner`'s leases on `hosts`; the hosts it still holds (a lease another owner took is gone). */
  renew(owner: string, hosts: string[], ttlMs: number): Promise<LeasedHost[]>;
  /** Hosts whose lease expired (their owner died or stopped): to be adopted. */
  expired(): Promise<LeasedHost[]>;
  /** Hosts whose lease is live, with their owner. */
  live(): Promise<Map<string, string>>;
  /** Expires `owner`'s leases now (a clean stop): the others adopt them at their next look. */
  release(owner: string): Promise<void>;
}
