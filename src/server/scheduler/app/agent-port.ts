/**
 * What the application layer needs of the hosts' agents, in plain types
 * (decision 55): the workflows (bind, clean, release, migrate, register) ask
 * for a host's agent, call it and judge a failure without a gRPC type in
 * sight. The runtime implements these ports over gRPC (runtime/agent-link.ts,
 * agent-links.ts, agent-directory.ts); the scheduler's composition hands them
 * to the workflows.
 */
import type { HostName } from '../../../identifiers.js';
import type { HostRecord } from '../domain/host.js';

/** An agent that records bindings (RecordBinding) before a device is handed over. */
export const BINDING_FEATURE = 'binding.v1';
/** An agent that cleans devices (CleanupDevice). */
export const CLEANUP_FEATURE = 'cleanup.v1';
/** An agent that prepares a live migration's destination (PrepareMigration). */
export const MIGRATION_FEATURE = 'migration.v1';

/** A claimed destination device as PrepareMigration checks it (what it must match on the source). */
export interface PreparedDevice {
  /** Address on the destination host. */
  address: string;
  vendorId: string;
  productId: string;
  managed: boolean;
  sourceAddress: string;
}

/** The destination agent's answer for one device. */
export interface PreparedAnswer {
  address: string;
  ready: boolean;
  /** Why the device is not ready; empty when ready. */
  reason: string;
}

/** A failed call to an agent, as the workflows that made it judge it. */
export interface AgentCallFailure {
  /** The agent could not be reached, or did not answer in time: retry later. */
  unreachable: boolean;
  /** The agent does not have the method (an older agent). */
  unimplemented: boolean;
  /** The agent's own reason for a refusal ('' when it gave none beyond the code). */
  reason: string;
  message: string;
}

/** Whether a host's agent is there and what it can do, as this scheduler knows it. */
export interface AgentView {
  readonly host: HostName;
  /** Whether the scheduler that follows the host says it is connected. */
  readonly isConnected: boolean;
  /** Whether the agent registered `feature`. */
  has(feature: string): boolean;
}

/** What a bind, a clean or a migration needs of one host's agent, followed here or not. */
export interface AgentHandle extends AgentView {
  /**
   * RecordBinding: the agent records, durably, that the device is handed to a
   * guest, and for which project ('' when none is known; the certificate names it).
   */
  recordBinding(
    address: string,
    arqUuid: string,
    instanceUuid: string,
    projectId: string,
    timeoutMs?: number,
  ): Promise<void>;
  /** ReleaseDevice: the agent clears its journal's record of the burn of the device's media. */
  releaseDevice(address: string, mediaKey: string, timeoutMs?: number): Promise<void>;
  /** PrepareMigration, run to completion. */
  prepareMigration(
    migrationId: string,
    devices: PreparedDevice[],
    timeoutMs?: number,
  ): Promise<PreparedAnswer[]>;
}

/** The hosts' agents as a workflow reaches them (runtime/agent-directory.ts). */
export interface AgentPort {
  /**
   * Reads from the database the hosts among `hosts` that this scheduler does
   * not follow (where schedulers share one); rejects when the database does
   * not answer.
   */
  refresh(hosts: Iterable<HostName>): Promise<void>;
  /** The host's agent: followed here, or (after `refresh`) by another scheduler. */
  get(host: string): AgentHandle | undefined;
  /**
   * The host's agent as this scheduler's links and `host`'s record (just read)
   * say, without a client: pure (nothing made, closed or remembered), so a
   * unit may ask it. Undefined when neither can tell (not followed here, and
   * no scheduler shares the database).
   */
  view(host: HostRecord): AgentView | undefined;
  /**
   * The host's agent to call, given its record as just read (no read of its
   * own): followed here, or another scheduler's, whose client it makes or
   * reuses. Never inside a unit.
   */
  observe(host: HostRecord): AgentHandle | undefined;
  /** What a rejected call of an AgentHandle means. */
  failure(err: unknown): AgentCallFailure;
}

/** The hosts this scheduler follows (runtime/agent-links.ts), as registration and host removal steer them. */
export interface FollowedHosts {
  /** The host's link: whether it is connected, and a nudge to retry now. */
  get(host: string): { readonly isConnected: boolean; poke(): void } | undefined;
  has(host: string): boolean;
  /** (Re)creates the link to a host's agent and starts following it. */
  connect(host: HostName, endpoint: string, features: string[]): void;
  /** Stops following a host; whether it was followed here. */
  drop(host: string): boolean;
}
