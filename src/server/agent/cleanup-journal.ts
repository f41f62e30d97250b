/**
 * The agent's durable journal of cleanup jobs (SQLite, WAL, synchronous=FULL,
 * in --state-dir). It lets a restarted agent tell "was cleaning" (reported as
 * interrupted, never as succeeded) from "never started" (unknown job id: it can
 * be dispatched again), and it keeps outcomes reached while nobody listened so
 * they are delivered when a caller re-attaches with the job id.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { CleanupJob, type JobEvent, TERMINAL_PHASES } from './cleanup-job.js';

const MIGRATIONS = [
  `CREATE TABLE cleanup_jobs (
     job_id TEXT PRIMARY KEY,
     address TEXT NOT NULL,
     action TEXT NOT NULL,
     state TEXT NOT NULL CHECK (state IN ('running','succeeded','failed','interrupted')),
     started_at INTEGER NOT NULL,
     finished_at INTEGER
   );
   CREATE INDEX cleanup_jobs_address ON cleanup_jobs(address, started_at);
   CREATE TABLE cleanup_events (
     job_id TEXT NOT NULL REFERENCES cleanup_jobs(job_id) ON DELETE CASCADE,
     sequence INTEGER NOT NULL,
     event TEXT NOT NULL,
     PRIMARY KEY (job_id, sequence)
   );`,
  // Devices handed to a guest and not cleaned since (RecordBinding): the agent's
  // own record of tenant data, independent of the scheduler's database.
  `CREATE TABLE held_devices (
     address TEXT PRIMARY KEY,
     arq_uuid TEXT NOT NULL,
     instance_uuid TEXT NOT NULL,
     since INTEGER NOT NULL
   );`,
];

/** A device the journal records as holding tenant data (handed to a guest, not cleaned since). */
export interface HeldDevice {
  address: string;
  arqUuid: string;
  instanceUuid: string;
  /** ms since the epoch. */
  since: number;
}

/** Jobs kept after they end; older finished jobs are pruned at start. */
const KEEP_FINISHED = 1000;

export class CleanupJournal {
  private readonly db: Database.Database;
  readonly path: string;

  constructor(stateDir: string) {
    mkdirSync(stateDir, { recursive: true });
    this.path = join(stateDir, 'agent-journal.db');
    this.db = new Database(this.path);
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('synchronous = FULL');
    this.db.pragma('foreign_keys = ON');
    this.db.pragma('busy_timeout = 5000');
    this.migrate();
  }

  private migrate(): void {
    const version = this.db.pragma('user_version', { simple: true }) as number;
    for (let i = version; i < MIGRATIONS.length; i++) {
      this.db.transaction(() => {
        this.db.exec(MIGRATIONS[i]!);
        this.db.pragma(`user_version = ${i + 1}`);
      })();
    }
  }

  /**
   * Called once at agent start: every job still `running` was cut short by a
   * crash or a kill. It gets a terminal `interrupted` event, durably.
   */
  recoverInterrupted(now = Date.now()): CleanupJob[] {
    const running = this.db.prepare(`SELECT job_id FROM cleanup_jobs WHERE state = 'running'`).all() as {
      job_id: string;
    }[];
    const out: CleanupJob[] = [];
    for (const { job_id } of running) {
      const job = this.load(job_id)!;
      const ev = job.push({
        phase: 'interrupted',
        step: '',
        percent: job.last?.percent ?? 0,
        bytesDone: job.last?.bytesDone ?? 0,
        bytesTotal: job.last?.bytesTotal ?? 0,
        message: 'the agent stopped while this cleanup ran; the device is not known to be clean',
      });
      ev.time = now;
      this.append(ev);
      out.push(job);
    }
    this.prune();
    return out;
  }

  private prune(): void {
    this.db
      .prepare(
        `DELETE FROM cleanup_jobs WHERE state != 'running' AND job_id NOT IN
           (SELECT job_id FROM cleanup_jobs ORDER BY started_at DESC LIMIT ?)`,
      )
      .run(KEEP_FINISHED);
  }

  begin(jobId: string, address: string, action: string, now = Date.now()): void {
    this.db
      .prepare(
        `INSERT INTO cleanup_jobs (job_id, address, action, state, started_at) VALUES (?, ?, ?, 'running', ?)`,
      )
      .run(jobId, address, action, now);
  }

  /** Records an event; a terminal one also ends the job, in the same transaction. */
  append(e: JobEvent): void {
    this.db.transaction(() => {
      this.db
        .prepare(`INSERT INTO cleanup_events (job_id, sequence, event) VALUES (?, ?, ?)`)
        .run(e.jobId, e.sequence, JSON.stringify(e));
      if (TERMINAL_PHASES.has(e.phase)) {
        this.db
          .prepare(`UPDATE cleanup_jobs SET state = ?, finished_at = ? WHERE job_id = ?`)
          .run(e.phase, e.time, e.jobId);
      }
    })();
  }

  load(jobId: string): CleanupJob | null {
    const row = this.db
      .prepare(`SELECT job_id, address, action FROM cleanup_jobs WHERE job_id = ?`)
      .get(jobId) as { job_id: string; address: string; action: string } | undefined;
    if (!row) return null;
    const events = (
      this.db.prepare(`SELECT event FROM cleanup_events WHERE job_id = ? ORDER BY sequence`).all(jobId) as {
        event: string;
      }[]
    ).map((r) => JSON.parse(r.event) as JobEvent);
    return new CleanupJob(row.job_id, row.address, row.action, events);
  }

  /** The newest job of a device, if any. */
  latestFor(address: string): CleanupJob | null {
    const row = this.db
      .prepare(
        `SELECT job_id FROM cleanup_jobs WHERE address = ? ORDER BY started_at DESC, rowid DESC LIMIT 1`,
      )
      .get(address) as { job_id: string } | undefined;
    return row ? this.load(row.job_id) : null;
  }

  /**
   * Records that `address` is handed to a guest for `arqUuid`, durably, before
   * the scheduler acknowledges the bind. The same binding again returns the
   * first record; a device still held for another binding returns that one
   * as `conflict` and records nothing.
   */
  hold(
    address: string,
    arqUuid: string,
    instanceUuid: string,
    now = Date.now(),
  ): { held: HeldDevice; conflict: boolean } {
    return this.db
      .transaction(() => {
        const known = this.held(address);
        if (known) return { held: known, conflict: known.arqUuid !== arqUuid };
        this.db
          .prepare(`INSERT INTO held_devices (address, arq_uuid, instance_uuid, since) VALUES (?, ?, ?, ?)`)
          .run(address, arqUuid, instanceUuid, now);
        return { held: { address, arqUuid, instanceUuid, since: now }, conflict: false };
      })
      .immediate();
  }

  held(address: string): HeldDevice | null {
    const row = this.db
      .prepare(`SELECT address, arq_uuid, instance_uuid, since FROM held_devices WHERE address = ?`)
      .get(address) as HeldRow | undefined;
    return row ? fromRow(row) : null;
  }

  /** Every device the journal records as holding tenant data. */
  heldDevices(): HeldDevice[] {
    return (
      this.db
        .prepare(`SELECT address, arq_uuid, instance_uuid, since FROM held_devices ORDER BY address`)
        .all() as HeldRow[]
    ).map(fromRow);
  }

  /** A cleanup the agent judged clean ended: the device holds no tenant data any more. */
  releaseHeld(address: string): void {
    this.db.prepare(`DELETE FROM held_devices WHERE address = ?`).run(address);
  }

  close(): void {
    this.db.close();
  }
}

interface HeldRow {
  address: string;
  arq_uuid: string;
  instance_uuid: string;
  since: number;
}

const fromRow = (r: HeldRow): HeldDevice => ({
  address: r.address,
  arqUuid: r.arq_uuid,
  instanceUuid: r.instance_uuid,
  since: r.since,
});
