/**
 * The scheduler's use cases as one API over any backend. Each method is a
 * use case of this directory, its signature written once — on the function —
 * and bound here to the backend's transaction runner: the `UseCases` type is
 * derived from the table below, so adding a use case is one function and one
 * line. Nothing here knows SQL; nothing in a backend knows a use case.
 *
 * After every read-write unit commits, `onChange` listeners hear of it (on
 * every backend, from this process's commits; on a shared PostgreSQL
 * database also from the other schedulers'), with the hosts on which the
 * unit queued cleanups: watches and the cleanup dispatcher wake from that,
 * never from a caller remembering to say so.
 */

import * as arqs from './arqs.js';
import * as certificates from './certificates.js';
import * as cleanup from './cleanup.js';
import type { Change, UseCaseDeps } from './context.js';
import * as devices from './devices.js';
import * as events from './events.js';
import * as externalUse from './external-use.js';
import * as hosts from './hosts.js';
import * as instances from './instances.js';
import * as migrations from './live-migrations.js';
import * as mediaReports from './media-reports.js';
import * as novaEvents from './nova-events.js';
import * as profiles from './profiles.js';
import * as retention from './retention.js';
import type { LinkLeases, TransactionRunner } from './unit-of-work.js';

export type { Change } from './context.js';

/** Every use case, by the name the API gives it. */
const USE_CASES = {
  // hosts
  registerHost: hosts.registerHost,
  reconcileHeldDevices: hosts.reconcileHeldDevices,
  reconcileMediaRecords: mediaReports.reconcileMediaRecords,
  forgetMedia: mediaReports.forgetMedia,
  setHostConnected: hosts.setHostConnected,
  getHost: hosts.getHost,
  listHosts: hosts.listHosts,
  hostsPage: hosts.hostsPage,
  deleteHost: hosts.deleteHost,
  // inventory and devices
  upsertInventory: devices.upsertInventory,
  getDevice: devices.getDevice,
  listDevices: devices.listDevices,
  setDeviceStatus: devices.setDeviceStatus,
  releaseDevice: devices.releaseBurn,
  requestClean: cleanup.requestClean,
  scrubUsedOutsideBerth: externalUse.scrubUsedOutsideBerth,
  // cleanup
  cleanupBacklog: cleanup.cleanupBacklog,
  markCleanupDispatched: cleanup.markCleanupDispatched,
  applyCleanupEvent: cleanup.applyCleanupEvent,
  failCleanup: cleanup.failCleanup,
  getCleanupJob: cleanup.getCleanupJob,
  latestCleanupJob: cleanup.latestCleanupJob,
  cleanupEvents: cleanup.cleanupEvents,
  // erasure certificates
  rotateAgentKey: certificates.rotateAgentKey,
  agentKeys: certificates.agentKeys,
  importCertificates: certificates.importCertificates,
  lastCertificate: certificates.lastCertificate,
  listCertificates: certificates.listCertificates,
  instanceOwner: certificates.instanceOwner,
  // profiles
  createProfile: profiles.createProfile,
  getProfile: profiles.getProfile,
  listProfiles: profiles.listProfiles,
  deleteProfile: profiles.deleteProfile,
  // accelerator requests
  createArqs: arqs.createArqs,
  getArq: arqs.getArq,
  listArqs: arqs.listArqs,
  bindArqs: arqs.bindArqs,
  recordBindFailure: arqs.recordBindFailure,
  revertUnconfirmedBind: arqs.revertUnconfirmedBind,
  deleteArqs: arqs.deleteArqs,
  unbindArqs: arqs.unbindArqs,
  claimBinds: arqs.claimBinds,
  releaseBindClaims: arqs.releaseBindClaims,
  databaseNow: arqs.databaseNow,
  // the events Nova is owed, and the claims on them (decision 77)
  claimNovaEvents: novaEvents.claimNovaEvents,
  novaEventsOwedCount: novaEvents.novaEventsOwedCount,
  releaseNovaEvents: novaEvents.releaseNovaEvents,
  releaseOthersNovaClaims: novaEvents.releaseOthersNovaClaims,
  novaEventDelivered: novaEvents.novaEventDelivered,
  // live migrations
  planMigration: migrations.planMigration,
  setMigrationDetails: migrations.setMigrationDetails,
  getMigration: migrations.getMigration,
  commitMigration: migrations.commitMigration,
  abortMigration: migrations.abortMigration,
  // instances
  setInstanceDevices: instances.setInstanceDevices,
  getInstanceDevices: instances.getInstanceDevices,
  registerInstanceDevices: instances.registerInstanceDevices,
  assignGuestAddresses: instances.assignGuestAddresses,
  // the device event log (WatchDevices) and metrics
  currentRevision: events.currentRevision,
  deviceCounts: events.deviceCounts,
  eventsSince: events.eventsSince,
  snapshot: events.snapshot,
  snapshotPage: events.snapshotPage,
  // retention
  pruneHistory: retention.pruneHistory,
};

/** A use case as the API offers it: its own signature without the `deps` it is bound to. */
type Bound<F> = F extends (deps: UseCaseDeps, ...args: infer A) => infer R ? (...args: A) => R : never;

/** Every use case, bound to one backend. */
export type UseCaseMethods = { readonly [K in keyof typeof USE_CASES]: Bound<(typeof USE_CASES)[K]> };

/** The use cases over one backend, with the backend's lifecycle. */
export type UseCases<R extends TransactionRunner = TransactionRunner> = UseCaseMethods & {
  /** The backend; exposed for tools that need it (benchmarks set pragmas during a load). */
  readonly db: R;
  /** Link leases, on backends that several schedulers share (PostgreSQL); absent = one scheduler. */
  readonly leases: LinkLeases | undefined;
  /** Units already accepted finish (and commit) first; later ones are refused. */
  close(): Promise<void>;
  /** Highest schema migration applied. */
  schemaVersion(): Promise<number>;
  /** Calls `listener` once if the database is (or is found) damaged: every unit is then refused. */
  onDamage(listener: (why: string) => void): void;
  /** Calls `listener` after each committed change (see the top of this file). */
  onChange(listener: (change: Change) => void): void;
};

export interface UseCasesOptions {
  /** Clock, for tests. */
  now?: () => Date;
}

/** The use cases over `db`. */
export function useCasesOver<R extends TransactionRunner>(db: R, options: UseCasesOptions = {}): UseCases<R> {
  const listeners: Array<(change: Change) => void> = [];
  const deps: UseCaseDeps = {
    db,
    clock: options.now ?? (() => new Date()),
    committed: (change) => {
      for (const l of listeners) l(change);
    },
  };
  const methods = Object.fromEntries(
    Object.entries(USE_CASES).map(([name, useCase]) => {
      const fn = useCase as (deps: UseCaseDeps, ...args: unknown[]) => unknown;
      return [name, (...args: unknown[]) => fn(deps, ...args)];
    }),
  ) as unknown as UseCaseMethods;
  return {
    ...methods,
    db,
    leases: db.leases,
    close: () => db.close(),
    schemaVersion: () => db.schemaVersion(),
    onDamage: (listener) => db.onDamage?.(listener),
    onChange(listener) {
      // A change another scheduler committed on a shared database: what it was is not known here.
      if (listeners.length === 0) db.onChange?.(() => deps.committed?.({ cleanupsOn: null }));
      listeners.push(listener);
    },
  };
}
