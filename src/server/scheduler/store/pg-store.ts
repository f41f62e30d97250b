/**
 * The PostgreSQL backend of the unit-of-work port (unit-of-work.ts), for
 * schedulers that share one database (issue 13). Only the port, the schema
 * and its migrations live here; every use case is the same code as on SQLite
 * (../usecases, composed by UseCaseStore).
 *
 * How it keeps the port's rules (docs/decisions.md 36):
 * - One transaction per unit, READ COMMITTED; reads given FOR_UPDATE are
 *   `SELECT … FOR UPDATE`; `lockInstance` is a transaction-scoped advisory
 *   lock. A unit that hits a deadlock, a serialization failure or a racing
 *   insert of the same key is rolled back and run again (at most 5 times):
 *   units have no effect outside the port until they resolve.
 * - `putDevice` is a compare-and-set on `generation` (ABORTED on a miss).
 * - Device events are buffered by the unit and written just before COMMIT
 *   under one advisory lock held to the end of the transaction, so revisions
 *   are in commit order: a watcher that read up to R never later finds a
 *   committed event ≤ R.
 * - Read-only units run REPEATABLE READ, READ ONLY: one consistent snapshot.
 */
import pg from 'pg';
import { BerthError } from '../../../errors.js';
import type { CandidateQuery } from '../domain/allocation.js';
import type { Arq } from '../domain/arq.js';
import type { DeviceRecord } from '../domain/device-state.js';
import type { MediaState } from '../domain/media.js';
import type { Profile } from '../domain/profile.js';
import { UseCaseStore, type UseCaseStoreOptions } from '../usecases/use-case-store.js';
import { PG_MIGRATIONS } from './pg-migrations.js';
import type {
  CleanupEvent,
  CleanupJob,
  DeviceEvent,
  DeviceRef,
  HostRecord,
  InstanceDevices,
  LeasedHost,
  LinkLeases,
  MigrationRecord,
} from './store.js';
import type {
  DeviceCount,
  DeviceQuery,
  IdempotencyRecord,
  PruneQuery,
  ReadOptions,
  ReadUnit,
  TransactionRunner,
  UnitOfWork,
} from './unit-of-work.js';

export interface PgStoreOptions extends UseCaseStoreOptions {
  /** Connections in the pool (default 10). */
  poolSize?: number;
}

/** The Store over PostgreSQL; `db` is the backend. */
export type PgStore = UseCaseStore<PgDatabase>;

/** Whether `--db` names a PostgreSQL database rather than a SQLite file. */
export const isPostgresUrl = (db: string): boolean => /^postgres(ql)?:\/\//.test(db);

/** Open (creating the schema and migrating if needed) a store on a `postgres://` URL. */
export async function openPgStore(url: string, options: PgStoreOptions = {}): Promise<PgStore> {
  const db = new PgDatabase(url, options);
  try {
    await db.migrate();
  } catch (err) {
    await db.close();
    throw err;
  }
  return new UseCaseStore(db, options);
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

export class PgDatabase implements TransactionRunner {
  private readonly pool: pg.Pool;
  private closed = false;
  private readonly inflight = new Set<Promise<unknown>>();
  readonly where: string;
  private readonly url: string;
  private readonly changeListeners: Array<() => void> = [];
  private listener: pg.Client | null = null;
  private relisten: NodeJS.Timeout | null = null;

  constructor(url: string, options: { poolSize?: number } = {}) {
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
  }

  /** Applies missing migrations, once even when several replicas start together. */
  async migrate(): Promise<void> {
    await this.withClient(async (client) => {
      await client.query('BEGIN');
      try {
        await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
        await client.query(
          'CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)',
        );
        const done = new Set(
          (await client.query<{ version: number }>('SELECT version FROM schema_migrations')).rows.map(
            (r) => r.version,
          ),
        );
        for (const m of PG_MIGRATIONS) {
          if (done.has(m.version)) continue;
          await client.query(m.sql);
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

  read<T>(fn: (uow: ReadUnit) => Promise<T>): Promise<T> {
    return this.track(() => this.unit(fn, false));
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
    await this.pool.end();
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
    // While checked out, the pool no longer listens for the client's errors: a
    // connection the server drops (a restart, a failover) must fail this unit's
    // query — which it does — not the whole process as an unhandled 'error'.
    const ignore = () => {};
    client.on('error', ignore);
    try {
      return await fn(client);
    } catch (err) {
      throw this.translate(err);
    } finally {
      client.removeListener('error', ignore);
      client.release();
    }
  }

  private async unit<T>(fn: (uow: PgUnit) => Promise<T>, writable: boolean): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.withClient(async (client) => {
          const unit = new PgUnit(client, writable);
          await client.query(writable ? 'BEGIN' : 'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
          try {
            const result = await fn(unit);
            const commit = unit.commitSql();
            unit.end();
            await client.query(commit);
            return result;
          } catch (err) {
            unit.end();
            await client.query('ROLLBACK').catch(() => {});
            throw err;
          }
        });
      } catch (err) {
        const code = (err as { pgCode?: string }).pgCode;
        if (code && TRANSIENT.has(code) && attempt < MAX_ATTEMPTS) continue;
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
    if (typeof code === 'string' && /^E[A-Z]+$/.test(code)) {
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
 * A unit's statements are prepared once per connection and then only bound
 * and executed (a name per distinct text): PostgreSQL parses and plans each
 * once, and the scheduler sends less per call — +15–28% binds/s in a 64-client
 * loop (bench/README.md). The texts are Berth's own, a bounded set (the
 * device query's optional filters give the most variants); past MAX_STATEMENTS
 * a new text runs unnamed, so nothing can grow without end.
 */
const STATEMENTS = new Map<string, string>();
const MAX_STATEMENTS = 500;

function statementName(sql: string): { name?: string } {
  let name = STATEMENTS.get(sql);
  if (name === undefined) {
    if (STATEMENTS.size >= MAX_STATEMENTS) return {};
    name = `berth_${STATEMENTS.size + 1}`;
    STATEMENTS.set(sql, name);
  }
  return { name };
}

type Row = { record: string };
type LeaseRow = { host: string; record: string };

const leasedHosts = (rows: LeaseRow[]): LeasedHost[] =>
  rows.map((r) => {
    const h = JSON.parse(r.record) as HostRecord;
    return {
      host: r.host,
      endpoint: h.endpoint,
      features: h.features,
      connected: h.connected,
      lastSeen: h.lastSeen,
    };
  });
type ArqRow = { record: string; guest_address: string | null };

const toArq = (r: ArqRow): Arq => ({
  ...(JSON.parse(r.record) as Arq),
  guestAddress: r.guest_address ?? null,
});

const parse = <T>(row: Row | undefined): T | null => (row ? (JSON.parse(row.record) as T) : null);

/** One unit's view of its connection; refuses use after the unit ended (and writes when read-only). */
class PgUnit implements UnitOfWork {
  private open = true;
  /** Whether the unit wrote anything (then its commit notifies the other schedulers). */
  wrote = false;
  private readonly events: Array<{ device: DeviceRecord; removed: boolean }> = [];

  constructor(
    private readonly client: pg.PoolClient,
    private readonly writable: boolean,
  ) {}

  end(): void {
    this.open = false;
  }

  private async q<R extends pg.QueryResultRow>(
    sql: string,
    params: unknown[] = [],
  ): Promise<pg.QueryResult<R>> {
    if (!this.open) throw new BerthError('INTERNAL', 'a unit of work was used after it ended');
    return this.client.query<R>({ ...statementName(sql), text: sql, values: params });
  }

  private async w<R extends pg.QueryResultRow>(
    sql: string,
    params: unknown[] = [],
  ): Promise<pg.QueryResult<R>> {
    this.assertWritable();
    this.wrote = true;
    return this.q<R>(sql, params);
  }

  private assertWritable(): void {
    if (!this.writable) throw new BerthError('INTERNAL', 'a read-only unit of work tried to write');
  }

  /** ` FOR UPDATE` when asked for in a read-write unit (a snapshot locks nothing). */
  private lock(opts?: ReadOptions): string {
    return opts?.forUpdate && this.writable ? ' FOR UPDATE' : '';
  }

  private async one<T>(sql: string, params: unknown[]): Promise<T | null> {
    return parse<T>((await this.q<Row>(sql, params)).rows[0]);
  }

  private async all<T>(sql: string, params: unknown[] = []): Promise<T[]> {
    return (await this.q<Row>(sql, params)).rows.map((r) => JSON.parse(r.record) as T);
  }

  /**
   * How the unit ends, in one round trip: its device events under the event
   * lock held to COMMIT (revisions in commit order), the notification the
   * other schedulers get at COMMIT (and only then), and COMMIT. One string
   * (the simple query protocol, values escaped by the driver) so the serial
   * section under the lock costs one round trip and the WAL flush, not one
   * round trip per statement while this process serves other requests; a
   * statement that fails stops the rest and the unit is rolled back.
   */
  commitSql(): string {
    const parts: string[] = [];
    if (this.events.length > 0) {
      const lit = (v: string) => this.client.escapeLiteral(v);
      const rows = this.events
        .splice(0)
        .map(
          (e) =>
            `(${lit(e.device.uuid)}, ${e.removed ? 'TRUE' : 'FALSE'}, ${lit(JSON.stringify(e.device))}, ${lit(e.device.updatedAt)})`,
        );
      parts.push(`SELECT pg_advisory_xact_lock(${EVENT_LOCK})`);
      parts.push(`INSERT INTO device_events (device_uuid, removed, record, at) VALUES ${rows.join(', ')}`);
    }
    if (this.wrote) parts.push(`NOTIFY ${CHANGES_CHANNEL}`);
    parts.push('COMMIT');
    return parts.join('; ');
  }

  // --- hosts ---------------------------------------------------------------

  host(name: string, opts?: ReadOptions): Promise<HostRecord | null> {
    return this.one(`SELECT record FROM hosts WHERE name = $1${this.lock(opts)}`, [name]);
  }

  hosts(): Promise<HostRecord[]> {
    return this.all('SELECT record FROM hosts ORDER BY name');
  }

  async deviceCount(host: string): Promise<number> {
    return (await this.q<{ n: number }>('SELECT COUNT(*) AS n FROM devices WHERE host = $1', [host])).rows[0]!
      .n;
  }

  async putHost(h: HostRecord): Promise<void> {
    await this.w(
      'INSERT INTO hosts (name, record) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET record = excluded.record',
      [h.name, JSON.stringify(h)],
    );
  }

  async deleteHost(name: string): Promise<void> {
    await this.w('DELETE FROM hosts WHERE name = $1', [name]);
  }

  // --- devices -------------------------------------------------------------

  device(ref: DeviceRef, opts?: ReadOptions): Promise<DeviceRecord | null> {
    return 'uuid' in ref
      ? this.one(`SELECT record FROM devices WHERE uuid = $1${this.lock(opts)}`, [ref.uuid])
      : this.one(`SELECT record FROM devices WHERE host = $1 AND address = $2${this.lock(opts)}`, [
          ref.host,
          ref.address,
        ]);
  }

  devices(query: DeviceQuery, opts?: ReadOptions): Promise<DeviceRecord[]> {
    const where: string[] = [];
    const params: unknown[] = [];
    const p = (v: unknown) => {
      params.push(v);
      return `$${params.length}`;
    };
    if (query.host) where.push(`host = ${p(query.host)}`);
    if (query.type) where.push(`type = ${p(query.type)}`);
    if (query.state) where.push(`device_state = ${p(query.state)}`);
    if (query.resourceClass) where.push(`resource_class = ${p(query.resourceClass)}`);
    if (query.mediaKey) where.push(`media_key = ${p(query.mediaKey)}`);
    if (query.states) where.push(`device_state = ANY(${p([...query.states])})`);
    if (query.after) where.push(`(host, address) > (${p(query.after.host)}, ${p(query.after.address)})`);
    let sql = `SELECT record FROM devices ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY host, address`;
    if (query.limit !== undefined) sql += ` LIMIT ${p(query.limit)}`;
    return this.all(sql + this.lock(opts), params);
  }

  allocationCandidates(query: CandidateQuery, opts?: ReadOptions): Promise<DeviceRecord[]> {
    return 'resourceClass' in query
      ? this.all(
          `SELECT record FROM devices WHERE host = $1 AND resource_class = $2 AND device_state = 'available'
             ORDER BY host, address${this.lock(opts)}`,
          [query.host, query.resourceClass],
        )
      : this.all(
          `SELECT record FROM devices WHERE host = $1 AND vendor_id = $2 AND product_id = $3
             AND device_state = 'available' ORDER BY host, address${this.lock(opts)}`,
          [query.host, query.vendorId, query.productId],
        );
  }

  async busyIommuGroups(host: string): Promise<number[]> {
    const r = await this.q<{ g: number }>(
      `SELECT DISTINCT iommu_group AS g FROM devices WHERE host = $1 AND iommu_group IS NOT NULL
         AND device_state IN ('allocated', 'pending_cleaning', 'cleaning')`,
      [host],
    );
    return r.rows.map((x) => x.g);
  }

  async deviceCounts(): Promise<DeviceCount[]> {
    return (
      await this.q<DeviceCount>(
        'SELECT host, type, device_state AS state, COUNT(*) AS count FROM devices GROUP BY host, type, device_state',
      )
    ).rows;
  }

  async putDevice(rec: DeviceRecord, previousGeneration: number | null): Promise<void> {
    const values = [
      rec.uuid,
      rec.host,
      rec.address,
      rec.type,
      rec.resourceClass,
      rec.vendorId,
      rec.productId,
      rec.iommuGroup,
      rec.deviceState,
      rec.generation,
      JSON.stringify(rec),
      rec.media?.key || null,
    ];
    const r =
      previousGeneration === null
        ? await this.w(
            `INSERT INTO devices (uuid, host, address, type, resource_class, vendor_id, product_id, iommu_group,
               device_state, generation, record, media_key) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
             ON CONFLICT DO NOTHING`,
            values,
          )
        : await this.w(
            `UPDATE devices SET host = $2, address = $3, type = $4, resource_class = $5, vendor_id = $6,
               product_id = $7, iommu_group = $8, device_state = $9, generation = $10, record = $11,
               media_key = $12
             WHERE uuid = $1 AND generation = $13`,
            [...values, previousGeneration],
          );
    if (r.rowCount === 0) {
      throw new BerthError(
        'ABORTED',
        `device ${rec.uuid} (${rec.host} ${rec.address}) changed while it was being written; retry`,
        { reason: 'CONCURRENT_UPDATE', metadata: { device_uuid: rec.uuid } },
      );
    }
  }

  async appendDeviceEvent(device: DeviceRecord, removed = false): Promise<void> {
    this.assertWritable();
    this.wrote = true;
    this.events.push({ device: structuredClone(device), removed });
  }

  // --- media ---------------------------------------------------------------

  media(key: string, opts?: ReadOptions): Promise<MediaState | null> {
    return this.one(`SELECT record FROM media WHERE key = $1${this.lock(opts)}`, [key]);
  }

  async putMedia(m: MediaState): Promise<void> {
    await this.w(
      'INSERT INTO media (key, record) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET record = excluded.record',
      [m.key, JSON.stringify(m)],
    );
  }

  async deleteDevice(uuid: string): Promise<void> {
    await this.w('DELETE FROM devices WHERE uuid = $1', [uuid]);
  }

  // --- cleanup -------------------------------------------------------------

  cleanupJob(jobId: string, opts?: ReadOptions): Promise<CleanupJob | null> {
    return this.one(`SELECT record FROM cleanup_jobs WHERE job_id = $1${this.lock(opts)}`, [jobId]);
  }

  latestCleanupJob(deviceUuid: string): Promise<CleanupJob | null> {
    return this.one('SELECT record FROM cleanup_jobs WHERE device_uuid = $1 ORDER BY seq DESC LIMIT 1', [
      deviceUuid,
    ]);
  }

  async cleanupEvents(jobId: string, afterSequence: number): Promise<CleanupEvent[]> {
    const r = await this.q<{ event: string }>(
      'SELECT event FROM cleanup_events WHERE job_id = $1 AND sequence > $2 ORDER BY sequence',
      [jobId, afterSequence],
    );
    return r.rows.map((x) => JSON.parse(x.event) as CleanupEvent);
  }

  async putCleanupJob(j: CleanupJob): Promise<void> {
    await this.w(
      `INSERT INTO cleanup_jobs (job_id, device_uuid, state, finished_at, record) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (job_id) DO UPDATE SET state = excluded.state, finished_at = excluded.finished_at,
           record = excluded.record`,
      [j.jobId, j.deviceUuid, j.state, j.finishedAt, JSON.stringify(j)],
    );
  }

  async addCleanupEvent(ev: CleanupEvent): Promise<boolean> {
    const r = await this.w(
      'INSERT INTO cleanup_events (job_id, sequence, event) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING',
      [ev.jobId, ev.sequence, JSON.stringify(ev)],
    );
    return (r.rowCount ?? 0) > 0;
  }

  // --- profiles ------------------------------------------------------------

  profile(nameOrUuid: string, opts?: ReadOptions): Promise<Profile | null> {
    return this.one(`SELECT record FROM profiles WHERE name = $1 OR uuid = $1${this.lock(opts)}`, [
      nameOrUuid,
    ]);
  }

  profiles(): Promise<Profile[]> {
    return this.all('SELECT record FROM profiles ORDER BY name');
  }

  async insertProfile(p: Profile): Promise<void> {
    await this.w('INSERT INTO profiles (name, uuid, record) VALUES ($1, $2, $3)', [
      p.name,
      p.uuid,
      JSON.stringify(p),
    ]);
  }

  async deleteProfile(name: string): Promise<boolean> {
    return ((await this.w('DELETE FROM profiles WHERE name = $1', [name])).rowCount ?? 0) > 0;
  }

  // --- ARQs ----------------------------------------------------------------

  async arq(uuid: string, opts?: ReadOptions): Promise<Arq | null> {
    const r = await this.q<ArqRow>(
      `SELECT record, guest_address FROM arqs WHERE uuid = $1${this.lock(opts)}`,
      [uuid],
    );
    return r.rows[0] ? toArq(r.rows[0]) : null;
  }

  async arqs(filter: { instanceUuid?: string }, opts?: ReadOptions): Promise<Arq[]> {
    const r = filter.instanceUuid
      ? await this.q<ArqRow>(
          `SELECT record, guest_address FROM arqs WHERE instance_uuid = $1 ORDER BY seq${this.lock(opts)}`,
          [filter.instanceUuid],
        )
      : await this.q<ArqRow>(`SELECT record, guest_address FROM arqs ORDER BY seq${this.lock(opts)}`);
    return r.rows.map(toArq);
  }

  async putArq(a: Arq): Promise<void> {
    await this.w(
      `INSERT INTO arqs (uuid, instance_uuid, device_uuid, state, guest_address, record)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (uuid) DO UPDATE SET instance_uuid = excluded.instance_uuid,
           device_uuid = excluded.device_uuid, state = excluded.state,
           guest_address = excluded.guest_address, record = excluded.record`,
      [a.uuid, a.instanceUuid, a.deviceUuid, a.state, a.guestAddress ?? null, JSON.stringify(a)],
    );
  }

  async deleteArq(uuid: string): Promise<void> {
    await this.w('DELETE FROM arqs WHERE uuid = $1', [uuid]);
  }

  async lockInstance(instanceUuid: string): Promise<void> {
    await this.w('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [`instance:${instanceUuid}`]);
  }

  // --- migrations ----------------------------------------------------------

  migration(uuid: string, opts?: ReadOptions): Promise<MigrationRecord | null> {
    return this.one(`SELECT record FROM migrations WHERE uuid = $1${this.lock(opts)}`, [uuid]);
  }

  plannedMigrations(instanceUuid: string, opts?: ReadOptions): Promise<MigrationRecord[]> {
    return this.all(
      `SELECT record FROM migrations WHERE instance_uuid = $1 AND state = 'planned' ORDER BY seq${this.lock(opts)}`,
      [instanceUuid],
    );
  }

  async putMigration(m: MigrationRecord): Promise<void> {
    await this.w(
      `INSERT INTO migrations (uuid, instance_uuid, state, record) VALUES ($1, $2, $3, $4)
         ON CONFLICT (uuid) DO UPDATE SET state = excluded.state, record = excluded.record`,
      [m.uuid, m.instanceUuid, m.state, JSON.stringify(m)],
    );
  }

  // --- instances -----------------------------------------------------------

  instanceDevices(instanceUuid: string, opts?: ReadOptions): Promise<InstanceDevices | null> {
    return this.one(`SELECT record FROM instance_devices WHERE instance_uuid = $1${this.lock(opts)}`, [
      instanceUuid,
    ]);
  }

  async putInstanceDevices(instanceUuid: string, devices: InstanceDevices): Promise<void> {
    await this.w(
      `INSERT INTO instance_devices (instance_uuid, record) VALUES ($1, $2)
         ON CONFLICT (instance_uuid) DO UPDATE SET record = excluded.record`,
      [instanceUuid, JSON.stringify(devices)],
    );
  }

  // --- idempotency keys ----------------------------------------------------

  async idempotencyKey(key: string, opts?: ReadOptions): Promise<IdempotencyRecord | null> {
    const r = await this.q<IdempotencyRecord>(
      `SELECT fingerprint, result FROM idempotency_keys WHERE key = $1${this.lock(opts)}`,
      [key],
    );
    return r.rows[0] ?? null;
  }

  async putIdempotencyKey(key: string, record: IdempotencyRecord, createdAt: string): Promise<void> {
    await this.w(
      'INSERT INTO idempotency_keys (key, fingerprint, result, created_at) VALUES ($1, $2, $3, $4)',
      [key, record.fingerprint, record.result, createdAt],
    );
  }

  // --- device event log ----------------------------------------------------

  async currentRevision(): Promise<number> {
    return (
      (await this.q<{ r: number | null }>('SELECT MAX(revision) AS r FROM device_events')).rows[0]?.r ?? 0
    );
  }

  async eventsSince(revision: number, limit: number): Promise<DeviceEvent[]> {
    const r = await this.q<{ revision: number; removed: boolean; record: string }>(
      'SELECT revision, removed, record FROM device_events WHERE revision > $1 ORDER BY revision LIMIT $2',
      [revision, limit],
    );
    return r.rows.map((x) => ({
      revision: x.revision,
      removed: x.removed,
      device: JSON.parse(x.record) as DeviceRecord,
    }));
  }

  async compactedRevision(): Promise<number> {
    const r = await this.q<{ value: number }>(
      "SELECT value FROM retention_marks WHERE name = 'device_events'",
    );
    return r.rows[0]?.value ?? 0;
  }

  // --- retention -----------------------------------------------------------

  async pruneDeviceEvents(q: PruneQuery): Promise<number> {
    const newest = await this.currentRevision();
    const rows = (
      await this.q<{ revision: number; at: string }>(
        'SELECT revision, at FROM device_events WHERE revision < $1 ORDER BY revision LIMIT $2',
        [newest, q.limit],
      )
    ).rows;
    const beyondCap = newest - q.keepNewest;
    let upTo = 0;
    for (const r of rows) {
      if (r.at >= q.before && r.revision > beyondCap) break;
      upTo = r.revision;
    }
    if (upTo === 0) return 0;
    const removed = (await this.w('DELETE FROM device_events WHERE revision <= $1', [upTo])).rowCount ?? 0;
    await this.w(
      `INSERT INTO retention_marks (name, value) VALUES ('device_events', $1)
         ON CONFLICT (name) DO UPDATE SET value = GREATEST(retention_marks.value, excluded.value)`,
      [upTo],
    );
    return removed;
  }

  async pruneCleanupJobs(q: PruneQuery): Promise<number> {
    const finished = (
      await this.q<{ n: number }>('SELECT COUNT(*) AS n FROM cleanup_jobs WHERE finished_at IS NOT NULL')
    ).rows[0]!.n;
    const overCap = Math.max(0, finished - q.keepNewest);
    const rows = (
      await this.q<{ jobId: string; finishedAt: string }>(
        `SELECT j.job_id AS "jobId", j.finished_at AS "finishedAt" FROM cleanup_jobs j
          WHERE j.finished_at IS NOT NULL
            AND j.seq < (SELECT MAX(k.seq) FROM cleanup_jobs k WHERE k.device_uuid = j.device_uuid)
          ORDER BY j.finished_at LIMIT $1`,
        [q.limit],
      )
    ).rows;
    let removed = 0;
    for (const r of rows) {
      if (r.finishedAt >= q.before && removed >= overCap) break;
      await this.w('DELETE FROM cleanup_events WHERE job_id = $1', [r.jobId]);
      removed += (await this.w('DELETE FROM cleanup_jobs WHERE job_id = $1', [r.jobId])).rowCount ?? 0;
    }
    return removed;
  }

  async pruneIdempotencyKeys(q: PruneQuery): Promise<number> {
    const total = (await this.q<{ n: number }>('SELECT COUNT(*) AS n FROM idempotency_keys')).rows[0]!.n;
    const overCap = Math.max(0, total - q.keepNewest);
    const rows = (
      await this.q<{ key: string; createdAt: string }>(
        'SELECT key, created_at AS "createdAt" FROM idempotency_keys ORDER BY created_at LIMIT $1',
        [q.limit],
      )
    ).rows;
    let removed = 0;
    for (const r of rows) {
      if (r.createdAt >= q.before && removed >= overCap) break;
      removed += (await this.w('DELETE FROM idempotency_keys WHERE key = $1', [r.key])).rowCount ?? 0;
    }
    return removed;
  }
}
