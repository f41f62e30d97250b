/**
 * The Store every service uses, for any backend: each method is one use case
 * (this directory) run over the backend's transaction runner. Nothing here
 * knows SQL; nothing in a backend knows a use case.
 */

import type { MediaRecord } from '../../../plugins/types.js';
import type { PickFn } from '../domain/allocation.js';
import type { Arq } from '../domain/arq.js';
import type { DeviceRecord, DeviceStatus } from '../domain/device-state.js';
import type { Profile, ProfileSpec } from '../domain/profile.js';
import type {
  ArqBinding,
  BindGate,
  BindResult,
  CleanupBacklogEntry,
  CleanupEvent,
  CleanupJob,
  CreateArqsRequest,
  DeleteArqsResult,
  DeviceEvent,
  DeviceFilter,
  DevicePage,
  DeviceRef,
  GuestBinding,
  HeldDeviceReport,
  HostRecord,
  HostRegistration,
  InstanceDevices,
  InventoryResult,
  InventoryUpdate,
  LinkLeases,
  MigrationOutcome,
  MigrationRecord,
  PageRequest,
  PlanMigrationRequest,
  PruneCounts,
  RetentionPolicy,
  Store,
} from '../store/store.js';
import type { DeviceCount, TransactionRunner } from '../store/unit-of-work.js';
import * as arqs from './arqs.js';
import * as cleanup from './cleanup.js';
import type { UseCaseDeps } from './context.js';
import * as devices from './devices.js';
import * as events from './events.js';
import * as externalUse from './external-use.js';
import * as hosts from './hosts.js';
import * as instances from './instances.js';
import * as migrations from './live-migrations.js';
import * as profiles from './profiles.js';
import * as retention from './retention.js';

export interface UseCaseStoreOptions {
  /** Clock, for tests. */
  now?: () => Date;
}

export class UseCaseStore<R extends TransactionRunner = TransactionRunner> implements Store {
  private readonly deps: UseCaseDeps;
  private readonly queuedListeners: Array<(hosts: string[]) => void> = [];

  constructor(
    /** The backend; exposed for tools that need it (benchmarks set pragmas during a load). */
    readonly db: R,
    options: UseCaseStoreOptions = {},
  ) {
    this.deps = {
      db,
      clock: options.now ?? (() => new Date()),
      cleanupsQueued: (hosts) => {
        for (const l of this.queuedListeners) l(hosts);
      },
    };
  }

  onCleanupsQueued(listener: (hosts: string[]) => void): void {
    this.queuedListeners.push(listener);
  }

  close(): Promise<void> {
    return this.db.close();
  }

  onDamage(listener: (why: string) => void): void {
    this.db.onDamage?.(listener);
  }

  onChange(listener: () => void): void {
    this.db.onChange?.(listener);
  }

  get leases(): LinkLeases | undefined {
    return this.db.leases;
  }

  schemaVersion(): Promise<number> {
    return this.db.schemaVersion();
  }

  // --- hosts -------------------------------------------------------------

  registerHost(reg: HostRegistration): Promise<HostRecord> {
    return hosts.registerHost(this.deps, reg);
  }

  touchHost(name: string): Promise<HostRecord> {
    return hosts.touchHost(this.deps, name);
  }

  reconcileAgentRestart(host: string): Promise<{ interrupted: DeviceRecord[]; toDispatch: DeviceRecord[] }> {
    return hosts.reconcileAgentRestart(this.deps, host);
  }

  reconcileHeldDevices(host: string, held: readonly HeldDeviceReport[]): Promise<DeviceRecord[]> {
    return hosts.reconcileHeldDevices(this.deps, host, held);
  }

  reconcileMediaRecords(host: string, records: readonly MediaRecord[]): Promise<string[]> {
    return hosts.reconcileMediaRecords(this.deps, host, records);
  }

  setHostConnected(host: string, connected: boolean): Promise<HostRecord> {
    return hosts.touchHost(this.deps, host, { connected });
  }

  getHost(name: string): Promise<HostRecord> {
    return hosts.getHost(this.deps, name);
  }

  listHosts(): Promise<HostRecord[]> {
    return hosts.listHosts(this.deps);
  }

  deleteHost(name: string): Promise<DeviceRecord[]> {
    return hosts.deleteHost(this.deps, name);
  }

  // --- inventory and devices --------------------------------------------

  upsertInventory(host: string, update: InventoryUpdate): Promise<InventoryResult> {
    return devices.upsertInventory(this.deps, host, update);
  }

  getDevice(ref: DeviceRef): Promise<DeviceRecord> {
    return devices.getDevice(this.deps, ref);
  }

  listDevices(filter?: DeviceFilter, page?: PageRequest): Promise<DevicePage> {
    return devices.listDevices(this.deps, filter, page);
  }

  setDeviceStatus(ref: DeviceRef, status: DeviceStatus, expectedGeneration?: number): Promise<DeviceRecord> {
    return devices.setDeviceStatus(this.deps, ref, status, expectedGeneration);
  }

  releaseDevice(ref: DeviceRef, expectedGeneration?: number): Promise<DeviceRecord> {
    return devices.releaseBurn(this.deps, ref, expectedGeneration);
  }

  requestClean(
    ref: DeviceRef,
    opts: { requestId?: string; agentCanClean: boolean },
  ): Promise<{ device: DeviceRecord; job: CleanupJob }> {
    return cleanup.requestClean(this.deps, ref, opts);
  }

  scrubUsedOutsideBerth(
    ref: DeviceRef,
    why: string,
  ): Promise<{ device: DeviceRecord; job: CleanupJob | null }> {
    return externalUse.scrubUsedOutsideBerth(this.deps, ref, why);
  }

  // --- cleanup -----------------------------------------------------------

  cleanupBacklog(host?: string): Promise<CleanupBacklogEntry[]> {
    return cleanup.cleanupBacklog(this.deps, host);
  }

  markCleanupDispatched(jobId: string): Promise<CleanupJob> {
    return cleanup.markCleanupDispatched(this.deps, jobId);
  }

  applyCleanupEvent(
    event: CleanupEvent,
  ): Promise<{ device: DeviceRecord; job: CleanupJob; applied: boolean }> {
    return cleanup.applyCleanupEvent(this.deps, event);
  }

  failCleanup(jobId: string, reason: string): Promise<{ device: DeviceRecord; job: CleanupJob }> {
    return cleanup.failCleanup(this.deps, jobId, reason);
  }

  getCleanupJob(jobId: string): Promise<CleanupJob> {
    return cleanup.getCleanupJob(this.deps, jobId);
  }

  latestCleanupJob(deviceUuid: string): Promise<CleanupJob | null> {
    return cleanup.latestCleanupJob(this.deps, deviceUuid);
  }

  cleanupEvents(jobId: string, afterSequence?: number): Promise<CleanupEvent[]> {
    return cleanup.cleanupEvents(this.deps, jobId, afterSequence);
  }

  // --- profiles ----------------------------------------------------------

  createProfile(spec: ProfileSpec): Promise<Profile> {
    return profiles.createProfile(this.deps, spec);
  }

  getProfile(nameOrUuid: string): Promise<Profile> {
    return profiles.getProfile(this.deps, nameOrUuid);
  }

  listProfiles(): Promise<Profile[]> {
    return profiles.listProfiles(this.deps);
  }

  deleteProfile(name: string): Promise<boolean> {
    return profiles.deleteProfile(this.deps, name);
  }

  // --- accelerator requests ---------------------------------------------

  createArqs(req: CreateArqsRequest): Promise<Arq[]> {
    return arqs.createArqs(this.deps, req);
  }

  getArq(uuid: string): Promise<Arq> {
    return arqs.getArq(this.deps, uuid);
  }

  listArqs(instanceUuid?: string): Promise<Arq[]> {
    return arqs.listArqs(this.deps, instanceUuid);
  }

  bindArqs(bindings: ArqBinding[], pick?: PickFn, gate?: BindGate): Promise<BindResult> {
    return arqs.bindArqs(this.deps, bindings, pick, gate);
  }

  revertUnconfirmedBind(bindings: ArqBinding[], reason: string): Promise<DeviceRecord[]> {
    return arqs.revertUnconfirmedBind(this.deps, bindings, reason);
  }

  deleteArqs(selector: { uuids?: string[]; instanceUuid?: string }): Promise<DeleteArqsResult> {
    return arqs.deleteArqs(this.deps, selector);
  }

  // --- migrations --------------------------------------------------------

  planMigration(req: PlanMigrationRequest, pick?: PickFn): Promise<MigrationRecord> {
    return migrations.planMigration(this.deps, req, pick);
  }

  setMigrationDetails(
    uuid: string,
    details: { destinationXml?: string; readiness?: MigrationRecord['readiness'] },
  ): Promise<MigrationRecord> {
    return migrations.setMigrationDetails(this.deps, uuid, details);
  }

  getMigration(uuid: string): Promise<MigrationRecord> {
    return migrations.getMigration(this.deps, uuid);
  }

  commitMigration(uuid: string): Promise<MigrationOutcome> {
    return migrations.commitMigration(this.deps, uuid);
  }

  abortMigration(uuid: string): Promise<MigrationOutcome> {
    return migrations.abortMigration(this.deps, uuid);
  }

  // --- instances ---------------------------------------------------------

  setInstanceDevices(instanceUuid: string, devs: InstanceDevices): Promise<void> {
    return instances.setInstanceDevices(this.deps, instanceUuid, devs);
  }

  getInstanceDevices(instanceUuid: string): Promise<InstanceDevices> {
    return instances.getInstanceDevices(this.deps, instanceUuid);
  }

  registerInstanceDevices(instanceUuid: string, devs: InstanceDevices): Promise<InstanceDevices> {
    return instances.registerInstanceDevices(this.deps, instanceUuid, devs);
  }

  assignGuestAddresses(instanceUuid: string): Promise<GuestBinding[]> {
    return instances.assignGuestAddresses(this.deps, instanceUuid);
  }

  // --- event log ---------------------------------------------------------

  currentRevision(): Promise<number> {
    return events.currentRevision(this.deps);
  }

  deviceCounts(): Promise<DeviceCount[]> {
    return events.deviceCounts(this.deps);
  }

  eventsSince(revision: number, limit: number): Promise<DeviceEvent[]> {
    return events.eventsSince(this.deps, revision, limit);
  }

  snapshot(filter?: DeviceFilter): Promise<{ revision: number; devices: DeviceRecord[] }> {
    return events.snapshot(this.deps, filter);
  }

  // --- retention ---------------------------------------------------------

  pruneHistory(
    policy: RetentionPolicy,
    options?: { batch?: number; between?: () => Promise<void> },
  ): Promise<PruneCounts> {
    return retention.pruneHistory(this.deps, policy, options);
  }
}
