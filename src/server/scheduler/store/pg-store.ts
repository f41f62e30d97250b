/**
 * The PostgreSQL backend of the unit-of-work port (unit-of-work.ts), for
 * schedulers that share one database (decisions 36, 37). The port's queries and the
 * schema are shared with SQLite (./sql); this file is PostgreSQL's runner
 * only: the pool, transactions and retries, event numbering at commit,
 * NOTIFY/LISTEN and link leases. Every use case is the same code as on
 * SQLite (../usecases, composed by use-cases.ts).
 *
 * How it keeps the port's rules (docs/decisions.md 36):
 * - One transaction per unit, READ COMMITTED; reads given FOR_UPDATE are
 *   `SELECT … FOR UPDATE`; `lockInstance` is a transaction-scoped advisory
 *   lock. A unit that hits a deadlock, a serialization failure or a racing
 *   insert of the same key is rolled back and run again (at most 5 times):
 *   units have no effect outside the port until they resolve.
 * - `putDevice` is a compare-and-set on `generation` (ABORTED on a miss), sent
 *   with the next statement behind a guard (`laterChanging`, decision 91).
 * - Device events are buffered by the unit and written just before COMMIT,
 *   numbered by the log's identity column, under the event lock taken SHARED
 *   and held to the end of the transaction: writing units commit side by side
 *   (their WAL flushes shared), and revisions may commit out of order and
 *   leave gaps (a rolled-back unit's numbers). What a watcher reads is made
 *   safe on the reading side (decision 59): a unit that reads the event log
 *   takes its snapshot while holding the event lock EXCLUSIVE for a moment,
 *   so no unit is between numbering its events and committing; every event
 *   at or below the highest revision it sees is in it, and every later one
 *   gets a higher number. A watcher that read up to R never later finds a
 *   committed event ≤ R.
 * - Read-only units run REPEATABLE READ, READ ONLY: one consistent snapshot.
 * - The NOTIFY that wakes the other schedulers is sent after COMMIT, one for
 *   every unit that committed in 10 ms: a NOTIFY inside a transaction takes
 *   PostgreSQL's one notification-queue lock to the end of its commit, which
 *   would serialise every writing unit again.
 * - What need not wait for an answer — a unit's BEGIN, the writes and locks
 *   whose result it does not use — goes with its next statement or its end,
 *   in the same round trip, and statements asked for together go together
 *   (`UnitExecutor`, ./pg-executor.ts).
 */
import pg from 'pg';
import { BerthError } from '../../../errors.js';
import type { HostRecord } from '../domain/host.js';
import type {
  LeasedHost,
  LinkLeases,
  ReadUnit,
  ReadUnitOptions,
  TransactionRunner,
  UnitOfWork,
} from '../usecases/unit-of-work.js';
import { quote, UnitExecutor } from './pg-executor.js';
import { POSTGRES } from './sql/dialect.js';
import { pendingMigrations, SCHEMA_MIGRATIONS_TABLE } from './sql/schema.js';
import { SqlUnit } from './sql/unit.js';

export interface PgDatabaseOptions {
  /** Connections in the pool (default 10). */
  poolSize?: number;
}

/** Whether `--db` names a PostgreSQL database rather than a SQLite file. */
export const isPostgresUrl = (db: string): boolean => /^postgres(ql)?:\/\//.test(db);

/** Opens the database on a `postgres://` URL, creating the schema and migrating it if needed. */
export async function openPgDatabase(url: string, options: PgDatabaseOptions = {}): Promise<PgDatabase> {
  const db = new PgDatabase(url, options);
  try {
    await db.migrate();
  } catch (err) {
    await db.close();
    throw err;
  }
  return db;
}

const INT8_OID = 20;
/** BIGINT columns and COUNT(*) as numbers (revisions and counts stay far below 2^53). */
const TYPES = {
  getTypeParser: ((oid: number, format?: string) =>
    oid === INT8_OID
      ? (v: string) => Number(v)
      : pg.types.getTypeParser(oid, format as 'text')) as typeof pg.types.getTypeParser,
};

/** Advisory lock keys (one namespace: Berth's). */
const MIGRATION_LOCK = 0x6265_7274_0001;
const EVENT_LOCK = 0x6265_7274_0002;
const MAX_ATTEMPTS = 5;

/** The messages node-postgres gives a connection that ended or broke (pg/lib/client.js). */
const PG_CONNECTION_LOST = [
  'Connection terminated',
  'Client has encountered a connection error and is not queryable',
  'Client was closed and is not queryable',
  'timeout expired',
  'Query read timeout',
];
/** serialization_failure, deadlock_detected, unique_violation (a racing insert of the same key). */
const TRANSIENT = new Set(['40001', '40P01', '23505']);

const closedError = () => new BerthError('UNAVAILABLE', 'the store is closed');

/** Where a URL points, without its password, for messages. */
function redact(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return 'the configured PostgreSQL database';
  }
}

/** The channel every writing unit notifies at commit, so other schedulers on the database wake their watches. */
const CHANGES_CHANNEL = 'berth_changes';
/** How long a NOTIFY waits for more commits to tell of (the other schedulers' watches wake that much later). */
const NOTIFY_WINDOW_MS = 10;

export class PgDatabase implements TransactionRunner {
  private readonly pool: pg.Pool;
  private closed = false;
  private readonly inflight = new Set<Promise<unknown>>();
  readonly where: string;
  private readonly url: string;
  private readonly changeListeners: Array<() => void> = [];
  private listener: pg.Client | null = null;
  private relisten: NodeJS.Timeout | null = null;

  constructor(url: string, options: PgDatabaseOptions = {}) {
    this.url = url;
    this.where = redact(url);
    // A database that does not answer at all (a black-holed network) fails a
    // unit after 10 s instead of holding it forever.
    this.pool = new pg.Pool({
      connectionString: url,
      max: options.poolSize ?? 10,
      types: TYPES,
      connectionTimeoutMillis: 10_000,
    });
    // An idle connection that breaks is dropped by the pool; the next unit reports it.
    this.pool.on('error', () => {});
    // Every connection keeps a listener for its 'error' for its whole life: a
    // server that goes away (a restart, a failover, `pg_terminate_backend`)
    // sends 57P01 to each connection, which pg emits as 'error' whether the
    // connection is idle, checked out, or being removed from the pool; with no
    // listener that is an uncaught exception. The unit using a connection
    // still sees the failure, as its query's rejection.
    this.pool.on('connect', (client) => {
      client.on('error', () => {});
    });
  }

  /** Applies missing migrations, once even when several replicas start together. */
  async migrate(): Promise<void> {
    await this.withClient(async (client) => {
      await client.query('BEGIN');
      try {
        await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
        await client.query(SCHEMA_MIGRATIONS_TABLE);
        const done = new Set(
          (await client.query<{ version: number }>('SELECT version FROM schema_migrations')).rows.map(
            (r) => r.version,
          ),
        );
        for (const m of pendingMigrations(done)) {
          await client.query(m.sql(POSTGRES));
          await client.query(
            'INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)',
            [m.version, m.name, new Date().toISOString()],
          );
        }
        await client.query('COMMIT');
      } catch (err) {
        await client.query('ROLLBACK').catch(() => {});
        throw err;
      }
    });
  }

  async schemaVersion(): Promise<number> {
    if (this.closed) throw closedError();
    return this.withClient(async (client) => {
      const r = await client.query<{ v: number | null }>('SELECT MAX(version) AS v FROM schema_migrations');
      return r.rows[0]?.v ?? 0;
    });
  }

  run<T>(fn: (uow: UnitOfWork) => Promise<T>): Promise<T> {
    return this.track(() => this.unit(fn, true));
  }

  read<T>(fn: (uow: ReadUnit) => Promise<T>, opts?: ReadUnitOptions): Promise<T> {
    return this.track(() => this.unit(fn, false, opts?.eventLog === true));
  }

  /** Link leases (store.ts LinkLeases): one statement each, outside any unit. */
  readonly leases: LinkLeases = {
    claim: async (host, owner, ttlMs) => {
      const rows = await this.query<{ owner: string }>(
        `INSERT INTO link_leases (host, owner, expires_at) VALUES ($1, $2, now() + $3 * interval '1 millisecond')
         ON CONFLICT (host) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at
           WHERE link_leases.owner = EXCLUDED.owner OR link_leases.expires_at < now()
         RETURNING owner`,
        [host, owner, ttlMs],
      );
      return rows.length === 1;
    },
    renew: async (owner, hosts, ttlMs) =>
      leasedHosts(
        await this.query<LeaseRow>(
          `UPDATE link_leases l SET expires_at = now() + $3 * interval '1 millisecond' FROM hosts h
           WHERE l.owner = $1 AND l.host = ANY($2::text[]) AND h.name = l.host
           RETURNING l.host, h.record`,
          [owner, hosts, ttlMs],
        ),
      ),
    expired: async () =>
      leasedHosts(
        await this.query<LeaseRow>(
          'SELECT l.host, h.record FROM link_leases l JOIN hosts h ON h.name = l.host WHERE l.expires_at < now() ORDER BY l.host',
        ),
      ),
    live: async () =>
      new Map(
        (
          await this.query<{ host: string; owner: string }>(
            'SELECT host, owner FROM link_leases WHERE expires_at >= now()',
          )
        ).map((r) => [r.host, r.owner]),
      ),
    release: async (owner) => {
      await this.query("UPDATE link_leases SET expires_at = now() - interval '1 second' WHERE owner = $1", [
        owner,
      ]);
    },
  };

  /** One statement outside any unit (it commits on its own). */
  private query<R extends pg.QueryResultRow>(sql: string, params: unknown[] = []): Promise<R[]> {
    return this.track(() => this.withClient(async (client) => (await client.query<R>(sql, params)).rows));
  }

  /**
   * Calls `listener` after any unit commits a change — its own scheduler's or
   * another's on the same database (LISTEN/NOTIFY): a watch on one scheduler
   * sees what was changed through another. A lost listening connection is
   * opened again (and the listeners called, as something may have changed).
   */
  onChange(listener: () => void): void {
    this.changeListeners.push(listener);
    if (!this.listener && !this.relisten) void this.listen();
  }

  private async listen(): Promise<void> {
    this.relisten = null;
    if (this.closed) return;
    const client = new pg.Client({ connectionString: this.url, types: TYPES });
    const again = () => {
      if (this.listener !== client) return;
      this.listener = null;
      void client.end().catch(() => {});
      if (!this.closed) this.relisten = setTimeout(() => void this.listen(), 1_000);
    };
    client.on('error', again);
    client.on('end', again);
    client.on('notification', () => {
      for (const l of this.changeListeners) l();
    });
    this.listener = client;
    try {
      await client.connect();
      await client.query(`LISTEN ${CHANGES_CHANNEL}`);
      for (const l of this.changeListeners) l();
    } catch {
      again();
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.relisten) clearTimeout(this.relisten);
    const listener = this.listener;
    this.listener = null;
    await listener?.end().catch(() => {});
    await Promise.allSettled([...this.inflight]);
    await this.notifyNow();
    await this.pool.end();
  }

  private notifyTimer: NodeJS.Timeout | null = null;

  /**
   * Tells the other schedulers that something committed: one NOTIFY, outside
   * any unit, for every unit that committed in the next NOTIFY_WINDOW_MS (a
   * round trip each would be a tenth of a bind cycle's). Lost only if this
   * process dies inside that window; the other schedulers' next change or look
   * then catches up (decision 59). A clean close sends a pending one first.
   */
  private notifySoon(): void {
    if (this.notifyTimer || this.closed) return;
    this.notifyTimer = setTimeout(() => void this.notifyNow(), NOTIFY_WINDOW_MS);
  }

  private async notifyNow(): Promise<void> {
    if (!this.notifyTimer) return;
    clearTimeout(this.notifyTimer);
    this.notifyTimer = null;
    await this.withClient((client) => client.query(`NOTIFY ${CHANGES_CHANNEL}`)).catch(() => {});
  }

  private track<T>(start: () => Promise<T>): Promise<T> {
    if (this.closed) return Promise.reject(closedError());
    const p = start();
    this.inflight.add(p);
    void p.then(
      () => this.inflight.delete(p),
      () => this.inflight.delete(p),
    );
    return p;
  }

  private async withClient<T>(fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (err) {
      const e = this.translate(err);
      // Not a PostgreSQL error (a timeout, a refused or reset connection): the database is out of reach.
      if (e instanceof BerthError || typeof (e as { code?: unknown }).code === 'string') throw e;
      throw new BerthError(
        'UNAVAILABLE',
        `the scheduler's database ${this.where} is unreachable (${(e as Error).message})`,
        { reason: 'STORE_UNAVAILABLE' },
      );
    }
    // The connection's errors are listened for since the pool made it (constructor).
    try {
      return await fn(client);
    } catch (err) {
      throw this.translate(err);
    } finally {
      client.release();
    }
  }

  private async unit<T>(fn: (uow: SqlUnit) => Promise<T>, writable: boolean, eventLog = false): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      let connected = false;
      let committing = false;
      try {
        const result = await this.withClient(async (client) => {
          connected = true;
          // BEGIN goes with the unit's first statement (one round trip less a unit);
          // a log reader's begins at the barrier, on its own.
          if (eventLog && !writable) await beginAtEventBarrier(client);
          const x = new UnitExecutor(
            client,
            eventLog && !writable
              ? null
              : writable
                ? 'BEGIN'
                : 'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY',
          );
          if (eventLog && !writable) x.begun = true;
          const unit = new SqlUnit(x, POSTGRES, writable);
          try {
            const result = await fn(unit);
            const commit = commitSql(unit, x.finish(), x.begun);
            unit.end();
            if (commit) {
              // From here the transaction may be open (the string starts with BEGIN when
              // nothing went before): a failure must roll it back, not leave it to the pool.
              x.begun = true;
              committing = true;
              await client.query(commit).catch((err: unknown) => {
                throw x.met(err);
              });
            }
            return { result, wrote: unit.wrote };
          } catch (err) {
            unit.end();
            x.abandon();
            if (x.begun) await client.query('ROLLBACK').catch(() => {});
            throw err;
          }
        });
        if (result.wrote) this.notifySoon();
        return result.result;
      } catch (err) {
        const code = (err as { pgCode?: string }).pgCode;
        if (code && TRANSIENT.has(code) && attempt < MAX_ATTEMPTS) continue;
        // A connection the server ended (a restart, a failover; a pooled one
        // that was idle) fails the unit before its COMMIT was sent: nothing of
        // it was written, and the pool has dropped the connection, so the unit
        // runs again on another. A failure while the COMMIT was out is not
        // retried: it may have been written. Nor is a connection that could not
        // be made: that is the database out of reach, reported after the
        // connect timeout, not five of them.
        if (
          connected &&
          !committing &&
          err instanceof BerthError &&
          err.reason === 'STORE_UNAVAILABLE' &&
          attempt < MAX_ATTEMPTS
        )
          continue;
        // A compare-and-set lost to a unit that committed meanwhile (a device
        // written under it, or two devices of one media bound on two hosts at
        // once): run the unit again, it sees what won (decision 13).
        if (err instanceof BerthError && err.reason === 'CONCURRENT_UPDATE' && attempt < MAX_ATTEMPTS)
          continue;
        throw err;
      }
    }
  }

  /** A PostgreSQL or connection failure in Berth's terms; Berth's own errors pass through. */
  private translate(err: unknown): unknown {
    if (err instanceof BerthError) return err;
    const code = (err as { code?: unknown }).code;
    if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) {
      if (TRANSIENT.has(code)) return Object.assign(err as object, { pgCode: code });
      if (code === '53100') {
        return new BerthError(
          'RESOURCE_EXHAUSTED',
          `the scheduler's database is out of disk (${this.where}): nothing of this request was written`,
          { reason: 'STORE_DISK_FULL' },
        );
      }
      if (code.startsWith('08') || code.startsWith('57P') || code === '53300') {
        return new BerthError(
          'UNAVAILABLE',
          `the scheduler's database ${this.where} is unavailable (${code}: ${(err as Error).message})`,
          { reason: 'STORE_UNAVAILABLE' },
        );
      }
      return err;
    }
    // node-postgres says a connection ended or broke with a plain Error (no code, no class):
    // its message is all there is to tell it from a bug.
    const lost =
      code === undefined && err instanceof Error && PG_CONNECTION_LOST.some((m) => err.message.startsWith(m));
    if (lost || (typeof code === 'string' && /^E[A-Z]+$/.test(code))) {
      return new BerthError(
        'UNAVAILABLE',
        `the scheduler's database ${this.where} is unreachable (${(err as Error).message})`,
        { reason: 'STORE_UNAVAILABLE' },
      );
    }
    return err;
  }
}

/**
 * How a unit ends, in one round trip: its device events, numbered
 * under the event lock taken SHARED and held to COMMIT (so a reader of the
 * log can wait for every numbered event to commit: `beginAtEventBarrier`),
 * and COMMIT. One string (the simple query protocol, values escaped by the
 * driver): a statement that fails stops the rest and the unit is rolled back.
 * Writing units take the lock side by side and share their WAL flushes.
 */
function commitSql(unit: SqlUnit, pending: string[], begun: boolean): string | null {
  const events = unit.takeEvents();
  // A unit that sent nothing and has nothing to send: its BEGIN never went, there is nothing to end.
  if (!begun && pending.length <= 1 && events.length === 0) return null;
  const parts: string[] = pending;
  if (events.length > 0) {
    const rows = events.map(
      (e) => `(${quote(e.deviceUuid)}, ${e.removed ? 'TRUE' : 'FALSE'}, ${quote(e.record)}, ${quote(e.at)})`,
    );
    parts.push(`SELECT pg_advisory_xact_lock_shared(${EVENT_LOCK})`);
    parts.push(`INSERT INTO device_events (device_uuid, removed, record, at) VALUES ${rows.join(', ')}`);
  }
  parts.push('COMMIT');
  return parts.join('; ');
}

/**
 * Opens a read-only unit whose snapshot holds every device event numbered so
 * far: the snapshot is taken (by the first statement after BEGIN) while this
 * session holds the event lock EXCLUSIVE, which it gets once every unit that
 * numbered events has committed or rolled back, and before any other numbers
 * one; it lets go at once. Writers wait for it only that long. The lock is
 * the session's (a transaction lock would be taken after the snapshot): on a
 * failure the session lets go of it before the client goes back to the pool.
 */
async function beginAtEventBarrier(client: pg.PoolClient): Promise<void> {
  await client.query(`SELECT pg_advisory_lock(${EVENT_LOCK})`);
  try {
    await client.query(
      `BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SELECT pg_advisory_unlock(${EVENT_LOCK})`,
    );
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    await client.query(`SELECT pg_advisory_unlock(${EVENT_LOCK})`).catch(() => {});
    throw err;
  }
}

type LeaseRow = { host: string; record: string };

const leasedHosts = (rows: LeaseRow[]): LeasedHost[] =>
  rows.map((r) => {
    const h = JSON.parse(r.record) as HostRecord;
    return {
      host: h.name,
      endpoint: h.endpoint,
      features: h.features,
      connected: h.connected,
      lastSeen: h.lastSeen,
    };
  });
