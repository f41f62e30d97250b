/**
 * A backend for the application layer's tests, over SQLite: it keeps the
 * port's rules as a shared PostgreSQL database may (usecases/unit-of-work.ts)
 * and shows what a workflow does around its units.
 *
 * - Every read-write unit runs twice, as after a transient conflict: the first
 *   attempt runs to its end and is rolled back, the second commits. A unit
 *   that throws its own error is not run again.
 * - `inUnit` says whether a unit (read or write) is running now: an effect
 *   outside the store seen while it is true broke the rule that units have
 *   none until they resolve.
 * - It has link leases (every claim granted), so the agent directory treats a
 *   host as followed by another scheduler, as on a shared database.
 * - `failReads` makes read-only units fail with a storage error, as a database
 *   that stops answering does; `failWrites` the same for read-write units.
 */
import { BerthError } from '../../../errors.js';
import { classifySqliteFailure } from '../../storage-faults.js';
import type { LinkLeases, ReadUnit, TransactionRunner, UnitOfWork } from '../usecases/unit-of-work.js';
import { SqliteDatabase } from './sqlite-store.js';

const RUN_AGAIN = new BerthError('ABORTED', 'the test backend runs this unit again', {
  reason: 'CONCURRENT_UPDATE',
});

/** The error SQLite's runner gives for an I/O failure (UNAVAILABLE STORE_IO_ERROR). */
export function storageOutage(path: string): BerthError {
  const io = Object.assign(new Error('disk I/O error'), { code: 'SQLITE_IOERR' });
  return classifySqliteFailure(io, path)!.error;
}

export class UnitWatch implements TransactionRunner {
  private readonly inner: SqliteDatabase;
  private running = 0;
  /** Read-write units started, and how many attempts of them ran (each runs twice unless it threw). */
  readonly writes = { units: 0, attempts: 0 };
  /** When set, every read-only unit fails with it. */
  failReads: BerthError | null = null;
  /** When set, every read-write unit fails with it. */
  failWrites: BerthError | null = null;

  readonly leases: LinkLeases = {
    claim: async () => true,
    renew: async () => [],
    expired: async () => [],
    live: async () => new Map(),
    release: async () => {},
  };

  constructor(readonly path: string) {
    this.inner = new SqliteDatabase(path);
  }

  /** Whether a unit is running now. */
  get inUnit(): boolean {
    return this.running > 0;
  }

  async run<T>(fn: (uow: UnitOfWork) => Promise<T>): Promise<T> {
    this.writes.units++;
    if (this.failWrites) throw this.failWrites;
    const attempt = async (uow: UnitOfWork): Promise<T> => {
      this.writes.attempts++;
      this.running++;
      try {
        return await fn(uow);
      } finally {
        this.running--;
      }
    };
    try {
      await this.inner.run(async (uow) => {
        await attempt(uow);
        throw RUN_AGAIN;
      });
    } catch (e) {
      if (e !== RUN_AGAIN) throw e;
    }
    return this.inner.run(attempt);
  }

  async read<T>(fn: (uow: ReadUnit) => Promise<T>): Promise<T> {
    if (this.failReads) throw this.failReads;
    return this.inner.read(async (r) => {
      this.running++;
      try {
        return await fn(r);
      } finally {
        this.running--;
      }
    });
  }

  schemaVersion(): Promise<number> {
    return this.inner.schemaVersion();
  }

  close(): Promise<void> {
    return this.inner.close();
  }
}
