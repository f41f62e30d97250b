/**
 * Claims on the events Nova is owed (docs/decisions.md 77): the statements
 * SqlUnit (./unit.ts) runs on the `arqs` columns `nova_event` (what is owed,
 * NULL when nothing), `nova_claim_owner` and `nova_claim_expires` (the
 * database's time; schema.ts migration 8). A claim is live until it expires;
 * one that expired is free to take, as is an event nobody claimed. `putArq`
 * drops the claim whenever the event owed changes: a claim is on one event.
 */

import type { Arq } from '../../domain/arq.js';
import type { Dialect } from './dialect.js';

/** What `nova_event` holds for an ARQ: the event owed as one comparable value, or null. */
export const novaEventColumn = (a: Arq): string | null =>
  a.novaEvent ? `${a.novaEvent.status}:${a.novaEvent.instanceUuid}` : null;

/** `putArq`'s assignments of the claim columns on a conflict: kept while the event owed stays the same. */
export const KEEP_CLAIM_WHILE_SAME_EVENT = `nova_claim_owner = CASE WHEN arqs.nova_event = excluded.nova_event THEN arqs.nova_claim_owner END,
           nova_claim_expires = CASE WHEN arqs.nova_event = excluded.nova_event THEN arqs.nova_claim_expires END,
           nova_event = excluded.nova_event`;

/**
 * The database's time now, as one row's `now`: the one clock every claim is
 * judged by — Nova's events here, the Cyborg API's bind claims through the
 * port's `databaseNow` (docs/decisions.md 89) — so the schedulers' clocks do not matter.
 */
export const nowSql = (d: Dialect) => `SELECT ${d.now} AS now`;

const free = (d: Dialect) =>
  `nova_event IS NOT NULL AND (nova_claim_expires IS NULL OR nova_claim_expires <= ${d.now})`;

/**
 * Takes up to `limit` (3rd parameter) owed events that no live claim holds
 * (unclaimed ones first, oldest ARQ first; then the longest expired), for an owner (1st) until a time from now (2nd, ms), in one
 * conditional update: of two units racing for a row, the second finds it
 * claimed (PostgreSQL re-reads a row it waited for, and SKIP LOCKED passes
 * over rows another unit is claiming; SQLite runs one writer at a time).
 * Returns the records claimed.
 */
export const claimSql = (d: Dialect) =>
  `UPDATE arqs SET nova_claim_owner = ?, nova_claim_expires = ${d.nowPlusMs('?')}
     WHERE uuid IN (SELECT uuid FROM arqs WHERE ${free(d)}
                      ORDER BY nova_claim_expires NULLS FIRST, ${d.creationOrder} LIMIT ?${d.skipLocked})
       AND ${free(d)}
     RETURNING record`;

/** Claims one ARQ's event (3rd parameter) for an owner (1st) until a time from now (2nd, ms), whoever held it. */
export const holdSql = (d: Dialect) =>
  `UPDATE arqs SET nova_claim_owner = ?, nova_claim_expires = ${d.nowPlusMs('?')}
     WHERE uuid = ? AND nova_event IS NOT NULL`;

/** Lets go of an owner's (2nd parameter) claim on one ARQ's event (1st); another's stays. */
export const RELEASE_SQL =
  'UPDATE arqs SET nova_claim_owner = NULL, nova_claim_expires = NULL WHERE uuid = ? AND nova_claim_owner = ?';

/** Lets go of every claim not the owner's (the parameter). */
export const RELEASE_OTHERS_SQL =
  'UPDATE arqs SET nova_claim_owner = NULL, nova_claim_expires = NULL WHERE nova_claim_owner IS NOT NULL AND nova_claim_owner <> ?';

/** Who claims an ARQ's event (expired or not). */
export const CLAIMANT_SQL = 'SELECT nova_claim_owner AS owner FROM arqs WHERE uuid = ?';

/** How many events are owed (claimed or not). */
export const OWED_COUNT_SQL = 'SELECT COUNT(*) AS n FROM arqs WHERE nova_event IS NOT NULL';
