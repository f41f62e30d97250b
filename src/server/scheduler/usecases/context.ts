/**
 * What every use case runs with: a transaction runner (any backend) and a
 * clock. A use case validates its request, then does its whole
 * read-decide-write inside ONE unit of work (`write`, ./unit.ts), or reads a
 * consistent view (`read`).
 */

import type { HostName } from '../../../identifiers.js';
import type { MediaRecord } from '../../../plugins/types.js';
import type { ReadUnit, ReadUnitOptions, TransactionRunner, UnitOfWork } from './unit-of-work.js';
import { upgrading } from './upgrade.js';

/** A change committed to the scheduler's records, as the listeners need it. */
export interface Change {
  /**
   * The hosts on which the unit queued cleanups (or let one that waited go):
   * their backlog is dispatched now. null for a change another scheduler
   * committed on a shared database (what it was is not known here).
   */
  cleanupsOn: readonly HostName[] | null;
}

export interface UseCaseDeps {
  readonly db: TransactionRunner;
  /** Clock, injectable for tests. */
  readonly clock: () => Date;
  /** Called after every read-write unit committed. */
  readonly committed?: (change: Change) => void;
}

/** An agent's journal record of a media, as its inventory reported it with a device. */
export interface AgentMediaReport {
  host: string;
  address: string;
  record: MediaRecord;
}

/** One unit of work as the use cases see it: the port plus the clock. */
export class Tx {
  /** Media keys whose devices this unit wrote: settled before the unit ends. */
  readonly touchedMedia = new Set<string>();
  /** Hosts on which this unit queued cleanups (or let one that waited go). */
  readonly queuedOn = new Set<HostName>();
  /** What agents' journals said in this unit of the media they reported devices of, by media key. */
  readonly agentReports = new Map<string, AgentMediaReport[]>();

  constructor(
    readonly uow: UnitOfWork,
    private readonly clock: () => Date,
  ) {}

  now(): string {
    return this.clock().toISOString();
  }
}

/** Run `fn` as one read-only unit (a consistent snapshot); its records are up to date (./upgrade.ts). */
export function read<T>(
  deps: UseCaseDeps,
  fn: (r: ReadUnit) => Promise<T>,
  opts?: ReadUnitOptions,
): Promise<T> {
  return deps.db.read((r) => fn(upgrading(r)), opts);
}
