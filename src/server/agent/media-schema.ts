/**
 * The media ledger's tables in the agent's journal (media-ledger.ts): the
 * migrations the journal (cleanup-journal.ts) runs, in order.
 */
import type { MediaCondition } from '../../plugins/types.js';

export const MEDIA_MIGRATION = `
  CREATE TABLE media (
    key TEXT PRIMARY KEY,
    condition TEXT NOT NULL CHECK (condition IN ('clean','held','dirty','declared_clean','not_cleanable')),
    burned INTEGER NOT NULL DEFAULT 0 CHECK (burned IN (0, 1)),
    since INTEGER NOT NULL,
    last_address TEXT NOT NULL,
    arq_uuid TEXT NOT NULL DEFAULT '',
    instance_uuid TEXT NOT NULL DEFAULT '',
    last_seen INTEGER NOT NULL,
    reason TEXT NOT NULL DEFAULT ''
  );
  ALTER TABLE cleanup_jobs ADD COLUMN media_key TEXT NOT NULL DEFAULT '';`;

/**
 * Custody (DESIGN invariant 15, decision 62): when each record's custody
 * broke (0 = unbroken) and why, and the boot id the journal last ran under.
 * `adopt_unrecorded` is 1 on a journal that predates custody: its agent kept
 * no record of unused one-time-use media, so the first discovery after the
 * upgrade takes those it finds as unused (cleared with that discovery).
 */
export const CUSTODY_MIGRATION = `
  ALTER TABLE media ADD COLUMN custody_broken_at INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE media ADD COLUMN custody_break TEXT NOT NULL DEFAULT '';
  CREATE TABLE custody (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    boot_id TEXT NOT NULL,
    adopt_unrecorded INTEGER NOT NULL CHECK (adopt_unrecorded IN (0, 1))
  );
  INSERT INTO custody (id, boot_id, adopt_unrecorded) VALUES (1, '', 1);`;

/**
 * The write counters a clean (or declared clean) record was made with, as
 * JSON ('' = none): decision 64.
 */
export const MEDIA_COUNTERS_MIGRATION = `ALTER TABLE media ADD COLUMN write_counters TEXT NOT NULL DEFAULT '';`;

/** The project a hold was recorded for ('' = none known): its certificate names it (decision 79). */
export const MEDIA_PROJECT_MIGRATION = `ALTER TABLE media ADD COLUMN project_id TEXT NOT NULL DEFAULT '';`;

/** A row of the journal's `media` table, as SQLite returns it. */
export interface MediaRow {
  key: string;
  condition: MediaCondition;
  burned: number;
  since: number;
  last_address: string;
  arq_uuid: string;
  instance_uuid: string;
  last_seen: number;
  reason: string;
  /** Absent from a journal read before its custody migration (the operator's dry run). */
  custody_broken_at?: number;
  custody_break?: string;
  /** Absent in a journal read before MEDIA_COUNTERS_MIGRATION (the operator's dry run). */
  write_counters?: string;
  /** Absent in a journal read before MEDIA_PROJECT_MIGRATION (the operator's dry run). */
  project_id?: string;
}
