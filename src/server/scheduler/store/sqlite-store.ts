/**
 * The default store backend: the unit-of-work port (unit-of-work.ts) on one
 * SQLite file through better-sqlite3. The port's queries and the schema are
 * shared with PostgreSQL (./sql); this file is SQLite's runner only: the
 * connection, group commit, the statement cache and damage detection.
 *
 * Durability: WAL with synchronous=FULL, so an acknowledged write survives
 * kill -9. Atomicity: a unit runs inside one IMMEDIATE transaction (the write
 * lock is taken first, so callers in another process on the same file
 * serialise through busy_timeout instead of racing).
 *
 * Group commit: the units that arrive in the same turn of the event loop
 * share one IMMEDIATE transaction and so one fsync; each runs in a SAVEPOINT
 * of its own (rolled back alone if it throws) and is acknowledged only after
 * the COMMIT. Units are serialised on the one connection: a unit awaits only
 * this port, whose methods resolve at once, so it runs to its end inside the
 * open transaction while every other unit (read-only ones too) waits its turn.
 * better-sqlite3 is synchronous, and so is the shared SQL underneath (./sql/unit.ts):
 * a statement's rows are at hand when the port method continues.
 *
 * Device events: a unit's events are inserted when it ends, inside its
 * SAVEPOINT; AUTOINCREMENT in the one write transaction numbers them in
 * commit order.
 */

import Database from 'better-sqlite3';
import { BerthError } from '../../../errors.js';
import { classifySqliteFailure, storeDamaged } from '../../storage-faults.js';
import type { ReadUnit, TransactionRunner, UnitOfWork } from '../usecases/unit-of-work.js';
import { SQLITE } from './sql/dialect.js';
import { pendingMigrations, SCHEMA_MIGRATIONS_TABLE } from './sql/schema.js';
import { type Executor, type PendingEvent, SqlUnit } from './sql/unit.js';

export interface SqliteDatabaseOptions {
  /** How long a writer waits for another connection's lock (ms). */
  busyTimeoutMs?: number;
}

const closedError = () => new BerthError('UNAVAILABLE', 'the store is closed');

interface PendingUnit {
  fn: (uow: UnitOfWork) => Promise<unknown>;
  resolve: (v: unknown) => void;
  reject: (e: unknown) => void;
}

type Outcome = { ok: true; value: unknown } | { ok: false; error: unknown };

export class SqliteDatabase implements TransactionRunner {
  /** The connection, for tools (benchmarks set pragmas during an untimed load); units never see it. */
  readonly connection: Database.Database;
  private readonly statements = new Map<string, Database.Statement>();
  /** Statements on the connection, for the shared SQL (./sql/unit.ts): each answers at once. */
  private readonly exec: Executor = {
    all: <R>(sql: string, params: readonly unknown[] = []) => this.stmt(sql).all(...params) as R[],
    get: <R>(sql: string, params: readonly unknown[] = []) => this.stmt(sql).get(...params) as R | undefined,
    run: (sql: string, params: readonly unknown[] = []) => this.stmt(sql).run(...params).changes,
  };
  private pending: PendingUnit[] = [];
  private flushScheduled = false;
  private closed = false;
  /** Whether a unit (or a batch of them) is using the connection; others wait in `waiters`. */
  private busy = false;
  private readonly waiters: Array<() => void> = [];
  /** Why the file is known to be damaged (then every unit is refused), or null. */
  private damage: string | null = null;
  private readonly damageListeners: Array<(why: string) => void> = [];

  constructor(
    readonly path: string,
    options: SqliteDatabaseOptions = {},
  ) {
    this.connection = new Database(path);
    try {
      this.connection.pragma(`busy_timeout = ${Math.trunc(options.busyTimeoutMs ?? 5000)}`);
      this.connection.pragma('journal_mode = WAL');
      this.connection.pragma('synchronous = FULL');
      this.connection.pragma('foreign_keys = ON');
      // A damaged file is found at start, before it serves anything.
      if (path !== ':memory:') {
        const rows = this.connection.pragma('quick_check') as { quick_check: string }[];
        const problems = rows.map((r) => r.quick_check).filter((r) => r !== 'ok');
        if (problems.length > 0) {
          this.markDamaged(
            `quick_check: ${problems.slice(0, 3).join('; ')}${problems.length > 3 ? '; …' : ''}`,
          );
          return;
        }
      }
      this.migrate();
    } catch (err) {
      const fault = classifySqliteFailure(err, path);
      if (!fault?.damage) throw fault?.error ?? err;
      this.markDamaged(fault.damage);
    }
  }

  /** Why the database is damaged, or null. */
  get damaged(): string | null {
    return this.damage;
  }

  /** Called once when the database is found damaged (at once if it already is). */
  onDamage(listener: (why: string) => void): void {
    if (this.damage) listener(this.damage);
    else this.damageListeners.push(listener);
  }

  private markDamaged(why: string): void {
    if (this.damage) return;
    this.damage = why;
    for (const l of this.damageListeners.splice(0)) l(why);
  }

  /** A SQLite failure in Berth's terms; a damaged file stops the store. */
  private translate(err: unknown): unknown {
    const fault = classifySqliteFailure(err, this.path);
    if (!fault) return err;
    if (fault.damage) this.markDamaged(fault.damage);
    return fault.error;
  }

  /** Prepared statements are cached by their SQL: preparing is a measurable share of a bind. */
  stmt(sql: string): Database.Statement {
    let st = this.statements.get(sql);
    if (!st) {
      st = this.connection.prepare(sql);
      this.statements.set(sql, st);
    }
    return st;
  }

  /** Applies the missing migrations (./sql/schema.ts), each in its own transaction. */
  private migrate(): void {
    this.connection.exec(SCHEMA_MIGRATIONS_TABLE);
    const applied = this.stmt('SELECT version FROM schema_migrations').all() as Array<{ version: number }>;
    for (const m of pendingMigrations(new Set(applied.map((r) => r.version)))) {
      this.connection
        .transaction(() => {
          // Another process on the file may have applied it meanwhile.
          if (this.stmt('SELECT 1 FROM schema_migrations WHERE version = ?').get(m.version)) return;
          this.connection.exec(m.sql(SQLITE));
          this.stmt('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)').run(
            m.version,
            m.name,
            new Date().toISOString(),
          );
        })
        .immediate();
    }
  }

  async schemaVersion(): Promise<number> {
    if (this.closed) throw closedError();
    if (this.damage) throw storeDamaged(this.path, this.damage);
    const row = this.stmt('SELECT MAX(version) AS v FROM schema_migrations').get() as { v: number | null };
    return row.v ?? 0;
  }

  // --- serialising units on the connection -------------------------------

  /** Take the connection; undefined when it was free (no extra turn of the microtask queue). */
  private acquire(): Promise<void> | undefined {
    if (!this.busy) {
      this.busy = true;
      return undefined;
    }
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** Hand the connection to the next waiter, in arrival order. */
  private releaseConnection(): void {
    const next = this.waiters.shift();
    if (next) next();
    else this.busy = false;
  }

  run<T>(fn: (uow: UnitOfWork) => Promise<T>): Promise<T> {
    if (this.closed) return Promise.reject(closedError());
    if (this.damage) return Promise.reject(storeDamaged(this.path, this.damage));
    return new Promise<T>((resolve, reject) => {
      this.pending.push({ fn, resolve: resolve as (v: unknown) => void, reject });
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        setImmediate(() => void this.flushWhenFree());
      }
    });
  }

  async read<T>(fn: (uow: ReadUnit) => Promise<T>): Promise<T> {
    if (this.closed) throw closedError();
    if (this.damage) throw storeDamaged(this.path, this.damage);
    const wait = this.acquire();
    if (wait) await wait;
    try {
      if (!this.connection.open) throw closedError();
      // One read transaction: what the unit reads is from one moment, even
      // while another process writes the file.
      this.stmt('BEGIN').run();
      const unit = new SqlUnit(this.exec, SQLITE, false);
      try {
        return await fn(unit);
      } finally {
        unit.end();
        if (this.connection.inTransaction) this.stmt('COMMIT').run();
      }
    } catch (err) {
      throw this.translate(err);
    } finally {
      this.releaseConnection();
    }
  }

  private async flushWhenFree(): Promise<void> {
    const wait = this.acquire();
    if (wait) await wait;
    try {
      await this.flush();
    } finally {
      this.releaseConnection();
    }
  }

  /** Runs every pending unit in one IMMEDIATE transaction, then answers them (connection held). */
  private async flush(): Promise<void> {
    this.flushScheduled = false;
    const batch = this.pending;
    this.pending = [];
    if (batch.length === 0) return;
    const outcomes: Outcome[] = [];
    try {
      this.stmt('BEGIN IMMEDIATE').run();
      for (const item of batch) {
        this.stmt('SAVEPOINT unit').run();
        const unit = new SqlUnit(this.exec, SQLITE, true);
        try {
          const value = await item.fn(unit);
          this.writeEvents(unit.takeEvents());
          unit.end();
          this.stmt('RELEASE unit').run();
          outcomes.push({ ok: true, value });
        } catch (error) {
          unit.end();
          this.stmt('ROLLBACK TO unit').run();
          this.stmt('RELEASE unit').run();
          outcomes.push({ ok: false, error: this.translate(error) });
        }
      }
      this.stmt('COMMIT').run();
    } catch (error) {
      // BEGIN, a savepoint or COMMIT failed: nothing of the batch is durable.
      try {
        if (this.connection.inTransaction) this.stmt('ROLLBACK').run();
      } catch {
        // The callers get the batch's own error; SQLite rolls back what it can.
      }
      const reported = this.translate(error);
      for (const item of batch) item.reject(reported);
      return;
    }
    batch.forEach((item, i) => {
      const o = outcomes[i]!;
      if (o.ok) item.resolve(o.value);
      else item.reject(o.error);
    });
  }

  /** A unit's device events, in its SAVEPOINT: AUTOINCREMENT in the one writer numbers them in commit order. */
  private writeEvents(events: PendingEvent[]): void {
    if (events.length === 0) return;
    const insert = this.stmt(
      'INSERT INTO device_events (device_uuid, removed, record, at) VALUES (?, ?, ?, ?)',
    );
    for (const e of events) insert.run(e.deviceUuid, e.removed ? 1 : 0, e.record, e.at);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    // Units already accepted are committed (and answered) before the file closes.
    const wait = this.acquire();
    if (wait) await wait;
    try {
      await this.flush();
    } finally {
      this.connection.close();
      this.releaseConnection();
    }
  }
}
