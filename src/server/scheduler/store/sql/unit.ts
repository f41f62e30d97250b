/**
 * The unit-of-work port (../unit-of-work.ts) written ONCE in SQL, for every
 * backend: a backend gives it an executor on the unit's transaction and a
 * dialect (./dialect.ts), and keeps only what is its own — connections and
 * transactions, group commit or a pool, retries, numbering the unit's device
 * events at its commit, notifications (../sqlite-store.ts, ../pg-store.ts).
 *
 * Synchronous where the driver is: better-sqlite3 answers a statement with
 * its rows, PostgreSQL with a promise of them. The executor returns either
 * (`Maybe`), and each method continues with `andThen`, which calls on at once
 * when it holds a value: on SQLite a port method does all its work before it
 * returns its (already settled) promise, as a unit running to its end inside
 * the open transaction requires, with no extra turn of the microtask queue.
 *
 * Records are returned as stored (JSON parsed, nothing completed): an old
 * record lacking newer fields is brought up to date in the use-case layer
 * (usecases/upgrade.ts), once for every backend.
 */

import { BerthError } from '../../../../errors.js';
import type { CandidateQuery } from '../../domain/allocation.js';
import type { Arq } from '../../domain/arq.js';
import type { AgentKeyRecord, CertificateRecord } from '../../domain/certificate.js';
import type { CleanupEvent, CleanupJob } from '../../domain/cleanup.js';
import type { DeviceRecord } from '../../domain/device-state.js';
import type { HostRecord } from '../../domain/host.js';
import type { InstanceDevices } from '../../domain/instance.js';
import type { DeviceEvent, DeviceRef } from '../../domain/inventory.js';
import type { MediaState } from '../../domain/media.js';
import type { MigrationRecord } from '../../domain/migration.js';
import type { Profile } from '../../domain/profile.js';
import type {
  DeviceCount,
  DeviceQuery,
  EventAge,
  FinishedJob,
  FinishedJobKey,
  IdempotencyKeyAge,
  IdempotencyRecord,
  ReadOptions,
  UnitOfWork,
} from '../../usecases/unit-of-work.js';
import type { Dialect } from './dialect.js';
import * as claims from './nova-claims.js';

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
}

/** A device event the unit appended: the backend numbers and writes it when the unit ends. */
export interface PendingEvent {
  deviceUuid: string;
  removed: boolean;
  /** The device record, JSON. */
  record: string;
  at: string;
}

type Row = { record: string };

const record = <T>(row: Row | undefined): T | null => (row ? (JSON.parse(row.record) as T) : null);
const records = <T>(rows: Row[]): T[] => rows.map((r) => JSON.parse(r.record) as T);

/** One unit's view of its transaction; refuses use after the unit ended (and writes when read-only). */
export class SqlUnit implements UnitOfWork {
  private open = true;
  /** Whether the unit wrote anything (PostgreSQL then notifies the other schedulers at commit). */
  wrote = false;
  private readonly events: PendingEvent[] = [];
  /** The JSON of the device last written, reused by its event (the hot path writes both). */
  private lastDevice: { rec: DeviceRecord; json: string } | null = null;

  constructor(
    private readonly x: Executor,
    private readonly d: Dialect,
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

  private r(): Executor {
    if (!this.open) throw new BerthError('INTERNAL', 'a unit of work was used after it ended');
    return this.x;
  }

  private w(): Executor {
    if (!this.writable) throw new BerthError('INTERNAL', 'a read-only unit of work tried to write');
    const x = this.r();
    this.wrote = true;
    return x;
  }

  /** A write whose result is not used: sent with the next statement where the backend can (Executor.later). */
  private put(sql: string, params: readonly unknown[]): Maybe<void> {
    const x = this.w();
    if (x.later) return x.later(sql, params);
    return andThen(x.run(sql, params), () => undefined);
  }

  /** The dialect's lock clause when asked for in a read-write unit (a snapshot locks nothing). */
  private lock(opts?: ReadOptions): string {
    return opts?.forUpdate && this.writable ? this.d.forUpdate : '';
  }

  private one<T>(sql: string, params: readonly unknown[]): Maybe<T | null> {
    return andThen(this.r().get<Row>(sql, params), record<T>);
  }

  private all<T>(sql: string, params: readonly unknown[] = []): Maybe<T[]> {
    return andThen(this.r().all<Row>(sql, params), records<T>);
  }

  private count(sql: string, params: readonly unknown[] = []): Maybe<number> {
    return andThen(this.r().get<{ n: number }>(sql, params), (row) => row!.n);
  }

  // --- hosts ---------------------------------------------------------------

  async host(name: string, opts?: ReadOptions): Promise<HostRecord | null> {
    return this.one(`SELECT record FROM hosts WHERE name = ?${this.lock(opts)}`, [name]);
  }

  async hosts(page?: { after: string; limit: number }): Promise<HostRecord[]> {
    return page
      ? this.all('SELECT record FROM hosts WHERE name > ? ORDER BY name LIMIT ?', [page.after, page.limit])
      : this.all('SELECT record FROM hosts ORDER BY name');
  }

  async deviceCount(host: string): Promise<number> {
    return this.count('SELECT COUNT(*) AS n FROM devices WHERE host = ?', [host]);
  }

  async putHost(h: HostRecord): Promise<void> {
    await this.put(
      'INSERT INTO hosts (name, record) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET record = excluded.record',
      [h.name, JSON.stringify(h)],
    );
  }

  async deleteHost(name: string): Promise<void> {
    await this.put('DELETE FROM hosts WHERE name = ?', [name]);
  }

  // --- devices -------------------------------------------------------------

  async device(ref: DeviceRef, opts?: ReadOptions): Promise<DeviceRecord | null> {
    return 'uuid' in ref
      ? this.one(`SELECT record FROM devices WHERE uuid = ?${this.lock(opts)}`, [ref.uuid])
      : this.one(`SELECT record FROM devices WHERE host = ? AND address = ?${this.lock(opts)}`, [
          ref.host,
          ref.address,
        ]);
  }

  async devices(query: DeviceQuery, opts?: ReadOptions): Promise<DeviceRecord[]> {
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
    if (query.afterUuid !== undefined) {
      where.push('uuid > ?');
      params.push(query.afterUuid);
    }
    const order = query.afterUuid !== undefined ? 'uuid' : 'host, address';
    let sql = `SELECT record FROM devices ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY ${order}`;
    if (query.limit !== undefined) {
      sql += ' LIMIT ?';
      params.push(query.limit);
    }
    return this.all(sql + this.lock(opts), params);
  }

  async allocationCandidates(query: CandidateQuery, opts?: ReadOptions): Promise<DeviceRecord[]> {
    return 'resourceClass' in query
      ? this.all(
          `SELECT record FROM devices WHERE host = ? AND resource_class = ? AND device_state = 'available'
             ORDER BY host, address${this.lock(opts)}`,
          [query.host, query.resourceClass],
        )
      : this.all(
          `SELECT record FROM devices WHERE host = ? AND vendor_id = ? AND product_id = ?
             AND device_state = 'available' ORDER BY host, address${this.lock(opts)}`,
          [query.host, query.vendorId, query.productId],
        );
  }

  async busyIommuGroups(host: string): Promise<number[]> {
    return andThen(
      this.r().all<{ g: number }>(
        `SELECT DISTINCT iommu_group AS g FROM devices WHERE host = ? AND iommu_group IS NOT NULL
           AND device_state IN ('allocated', 'pending_cleaning', 'cleaning')`,
        [host],
      ),
      (rows) => rows.map((r) => r.g),
    );
  }

  async deviceCounts(): Promise<DeviceCount[]> {
    return this.r().all<DeviceCount>(
      'SELECT type, device_state AS state, resource_class AS "resourceClass", COUNT(*) AS count FROM devices GROUP BY type, device_state, resource_class',
    );
  }

  async putDevice(rec: DeviceRecord, previousGeneration: number | null): Promise<void> {
    const json = JSON.stringify(rec);
    // Not host and address: a uuid names one (host, address) for good, and
    // SQLite rewrites the entries of every index whose columns an UPDATE sets.
    const columns = [
      rec.type,
      rec.resourceClass,
      rec.vendorId,
      rec.productId,
      rec.iommuGroup,
      rec.deviceState,
      rec.generation,
      rec.media?.key || null,
      json,
    ];
    const changes =
      previousGeneration === null
        ? this.w().run(
            `INSERT INTO devices (uuid, host, address, type, resource_class, vendor_id, product_id, iommu_group,
               device_state, generation, media_key, record) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT DO NOTHING`,
            [rec.uuid, rec.host, rec.address, ...columns],
          )
        : this.w().run(
            `UPDATE devices SET type = ?, resource_class = ?, vendor_id = ?, product_id = ?, iommu_group = ?,
               device_state = ?, generation = ?, media_key = ?, record = ?
             WHERE uuid = ? AND generation = ?`,
            [...columns, rec.uuid, previousGeneration],
          );
    return andThen(changes, (n) => {
      if (n === 0) {
        throw new BerthError(
          'ABORTED',
          `device ${rec.uuid} (${rec.host} ${rec.address}) changed while it was being written; retry`,
          { reason: 'CONCURRENT_UPDATE', metadata: { device_uuid: rec.uuid } },
        );
      }
      this.lastDevice = { rec, json };
    });
  }

  async appendDeviceEvent(rec: DeviceRecord, removed = false): Promise<void> {
    this.w();
    // Taken now: what the log says is the device as it was at this call.
    const json = this.lastDevice?.rec === rec ? this.lastDevice.json : JSON.stringify(rec);
    this.events.push({ deviceUuid: rec.uuid, removed, record: json, at: rec.updatedAt });
  }

  async deleteDevice(uuid: string): Promise<void> {
    await this.put('DELETE FROM devices WHERE uuid = ?', [uuid]);
  }

  // --- media ---------------------------------------------------------------

  async media(key: string, opts?: ReadOptions): Promise<MediaState | null> {
    return this.one(`SELECT record FROM media WHERE key = ?${this.lock(opts)}`, [key]);
  }

  async putMedia(m: MediaState): Promise<void> {
    await this.put(
      `INSERT INTO media (key, record, host) VALUES (?, ?, ?)
       ON CONFLICT (key) DO UPDATE SET record = excluded.record, host = excluded.host, forgotten = NULL`,
      [m.key, JSON.stringify(m), m.host],
    );
  }

  async reportedMediaCount(host: string): Promise<number> {
    const n = await this.count(
      `SELECT COUNT(*) AS n FROM media m WHERE m.host = ? AND m.forgotten IS NULL
         AND NOT EXISTS (SELECT 1 FROM devices d WHERE d.media_key = m.key)`,
      [host],
    );
    return Number(n);
  }

  async mediaForgotten(key: string): Promise<string | null> {
    const row = await this.r().get<{ forgotten: string | null }>(
      'SELECT forgotten FROM media WHERE key = ?',
      [key],
    );
    return row?.forgotten ?? null;
  }

  async forgetMedia(key: string, note: string): Promise<void> {
    await this.put('UPDATE media SET forgotten = ? WHERE key = ?', [note, key]);
  }

  // --- erasure certificates --------------------------------------------------

  async agentKeys(host?: string): Promise<AgentKeyRecord[]> {
    return andThen(
      this.all<AgentKeyRecord>(
        `SELECT record FROM agent_keys${host === undefined ? '' : ' WHERE host = ?'}`,
        host === undefined ? [] : [host],
      ),
      (keys) =>
        keys.sort((a, b) =>
          a.host < b.host
            ? -1
            : a.host > b.host
              ? 1
              : a.pinnedAt < b.pinnedAt
                ? -1
                : a.pinnedAt > b.pinnedAt
                  ? 1
                  : 0,
        ),
    );
  }

  async putAgentKey(k: AgentKeyRecord): Promise<void> {
    await this.w().run(
      `INSERT INTO agent_keys (host, kid, retired_at, record) VALUES (?, ?, ?, ?)
         ON CONFLICT (host, kid) DO UPDATE SET retired_at = excluded.retired_at, record = excluded.record`,
      [k.host, k.kid, k.retiredAt, JSON.stringify(k)],
    );
  }

  async lastCertificate(mediaKey: string, opts?: ReadOptions): Promise<CertificateRecord | null> {
    return this.one(
      `SELECT record FROM erasure_certificates WHERE media_key = ? ORDER BY seq DESC LIMIT 1${this.lock(opts)}`,
      [mediaKey],
    );
  }

  async certificateAt(mediaKey: string, seq: number): Promise<CertificateRecord | null> {
    return this.one('SELECT record FROM erasure_certificates WHERE media_key = ? AND seq = ?', [
      mediaKey,
      seq,
    ]);
  }

  async certificate(hash: string): Promise<CertificateRecord | null> {
    return this.one('SELECT record FROM erasure_certificates WHERE hash = ?', [hash]);
  }

  async certificates(filter: {
    deviceUuid?: string;
    jobId?: string;
    instanceUuid?: string;
  }): Promise<CertificateRecord[]> {
    const where: string[] = [];
    const params: unknown[] = [];
    for (const [column, value] of [
      ['device_uuid', filter.deviceUuid],
      ['job_id', filter.jobId],
      ['instance_uuid', filter.instanceUuid],
    ] as const) {
      if (value === undefined) continue;
      where.push(`${column} = ?`);
      params.push(value);
    }
    return this.all(
      `SELECT record FROM erasure_certificates${where.length ? ` WHERE ${where.join(' AND ')}` : ''}
         ORDER BY media_key, seq`,
      params,
    );
  }

  async putCertificate(c: CertificateRecord): Promise<boolean> {
    return andThen(
      this.w().run(
        `INSERT INTO erasure_certificates (hash, media_key, seq, host, job_id, device_uuid, instance_uuid, received_at, record)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (hash) DO NOTHING`,
        [
          c.hash,
          c.mediaKey,
          c.seq,
          c.host,
          c.jobId,
          c.deviceUuid,
          c.instanceUuid,
          c.receivedAt,
          JSON.stringify(c),
        ],
      ),
      (n) => n > 0,
    );
  }

  async deleteCertificate(hash: string): Promise<number> {
    return this.w().run('DELETE FROM erasure_certificates WHERE hash = ?', [hash]);
  }

  async oldestCertificates(
    before: string,
    limit: number,
  ): Promise<{ hash: string; mediaKey: string; seq: number }[]> {
    return andThen(
      this.r().all<{ hash: string; media_key: string; seq: number | string }>(
        'SELECT hash, media_key, seq FROM erasure_certificates WHERE received_at < ? ORDER BY received_at LIMIT ?',
        [before, limit],
      ),
      (rows) => rows.map((r) => ({ hash: r.hash, mediaKey: r.media_key, seq: Number(r.seq) })),
    );
  }

  async instanceOwner(instanceUuid: string): Promise<string | null> {
    return andThen(
      this.r().get<{ subject: string }>('SELECT subject FROM instance_owners WHERE instance_uuid = ?', [
        instanceUuid,
      ]),
      (row) => row?.subject ?? null,
    );
  }

  async putInstanceOwner(instanceUuid: string, subject: string, at: string): Promise<void> {
    await this.w().run(
      'INSERT INTO instance_owners (instance_uuid, subject, created_at) VALUES (?, ?, ?) ON CONFLICT (instance_uuid) DO NOTHING',
      [instanceUuid, subject, at],
    );
  }

  // --- cleanup -------------------------------------------------------------

  async cleanupJob(jobId: string, opts?: ReadOptions): Promise<CleanupJob | null> {
    return this.one(`SELECT record FROM cleanup_jobs WHERE job_id = ?${this.lock(opts)}`, [jobId]);
  }

  async latestCleanupJob(deviceUuid: string): Promise<CleanupJob | null> {
    return this.one(
      `SELECT record FROM cleanup_jobs WHERE device_uuid = ? ORDER BY ${this.d.creationOrder} DESC LIMIT 1`,
      [deviceUuid],
    );
  }

  async cleanupEvents(jobId: string, afterSequence: number): Promise<CleanupEvent[]> {
    return andThen(
      this.r().all<{ event: string }>(
        'SELECT event FROM cleanup_events WHERE job_id = ? AND sequence > ? ORDER BY sequence',
        [jobId, afterSequence],
      ),
      (rows) => rows.map((r) => JSON.parse(r.event) as CleanupEvent),
    );
  }

  async putCleanupJob(j: CleanupJob): Promise<void> {
    await this.put(
      `INSERT INTO cleanup_jobs (job_id, device_uuid, state, finished_at, record) VALUES (?, ?, ?, ?, ?)
         ON CONFLICT (job_id) DO UPDATE SET state = excluded.state, finished_at = excluded.finished_at,
           record = excluded.record`,
      [j.jobId, j.deviceUuid, j.state, j.finishedAt, JSON.stringify(j)],
    );
  }

  async addCleanupEvent(ev: CleanupEvent): Promise<boolean> {
    return andThen(
      this.w().run(
        'INSERT INTO cleanup_events (job_id, sequence, event) VALUES (?, ?, ?) ON CONFLICT DO NOTHING',
        [ev.jobId, ev.sequence, JSON.stringify(ev)],
      ),
      (n) => n > 0,
    );
  }

  // --- profiles ------------------------------------------------------------

  async profile(nameOrUuid: string, opts?: ReadOptions): Promise<Profile | null> {
    return this.one(`SELECT record FROM profiles WHERE name = ? OR uuid = ?${this.lock(opts)}`, [
      nameOrUuid,
      nameOrUuid,
    ]);
  }

  async profiles(): Promise<Profile[]> {
    return this.all('SELECT record FROM profiles ORDER BY name');
  }

  async insertProfile(p: Profile): Promise<void> {
    await this.put('INSERT INTO profiles (name, uuid, record) VALUES (?, ?, ?)', [
      p.name,
      p.uuid,
      JSON.stringify(p),
    ]);
  }

  async deleteProfile(name: string): Promise<boolean> {
    return andThen(this.w().run('DELETE FROM profiles WHERE name = ?', [name]), (n) => n > 0);
  }

  // --- ARQs ----------------------------------------------------------------

  async arq(uuid: string, opts?: ReadOptions): Promise<Arq | null> {
    return this.one(`SELECT record FROM arqs WHERE uuid = ?${this.lock(opts)}`, [uuid]);
  }

  async arqs(filter: { instanceUuid?: string }, opts?: ReadOptions): Promise<Arq[]> {
    const order = `ORDER BY ${this.d.creationOrder}${this.lock(opts)}`;
    return filter.instanceUuid
      ? this.all(`SELECT record FROM arqs WHERE instance_uuid = ? ${order}`, [filter.instanceUuid])
      : this.all(`SELECT record FROM arqs ${order}`);
  }

  async putArq(a: Arq): Promise<void> {
    await this.put(
      `INSERT INTO arqs (uuid, instance_uuid, device_uuid, state, guest_address, nova_event, record)
         VALUES (?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (uuid) DO UPDATE SET instance_uuid = excluded.instance_uuid,
           device_uuid = excluded.device_uuid, state = excluded.state,
           guest_address = excluded.guest_address, record = excluded.record,
           ${claims.KEEP_CLAIM_WHILE_SAME_EVENT}`,
      [
        a.uuid,
        a.instanceUuid,
        a.deviceUuid,
        a.state,
        a.guestAddress ?? null,
        claims.novaEventColumn(a),
        JSON.stringify(a),
      ],
    );
  }

  // Claims on Nova's events (./nova-claims.ts).
  async claimNovaEvents(owner: string, ttlMs: number, limit: number): Promise<Arq[]> {
    return andThen(this.w().all<Row>(claims.claimSql(this.d), [owner, ttlMs, limit]), records<Arq>);
  }

  async holdNovaEvent(uuid: string, owner: string, ttlMs: number): Promise<void> {
    await this.put(claims.holdSql(this.d), [owner, ttlMs, uuid]);
  }

  async releaseNovaEvent(uuid: string, owner: string): Promise<void> {
    await this.put(claims.RELEASE_SQL, [uuid, owner]);
  }

  async releaseNovaEventClaims(owner: string): Promise<number> {
    return this.w().run(claims.RELEASE_OTHERS_SQL, [owner]);
  }

  async novaEventClaimant(uuid: string, opts?: ReadOptions): Promise<string | null> {
    return andThen(
      this.r().get<{ owner: string | null }>(`${claims.CLAIMANT_SQL}${this.lock(opts)}`, [uuid]),
      (r) => r?.owner ?? null,
    );
  }

  async novaEventsOwedCount(): Promise<number> {
    return this.count(claims.OWED_COUNT_SQL);
  }

  async deleteArq(uuid: string): Promise<void> {
    await this.put('DELETE FROM arqs WHERE uuid = ?', [uuid]);
  }

  async lockInstance(instanceUuid: string): Promise<void> {
    this.w();
    if (this.d.lockInstance) await this.put(this.d.lockInstance, [`instance:${instanceUuid}`]);
  }

  // --- migrations ----------------------------------------------------------

  async migration(uuid: string, opts?: ReadOptions): Promise<MigrationRecord | null> {
    return this.one(`SELECT record FROM migrations WHERE uuid = ?${this.lock(opts)}`, [uuid]);
  }

  async plannedMigrations(instanceUuid: string, opts?: ReadOptions): Promise<MigrationRecord[]> {
    return this.all(
      `SELECT record FROM migrations WHERE instance_uuid = ? AND state = 'planned'
         ORDER BY ${this.d.creationOrder}${this.lock(opts)}`,
      [instanceUuid],
    );
  }

  async putMigration(m: MigrationRecord): Promise<void> {
    await this.put(
      `INSERT INTO migrations (uuid, instance_uuid, state, record) VALUES (?, ?, ?, ?)
         ON CONFLICT (uuid) DO UPDATE SET state = excluded.state, record = excluded.record`,
      [m.uuid, m.instanceUuid, m.state, JSON.stringify(m)],
    );
  }

  // --- instances -----------------------------------------------------------

  async instanceDevices(instanceUuid: string, opts?: ReadOptions): Promise<InstanceDevices | null> {
    return this.one(`SELECT record FROM instance_devices WHERE instance_uuid = ?${this.lock(opts)}`, [
      instanceUuid,
    ]);
  }

  async putInstanceDevices(instanceUuid: string, devices: InstanceDevices): Promise<void> {
    await this.put(
      `INSERT INTO instance_devices (instance_uuid, record) VALUES (?, ?)
         ON CONFLICT (instance_uuid) DO UPDATE SET record = excluded.record`,
      [instanceUuid, JSON.stringify(devices)],
    );
  }

  // --- idempotency keys ----------------------------------------------------

  async idempotencyKey(key: string, opts?: ReadOptions): Promise<IdempotencyRecord | null> {
    return andThen(
      this.r().get<IdempotencyRecord>(
        `SELECT fingerprint, result FROM idempotency_keys WHERE key = ?${this.lock(opts)}`,
        [key],
      ),
      (row) => row ?? null,
    );
  }

  async putIdempotencyKey(key: string, rec: IdempotencyRecord, createdAt: string): Promise<void> {
    await this.put(
      'INSERT INTO idempotency_keys (key, fingerprint, result, created_at) VALUES (?, ?, ?, ?)',
      [key, rec.fingerprint, rec.result, createdAt],
    );
  }

  // --- device event log ----------------------------------------------------

  async currentRevision(): Promise<number> {
    return andThen(
      this.r().get<{ r: number | null }>('SELECT MAX(revision) AS r FROM device_events'),
      (row) => row?.r ?? 0,
    );
  }

  async eventsSince(revision: number, limit: number): Promise<DeviceEvent[]> {
    return andThen(
      this.r().all<{ revision: number; removed: unknown; record: string }>(
        'SELECT revision, removed, record FROM device_events WHERE revision > ? ORDER BY revision LIMIT ?',
        [revision, limit],
      ),
      (rows) =>
        rows.map((r) => ({
          revision: r.revision,
          removed: this.d.bool(r.removed),
          device: JSON.parse(r.record) as DeviceRecord,
        })),
    );
  }

  async compactedRevision(): Promise<number> {
    return andThen(
      this.r().get<{ value: number }>("SELECT value FROM retention_marks WHERE name = 'device_events'"),
      (row) => row?.value ?? 0,
    );
  }

  // --- retention: reads and deletes by key ----------------------------------

  async oldestDeviceEvents(limit: number): Promise<EventAge[]> {
    return this.r().all<EventAge>('SELECT revision, at FROM device_events ORDER BY revision LIMIT ?', [
      limit,
    ]);
  }

  async deleteDeviceEventsThrough(revision: number): Promise<number> {
    const x = this.w();
    const removed = await x.run('DELETE FROM device_events WHERE revision <= ?', [revision]);
    await x.run(
      `INSERT INTO retention_marks (name, value) VALUES ('device_events', ?)
         ON CONFLICT (name) DO UPDATE SET value = ${this.d.greatest('retention_marks.value', 'excluded.value')}`,
      [revision],
    );
    return removed;
  }

  async finishedCleanupJobCount(): Promise<number> {
    return this.count('SELECT COUNT(*) AS n FROM cleanup_jobs WHERE finished_at IS NOT NULL');
  }

  async finishedCleanupJobs(after: FinishedJobKey | null, limit: number): Promise<FinishedJob[]> {
    const o = this.d.creationOrder;
    return andThen(
      this.r().all<{ job_id: string; finished_at: string; position: number; latest: unknown }>(
        `SELECT j.job_id, j.finished_at, j.${o} AS position,
           j.${o} = (SELECT MAX(k.${o}) FROM cleanup_jobs k WHERE k.device_uuid = j.device_uuid) AS latest
         FROM cleanup_jobs j
         WHERE j.finished_at IS NOT NULL AND (j.finished_at, j.${o}) > (?, ?)
         ORDER BY j.finished_at, j.${o} LIMIT ?`,
        [after?.finishedAt ?? '', after?.position ?? -1, limit],
      ),
      (rows) =>
        rows.map((r) => ({
          jobId: r.job_id,
          finishedAt: r.finished_at,
          position: r.position,
          latestOfDevice: this.d.bool(r.latest),
        })),
    );
  }

  async deleteCleanupJob(jobId: string): Promise<number> {
    const x = this.w();
    await x.run('DELETE FROM cleanup_events WHERE job_id = ?', [jobId]);
    return x.run('DELETE FROM cleanup_jobs WHERE job_id = ?', [jobId]);
  }

  async idempotencyKeyCount(): Promise<number> {
    return this.count('SELECT COUNT(*) AS n FROM idempotency_keys');
  }

  async oldestIdempotencyKeys(limit: number): Promise<IdempotencyKeyAge[]> {
    return andThen(
      this.r().all<{ key: string; created_at: string }>(
        'SELECT key, created_at FROM idempotency_keys ORDER BY created_at LIMIT ?',
        [limit],
      ),
      (rows) => rows.map((r) => ({ key: r.key, createdAt: r.created_at })),
    );
  }

  async deleteIdempotencyKey(key: string): Promise<number> {
    return this.w().run('DELETE FROM idempotency_keys WHERE key = ?', [key]);
  }
}
