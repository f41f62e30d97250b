/**
 * The scheduler's store: one interface, one contract test suite
 * (store-contract.ts), several backends (SQLite now, PostgreSQL for HA later).
 *
 * Every operation that must be atomic is ONE method here — the caller never
 * reads, decides and writes in separate calls. Each is a use case (../usecases)
 * that applies the pure transitions of ../domain inside one unit of work
 * (unit-of-work.ts), bumps the device generation and appends to the device event
 * log; a backend implements only that port. Errors are BerthErrors that already
 * carry their gRPC code.
 */

import type { BerthError } from '../../../errors.js';
import type { MediaRecord } from '../../../plugins/types.js';
import type { PickFn } from '../domain/allocation.js';
import type { Arq } from '../domain/arq.js';
import type {
  CleanupProofRecord,
  DeviceFacts,
  DeviceRecord,
  DeviceState,
  DeviceStatus,
  DeviceType,
} from '../domain/device-state.js';
import type { Profile, ProfileSpec } from '../domain/profile.js';

export interface HostRegistration {
  name: string;
  endpoint: string;
  bootId: string;
  /** The agent process's own epoch id (Register.epoch): a new one means the agent restarted. */
  agentEpoch: string;
  agentVersion: string;
  features: string[];
  drivers: string[];
  /**
   * The authenticated principal the host is pinned to (its first agent
   * registration's subject; invariant 10). Absent with authentication off.
   */
  principal?: string;
}

export interface HostRecord extends HostRegistration {
  /** How many times the host registered (reconnects included). */
  registrations: number;
  connected: boolean;
  registeredAt: string;
  lastSeen: string;
  /** The agent inventory revision the scheduler last applied. */
  inventoryRevision: number;
  deviceCount: number;
}

/** A device named by uuid, or by host and PCI address (proto DeviceRef). */
export type DeviceRef = { uuid: string } | { host: string; address: string };

export interface DeviceFilter {
  host?: string;
  type?: DeviceType;
  state?: DeviceState;
  resourceClass?: string;
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
  | { kind: 'delta'; revision: number; added: DeviceFacts[]; changed: DeviceFacts[]; removed: string[] };

export interface InventoryResult {
  added: DeviceRecord[];
  changed: DeviceRecord[];
  /** Devices marked unhealthy because the host no longer reports them (never deleted). */
  missing: DeviceRecord[];
}

export type CleanupJobState = 'queued' | 'dispatched' | 'running' | 'succeeded' | 'failed' | 'interrupted';
export type CleanupPhase =
  | 'queued'
  | 'preparing'
  | 'sanitizing'
  | 'namespace_reset'
  | 'zeroing'
  | 'verifying'
  | 'succeeded'
  | 'failed'
  | 'interrupted';

export interface CleanupEvent {
  jobId: string;
  address: string;
  action: string;
  phase: CleanupPhase;
  step: string;
  percent: number;
  bytesDone: number;
  bytesTotal: number;
  message: string;
  time: string;
  /** Increases by one per event of a job; a repeated sequence is ignored. */
  sequence: number;
  /** On `succeeded`: the agent's proof of erasure. */
  proof?: CleanupProofRecord | null;
}

/** A device an agent's journal records as handed to a guest and not cleaned since. */
export interface HeldDeviceReport {
  address: string;
  arqUuid: string;
  instanceUuid: string;
  /** When the agent recorded the binding (ISO 8601, the agent's clock); absent from older agents. */
  since?: string;
}

export interface CleanupJob {
  jobId: string;
  deviceUuid: string;
  host: string;
  address: string;
  /** The device's locked-in action when the job was created. */
  action: string;
  state: CleanupJobState;
  /**
   * What asked for it: release (of an ARQ/migration), operator (CleanDevice),
   * agent (its agent reports it holds tenant data), media (its media may hold
   * tenant data nobody is cleaning: seen dirty elsewhere, or never cleaned by
   * Berth; docs/media-identity.md), or placement (used outside Berth: Nova's
   * one-time-use devices).
   */
  origin: 'release' | 'operator' | 'agent' | 'media' | 'placement';
  message: string;
  lastSequence: number;
  createdAt: string;
  dispatchedAt: string | null;
  finishedAt: string | null;
}

/** A cleanup to dispatch or re-attach. */
export interface CleanupBacklogEntry {
  device: DeviceRecord;
  job: CleanupJob;
  /** Why it must not start yet (another device holds its media), or null. */
  waitsFor: string | null;
}

export interface CreateArqsRequest {
  profileName: string;
  /** Idempotency key: the same id returns the same ARQs. */
  requestId?: string;
  tags?: string[];
}

export interface ArqBinding {
  arqUuid: string;
  instanceUuid: string;
  host: string;
  /** Overrides the tag given at creation when non-empty. */
  tag?: string;
}

/**
 * Whether a device that is cleaned may be bound on `host` now (its agent is
 * connected and records bindings): null, or the error to refuse with before
 * anything is allocated.
 */
export type BindGate = (host: HostRecord) => BerthError | null;

export interface BindResult {
  arqs: Arq[];
  devices: DeviceRecord[];
  /** The ARQs this call bound (the others were already bound so: a retried request). */
  newlyBound: string[];
}

export interface DeleteArqsResult {
  deletedUuids: string[];
  /** Devices that went through release; pending_cleaning ones need a cleanup dispatch. */
  released: DeviceRecord[];
}

export type MigrationState = 'planned' | 'committed' | 'aborted';

export interface MigrationRecord {
  uuid: string;
  instanceUuid: string;
  sourceHost: string;
  destinationHost: string;
  state: MigrationState;
  /** Source PCI address → destination PCI address. */
  addressMap: Record<string, string>;
  /** Source device uuid → claimed destination device uuid. */
  claims: Record<string, string>;
  destinationXml: string;
  readiness: Array<{ address: string; ready: boolean; reason: string }>;
  requestId: string | null;
  createdAt: string;
}

export interface PlanMigrationRequest {
  instanceUuid: string;
  destinationHost: string;
  requestId?: string;
}

export interface MigrationOutcome {
  migration: MigrationRecord;
  released: DeviceRecord[];
}

export interface Nic {
  mac: string;
  address: string;
  tag: string;
  vlan: number | null;
  model: string;
  /** The guest's interface name; null for none (and in records written before it existed). */
  devname: string | null;
}

export interface Disk {
  serial: string;
  bus: string;
  address: string;
  path: string;
  tag: string;
}

export interface InstanceDevices {
  nics: Nic[];
  disks: Disk[];
}

/** A bound ARQ of an instance with its device; `arq.guestAddress` is set. */
export interface GuestBinding {
  arq: Arq;
  device: DeviceRecord;
}

/** One entry of the device event log; revisions strictly increase. */
export interface DeviceEvent {
  revision: number;
  device: DeviceRecord;
  removed: boolean;
}

/** How long the scheduler keeps history (docs/operator-guide.md "Retention"). */
export interface RetentionPolicy {
  /** Device events and finished cleanup jobs older than this go (ms). */
  historyMs: number;
  /** At most this many device events, finished cleanup jobs and idempotency keys each. */
  maxRows: number;
  /** Request ids are honoured for this long (ms); a retry after it makes a new request. */
  requestIdMs: number;
}

/** Rows one retention pass removed. */
export interface PruneCounts {
  deviceEvents: number;
  cleanupJobs: number;
  idempotencyKeys: number;
}

/** A host whose agent link is leased, with what a scheduler needs to dial it. */
export interface LeasedHost {
  host: string;
  endpoint: string;
  features: string[];
  /** Whether the database says its follower is connected to it. */
  connected: boolean;
  /** When the agent last registered or sent a heartbeat (to any scheduler). */
  lastSeen: string;
}

/**
 * Which scheduler follows each host's agent when several share one database
 * (issue 13, docs/decisions.md 37). A lease is held by one owner (a
 * scheduler's id) until it expires; times are the database's, so the
 * schedulers' clocks do not matter. Only a registration creates a lease: a
 * host never registered through a replica is never dialled by one.
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

export interface Store {
  /** Link leases, on backends that several schedulers share (PostgreSQL); absent = one scheduler. */
  readonly leases?: LinkLeases;
  /** Calls `listener` once if the database is (or is found) damaged: the store then refuses everything. */
  onDamage?(listener: (why: string) => void): void;
  /** Calls `listener` after a change committed by any scheduler sharing the database (PostgreSQL). */
  onChange?(listener: () => void): void;
  /**
   * Calls `listener` with the hosts on which a committed unit queued cleanups
   * of its own (media found holding data nobody cleans), for the dispatcher.
   */
  onCleanupsQueued?(listener: (hosts: string[]) => void): void;
  close(): Promise<void>;
  /** Highest schema migration applied. */
  schemaVersion(): Promise<number>;

  // --- hosts -------------------------------------------------------------
  /**
   * Upsert the host. A new agentEpoch resets the followed inventory revision
   * (the new agent process numbers its inventory afresh).
   */
  registerHost(reg: HostRegistration): Promise<HostRecord>;
  /** A heartbeat: stamps lastSeen. */
  touchHost(name: string): Promise<HostRecord>;
  /**
   * After an agent (re)start (invariant 3): cleaning devices go to error and
   * their jobs become interrupted; pending_cleaning devices are returned to be
   * dispatched again under their job id.
   */
  reconcileAgentRestart(host: string): Promise<{ interrupted: DeviceRecord[]; toDispatch: DeviceRecord[] }>;
  /**
   * The devices the host's agent reports as holding tenant data (its journal):
   * any this store thinks available goes to pending_cleaning with a job (origin
   * agent). Returns the devices it moved.
   */
  reconcileHeldDevices(host: string, held: readonly HeldDeviceReport[]): Promise<DeviceRecord[]>;
  /**
   * The media records the host's agent reports at registration (its journal's,
   * present on the host or not): dirt and burns are added to the scheduler's
   * own records, never removed (docs/media-identity.md). Returns the media
   * keys that changed.
   */
  reconcileMediaRecords(host: string, records: readonly MediaRecord[]): Promise<string[]>;
  setHostConnected(host: string, connected: boolean): Promise<HostRecord>;
  getHost(name: string): Promise<HostRecord>;
  /**
   * Remove a host and its devices (their removal is in the event log). NOT_FOUND
   * for an unknown host; FAILED_PRECONDITION while it is connected
   * (HOST_CONNECTED) or any device is in use or holds tenant data
   * (HOST_HAS_DEVICES_IN_USE). Returns the devices removed.
   */
  deleteHost(name: string): Promise<DeviceRecord[]>;
  listHosts(): Promise<HostRecord[]>;

  // --- inventory and devices --------------------------------------------
  /**
   * Apply an agent snapshot or delta: insert new devices, update changed ones
   * (rediscovery, invariant 6), mark missing ones unhealthy. Never deletes.
   */
  upsertInventory(host: string, update: InventoryUpdate): Promise<InventoryResult>;
  getDevice(ref: DeviceRef): Promise<DeviceRecord>;
  listDevices(filter?: DeviceFilter, page?: PageRequest): Promise<DevicePage>;
  /** ABORTED (nothing changed) when expectedGeneration is given and stale. */
  setDeviceStatus(ref: DeviceRef, status: DeviceStatus, expectedGeneration?: number): Promise<DeviceRecord>;
  /** Operator un-burn (ReleaseDevice). */
  releaseDevice(ref: DeviceRef, expectedGeneration?: number): Promise<DeviceRecord>;
  /**
   * Operator CleanDevice: error → pending_cleaning under a new queued job.
   * A retry with the same requestId returns the same job.
   */
  requestClean(
    ref: DeviceRef,
    opts: { requestId?: string; agentCanClean: boolean },
  ): Promise<{ device: DeviceRecord; job: CleanupJob }>;

  /**
   * The device was used outside Berth (Nova's one-time-use): available and
   * cleanable → pending_cleaning under a new queued job (origin placement);
   * available and not cleanable → error with `why`; otherwise unchanged, job null.
   */
  scrubUsedOutsideBerth(
    ref: DeviceRef,
    why: string,
  ): Promise<{ device: DeviceRecord; job: CleanupJob | null }>;

  // --- cleanup -----------------------------------------------------------
  /** pending_cleaning and cleaning devices (of one host, or all) with their jobs: what to dispatch or re-attach. */
  cleanupBacklog(host?: string): Promise<CleanupBacklogEntry[]>;
  markCleanupDispatched(jobId: string): Promise<CleanupJob>;
  /**
   * Record one progress event and apply it to the device: the first working
   * phase → cleaning, succeeded/failed/interrupted → available/error. A repeated
   * sequence is ignored (applied: false); an event of a job that is no longer
   * the device's is recorded but changes no device.
   */
  applyCleanupEvent(
    event: CleanupEvent,
  ): Promise<{ device: DeviceRecord; job: CleanupJob; applied: boolean }>;
  /** The job cannot run (agent cannot clean): pending_cleaning → error. */
  failCleanup(jobId: string, reason: string): Promise<{ device: DeviceRecord; job: CleanupJob }>;
  getCleanupJob(jobId: string): Promise<CleanupJob>;
  /** The device's newest job, or null. */
  latestCleanupJob(deviceUuid: string): Promise<CleanupJob | null>;
  cleanupEvents(jobId: string, afterSequence?: number): Promise<CleanupEvent[]>;

  // --- profiles ----------------------------------------------------------
  /** Idempotent on an identical spec; ALREADY_EXISTS for a different one under the name. */
  createProfile(spec: ProfileSpec): Promise<Profile>;
  /** By name or uuid. */
  getProfile(nameOrUuid: string): Promise<Profile>;
  listProfiles(): Promise<Profile[]>;
  /** false when there was nothing to delete. */
  deleteProfile(name: string): Promise<boolean>;

  // --- accelerator requests ---------------------------------------------
  createArqs(req: CreateArqsRequest): Promise<Arq[]>;
  getArq(uuid: string): Promise<Arq>;
  listArqs(instanceUuid?: string): Promise<Arq[]>;
  /**
   * Bind every ARQ to an allocatable device on its host, all or nothing, in one
   * transaction: read the host's candidates, pick (default pickDevice), bind,
   * update the ARQ, log. A retried identical binding returns the same devices.
   * On failure nothing is bound and the ARQs are marked bind_failed with the error.
   */
  bindArqs(bindings: ArqBinding[], pick?: PickFn, gate?: BindGate): Promise<BindResult>;
  /**
   * Undo a bind whose devices' agents did not confirm it (RecordBinding): each
   * ARQ still bound as `bindings` asked goes to bind_failed with `reason`, and
   * its device is released (a cleanup, for devices that are cleaned: invariant
   * 2). Returns the released devices.
   */
  revertUnconfirmedBind(bindings: ArqBinding[], reason: string): Promise<DeviceRecord[]>;
  /** By uuids or instance; devices go through release. Deleting what is gone is a no-op. */
  deleteArqs(selector: { uuids?: string[]; instanceUuid?: string }): Promise<DeleteArqsResult>;

  // --- migrations --------------------------------------------------------
  /**
   * Check that every device bound to the instance is live-migratable and claim
   * a matching device on the destination for each, atomically.
   */
  planMigration(req: PlanMigrationRequest, pick?: PickFn): Promise<MigrationRecord>;
  setMigrationDetails(
    uuid: string,
    details: { destinationXml?: string; readiness?: MigrationRecord['readiness'] },
  ): Promise<MigrationRecord>;
  getMigration(uuid: string): Promise<MigrationRecord>;
  /** ARQs move to the destination devices; source devices are released. Idempotent. */
  commitMigration(uuid: string): Promise<MigrationOutcome>;
  /** Destination claims are released. Idempotent. */
  abortMigration(uuid: string): Promise<MigrationOutcome>;

  // --- instances ---------------------------------------------------------
  setInstanceDevices(instanceUuid: string, devices: InstanceDevices): Promise<void>;
  getInstanceDevices(instanceUuid: string): Promise<InstanceDevices>;
  /**
   * Replace the instance's NICs and disks after checking them, in the same
   * transaction, against the guest addresses already assigned to its bound
   * ARQs (guest/metadata.ts validateInstanceDevices): one INVALID_ARGUMENT
   * naming every bad field. Returns what was stored (normalised).
   */
  registerInstanceDevices(instanceUuid: string, devices: InstanceDevices): Promise<InstanceDevices>;
  /**
   * The instance's bound ARQs (creation order) with their devices, each with a
   * guest PCI address: stored addresses are kept, ARQs without one get the
   * lowest free Berth slot avoiding the registered NICs and disks
   * (guest/guest-address.ts planGuestAddresses), persisted in one transaction.
   * An ARQ keeps its address until it is deleted, a committed migration included.
   */
  assignGuestAddresses(instanceUuid: string): Promise<GuestBinding[]>;

  // --- event log (WatchDevices) -----------------------------------------
  currentRevision(): Promise<number>;
  /** Devices counted by host, type and state (metrics). */
  deviceCounts(): Promise<Array<{ host: string; type: string; state: string; count: number }>>;
  /** Events with revision > `revision`, oldest first, at most `limit`. */
  eventsSince(revision: number, limit: number): Promise<DeviceEvent[]>;
  /** Matching devices and the revision they are consistent with, read together. */
  snapshot(filter?: DeviceFilter): Promise<{ revision: number; devices: DeviceRecord[] }>;

  // --- retention ---------------------------------------------------------
  /**
   * Remove device events and finished cleanup jobs past the policy's window or
   * row cap, and idempotency keys past theirs, in units of at most `batch` rows
   * (`between` runs between units). A device's latest cleanup job and the newest
   * event always stay; eventsSince from before what went is FAILED_PRECONDITION
   * (REVISION_COMPACTED).
   */
  pruneHistory(
    policy: RetentionPolicy,
    options?: { batch?: number; between?: () => Promise<void> },
  ): Promise<PruneCounts>;
}
