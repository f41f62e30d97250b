/**
 * The unit-of-work port (../unit-of-work.ts) written ONCE in SQL, for every
 * backend: a backend gives it an executor on the unit's transaction and a
 * dialect (./dialect.ts), and keeps only what is its own — connections and
 * transactions, group commit or a pool, retries, numbering the unit's device
 * events at its commit, notifications (../sqlite-store.ts, ../pg-store.ts).
 * Written in parts by concern (see SqlUnit below).
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
import type {
  EventAge,
  FinishedJob,
  FinishedJobKey,
  IdempotencyKeyAge,
  UnitOfWork,
} from '../../usecases/unit-of-work.js';
import { andThen } from './unit-base.js';
import { WorkloadRows } from './unit-workloads.js';

export type { Executor, PendingEvent } from './unit-base.js';

/**
 * One unit's view of its transaction; refuses use after the unit ended (and
 * writes when read-only). Written in parts by concern, each a layer over the
 * one before: unit-base.ts (executor, guards, row helpers) ← unit-devices.ts
 * ← unit-evidence.ts ← unit-workloads.ts ← this (retention).
 */
export class SqlUnit extends WorkloadRows implements UnitOfWork {
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
