/**
 * The default Store backend: one SQLite file through better-sqlite3.
 *
 * Durability: WAL with synchronous=FULL, so an acknowledged write survives
 * kill -9. Atomicity: every mutating method runs its whole read-decide-write
 * synchronously inside ONE `db.transaction(...).immediate()` (style practice 5):
 * the write lock is taken first, so concurrent callers — in this process or in
 * another process on the same file (busy_timeout) — serialize instead of
 * racing. No transaction ever spans an await.
 */

import { randomUUID } from 'node:crypto';
import Database from 'better-sqlite3';
import { BerthError, failedPrecondition, invalidArgument, notFound } from '../../../errors.js';
import { candidateQuery, describeRejections, type PickFn, pickDevice } from '../domain/allocation.js';
import { type Arq, arqBound, sameBinding, transitionArq } from '../domain/arq.js';
import {
  adoptClaim,
  agentRestarted,
  bind,
  claimForMigration,
  cleanupDispatched,
  cleanupFailed,
  cleanupImpossible,
  cleanupInterrupted,
  cleanupStarted,
  cleanupSucceeded,
  DEVICE_STATUSES,
  type DeviceFacts,
  type DeviceRecord,
  type DeviceStatus,
  newDevice,
  operatorClean,
  operatorRelease,
  rediscovered,
  release,
  setStatus,
  vanished,
} from '../domain/device-state.js';
import { type Profile, type ProfileSpec, type RequestGroup, sameProfileSpec } from '../domain/profile.js';
import { duplicateTags, validateTag } from '../domain/tags.js';
import { formatPciAddress, planGuestAddresses, type TakenAddress } from '../guest/guest-address.js';
import { aliasFor } from '../guest/hostdev-xml.js';
import {
  type InstanceDevicesInput,
  registeredAddresses,
  validateInstanceDevices,
} from '../guest/metadata.js';
import { MIGRATIONS } from './migrations.js';
import type {
  ArqBinding,
  BindResult,
  CleanupEvent,
  CleanupJob,
  CreateArqsRequest,
  DeleteArqsResult,
  DeviceEvent,
  DeviceFilter,
  DevicePage,
  DeviceRef,
  GuestBinding,
  HostRecord,
  HostRegistration,
  InstanceDevices,
  InventoryResult,
  InventoryUpdate,
  MigrationOutcome,
  MigrationRecord,
  PageRequest,
  PlanMigrationRequest,
  Store,
} from './store.js';

export interface SqliteStoreOptions {
  /** Clock, for tests. */
  now?: () => Date;
  /** How long a writer waits for another connection's lock (ms). */
  busyTimeoutMs?: number;
}

const PCI_ADDRESS = /^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$/;
const DEFAULT_PAGE = 500;
const MAX_PAGE = 5000;
const WORKING_PHASES = new Set(['preparing', 'sanitizing', 'namespace_reset', 'zeroing', 'verifying']);

type Row = { record: string };
type ArqRow = { record: string; guest_address: string | null };

/** The guest_address column is authoritative (rows from before migration 2 lack the JSON field). */
const toArq = (r: ArqRow): Arq => ({
  ...(JSON.parse(r.record) as Arq),
  guestAddress: r.guest_address ?? null,
});

/** The stored NICs/disks in the validator's input shape (proto `optional vlan` → absent). */
const devicesInput = (d: InstanceDevices): InstanceDevicesInput => ({
  nics: d.nics.map(({ vlan, ...n }) => (vlan === null ? n : { ...n, vlan })),
  disks: d.disks,
});

/** Open (creating and migrating if needed) a store on `path`. */
export async function openSqliteStore(path: string, options: SqliteStoreOptions = {}): Promise<SqliteStore> {
  return new SqliteStore(path, options);
}

export class SqliteStore implements Store {
  private readonly db: Database.Database;
  private readonly clock: () => Date;

  constructor(path: string, options: SqliteStoreOptions = {}) {
    this.clock = options.now ?? (() => new Date());
    this.db = new Database(path);
    this.db.pragma(`busy_timeout = ${Math.trunc(options.busyTimeoutMs ?? 5000)}`);
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('synchronous = FULL');
    this.db.pragma('foreign_keys = ON');
    this.migrate();
  }

  // --- plumbing ----------------------------------------------------------

  private now(): string {
    return this.clock().toISOString();
  }

  /** Run `fn` in one IMMEDIATE transaction (write lock first, so no upgrade deadlocks). */
  private tx<T>(fn: () => T): T {
    return this.db.transaction(fn).immediate();
  }

  private readonly statements = new Map<string, Database.Statement>();

  /** Prepared statements are cached by their SQL: preparing is a measurable share of a bind. */
  private stmt(sql: string): Database.Statement {
    let st = this.statements.get(sql);
    if (!st) {
      st = this.db.prepare(sql);
      this.statements.set(sql, st);
    }
    return st;
  }

  private pending: Array<{ fn: () => unknown; resolve: (v: unknown) => void; reject: (e: unknown) => void }> =
    [];
  private flushScheduled = false;

  /**
   * Group commit. Every write is still one atomic read-check-write (a SAVEPOINT
   * of its own, rolled back alone if it throws), but the writes that arrive in
   * the same turn of the event loop share one IMMEDIATE transaction and so one
   * fsync. Each promise resolves only after that COMMIT: nothing is
   * acknowledged before it is durable.
   */
  private write<T>(fn: () => T): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.pending.push({ fn, resolve: resolve as (v: unknown) => void, reject });
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }

  private flush(): void {
    this.flushScheduled = false;
    const batch = this.pending;
    this.pending = [];
    if (batch.length === 0) return;
    const outcomes: Array<{ ok: true; value: unknown } | { ok: false; error: unknown }> = [];
    try {
      this.tx(() => {
        for (const item of batch) {
          try {
            // A nested better-sqlite3 transaction is a SAVEPOINT.
            outcomes.push({ ok: true, value: this.db.transaction(item.fn)() });
          } catch (error) {
            outcomes.push({ ok: false, error });
          }
        }
      });
    } catch (error) {
      for (const item of batch) item.reject(error);
      return;
    }
    batch.forEach((item, i) => {
      const o = outcomes[i]!;
      if (o.ok) item.resolve(o.value);
      else item.reject(o.error);
    });
  }

  private migrate(): void {
    this.db.exec(
      'CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)',
    );
    for (const m of MIGRATIONS) {
      this.tx(() => {
        const done = this.stmt('SELECT 1 FROM schema_migrations WHERE version = ?').get(m.version);
        if (done) return;
        this.db.exec(m.sql);
        this.stmt('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)').run(
          m.version,
          m.name,
          this.now(),
        );
      });
    }
  }

  async close(): Promise<void> {
    // Writes already accepted are committed (and answered) before the file closes.
    if (this.db.open) this.flush();
    if (this.db.open) this.db.close();
  }

  async schemaVersion(): Promise<number> {
    const row = this.stmt('SELECT MAX(version) AS v FROM schema_migrations').get() as {
      v: number | null;
    };
    return row.v ?? 0;
  }

  /** Returns the stored result for an idempotency key, or null; INVALID_ARGUMENT if reused differently. */
  private idempotent<T>(key: string | undefined, fingerprint: unknown): T | null {
    if (!key) return null;
    const row = this.stmt('SELECT fingerprint, result FROM idempotency_keys WHERE key = ?').get(key) as
      | { fingerprint: string; result: string }
      | undefined;
    if (!row) return null;
    if (row.fingerprint !== JSON.stringify(fingerprint)) {
      throw invalidArgument(
        'request_id',
        `request id "${key.split(':').slice(1).join(':')}" was used for a different request`,
      );
    }
    return JSON.parse(row.result) as T;
  }

  private remember(key: string | undefined, fingerprint: unknown, result: unknown): void {
    if (!key) return;
    this.stmt('INSERT INTO idempotency_keys (key, fingerprint, result, created_at) VALUES (?, ?, ?, ?)').run(
      key,
      JSON.stringify(fingerprint),
      JSON.stringify(result),
      this.now(),
    );
  }

  // --- hosts -------------------------------------------------------------

  private readHost(name: string): HostRecord | undefined {
    const row = this.stmt('SELECT record FROM hosts WHERE name = ?').get(name) as Row | undefined;
    return row ? (JSON.parse(row.record) as HostRecord) : undefined;
  }

  private mustHost(name: string): HostRecord {
    const h = this.readHost(name);
    if (!h) throw notFound('host', name);
    return h;
  }

  private writeHost(h: HostRecord): HostRecord {
    this.stmt(
      'INSERT INTO hosts (name, record) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET record = excluded.record',
    ).run(h.name, JSON.stringify(h));
    return this.withCount(h);
  }

  private withCount(h: HostRecord): HostRecord {
    const row = this.stmt('SELECT COUNT(*) AS n FROM devices WHERE host = ?').get(h.name) as {
      n: number;
    };
    return { ...h, deviceCount: row.n };
  }

  async registerHost(reg: HostRegistration): Promise<HostRecord> {
    if (!reg.name) throw invalidArgument('host', 'a host name is required');
    return this.write(() => {
      const now = this.now();
      const prev = this.readHost(reg.name);
      return this.writeHost({
        ...reg,
        features: [...reg.features],
        drivers: [...reg.drivers],
        registrations: (prev?.registrations ?? 0) + 1,
        connected: prev?.connected ?? false,
        registeredAt: now,
        lastSeen: now,
        // A new agent process numbers its inventory afresh.
        inventoryRevision: prev && prev.agentEpoch === reg.agentEpoch ? prev.inventoryRevision : 0,
        deviceCount: 0,
      });
    });
  }

  async reconcileAgentRestart(
    host: string,
  ): Promise<{ interrupted: DeviceRecord[]; toDispatch: DeviceRecord[] }> {
    return this.write(() => {
      this.mustHost(host);
      const now = this.now();
      const interrupted: DeviceRecord[] = [];
      const toDispatch: DeviceRecord[] = [];
      for (const d of this.devicesWhere(
        'host = ? AND device_state IN (?, ?)',
        host,
        'cleaning',
        'pending_cleaning',
      )) {
        if (d.deviceState === 'pending_cleaning') {
          toDispatch.push(d);
          continue;
        }
        const jobId = d.cleanupJobId;
        const next = this.writeDevice(d, agentRestarted(d, now));
        if (jobId) this.finishJob(jobId, 'interrupted', next.errorReason);
        interrupted.push(next);
      }
      return { interrupted, toDispatch };
    });
  }

  async touchHost(name: string): Promise<HostRecord> {
    return this.write(() => this.writeHost({ ...this.mustHost(name), lastSeen: this.now() }));
  }

  async setHostConnected(host: string, connected: boolean): Promise<HostRecord> {
    return this.write(() => this.writeHost({ ...this.mustHost(host), connected, lastSeen: this.now() }));
  }

  async getHost(name: string): Promise<HostRecord> {
    return this.withCount(this.mustHost(name));
  }

  async listHosts(): Promise<HostRecord[]> {
    const rows = this.stmt('SELECT record FROM hosts ORDER BY name').all() as Row[];
    return rows.map((r) => this.withCount(JSON.parse(r.record) as HostRecord));
  }

  // --- devices -----------------------------------------------------------

  private devicesWhere(where: string, ...params: unknown[]): DeviceRecord[] {
    const rows = this.stmt(`SELECT record FROM devices WHERE ${where} ORDER BY host, address`).all(
      ...params,
    ) as Row[];
    return rows.map((r) => JSON.parse(r.record) as DeviceRecord);
  }

  private findDevice(ref: DeviceRef): DeviceRecord | undefined {
    const row = (
      'uuid' in ref
        ? this.stmt('SELECT record FROM devices WHERE uuid = ?').get(ref.uuid)
        : this.db
            .prepare('SELECT record FROM devices WHERE host = ? AND address = ?')
            .get(ref.host, ref.address)
    ) as Row | undefined;
    return row ? (JSON.parse(row.record) as DeviceRecord) : undefined;
  }

  private mustDevice(ref: DeviceRef): DeviceRecord {
    const d = this.findDevice(ref);
    if (!d) throw notFound('device', 'uuid' in ref ? ref.uuid : `${ref.host} ${ref.address}`);
    return d;
  }

  /**
   * The one place a device row is written: bumps the generation, stamps the time
   * and appends to the event log. A transition that changed nothing writes nothing.
   */
  private writeDevice(prev: DeviceRecord | null, next: DeviceRecord): DeviceRecord {
    if (
      prev &&
      JSON.stringify({ ...next, generation: prev.generation, updatedAt: prev.updatedAt }) ===
        JSON.stringify(prev)
    ) {
      return prev;
    }
    const now = this.now();
    const rec: DeviceRecord = { ...next, generation: (prev?.generation ?? 0) + 1, updatedAt: now };
    const json = JSON.stringify(rec);
    this.stmt(
      `INSERT INTO devices (uuid, host, address, type, resource_class, vendor_id, product_id, iommu_group, device_state, generation, record)
         VALUES (@uuid, @host, @address, @type, @resourceClass, @vendorId, @productId, @iommuGroup, @deviceState, @generation, @record)
         ON CONFLICT (uuid) DO UPDATE SET type = excluded.type, resource_class = excluded.resource_class,
           vendor_id = excluded.vendor_id, product_id = excluded.product_id, iommu_group = excluded.iommu_group,
           device_state = excluded.device_state, generation = excluded.generation, record = excluded.record`,
    ).run({
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
      record: json,
    });
    this.stmt('INSERT INTO device_events (device_uuid, removed, record, at) VALUES (?, 0, ?, ?)').run(
      rec.uuid,
      json,
      now,
    );
    return rec;
  }

  private checkGeneration(d: DeviceRecord, expected: number | undefined): void {
    if (expected !== undefined && expected !== d.generation) {
      throw new BerthError(
        'ABORTED',
        `device ${d.uuid} is at generation ${d.generation}, not ${expected}; re-read and retry`,
        {
          reason: 'GENERATION_CONFLICT',
          metadata: { device_uuid: d.uuid, generation: String(d.generation) },
        },
      );
    }
  }

  async getDevice(ref: DeviceRef): Promise<DeviceRecord> {
    return this.mustDevice(ref);
  }

  async listDevices(filter: DeviceFilter = {}, page: PageRequest = {}): Promise<DevicePage> {
    const size = page.pageSize ? Math.min(Math.max(1, Math.trunc(page.pageSize)), MAX_PAGE) : DEFAULT_PAGE;
    const { where, params } = filterSql(filter);
    if (page.pageToken) {
      let after: unknown;
      try {
        after = JSON.parse(Buffer.from(page.pageToken, 'base64url').toString('utf8'));
      } catch {
        after = null;
      }
      if (!Array.isArray(after) || after.length !== 2 || after.some((x) => typeof x !== 'string')) {
        throw invalidArgument('page_token', `"${page.pageToken}" is not a page token this server issued`);
      }
      where.push('(host, address) > (?, ?)');
      params.push(after[0], after[1]);
    }
    const rows = this.stmt(
      `SELECT record FROM devices ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY host, address LIMIT ?`,
    ).all(...params, size + 1) as Row[];
    const devices = rows.slice(0, size).map((r) => JSON.parse(r.record) as DeviceRecord);
    const last = devices[devices.length - 1];
    const nextPageToken =
      rows.length > size && last
        ? Buffer.from(JSON.stringify([last.host, last.address])).toString('base64url')
        : '';
    return { devices, nextPageToken };
  }

  async setDeviceStatus(
    ref: DeviceRef,
    status: DeviceStatus,
    expectedGeneration?: number,
  ): Promise<DeviceRecord> {
    if (!DEVICE_STATUSES.includes(status)) {
      throw invalidArgument('status', `"${status}" is not enabled or maintaining`);
    }
    return this.write(() => {
      const d = this.mustDevice(ref);
      this.checkGeneration(d, expectedGeneration);
      return this.writeDevice(d, setStatus(d, status));
    });
  }

  async releaseDevice(ref: DeviceRef, expectedGeneration?: number): Promise<DeviceRecord> {
    return this.write(() => {
      const d = this.mustDevice(ref);
      this.checkGeneration(d, expectedGeneration);
      return this.writeDevice(d, operatorRelease(d));
    });
  }

  async requestClean(
    ref: DeviceRef,
    opts: { requestId?: string; agentCanClean: boolean },
  ): Promise<{ device: DeviceRecord; job: CleanupJob }> {
    return this.write(() => {
      const d = this.mustDevice(ref);
      const key = opts.requestId ? `clean:${opts.requestId}` : undefined;
      const seen = this.idempotent<{ jobId: string }>(key, { device: d.uuid });
      if (seen) return { device: d, job: this.mustJob(seen.jobId) };
      const jobId = randomUUID();
      const next = this.writeDevice(d, operatorClean(d, jobId, opts.agentCanClean));
      const job = this.createJob(next, jobId, 'operator');
      this.remember(key, { device: d.uuid }, { jobId });
      return { device: next, job };
    });
  }

  // --- inventory ---------------------------------------------------------

  async upsertInventory(host: string, update: InventoryUpdate): Promise<InventoryResult> {
    const incoming = update.kind === 'snapshot' ? update.devices : [...update.added, ...update.changed];
    incoming.forEach((f, i) => {
      if (!PCI_ADDRESS.test(f.address)) {
        throw invalidArgument(`devices[${i}].address`, `"${f.address}" is not a lower-case PCI address`);
      }
    });
    return this.write(() => {
      const h = this.mustHost(host);
      const result: InventoryResult = { added: [], changed: [], missing: [] };
      // A delta the scheduler already applied (a retried delivery) changes nothing.
      if (update.kind === 'delta' && update.revision <= h.inventoryRevision) return result;
      const now = this.now();
      const existing = new Map(this.devicesWhere('host = ?', host).map((d) => [d.address, d]));
      const upsert = (f: DeviceFacts) => {
        const prev = existing.get(f.address);
        if (!prev) {
          result.added.push(this.writeDevice(null, newDevice(host, f, randomUUID(), now)));
          return;
        }
        const next = this.writeDevice(prev, rediscovered(prev, f));
        if (next !== prev) result.changed.push(next);
      };
      const gone = (d: DeviceRecord) => {
        if (!d.present) return;
        result.missing.push(this.writeDevice(d, vanished(d, 'no longer reported by the host agent')));
      };
      if (update.kind === 'snapshot') {
        const seen = new Set(update.devices.map((f) => f.address));
        update.devices.forEach(upsert);
        for (const d of existing.values()) if (!seen.has(d.address)) gone(d);
      } else {
        [...update.added, ...update.changed].forEach(upsert);
        for (const address of update.removed) {
          const d = existing.get(address);
          if (d) gone(d);
        }
      }
      this.writeHost({ ...h, inventoryRevision: update.revision, lastSeen: now });
      return result;
    });
  }

  // --- cleanup jobs ------------------------------------------------------

  private readJob(jobId: string): CleanupJob | undefined {
    const row = this.stmt('SELECT record FROM cleanup_jobs WHERE job_id = ?').get(jobId) as Row | undefined;
    return row ? (JSON.parse(row.record) as CleanupJob) : undefined;
  }

  private mustJob(jobId: string): CleanupJob {
    const j = this.readJob(jobId);
    if (!j) throw notFound('cleanup job', jobId);
    return j;
  }

  private writeJob(j: CleanupJob): CleanupJob {
    this.stmt(
      `INSERT INTO cleanup_jobs (job_id, device_uuid, state, record) VALUES (?, ?, ?, ?)
         ON CONFLICT (job_id) DO UPDATE SET state = excluded.state, record = excluded.record`,
    ).run(j.jobId, j.deviceUuid, j.state, JSON.stringify(j));
    return j;
  }

  private createJob(d: DeviceRecord, jobId: string, origin: CleanupJob['origin']): CleanupJob {
    return this.writeJob({
      jobId,
      deviceUuid: d.uuid,
      host: d.host,
      address: d.address,
      action: d.cleanupAction ?? '',
      state: 'queued',
      origin,
      message: '',
      lastSequence: 0,
      createdAt: this.now(),
      dispatchedAt: null,
      finishedAt: null,
    });
  }

  private finishJob(jobId: string, state: CleanupJob['state'], message: string): CleanupJob | undefined {
    const j = this.readJob(jobId);
    if (!j) return undefined;
    return this.writeJob({ ...j, state, message, finishedAt: this.now() });
  }

  /** Release a held device; a device that now needs cleaning gets a queued job. */
  private releaseHeld(
    d: DeviceRecord,
    holder: { arqUuid: string } | { migrationUuid: string },
  ): DeviceRecord {
    const jobId = randomUUID();
    const next = this.writeDevice(d, release(d, holder, jobId));
    if (next.deviceState === 'pending_cleaning') this.createJob(next, jobId, 'release');
    return next;
  }

  async cleanupBacklog(host?: string): Promise<Array<{ device: DeviceRecord; job: CleanupJob }>> {
    // cleaning devices too: a broken progress stream is re-attached by job id
    // (after an agent restart, reconcileAgentRestart has already moved them to error).
    const devices = host
      ? this.devicesWhere("host = ? AND device_state IN ('pending_cleaning', 'cleaning')", host)
      : this.devicesWhere("device_state IN ('pending_cleaning', 'cleaning')");
    return devices.flatMap((device) => {
      const job = device.cleanupJobId ? this.readJob(device.cleanupJobId) : undefined;
      return job ? [{ device, job }] : [];
    });
  }

  async markCleanupDispatched(jobId: string): Promise<CleanupJob> {
    return this.write(() => {
      const job = this.mustJob(jobId);
      cleanupDispatched(this.mustDevice({ uuid: job.deviceUuid }), jobId);
      if (job.state !== 'queued' && job.state !== 'dispatched') return job;
      return this.writeJob({ ...job, state: 'dispatched', dispatchedAt: this.now() });
    });
  }

  async applyCleanupEvent(
    ev: CleanupEvent,
  ): Promise<{ device: DeviceRecord; job: CleanupJob; applied: boolean }> {
    if (!Number.isInteger(ev.sequence) || ev.sequence < 1) {
      throw invalidArgument('event.sequence', `${ev.sequence} is not a positive integer`);
    }
    return this.write(() => {
      const job = this.mustJob(ev.jobId);
      const device = this.mustDevice({ uuid: job.deviceUuid });
      if (ev.address !== job.address) {
        throw invalidArgument(
          'event.address',
          `"${ev.address}" is not job ${job.jobId}'s device ${job.address}`,
        );
      }
      const inserted = this.stmt(
        'INSERT OR IGNORE INTO cleanup_events (job_id, sequence, event) VALUES (?, ?, ?)',
      ).run(ev.jobId, ev.sequence, JSON.stringify(ev));
      if (inserted.changes === 0) return { device, job, applied: false };
      let nextJob: CleanupJob = { ...job, lastSequence: Math.max(job.lastSequence, ev.sequence) };
      if (ev.phase === 'succeeded' || ev.phase === 'failed' || ev.phase === 'interrupted') {
        nextJob = { ...nextJob, state: ev.phase, message: ev.message, finishedAt: ev.time };
      } else if (
        WORKING_PHASES.has(ev.phase) &&
        !['succeeded', 'failed', 'interrupted'].includes(job.state)
      ) {
        nextJob = { ...nextJob, state: 'running' };
      }
      let next = device;
      // Only the device's current job may move it; a late event of an old job is history.
      if (device.cleanupJobId === ev.jobId) {
        const now = this.now();
        if (ev.phase === 'succeeded')
          next = cleanupSucceeded(device, ev.jobId, ev.action, now, ev.proof ?? null);
        else if (ev.phase === 'failed') next = cleanupFailed(device, ev.jobId, ev.message, now);
        else if (ev.phase === 'interrupted') next = cleanupInterrupted(device, ev.jobId, ev.message, now);
        else if (WORKING_PHASES.has(ev.phase)) next = cleanupStarted(device, ev.jobId, now);
        next = this.writeDevice(device, next);
        if (ev.phase === 'succeeded' && next.deviceState === 'error') {
          nextJob = { ...nextJob, state: 'failed', message: next.errorReason };
        }
      }
      return { device: next, job: this.writeJob(nextJob), applied: true };
    });
  }

  async failCleanup(jobId: string, reason: string): Promise<{ device: DeviceRecord; job: CleanupJob }> {
    return this.write(() => {
      const job = this.mustJob(jobId);
      const d = this.mustDevice({ uuid: job.deviceUuid });
      const device = this.writeDevice(d, cleanupImpossible(d, jobId, reason, this.now()));
      return { device, job: this.finishJob(jobId, 'failed', reason)! };
    });
  }

  async getCleanupJob(jobId: string): Promise<CleanupJob> {
    return this.mustJob(jobId);
  }

  async latestCleanupJob(deviceUuid: string): Promise<CleanupJob | null> {
    const row = this.stmt(
      'SELECT record FROM cleanup_jobs WHERE device_uuid = ? ORDER BY rowid DESC LIMIT 1',
    ).get(deviceUuid) as Row | undefined;
    return row ? (JSON.parse(row.record) as CleanupJob) : null;
  }

  async cleanupEvents(jobId: string, afterSequence = 0): Promise<CleanupEvent[]> {
    const rows = this.stmt(
      'SELECT event FROM cleanup_events WHERE job_id = ? AND sequence > ? ORDER BY sequence',
    ).all(jobId, afterSequence) as Array<{ event: string }>;
    return rows.map((r) => JSON.parse(r.event) as CleanupEvent);
  }

  // --- profiles ----------------------------------------------------------

  private findProfile(nameOrUuid: string): Profile | undefined {
    const row = this.stmt('SELECT record FROM profiles WHERE name = ? OR uuid = ?').get(
      nameOrUuid,
      nameOrUuid,
    ) as Row | undefined;
    return row ? (JSON.parse(row.record) as Profile) : undefined;
  }

  async createProfile(spec: ProfileSpec): Promise<Profile> {
    return this.write(() => {
      const prev = this.findProfile(spec.name);
      if (prev && prev.name === spec.name) {
        if (sameProfileSpec(prev, spec)) return prev;
        throw new BerthError(
          'ALREADY_EXISTS',
          `profile "${spec.name}" already exists with different groups`,
          {
            metadata: { kind: 'profile', id: spec.name },
          },
        );
      }
      const p: Profile = { ...spec, uuid: randomUUID(), createdAt: this.now() };
      this.stmt('INSERT INTO profiles (name, uuid, record) VALUES (?, ?, ?)').run(
        p.name,
        p.uuid,
        JSON.stringify(p),
      );
      return p;
    });
  }

  async getProfile(nameOrUuid: string): Promise<Profile> {
    const p = this.findProfile(nameOrUuid);
    if (!p) throw notFound('profile', nameOrUuid);
    return p;
  }

  async listProfiles(): Promise<Profile[]> {
    const rows = this.stmt('SELECT record FROM profiles ORDER BY name').all() as Row[];
    return rows.map((r) => JSON.parse(r.record) as Profile);
  }

  async deleteProfile(name: string): Promise<boolean> {
    return this.write(() => this.stmt('DELETE FROM profiles WHERE name = ?').run(name).changes > 0);
  }

  // --- ARQs --------------------------------------------------------------

  private readArq(uuid: string): Arq | undefined {
    const row = this.stmt('SELECT record, guest_address FROM arqs WHERE uuid = ?').get(uuid) as
      | ArqRow
      | undefined;
    return row ? toArq(row) : undefined;
  }

  private mustArq(uuid: string): Arq {
    const a = this.readArq(uuid);
    if (!a) throw notFound('accelerator request', uuid);
    return a;
  }

  private writeArq(a: Arq): Arq {
    this.stmt(
      `INSERT INTO arqs (uuid, instance_uuid, device_uuid, state, guest_address, record) VALUES (?, ?, ?, ?, ?, ?)
         ON CONFLICT (uuid) DO UPDATE SET instance_uuid = excluded.instance_uuid,
           device_uuid = excluded.device_uuid, state = excluded.state,
           guest_address = excluded.guest_address, record = excluded.record`,
    ).run(a.uuid, a.instanceUuid, a.deviceUuid, a.state, a.guestAddress ?? null, JSON.stringify(a));
    return a;
  }

  private arqsOfInstance(instanceUuid: string): Arq[] {
    const rows = this.stmt(
      'SELECT record, guest_address FROM arqs WHERE instance_uuid = ? ORDER BY rowid',
    ).all(instanceUuid) as ArqRow[];
    return rows.map(toArq);
  }

  async createArqs(req: CreateArqsRequest): Promise<Arq[]> {
    const tags = req.tags ?? [];
    for (const [i, t] of tags.entries()) validateTag(`tags[${i}]`, t);
    return this.write(() => {
      const key = req.requestId ? `arqs:${req.requestId}` : undefined;
      const fingerprint = { profile: req.profileName, tags };
      const seen = this.idempotent<string[]>(key, fingerprint);
      if (seen) return seen.map((u) => this.mustArq(u));
      const profile = this.findProfile(req.profileName);
      if (!profile) throw notFound('profile', req.profileName);
      const total = profile.groups.reduce((n, g) => n + g.count, 0);
      if (tags.length > total) {
        throw invalidArgument(
          'tags',
          `${tags.length} tags for profile "${profile.name}" which makes ${total} ARQs`,
        );
      }
      const now = this.now();
      const out: Arq[] = [];
      profile.groups.forEach((group, groupId) => {
        for (let k = 0; k < group.count; k++) {
          out.push(
            this.writeArq({
              uuid: randomUUID(),
              profileName: profile.name,
              groupId,
              group,
              state: 'initial',
              instanceUuid: null,
              host: null,
              deviceUuid: null,
              deviceAddress: null,
              attachHandle: null,
              tag: tags[out.length] ?? '',
              error: '',
              createdAt: now,
              deviceType: '',
              guestAddress: null,
            }),
          );
        }
      });
      this.remember(
        key,
        fingerprint,
        out.map((a) => a.uuid),
      );
      return out;
    });
  }

  async getArq(uuid: string): Promise<Arq> {
    return this.mustArq(uuid);
  }

  async listArqs(instanceUuid?: string): Promise<Arq[]> {
    if (instanceUuid) return this.arqsOfInstance(instanceUuid);
    return (this.stmt('SELECT record, guest_address FROM arqs ORDER BY rowid').all() as ArqRow[]).map(toArq);
  }

  /** Read only what allocation needs: one host's candidates and its busy IOMMU groups. */
  private pickOnHost(host: string, group: RequestGroup, pick: PickFn) {
    const q = candidateQuery(host, group);
    const candidates =
      'resourceClass' in q
        ? this.devicesWhere(
            'host = ? AND resource_class = ? AND device_state = ?',
            host,
            q.resourceClass,
            'available',
          )
        : this.devicesWhere(
            'host = ? AND vendor_id = ? AND product_id = ? AND device_state = ?',
            host,
            q.vendorId,
            q.productId,
            'available',
          );
    const busy = this.stmt(
      `SELECT DISTINCT iommu_group AS g FROM devices WHERE host = ? AND iommu_group IS NOT NULL
         AND device_state IN ('allocated', 'pending_cleaning', 'cleaning')`,
    ).all(host) as Array<{ g: number }>;
    return {
      result: pick(group, candidates, { busyIommuGroups: new Set(busy.map((r) => r.g)) }),
      candidates,
    };
  }

  async bindArqs(bindings: ArqBinding[], pick: PickFn = pickDevice): Promise<BindResult> {
    const seenUuids = new Set<string>();
    bindings.forEach((b, i) => {
      for (const key of ['arqUuid', 'instanceUuid', 'host'] as const) {
        if (!b[key]) throw invalidArgument(`bindings[${i}].${snake(key)}`, 'is required');
      }
      if (seenUuids.has(b.arqUuid)) {
        throw invalidArgument(`bindings[${i}].arq_uuid`, `ARQ ${b.arqUuid} appears twice in one request`);
      }
      seenUuids.add(b.arqUuid);
      validateTag(`bindings[${i}].tag`, b.tag ?? '');
    });
    try {
      return await this.write(() => {
        const arqs: Arq[] = [];
        const devices: DeviceRecord[] = [];
        bindings.forEach((b, i) => {
          const arq = this.mustArq(b.arqUuid);
          if (sameBinding(arq, b)) {
            arqs.push(arq);
            devices.push(this.mustDevice({ uuid: arq.deviceUuid! }));
            return;
          }
          if (arq.state === 'bound') {
            throw failedPrecondition(
              'ARQ_ALREADY_BOUND',
              `ARQ ${arq.uuid} is already bound to instance ${arq.instanceUuid} on host ${arq.host}`,
              { arq_uuid: arq.uuid },
            );
          }
          this.mustHost(b.host);
          const started = transitionArq(arq, 'bind_started');
          const { result, candidates } = this.pickOnHost(b.host, arq.group, pick);
          if (!result.device) {
            throw failedPrecondition(
              'NO_ALLOCATABLE_DEVICE',
              `no allocatable device on host ${b.host} for ARQ ${arq.uuid} (${describeGroup(arq.group)}): ${
                candidates.length === 0 ? 'no available candidates' : describeRejections(result.rejected)
              }`,
              { arq_uuid: arq.uuid, host: b.host },
            );
          }
          const device = this.writeDevice(
            result.device,
            bind(result.device, { arqUuid: arq.uuid, instanceUuid: b.instanceUuid }),
          );
          const tag = b.tag || arq.tag;
          const bound = arqBound(started, device, b.instanceUuid, tag);
          const dups = duplicateTags(
            [
              ...this.arqsOfInstance(b.instanceUuid).filter(
                (a) => a.uuid !== arq.uuid && a.state === 'bound',
              ),
              bound,
            ].map((a) => ({
              field: a.uuid === arq.uuid ? `bindings[${i}].tag` : `ARQ ${a.uuid}`,
              deviceType: a.deviceType,
              tag: a.tag,
            })),
          );
          if (dups[0]) throw invalidArgument(dups[0].field, dups[0].description);
          arqs.push(this.writeArq(bound));
          devices.push(device);
        });
        return { arqs, devices };
      });
    } catch (e) {
      if (e instanceof BerthError && e.code === 'FAILED_PRECONDITION' && e.reason !== 'ARQ_ALREADY_BOUND') {
        await this.markBindFailed(bindings, e.message);
      }
      throw e;
    }
  }

  /** After a rolled-back bind, record why on the ARQs that could have been bound. */
  private markBindFailed(bindings: ArqBinding[], message: string): Promise<void> {
    return this.write(() => {
      for (const b of bindings) {
        const arq = this.readArq(b.arqUuid);
        if (!arq || (arq.state !== 'initial' && arq.state !== 'bind_failed')) continue;
        const started = transitionArq(arq, 'bind_started');
        this.writeArq(transitionArq(started, 'bind_failed', { error: message }));
      }
    });
  }

  async deleteArqs(selector: { uuids?: string[]; instanceUuid?: string }): Promise<DeleteArqsResult> {
    if (!selector.uuids?.length && !selector.instanceUuid) {
      throw invalidArgument('uuids', 'give ARQ uuids or an instance_uuid');
    }
    return this.write(() => {
      const arqs = selector.uuids?.length
        ? selector.uuids.flatMap((u) => {
            const a = this.readArq(u);
            return a ? [a] : [];
          })
        : this.arqsOfInstance(selector.instanceUuid!);
      const released: DeviceRecord[] = [];
      for (const arq of arqs) {
        transitionArq(arq, 'deleting');
        if (arq.deviceUuid) {
          const d = this.findDevice({ uuid: arq.deviceUuid });
          if (d && d.deviceState === 'allocated' && d.arqUuid === arq.uuid) {
            released.push(this.releaseHeld(d, { arqUuid: arq.uuid }));
          }
        }
        this.stmt('DELETE FROM arqs WHERE uuid = ?').run(arq.uuid);
      }
      // A planned migration no longer matches an instance that lost ARQs: abort
      // it, or its destination claims would stay allocated to nobody.
      const instances = new Set(arqs.flatMap((a) => (a.instanceUuid ? [a.instanceUuid] : [])));
      for (const instance of instances) {
        const planned = this.stmt(
          "SELECT record FROM migrations WHERE instance_uuid = ? AND state = 'planned'",
        ).all(instance) as Row[];
        for (const row of planned)
          released.push(...this.abortPlanned(JSON.parse(row.record) as MigrationRecord).released);
      }
      return { deletedUuids: arqs.map((a) => a.uuid), released };
    });
  }

  // --- migrations --------------------------------------------------------

  private readMigration(uuid: string): MigrationRecord | undefined {
    const row = this.stmt('SELECT record FROM migrations WHERE uuid = ?').get(uuid) as Row | undefined;
    return row ? (JSON.parse(row.record) as MigrationRecord) : undefined;
  }

  private mustMigration(uuid: string): MigrationRecord {
    const m = this.readMigration(uuid);
    if (!m) throw notFound('migration', uuid);
    return m;
  }

  private writeMigration(m: MigrationRecord): MigrationRecord {
    this.stmt(
      `INSERT INTO migrations (uuid, instance_uuid, state, record) VALUES (?, ?, ?, ?)
         ON CONFLICT (uuid) DO UPDATE SET state = excluded.state, record = excluded.record`,
    ).run(m.uuid, m.instanceUuid, m.state, JSON.stringify(m));
    return m;
  }

  async planMigration(req: PlanMigrationRequest, pick: PickFn = pickDevice): Promise<MigrationRecord> {
    if (!req.instanceUuid) throw invalidArgument('instance_uuid', 'is required');
    if (!req.destinationHost) throw invalidArgument('destination_host', 'is required');
    return this.write(() => {
      const key = req.requestId ? `migration:${req.requestId}` : undefined;
      const fingerprint = { instance: req.instanceUuid, destination: req.destinationHost };
      const seen = this.idempotent<{ uuid: string }>(key, fingerprint);
      if (seen) return this.mustMigration(seen.uuid);
      this.mustHost(req.destinationHost);
      const open = this.stmt("SELECT uuid FROM migrations WHERE instance_uuid = ? AND state = 'planned'").get(
        req.instanceUuid,
      ) as { uuid: string } | undefined;
      if (open) {
        throw failedPrecondition(
          'MIGRATION_IN_PROGRESS',
          `instance ${req.instanceUuid} already has planned migration ${open.uuid}`,
          { migration_uuid: open.uuid },
        );
      }
      const bound = this.arqsOfInstance(req.instanceUuid).filter((a) => a.state === 'bound');
      const sources = bound.map((a) => ({ arq: a, device: this.mustDevice({ uuid: a.deviceUuid! }) }));
      const sourceHost = sources[0]?.device.host ?? '';
      if (sourceHost === req.destinationHost) {
        throw invalidArgument('destination_host', `"${req.destinationHost}" is the instance's current host`);
      }
      const stuck = sources.filter((s) => !s.device.liveMigratable).map((s) => s.device.address);
      if (stuck.length > 0) {
        throw failedPrecondition(
          'DEVICE_NOT_LIVE_MIGRATABLE',
          `instance ${req.instanceUuid} has devices that are not live-migratable on ${sourceHost}: ${stuck.join(', ')}`,
          { devices: stuck.join(',') },
        );
      }
      const uuid = randomUUID();
      const addressMap: Record<string, string> = {};
      const claims: Record<string, string> = {};
      for (const { arq, device: src } of sources) {
        // The destination must match the source's identity, as PrepareMigration checks.
        const group: RequestGroup = {
          ...arq.group,
          resourceClass: '',
          vendorId: src.vendorId,
          productId: src.productId,
          liveMigratable: 'yes',
        };
        const { result } = this.pickOnHost(req.destinationHost, group, pick);
        if (!result.device) {
          throw failedPrecondition(
            'NO_ALLOCATABLE_DEVICE',
            `no live-migratable ${src.vendorId}:${src.productId} device free on ${req.destinationHost} for ${src.address}: ${describeRejections(result.rejected)}`,
            { host: req.destinationHost },
          );
        }
        const dest = this.writeDevice(
          result.device,
          claimForMigration(result.device, { migrationUuid: uuid, instanceUuid: req.instanceUuid }),
        );
        addressMap[src.address] = dest.address;
        claims[src.uuid] = dest.uuid;
      }
      const m = this.writeMigration({
        uuid,
        instanceUuid: req.instanceUuid,
        sourceHost,
        destinationHost: req.destinationHost,
        state: 'planned',
        addressMap,
        claims,
        destinationXml: '',
        readiness: [],
        requestId: req.requestId ?? null,
        createdAt: this.now(),
      });
      this.remember(key, fingerprint, { uuid });
      return m;
    });
  }

  async setMigrationDetails(
    uuid: string,
    details: { destinationXml?: string; readiness?: MigrationRecord['readiness'] },
  ): Promise<MigrationRecord> {
    return this.write(() => {
      const m = this.mustMigration(uuid);
      return this.writeMigration({
        ...m,
        destinationXml: details.destinationXml ?? m.destinationXml,
        readiness: details.readiness ?? m.readiness,
      });
    });
  }

  async getMigration(uuid: string): Promise<MigrationRecord> {
    return this.mustMigration(uuid);
  }

  async commitMigration(uuid: string): Promise<MigrationOutcome> {
    return this.write(() => {
      const m = this.mustMigration(uuid);
      if (m.state === 'committed') return { migration: m, released: [] };
      if (m.state !== 'planned') {
        throw failedPrecondition('MIGRATION_NOT_PLANNED', `migration ${uuid} is ${m.state}`, {
          migration_uuid: uuid,
        });
      }
      const released: DeviceRecord[] = [];
      for (const arq of this.arqsOfInstance(m.instanceUuid)) {
        const destUuid = arq.deviceUuid ? m.claims[arq.deviceUuid] : undefined;
        if (!destUuid || !arq.deviceUuid) continue;
        const src = this.mustDevice({ uuid: arq.deviceUuid });
        const dest = this.mustDevice({ uuid: destUuid });
        if (src.arqUuid === arq.uuid) released.push(this.releaseHeld(src, { arqUuid: arq.uuid }));
        const adopted = this.writeDevice(dest, adoptClaim(dest, uuid, arq.uuid));
        // Move the ARQ: bound → bound on the destination (same state, new device).
        const moved = arqBound({ ...arq, state: 'bind_started' }, adopted, m.instanceUuid, arq.tag);
        this.writeArq(moved);
      }
      return { migration: this.writeMigration({ ...m, state: 'committed' }), released };
    });
  }

  async abortMigration(uuid: string): Promise<MigrationOutcome> {
    return this.write(() => {
      const m = this.mustMigration(uuid);
      if (m.state === 'aborted') return { migration: m, released: [] };
      if (m.state !== 'planned') {
        throw failedPrecondition('MIGRATION_NOT_PLANNED', `migration ${uuid} is ${m.state}`, {
          migration_uuid: uuid,
        });
      }
      return this.abortPlanned(m);
    });
  }

  /** Releases a planned migration's destination claims and marks it aborted (inside a write). */
  private abortPlanned(m: MigrationRecord): MigrationOutcome {
    const released: DeviceRecord[] = [];
    for (const destUuid of Object.values(m.claims)) {
      const d = this.findDevice({ uuid: destUuid });
      if (d && d.migrationUuid === m.uuid) released.push(this.releaseHeld(d, { migrationUuid: m.uuid }));
    }
    return { migration: this.writeMigration({ ...m, state: 'aborted' }), released };
  }

  // --- instances ---------------------------------------------------------

  async setInstanceDevices(instanceUuid: string, devices: InstanceDevices): Promise<void> {
    if (!instanceUuid) throw invalidArgument('instance_uuid', 'is required');
    await this.write(() => {
      this.stmt(
        `INSERT INTO instance_devices (instance_uuid, record) VALUES (?, ?)
           ON CONFLICT (instance_uuid) DO UPDATE SET record = excluded.record`,
      ).run(instanceUuid, JSON.stringify(devices));
    });
  }

  async getInstanceDevices(instanceUuid: string): Promise<InstanceDevices> {
    return this.readInstanceDevices(instanceUuid);
  }

  private readInstanceDevices(instanceUuid: string): InstanceDevices {
    const row = this.stmt('SELECT record FROM instance_devices WHERE instance_uuid = ?').get(instanceUuid) as
      | Row
      | undefined;
    return row ? (JSON.parse(row.record) as InstanceDevices) : { nics: [], disks: [] };
  }

  async registerInstanceDevices(instanceUuid: string, devices: InstanceDevices): Promise<InstanceDevices> {
    if (!instanceUuid) throw invalidArgument('instance_uuid', 'is required');
    return this.write(() => {
      // Only addresses already handed out bind the NICs/disks; a hostdev still
      // without one will be placed around them.
      const hostdevs: TakenAddress[] = this.arqsOfInstance(instanceUuid).flatMap((a) =>
        a.state === 'bound' && a.guestAddress
          ? [{ owner: `hostdev ${aliasFor({ tag: a.tag, arqUuid: a.uuid })}`, address: a.guestAddress }]
          : [],
      );
      const checked = validateInstanceDevices(devicesInput(devices), hostdevs);
      const stored: InstanceDevices = {
        nics: checked.nics.map((n) => ({
          mac: n.mac,
          address: n.address,
          tag: n.tag,
          vlan: n.vlan ?? null,
          model: n.model,
        })),
        disks: checked.disks.map((d) => ({
          serial: d.serial,
          bus: d.bus,
          address: d.address,
          path: d.path,
          tag: d.tag,
        })),
      };
      this.stmt(
        `INSERT INTO instance_devices (instance_uuid, record) VALUES (?, ?)
           ON CONFLICT (instance_uuid) DO UPDATE SET record = excluded.record`,
      ).run(instanceUuid, JSON.stringify(stored));
      return stored;
    });
  }

  async assignGuestAddresses(instanceUuid: string): Promise<GuestBinding[]> {
    if (!instanceUuid) throw invalidArgument('instance_uuid', 'is required');
    return this.write(() => {
      const bound = this.arqsOfInstance(instanceUuid).filter((a) => a.state === 'bound' && a.deviceUuid);
      const others = registeredAddresses(devicesInput(this.readInstanceDevices(instanceUuid)));
      const plan = planGuestAddresses(
        bound.map((a) => ({ id: a.uuid, guest: a.guestAddress ?? null })),
        others,
      );
      return bound.map((a) => {
        const guest = formatPciAddress(plan.get(a.uuid)!);
        const arq = a.guestAddress === guest ? a : this.writeArq({ ...a, guestAddress: guest });
        return { arq, device: this.mustDevice({ uuid: a.deviceUuid! }) };
      });
    });
  }

  // --- event log ---------------------------------------------------------

  async deviceCounts(): Promise<Array<{ host: string; type: string; state: string; count: number }>> {
    return this.stmt(
      'SELECT host, type, device_state AS state, COUNT(*) AS count FROM devices GROUP BY host, type, device_state',
    ).all() as Array<{ host: string; type: string; state: string; count: number }>;
  }

  async currentRevision(): Promise<number> {
    const row = this.stmt('SELECT MAX(revision) AS r FROM device_events').get() as { r: number | null };
    return row.r ?? 0;
  }

  async eventsSince(revision: number, limit: number): Promise<DeviceEvent[]> {
    const rows = this.stmt(
      'SELECT revision, removed, record FROM device_events WHERE revision > ? ORDER BY revision LIMIT ?',
    ).all(revision, Math.max(1, Math.trunc(limit))) as Array<{
      revision: number;
      removed: number;
      record: string;
    }>;
    return rows.map((r) => ({
      revision: r.revision,
      removed: r.removed === 1,
      device: JSON.parse(r.record) as DeviceRecord,
    }));
  }

  async snapshot(filter: DeviceFilter = {}): Promise<{ revision: number; devices: DeviceRecord[] }> {
    // One read transaction: the devices and the revision are from the same moment.
    return this.db.transaction(() => {
      const row = this.stmt('SELECT MAX(revision) AS r FROM device_events').get() as {
        r: number | null;
      };
      const { where, params } = filterSql(filter);
      const devices = where.length
        ? this.devicesWhere(where.join(' AND '), ...params)
        : this.devicesWhere('1');
      return { revision: row.r ?? 0, devices };
    })();
  }
}

function filterSql(filter: DeviceFilter): { where: string[]; params: unknown[] } {
  const where: string[] = [];
  const params: unknown[] = [];
  if (filter.host) {
    where.push('host = ?');
    params.push(filter.host);
  }
  if (filter.type) {
    where.push('type = ?');
    params.push(filter.type);
  }
  if (filter.state) {
    where.push('device_state = ?');
    params.push(filter.state);
  }
  if (filter.resourceClass) {
    where.push('resource_class = ?');
    params.push(filter.resourceClass);
  }
  return { where, params };
}

const snake = (s: string) => s.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

const describeGroup = (g: RequestGroup) =>
  g.resourceClass ? `resource class ${g.resourceClass}` : `vendor ${g.vendorId} product ${g.productId}`;
