/**
 * The base of the SQL unit of work (./unit.ts): one unit's view of its
 * transaction — the executor, the dialect, the guards (no use after the unit
 * ended, no write in a read-only unit) and the row helpers every part uses.
 *
 * Synchronous where the driver is: better-sqlite3 answers a statement with
 * its rows, PostgreSQL with a promise of them. The executor returns either
 * (`Maybe`), and each method continues with `andThen`, which calls on at once
 * when it holds a value: on SQLite a port method does all its work before it
 * returns its (already settled) promise, as a unit running to its end inside
 * the open transaction requires, with no extra turn of the microtask queue.
 */
import { BerthError } from '../../../../errors.js';
import type { DeviceRecord } from '../../domain/device-state.js';
import type { ReadOptions } from '../../usecases/unit-of-work.js';
import type { Dialect } from './dialect.js';

/** A value now (SQLite) or later (PostgreSQL). */
export type Maybe<T> = T | Promise<T>;

/**
 * Continue with `f` at once when `v` is a value, after it when it is a
 * promise. (Not named `then`: a module exporting `then` is a thenable, and
 * `await import()` of it would call it.)
 */
export function andThen<T, U>(v: Maybe<T>, f: (value: T) => Maybe<U>): Maybe<U> {
  return v instanceof Promise ? v.then(f) : f(v);
}

/** Runs statements (written with `?` placeholders) on one unit's transaction. */
export interface Executor {
  /** Every row. */
  all<R>(sql: string, params?: readonly unknown[]): Maybe<R[]>;
  /** The first row, or undefined. */
  get<R>(sql: string, params?: readonly unknown[]): Maybe<R | undefined>;
  /** How many rows the statement changed. */
  run(sql: string, params?: readonly unknown[]): Maybe<number>;
  /**
   * A statement whose result the unit does not use (a write, a lock): the
   * backend may send it with the unit's next statement, or with its end, in
   * the same round trip and in order; its failure then fails that one (the
   * unit fails either way). Absent: it runs at once.
   */
  later?(sql: string, params?: readonly unknown[]): void;
  /**
   * A write that must change a row, else the unit fails with `miss()` (a
   * compare-and-set): like `later`, sent with the next statement or the unit's
   * end behind a guard that fails the string there when it changed none; that
   * statement (or the end) then rejects with `miss()`, and so does every one
   * after it. Absent: the caller runs it at once and counts.
   */
  laterChanging?(sql: string, params: readonly unknown[], miss: () => BerthError): void;
}

/** A device event the unit appended: the backend numbers and writes it when the unit ends. */
export interface PendingEvent {
  deviceUuid: string;
  removed: boolean;
  /** The device record, JSON. */
  record: string;
  at: string;
}

export type Row = { record: string };

const record = <T>(row: Row | undefined): T | null => (row ? (JSON.parse(row.record) as T) : null);
export const records = <T>(rows: Row[]): T[] => rows.map((r) => JSON.parse(r.record) as T);

/** One unit's view of its transaction; refuses use after the unit ended (and writes when read-only). */
export abstract class SqlUnitBase {
  protected open = true;
  /** Whether the unit wrote anything (PostgreSQL then notifies the other schedulers at commit). */
  wrote = false;
  protected readonly events: PendingEvent[] = [];
  /** The JSON of the device last written, reused by its event (the hot path writes both). */
  protected lastDevice: { rec: DeviceRecord; json: string } | null = null;

  constructor(
    private readonly x: Executor,
    protected readonly d: Dialect,
    readonly writable: boolean,
  ) {}

  /** After this, every method refuses. */
  end(): void {
    this.open = false;
  }

  /** The device events appended since the last call, in order (the backend writes them). */
  takeEvents(): PendingEvent[] {
    return this.events.splice(0);
  }

  protected r(): Executor {
    if (!this.open) throw new BerthError('INTERNAL', 'a unit of work was used after it ended');
    return this.x;
  }

  protected w(): Executor {
    if (!this.writable) throw new BerthError('INTERNAL', 'a read-only unit of work tried to write');
    const x = this.r();
    this.wrote = true;
    return x;
  }

  /** A write whose result is not used: sent with the next statement where the backend can (Executor.later). */
  protected put(sql: string, params: readonly unknown[]): Maybe<void> {
    const x = this.w();
    if (x.later) return x.later(sql, params);
    return andThen(x.run(sql, params), () => undefined);
  }

  /** The dialect's lock clause when asked for in a read-write unit (a snapshot locks nothing). */
  protected lock(opts?: ReadOptions): string {
    return opts?.forUpdate && this.writable ? this.d.forUpdate : '';
  }

  protected one<T>(sql: string, params: readonly unknown[]): Maybe<T | null> {
    return andThen(this.r().get<Row>(sql, params), record<T>);
  }

  protected all<T>(sql: string, params: readonly unknown[] = []): Maybe<T[]> {
    return andThen(this.r().all<Row>(sql, params), records<T>);
  }

  protected count(sql: string, params: readonly unknown[] = []): Maybe<number> {
    return andThen(this.r().get<{ n: number }>(sql, params), (row) => row!.n);
  }
}
