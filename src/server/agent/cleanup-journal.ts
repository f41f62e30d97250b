/**
 * The agent's durable journal (SQLite, WAL, synchronous=FULL, in --state-dir):
 * its cleanup jobs and its record of media (media-ledger.ts). The jobs let a
 * restarted agent tell "was cleaning" (reported as interrupted, never as
 * succeeded) from "never started" (unknown job id: it can be dispatched
 * again), and keep outcomes reached while nobody listened so they are
 * delivered when a caller re-attaches with the job id.
 */
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { endsCleanup } from '../../plugins/types.js';
import { CleanupJob, type JobEvent } from './cleanup-job.js';
import { type LegacyHold, MediaLedger, type StoredMedia } from './media-ledger.js';
import {
  CUSTODY_MIGRATION,
  MEDIA_COUNTERS_MIGRATION,
  MEDIA_MIGRATION,
  MEDIA_PROJECT_MIGRATION,
} from './media-schema.js';

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
  // Devices handed to a guest and not cleaned since (RecordBinding), by address:
  // what journals held before they followed media. Since migration 3 a row here
  // is a hold not yet moved onto the media found at its address (media-ledger.ts).
  `CREATE TABLE held_devices (
     address TEXT PRIMARY KEY,
     arq_uuid TEXT NOT NULL,
     instance_uuid TEXT NOT NULL,
     since INTEGER NOT NULL
   );`,
  MEDIA_MIGRATION,
  // Erasure certificates the agent signed (docs/erasure-certificates.md), a
  // chain per media (seq 1, 2, ...); `delivered` once a scheduler said it
  // stores one (RegisterResponse.stored_certificates).
  `CREATE TABLE erasure_certificates (
     hash TEXT PRIMARY KEY,
     media_key TEXT NOT NULL,
     seq INTEGER NOT NULL,
     job_id TEXT NOT NULL,
     issued_at INTEGER NOT NULL,
     jws TEXT NOT NULL,
     delivered INTEGER NOT NULL DEFAULT 0,
     UNIQUE (media_key, seq)
   );`,
  // Custody of media (decision 62): when each record's custody broke and why,
  // and the boot id the journal last ran under.
  CUSTODY_MIGRATION,
  // One chain per media across hosts (decision 63): the agent signs after the
  // scheduler's link, so its journal may hold two links of one seq of a media
  // (its own older one, and one after another host's link since). Rebuilt
  // without UNIQUE (media_key, seq); the hash stays the key.
  `CREATE TABLE erasure_certificates_63 (
     hash TEXT PRIMARY KEY,
     media_key TEXT NOT NULL,
     seq INTEGER NOT NULL,
     job_id TEXT NOT NULL,
     issued_at INTEGER NOT NULL,
     jws TEXT NOT NULL,
     delivered INTEGER NOT NULL DEFAULT 0
   );
   INSERT INTO erasure_certificates_63 SELECT hash, media_key, seq, job_id, issued_at, jws, delivered FROM erasure_certificates;
   DROP TABLE erasure_certificates;
   ALTER TABLE erasure_certificates_63 RENAME TO erasure_certificates;
   CREATE INDEX erasure_certificates_media ON erasure_certificates (media_key, seq);`,
  MEDIA_COUNTERS_MIGRATION,
  MEDIA_PROJECT_MIGRATION,
];

/** One certificate the agent signed, as its journal keeps it. */
export interface StoredCertificate {
  hash: string;
  mediaKey: string;
  seq: number;
  jobId: string;
  /** ms since the epoch. */
  issuedAt: number;
  jws: string;
  delivered: boolean;
}

/** Delivered certificates older than this go at the agent's start (never a media's newest): 10 years. */
const KEEP_DELIVERED_CERTIFICATES_MS = 10 * 366 * 24 * 3600 * 1000;

/** A device the journal records as holding tenant data (handed to a guest, not cleaned since). */
export interface HeldDevice {
  /** Where the media is now ('' never: a hold of media not on this host is reported as a media record only). */
  address: string;
  arqUuid: string;
  instanceUuid: string;
  /** ms since the epoch. */
  since: number;
  /** The media's key; '' for a hold recorded by address that no discovery has found media for yet. */
  mediaKey: string;
}

/** Jobs kept after they end; older finished jobs are pruned at start. */
const KEEP_FINISHED = 1000;

export class CleanupJournal {
  private readonly db: Database.Database;
  readonly path: string;
  /** The record of media: condition, burn, last address, per media key. */
  readonly media: MediaLedger;
  /** How many uninformative media records the start pruned. */
  readonly prunedMedia: number;

  constructor(stateDir: string) {
    mkdirSync(stateDir, { recursive: true });
    this.path = join(stateDir, 'agent-journal.db');
    this.db = new Database(this.path);
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('synchronous = FULL');
    this.db.pragma('foreign_keys = ON');
    this.db.pragma('busy_timeout = 5000');
    // A 256 KiB page cache, not better-sqlite3's 16 MB default: the journal's
    // transactions are small, the media ledger keeps its records in memory, and
    // the file's pages stay in the OS's cache anyway. Part of the agent's peak
    // (bench/memory.ts, bench/README.md stop 46).
    this.db.pragma('cache_size = -256');
    const fresh = (this.db.pragma('user_version', { simple: true }) as number) === 0;
    this.migrate();
    // A new journal (a new host, or a lost one): its first discovery is the one
    // assume_clean vouches for (decision 62).
    this.media = new MediaLedger(this.db, fresh);
    this.prunedMedia = this.media.load();
  }

  /**
   * The media records of the journal in `stateDir`, read only (the operator's
   * dry run); null when there is no journal, or one from before media records.
   */
  static readMedia(stateDir: string): Map<string, StoredMedia> | null {
    const path = join(stateDir, 'agent-journal.db');
    if (!existsSync(path)) return null;
    let db: Database.Database | null = null;
    try {
      db = new Database(path, { readonly: true, fileMustExist: true });
      if ((db.pragma('user_version', { simple: true }) as number) < MIGRATIONS.indexOf(MEDIA_MIGRATION) + 1)
        return null;
      const ledger = new MediaLedger(db);
      ledger.read();
      return new Map(ledger.all().map((r) => [r.key, r]));
    } catch {
      return null;
    } finally {
      db?.close();
    }
  }

  private migrate(): void {
    const version = this.db.pragma('user_version', { simple: true }) as number;
    for (let i = version; i < MIGRATIONS.length; i++) {
      this.db.transaction(() => {
        this.db.exec(MIGRATIONS[i]!);
        // A new journal (a new host, or a lost one) adopts nothing: only an upgraded one
        // may take the one-time-use media it finds as unused.
        if (MIGRATIONS[i] === CUSTODY_MIGRATION && version === 0) {
          this.db.exec(`UPDATE custody SET adopt_unrecorded = 0`);
        }
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
    this.pruneCertificates(now);
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

  begin(jobId: string, address: string, action: string, mediaKey = '', now = Date.now()): void {
    this.db
      .prepare(
        `INSERT INTO cleanup_jobs (job_id, address, action, state, started_at, media_key) VALUES (?, ?, ?, 'running', ?, ?)`,
      )
      .run(jobId, address, action, now, mediaKey);
  }

  /** The media a job cleaned ('' for a job journaled before media keys). */
  jobMediaKey(jobId: string): string {
    const row = this.db.prepare(`SELECT media_key FROM cleanup_jobs WHERE job_id = ?`).get(jobId) as
      | { media_key: string }
      | undefined;
    return row?.media_key ?? '';
  }

  /** Records an event; a terminal one also ends the job, in the same transaction. */
  append(e: JobEvent): void {
    this.db.transaction(() => {
      this.db
        .prepare(`INSERT INTO cleanup_events (job_id, sequence, event) VALUES (?, ?, ?)`)
        .run(e.jobId, e.sequence, JSON.stringify(e));
      if (endsCleanup(e.phase)) {
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

  /** Holds recorded by address (before media identities) not yet moved onto media. */
  legacyHolds(): LegacyHold[] {
    return (
      this.db
        .prepare(`SELECT address, arq_uuid, instance_uuid, since FROM held_devices ORDER BY address`)
        .all() as HeldRow[]
    ).map((r) => ({
      address: r.address,
      arqUuid: r.arq_uuid,
      instanceUuid: r.instance_uuid,
      since: r.since,
    }));
  }

  /** Runs `fn` in one transaction (nested ones are savepoints). */
  transaction<T>(fn: () => T): T {
    return this.db.transaction(fn)();
  }

  /** The certificates of a media this agent signed (and kept), by seq: what it knows of the media's chain. */
  mediaCertificates(mediaKey: string): StoredCertificate[] {
    return (
      this.db
        .prepare(`SELECT * FROM erasure_certificates WHERE media_key = ? ORDER BY seq, issued_at`)
        .all(mediaKey) as CertificateRow[]
    ).map(certificateFromRow);
  }

  /** Adds a certificate; never replaces one (a certificate is never re-signed or edited). */
  storeCertificate(c: Omit<StoredCertificate, 'delivered'>): void {
    this.db
      .prepare(
        `INSERT INTO erasure_certificates (hash, media_key, seq, job_id, issued_at, jws) VALUES (?, ?, ?, ?, ?, ?)`,
      )
      .run(c.hash, c.mediaKey, c.seq, c.jobId, c.issuedAt, c.jws);
  }

  /** Every certificate held (or only those no scheduler has said it stores), by media and seq. */
  certificates(opts: { undeliveredOnly?: boolean } = {}): StoredCertificate[] {
    return (
      this.db
        .prepare(
          `SELECT * FROM erasure_certificates ${opts.undeliveredOnly ? 'WHERE delivered = 0' : ''} ORDER BY media_key, seq, issued_at`,
        )
        .all() as CertificateRow[]
    ).map(certificateFromRow);
  }

  /** A scheduler stores these: they may be pruned after the agent's retention. */
  markDelivered(hashes: readonly string[]): number {
    const st = this.db.prepare(
      `UPDATE erasure_certificates SET delivered = 1 WHERE hash = ? AND delivered = 0`,
    );
    return this.transaction(() => hashes.reduce((n, h) => n + st.run(h).changes, 0));
  }

  /** Delivered certificates older than the retention, except each media's newest (the chain goes on from it). */
  pruneCertificates(now = Date.now()): number {
    return this.db
      .prepare(
        `DELETE FROM erasure_certificates WHERE delivered = 1 AND issued_at < ? AND seq <
           (SELECT MAX(c.seq) FROM erasure_certificates c WHERE c.media_key = erasure_certificates.media_key)`,
      )
      .run(now - KEEP_DELIVERED_CERTIFICATES_MS).changes;
  }

  close(): void {
    this.db.close();
  }
}

interface CertificateRow {
  hash: string;
  media_key: string;
  seq: number;
  job_id: string;
  issued_at: number;
  jws: string;
  delivered: number;
}

const certificateFromRow = (r: CertificateRow): StoredCertificate => ({
  hash: r.hash,
  mediaKey: r.media_key,
  seq: r.seq,
  jobId: r.job_id,
  issuedAt: r.issued_at,
  jws: r.jws,
  delivered: r.delivered === 1,
});

interface HeldRow {
  address: string;
  arq_uuid: string;
  instance_uuid: string;
  since: number;
}
