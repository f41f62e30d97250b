/**
 * The default store backend: the unit-of-work port (unit-of-work.ts) on one
 * SQLite file through better-sqlite3. It holds rows, not rules: every use case
 * lives once in ../usecases.
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
 */

import Database from 'better-sqlite3';
import { BerthError } from '../../../errors.js';
import { classifySqliteFailure, storeDamaged } from '../../storage-faults.js';
import type { CandidateQuery } from '../domain/allocation.js';
import type { Arq } from '../domain/arq.js';
import type { DeviceRecord } from '../domain/device-state.js';
import type { MediaState } from '../domain/media.js';
import type { Profile } from '../domain/profile.js';
import { UseCaseStore, type UseCaseStoreOptions } from '../usecases/use-case-store.js';
import { MIGRATIONS } from './migrations.js';
import type {
  CleanupEvent,
  CleanupJob,
  DeviceEvent,
  DeviceRef,
  HostRecord,
  InstanceDevices,
  MigrationRecord,
} from './store.js';
import type {
  DeviceCount,
  DeviceQuery,
  IdempotencyRecord,
  PruneQuery,
  ReadUnit,
  TransactionRunner,
  UnitOfWork,
} from './unit-of-work.js';

export interface SqliteStoreOptions extends UseCaseStoreOptions {
  /** How long a writer waits for another connection's lock (ms). */
  busyTimeoutMs?: number;
}

/** The Store over SQLite; `db` is the backend. */
export type SqliteStore = UseCaseStore<SqliteDatabase>;

/** Open (creating and migrating if needed) a store on `path`. */
export async function openSqliteStore(path: string, options: SqliteStoreOptions = {}): Promise<SqliteStore> {
  return new UseCaseStore(new SqliteDatabase(path, options), options);
}

type Row = { record: string };
type ArqRow = { record: string; guest_address: string | null };

/** The guest_address column is authoritative (rows from before migration 2 lack the JSON field). */
const toArq = (r: ArqRow): Arq => ({
  ...(JSON.parse(r.record) as Arq),
  guestAddress: r.guest_address ?? null,
});

const parse = <T>(row: Row | undefined): T | null => (row ? (JSON.parse(row.record) as T) : null);

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
    options: { busyTimeoutMs?: number } = {},
  ) {
    this.connection = new Database(path);
    try {
      this.connection.pragma(`busy_timeout = ${Math.trunc(options.busyTimeoutMs ?? 5000)}`);
      this.connection.pragma('journal_mode = WAL');
      this.connection.pragma('synchronous = FULL');
      this.connection.pragma('foreign_keys = ON');
      // A damaged file is found at start, before it serves anything (issue 19).
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

  private migrate(): void {
    this.connection.exec(
      'CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)',
    );
    for (const m of MIGRATIONS) {
      this.connection
        .transaction(() => {
          if (this.stmt('SELECT 1 FROM schema_migrations WHERE version = ?').get(m.version)) return;
          this.connection.exec(m.sql);
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
      const unit = new SqliteUnit(this, false);
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
        const unit = new SqliteUnit(this, true);
        try {
          const value = await item.fn(unit);
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

const DEVICE_COLUMNS = `type = @type, resource_class = @resourceClass, vendor_id = @vendorId,
  product_id = @productId, iommu_group = @iommuGroup, device_state = @deviceState, generation = @generation,
  media_key = @mediaKey, record = @record`;

/** One unit's view of the connection; refuses use after the unit ended (and writes when read-only). */
class SqliteUnit implements UnitOfWork {
  private open = true;
  /** The JSON of the device last written, reused by its event (the hot path writes both). */
  private lastDevice: { rec: DeviceRecord; json: string } | null = null;

  constructor(
    private readonly db: SqliteDatabase,
    private readonly writable: boolean,
  ) {}

  end(): void {
    this.open = false;
  }

  private q(sql: string): Database.Statement {
    if (!this.open) throw new BerthError('INTERNAL', 'a unit of work was used after it ended');
    return this.db.stmt(sql);
  }

  private w(sql: string): Database.Statement {
    this.assertWritable();
    return this.q(sql);
  }

  private assertWritable(): void {
    if (!this.writable) throw new BerthError('INTERNAL', 'a read-only unit of work tried to write');
  }

  // --- hosts ---------------------------------------------------------------

  async host(name: string): Promise<HostRecord | null> {
    return parse(this.q('SELECT record FROM hosts WHERE name = ?').get(name) as Row | undefined);
  }

  async hosts(): Promise<HostRecord[]> {
    return (this.q('SELECT record FROM hosts ORDER BY name').all() as Row[]).map((r) => JSON.parse(r.record));
  }

  async deviceCount(host: string): Promise<number> {
    return (this.q('SELECT COUNT(*) AS n FROM devices WHERE host = ?').get(host) as { n: number }).n;
  }

  async putHost(h: HostRecord): Promise<void> {
    this.w(
      'INSERT INTO hosts (name, record) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET record = excluded.record',
    ).run(h.name, JSON.stringify(h));
  }

  // --- devices -------------------------------------------------------------

  async device(ref: DeviceRef): Promise<DeviceRecord | null> {
    const row =
      'uuid' in ref
        ? this.q('SELECT record FROM devices WHERE uuid = ?').get(ref.uuid)
        : this.q('SELECT record FROM devices WHERE host = ? AND address = ?').get(ref.host, ref.address);
    return parse(row as Row | undefined);
  }

  async devices(query: DeviceQuery): Promise<DeviceRecord[]> {
    const where: string[] = [];
    const params: unknown[] = [];
    const eq = (column: string, value: string | undefined) => {
      if (!value) return;
      where.push(`${column} = ?`);
      params.push(value);
    };
    eq('host', query.host);
    eq('type', query.type);
    eq('device_state', query.state);
    eq('resource_class', query.resourceClass);
    eq('media_key', query.mediaKey);
    if (query.states) {
      where.push(`device_state IN (${query.states.map(() => '?').join(', ')})`);
      params.push(...query.states);
    }
    if (query.after) {
      where.push('(host, address) > (?, ?)');
      params.push(query.after.host, query.after.address);
    }
    let sql = `SELECT record FROM devices ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY host, address`;
    if (query.limit !== undefined) {
      sql += ' LIMIT ?';
      params.push(query.limit);
    }
    return (this.q(sql).all(...params) as Row[]).map((r) => JSON.parse(r.record));
  }

  async allocationCandidates(query: CandidateQuery): Promise<DeviceRecord[]> {
    const rows =
      'resourceClass' in query
        ? this.q(
            `SELECT record FROM devices WHERE host = ? AND resource_class = ? AND device_state = 'available'
               ORDER BY host, address`,
          ).all(query.host, query.resourceClass)
        : this.q(
            `SELECT record FROM devices WHERE host = ? AND vendor_id = ? AND product_id = ?
               AND device_state = 'available' ORDER BY host, address`,
          ).all(query.host, query.vendorId, query.productId);
    return (rows as Row[]).map((r) => JSON.parse(r.record));
  }

  async busyIommuGroups(host: string): Promise<number[]> {
    const rows = this.q(
      `SELECT DISTINCT iommu_group AS g FROM devices WHERE host = ? AND iommu_group IS NOT NULL
         AND device_state IN ('allocated', 'pending_cleaning', 'cleaning')`,
    ).all(host) as Array<{ g: number }>;
    return rows.map((r) => r.g);
  }

  async deviceCounts(): Promise<DeviceCount[]> {
    return this.q(
      'SELECT host, type, device_state AS state, COUNT(*) AS count FROM devices GROUP BY host, type, device_state',
    ).all() as DeviceCount[];
  }

  async putDevice(rec: DeviceRecord, previousGeneration: number | null): Promise<void> {
    const json = JSON.stringify(rec);
    const params = {
      uuid: rec.uuid,
      host: rec.host,
      address: rec.address,
      type: rec.type,
      resourceClass: rec.resourceClass,
      vendorId: rec.vendorId,
      productId: rec.productId,
      iommuGroup: rec.iommuGroup,
      deviceState: rec.deviceState,
      generation: rec.generation,
      mediaKey: rec.media?.key || null,
      record: json,
    };
    const changes =
      previousGeneration === null
        ? this.w(
            `INSERT INTO devices (uuid, host, address, type, resource_class, vendor_id, product_id, iommu_group,
               device_state, generation, media_key, record)
             VALUES (@uuid, @host, @address, @type, @resourceClass, @vendorId, @productId, @iommuGroup,
               @deviceState, @generation, @mediaKey, @record)
             ON CONFLICT DO NOTHING`,
          ).run(params).changes
        : this.w(
            `UPDATE devices SET ${DEVICE_COLUMNS} WHERE uuid = @uuid AND generation = @previousGeneration`,
          ).run({ ...params, previousGeneration }).changes;
    if (changes === 0) {
      throw new BerthError(
        'ABORTED',
        `device ${rec.uuid} (${rec.host} ${rec.address}) changed while it was being written; retry`,
        { reason: 'CONCURRENT_UPDATE', metadata: { device_uuid: rec.uuid } },
      );
    }
    this.lastDevice = { rec, json };
  }

  async appendDeviceEvent(rec: DeviceRecord, removed = false): Promise<void> {
    // AUTOINCREMENT inside the one write transaction: revisions are in commit order.
    const json = this.lastDevice?.rec === rec ? this.lastDevice.json : JSON.stringify(rec);
    this.w('INSERT INTO device_events (device_uuid, removed, record, at) VALUES (?, ?, ?, ?)').run(
      rec.uuid,
      removed ? 1 : 0,
      json,
      rec.updatedAt,
    );
  }

  async deleteDevice(uuid: string): Promise<void> {
    this.w('DELETE FROM devices WHERE uuid = ?').run(uuid);
  }

  // --- media ---------------------------------------------------------------

  async media(key: string): Promise<MediaState | null> {
    return parse(this.q('SELECT record FROM media WHERE key = ?').get(key) as Row | undefined);
  }

  async putMedia(m: MediaState): Promise<void> {
    this.w(
      'INSERT INTO media (key, record) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET record = excluded.record',
    ).run(m.key, JSON.stringify(m));
  }

  async deleteHost(name: string): Promise<void> {
    this.w('DELETE FROM hosts WHERE name = ?').run(name);
  }

  // --- cleanup -------------------------------------------------------------

  async cleanupJob(jobId: string): Promise<CleanupJob | null> {
    return parse(this.q('SELECT record FROM cleanup_jobs WHERE job_id = ?').get(jobId) as Row | undefined);
  }

  async latestCleanupJob(deviceUuid: string): Promise<CleanupJob | null> {
    return parse(
      this.q('SELECT record FROM cleanup_jobs WHERE device_uuid = ? ORDER BY rowid DESC LIMIT 1').get(
        deviceUuid,
      ) as Row | undefined,
    );
  }

  async cleanupEvents(jobId: string, afterSequence: number): Promise<CleanupEvent[]> {
    const rows = this.q(
      'SELECT event FROM cleanup_events WHERE job_id = ? AND sequence > ? ORDER BY sequence',
    ).all(jobId, afterSequence) as Array<{ event: string }>;
    return rows.map((r) => JSON.parse(r.event));
  }

  async putCleanupJob(j: CleanupJob): Promise<void> {
    this.w(
      `INSERT INTO cleanup_jobs (job_id, device_uuid, state, finished_at, record) VALUES (?, ?, ?, ?, ?)
         ON CONFLICT (job_id) DO UPDATE SET state = excluded.state, finished_at = excluded.finished_at,
           record = excluded.record`,
    ).run(j.jobId, j.deviceUuid, j.state, j.finishedAt, JSON.stringify(j));
  }

  async addCleanupEvent(ev: CleanupEvent): Promise<boolean> {
    return (
      this.w('INSERT OR IGNORE INTO cleanup_events (job_id, sequence, event) VALUES (?, ?, ?)').run(
        ev.jobId,
        ev.sequence,
        JSON.stringify(ev),
      ).changes > 0
    );
  }

  // --- profiles ------------------------------------------------------------

  async profile(nameOrUuid: string): Promise<Profile | null> {
    return parse(
      this.q('SELECT record FROM profiles WHERE name = ? OR uuid = ?').get(nameOrUuid, nameOrUuid) as
        | Row
        | undefined,
    );
  }

  async profiles(): Promise<Profile[]> {
    return (this.q('SELECT record FROM profiles ORDER BY name').all() as Row[]).map((r) =>
      JSON.parse(r.record),
    );
  }

  async insertProfile(p: Profile): Promise<void> {
    this.w('INSERT INTO profiles (name, uuid, record) VALUES (?, ?, ?)').run(
      p.name,
      p.uuid,
      JSON.stringify(p),
    );
  }

  async deleteProfile(name: string): Promise<boolean> {
    return this.w('DELETE FROM profiles WHERE name = ?').run(name).changes > 0;
  }

  // --- ARQs ----------------------------------------------------------------

  async arq(uuid: string): Promise<Arq | null> {
    const row = this.q('SELECT record, guest_address FROM arqs WHERE uuid = ?').get(uuid) as
      | ArqRow
      | undefined;
    return row ? toArq(row) : null;
  }

  async arqs(filter: { instanceUuid?: string }): Promise<Arq[]> {
    const rows = filter.instanceUuid
      ? this.q('SELECT record, guest_address FROM arqs WHERE instance_uuid = ? ORDER BY rowid').all(
          filter.instanceUuid,
        )
      : this.q('SELECT record, guest_address FROM arqs ORDER BY rowid').all();
    return (rows as ArqRow[]).map(toArq);
  }

  async putArq(a: Arq): Promise<void> {
    this.w(
      `INSERT INTO arqs (uuid, instance_uuid, device_uuid, state, guest_address, record) VALUES (?, ?, ?, ?, ?, ?)
         ON CONFLICT (uuid) DO UPDATE SET instance_uuid = excluded.instance_uuid,
           device_uuid = excluded.device_uuid, state = excluded.state,
           guest_address = excluded.guest_address, record = excluded.record`,
    ).run(a.uuid, a.instanceUuid, a.deviceUuid, a.state, a.guestAddress ?? null, JSON.stringify(a));
  }

  async deleteArq(uuid: string): Promise<void> {
    this.w('DELETE FROM arqs WHERE uuid = ?').run(uuid);
  }

  /** The unit's IMMEDIATE transaction holds the whole database: every instance is locked already. */
  async lockInstance(_instanceUuid: string): Promise<void> {
    this.assertWritable();
  }

  // --- migrations ----------------------------------------------------------

  async migration(uuid: string): Promise<MigrationRecord | null> {
    return parse(this.q('SELECT record FROM migrations WHERE uuid = ?').get(uuid) as Row | undefined);
  }

  async plannedMigrations(instanceUuid: string): Promise<MigrationRecord[]> {
    const rows = this.q(
      "SELECT record FROM migrations WHERE instance_uuid = ? AND state = 'planned' ORDER BY rowid",
    ).all(instanceUuid) as Row[];
    return rows.map((r) => JSON.parse(r.record));
  }

  async putMigration(m: MigrationRecord): Promise<void> {
    this.w(
      `INSERT INTO migrations (uuid, instance_uuid, state, record) VALUES (?, ?, ?, ?)
         ON CONFLICT (uuid) DO UPDATE SET state = excluded.state, record = excluded.record`,
    ).run(m.uuid, m.instanceUuid, m.state, JSON.stringify(m));
  }

  // --- instances -----------------------------------------------------------

  async instanceDevices(instanceUuid: string): Promise<InstanceDevices | null> {
    const d = parse<InstanceDevices>(
      this.q('SELECT record FROM instance_devices WHERE instance_uuid = ?').get(instanceUuid) as
        | Row
        | undefined,
    );
    // Records written before NICs had a devname have none.
    return d && { ...d, nics: d.nics.map((n) => ({ ...n, devname: n.devname ?? null })) };
  }

  async putInstanceDevices(instanceUuid: string, devices: InstanceDevices): Promise<void> {
    this.w(
      `INSERT INTO instance_devices (instance_uuid, record) VALUES (?, ?)
         ON CONFLICT (instance_uuid) DO UPDATE SET record = excluded.record`,
    ).run(instanceUuid, JSON.stringify(devices));
  }

  // --- idempotency keys ----------------------------------------------------

  async idempotencyKey(key: string): Promise<IdempotencyRecord | null> {
    const row = this.q('SELECT fingerprint, result FROM idempotency_keys WHERE key = ?').get(key) as
      | IdempotencyRecord
      | undefined;
    return row ?? null;
  }

  async putIdempotencyKey(key: string, record: IdempotencyRecord, createdAt: string): Promise<void> {
    this.w('INSERT INTO idempotency_keys (key, fingerprint, result, created_at) VALUES (?, ?, ?, ?)').run(
      key,
      record.fingerprint,
      record.result,
      createdAt,
    );
  }

  // --- device event log ----------------------------------------------------

  async currentRevision(): Promise<number> {
    return (this.q('SELECT MAX(revision) AS r FROM device_events').get() as { r: number | null }).r ?? 0;
  }

  async eventsSince(revision: number, limit: number): Promise<DeviceEvent[]> {
    const rows = this.q(
      'SELECT revision, removed, record FROM device_events WHERE revision > ? ORDER BY revision LIMIT ?',
    ).all(revision, limit) as Array<{ revision: number; removed: number; record: string }>;
    return rows.map((r) => ({
      revision: r.revision,
      removed: r.removed === 1,
      device: JSON.parse(r.record) as DeviceRecord,
    }));
  }

  async compactedRevision(): Promise<number> {
    const row = this.q("SELECT value FROM retention_marks WHERE name = 'device_events'").get() as
      | { value: number }
      | undefined;
    return row?.value ?? 0;
  }

  // --- retention -----------------------------------------------------------

  async pruneDeviceEvents(q: PruneQuery): Promise<number> {
    const newest = await this.currentRevision();
    // The oldest `limit` rows, then the prefix that may go: O(limit), no scan of the log.
    const rows = this.q(
      'SELECT revision, at FROM device_events WHERE revision < ? ORDER BY revision LIMIT ?',
    ).all(newest, q.limit) as Array<{ revision: number; at: string }>;
    const beyondCap = newest - q.keepNewest;
    let upTo = 0;
    for (const r of rows) {
      if (r.at >= q.before && r.revision > beyondCap) break;
      upTo = r.revision;
    }
    if (upTo === 0) return 0;
    const removed = this.w('DELETE FROM device_events WHERE revision <= ?').run(upTo).changes;
    this.w(
      `INSERT INTO retention_marks (name, value) VALUES ('device_events', ?)
         ON CONFLICT (name) DO UPDATE SET value = MAX(value, excluded.value)`,
    ).run(upTo);
    return removed;
  }

  async pruneCleanupJobs(q: PruneQuery): Promise<number> {
    const finished = (
      this.q('SELECT COUNT(*) AS n FROM cleanup_jobs WHERE finished_at IS NOT NULL').get() as { n: number }
    ).n;
    const overCap = Math.max(0, finished - q.keepNewest);
    // Oldest finished first; a device's latest job (highest rowid) always stays.
    const rows = this.q(
      `SELECT j.job_id AS jobId, j.finished_at AS finishedAt FROM cleanup_jobs j
        WHERE j.finished_at IS NOT NULL
          AND j.rowid < (SELECT MAX(k.rowid) FROM cleanup_jobs k WHERE k.device_uuid = j.device_uuid)
        ORDER BY j.finished_at LIMIT ?`,
    ).all(q.limit) as Array<{ jobId: string; finishedAt: string }>;
    let removed = 0;
    for (const r of rows) {
      if (r.finishedAt >= q.before && removed >= overCap) break;
      this.w('DELETE FROM cleanup_events WHERE job_id = ?').run(r.jobId);
      removed += this.w('DELETE FROM cleanup_jobs WHERE job_id = ?').run(r.jobId).changes;
    }
    return removed;
  }

  async pruneIdempotencyKeys(q: PruneQuery): Promise<number> {
    const total = (this.q('SELECT COUNT(*) AS n FROM idempotency_keys').get() as { n: number }).n;
    const overCap = Math.max(0, total - q.keepNewest);
    const rows = this.q(
      'SELECT key, created_at AS createdAt FROM idempotency_keys ORDER BY created_at LIMIT ?',
    ).all(q.limit) as Array<{ key: string; createdAt: string }>;
    let removed = 0;
    for (const r of rows) {
      if (r.createdAt >= q.before && removed >= overCap) break;
      removed += this.w('DELETE FROM idempotency_keys WHERE key = ?').run(r.key).changes;
    }
    return removed;
  }
}
