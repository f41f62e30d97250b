/**
 * The two narrow interfaces between Placement reporting and the rest of the
 * scheduler, so that neither knows the other's insides:
 *
 * - SchedulerSide: what Placement reporting reads and asks of the scheduler
 *   (devices, hosts, the ordered device change feed, and a scrub of a device
 *   used outside Berth). scheduler-side.ts implements it over the use cases,
 *   the event hub, the agent links and the cleaning workflow; nothing else in
 *   placement/ imports them.
 * - PlacementPort: what the scheduler's services get from it (status, a
 *   device's provider, provider uuid → devices, a dry run or a sync now).
 */
import type { HostName, PciAddress, Uuid } from '../../../identifiers.js';
import type { DeviceRecord } from '../domain/device-state.js';
import type { DeviceEvent } from '../domain/inventory.js';
import type { HostView } from './desired.js';

export interface SchedulerSide {
  /** The device change feed's revision now. */
  revision(): Promise<number>;
  /** One host's devices, read in one short unit (the reporter reads a host at a time, never the fleet). */
  hostDevices(host: HostName): Promise<DeviceRecord[]>;
  /** A page of hosts by name after `after` ('' first), without device counts (ListHosts' paging). */
  hostsPage(after: string, limit: number): Promise<HostView[]>;
  /** Device changes after `revision`, oldest first; 'compacted' when retention removed some (read a snapshot). */
  changesSince(revision: number, limit: number): Promise<DeviceEvent[] | 'compacted'>;
  hosts(): Promise<HostView[]>;
  /** Increases whenever the scheduler's state may have changed. */
  readonly changeVersion: number;
  /** Resolves once `changeVersion` is past `seen`, the signal fires, or `maxWaitMs` passed. */
  waitForChange(seen: number, signal: AbortSignal, maxWaitMs: number): Promise<void>;
  /**
   * Whether this scheduler speaks for the host (with a shared database, only
   * for the hosts it follows); null asks about a host Berth no longer knows.
   */
  ownsHost(host: string | null): boolean;
  device(host: HostName, address: PciAddress): Promise<DeviceRecord | null>;
  /** The device's newest cleanup job. */
  latestCleanupJob(deviceUuid: string): Promise<{ jobId: string; createdAt: string; state: string } | null>;
  /**
   * The device was used outside Berth (Nova's one-time-use): clean it through
   * the normal cleanup path (a job, the agent's CleanupDevice, judged proof).
   * `jobId` null when the device was not moved (held by Berth, cleaning
   * already, in error): the device says why.
   */
  scrubUsedOutsideBerth(
    device: { host: HostName; address: PciAddress },
    why: string,
  ): Promise<{ device: DeviceRecord; jobId: string | null }>;
}

export type PlacementMode = 'report' | 'clean-one-time-use';

/** A change Berth made (or, in a dry run, would make) in Placement. */
export interface PlacementChange {
  provider: string;
  providerUuid: string;
  host: string;
  /** create, update, delete, keep (a provider Berth would delete but Placement holds allocations against), unreserve, scrub, blocked. */
  action: 'create' | 'update' | 'delete' | 'keep' | 'unreserve' | 'scrub' | 'blocked';
  /** What changes, e.g. `reserved 0 → 1`, `traits + CUSTOM_X`. */
  details: string[];
  deviceAddresses: string[];
}

export interface PlacementProblem {
  provider: string;
  host: string;
  note: string;
}

export interface PlacementStatus {
  mode: PlacementMode;
  url: string;
  microversion: string;
  /** The server's max_version ('' until it answered). */
  serverMaxVersion: string;
  credentials: string;
  reachable: boolean;
  /** Why Placement is out of reach ('' when it answers). */
  lastError: string;
  unreachableSince: string | null;
  lastContactAt: string | null;
  /** The device change feed revision Placement reflects (every change up to it is written). */
  appliedRevision: number;
  storeRevision: number;
  /** Providers with a change Placement does not show yet (a host to read again counts one, decision 85). */
  pendingProviders: number;
  /** Age of the oldest change Placement does not show yet, in seconds (0 = in step). */
  lagSeconds: number;
  lastFullSyncAt: string | null;
  /** Providers Berth cannot make right (not Berth's, no compute node yet, Placement refused). */
  problems: PlacementProblem[];
  /** Providers Berth would delete but Placement holds allocations against. */
  held: Array<{ provider: string; host: string; consumers: string[] }>;
  /** clean-one-time-use: scrubs Berth started and has not finished or un-reserved. */
  scrubsInProgress: number;
  /** Writes refused for a stale provider generation (another writer came first), re-read and retried. */
  generationConflicts: number;
}

/** A device's provider as Berth last saw it. */
export interface DeviceProviderInfo {
  providerUuid: string;
  providerName: string;
  /** When Berth last wrote or checked the provider ('' never). */
  syncedAt: string;
  /** What an operator should know ('' when nothing). */
  note: string;
}

export interface PlacementPort {
  readonly mode: PlacementMode;
  status(): PlacementStatus;
  deviceProvider(device: DeviceRecord): DeviceProviderInfo | null;
  /**
   * Provider uuid → the devices it stands for (Cyborg's device_rp_uuid); [] when none.
   * `near` (a host or compute node name the caller expects it on) is looked at
   * first, in the store alone; otherwise Placement says the provider's name.
   */
  devicesOfProvider(
    providerUuid: string,
    near?: string,
  ): Promise<Array<{ deviceUuid: Uuid; host: HostName; address: PciAddress }>>;
  /**
   * Why a cleanup Berth starts on its own (a media never cleaned, or reported
   * dirty) must wait because someone outside Berth may be using the device:
   * in mode clean-one-time-use, Nova owns the devices, so a device whose
   * provider holds allocations — or whose provider Berth cannot ask about — is
   * never scrubbed under its instance. null when nothing stops it.
   */
  heldOutside(device: DeviceRecord): Promise<string | null>;
  /**
   * This scheduler's link to `host` connected or went (written in the store):
   * its providers wait to be written again at once, not at the next read of the hosts.
   */
  hostConnection(host: HostName, connected: boolean): void;
  /** A full pass now: with dryRun, what it would change (nothing written). */
  sync(options: { dryRun: boolean }): Promise<PlacementChange[]>;
  /** Starts following Berth's changes (once the scheduler knows which hosts it reaches). */
  start(): void;
  stop(): Promise<void>;
}
