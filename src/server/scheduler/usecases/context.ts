/**
 * What every use case runs with: a transaction runner (any backend) and a
 * clock. A use case validates its request, then does its whole
 * read-decide-write inside ONE unit of work (`write`), or reads a consistent
 * view (`read`).
 */

import type { ReadUnit, TransactionRunner, UnitOfWork } from '../store/unit-of-work.js';

export interface UseCaseDeps {
  readonly db: TransactionRunner;
  /** Clock, injectable for tests. */
  readonly clock: () => Date;
}

/** One unit of work as the use cases see it: the port plus the clock. */
export class Tx {
  constructor(
    readonly uow: UnitOfWork,
    private readonly clock: () => Date,
  ) {}

  now(): string {
    return this.clock().toISOString();
  }
}

/** Run `fn` as one read-write unit; resolves once it committed. */
export function write<T>(deps: UseCaseDeps, fn: (tx: Tx) => Promise<T>): Promise<T> {
  return deps.db.run((uow) => fn(new Tx(uow, deps.clock)));
}

/** Run `fn` as one read-only unit (a consistent snapshot). */
export function read<T>(deps: UseCaseDeps, fn: (r: ReadUnit) => Promise<T>): Promise<T> {
  return deps.db.read(fn);
}
