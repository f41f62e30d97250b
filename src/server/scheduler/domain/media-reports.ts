/**
 * Reports bound to their host (DESIGN invariant 15, docs/media-identity.md
 * "Reports bound to their host"): which of an agent's journal records of media
 * the scheduler takes at a registration, and how many it keeps of one host.
 *
 * A host speaks of dirt and burns only for media it holds now (a device of the
 * key is in its inventory, seen) or that its own journal holds (the scheduler
 * last saw the media on this host, or has no record of it and no other host
 * presents it). A record for media another host holds is refused: one host's
 * credential cannot take another host's device out of the pool by naming its
 * media key.
 */

import { BerthError } from '../../../errors.js';

export const MEDIA_RECORD_LIMITS = {
  /**
   * Media records one registration may carry. The agent sends at most this
   * many (held and burned first, then dirty, newest first).
   */
  perRegistration: 4096,
  /**
   * Media rows the scheduler keeps for keys only one host reported (no device
   * of them is known anywhere): four registrations' worth, room for media
   * pulled from the host over years, while one host's credential can add at
   * most about 6 MB to the database.
   */
  perHost: 16_384,
} as const;

/** Why a host's record of a media was refused. */
export type MediaRecordRefusal = 'other_host_presents' | 'other_host_last_saw' | 'forgotten';

/** What the scheduler knows of one media key when it judges a host's record of it. */
export interface MediaWhereabouts {
  /** The scheduler's record of the media (where a device of it was last seen), or null. */
  stored: { host: string } | null;
  /** An operator forgot it (berth media forget) and no device of it has come back since. */
  forgotten: boolean;
  /** The devices of the media, on any host, and whether their host sees them now. */
  devices: readonly { host: string; present: boolean }[];
}

/** A refusal, with the host that holds the media ('' for a forgotten one): for the scheduler's log, not the answer. */
export interface MediaReportJudgement {
  refusal: MediaRecordRefusal;
  holder: string;
}

/**
 * Whether `host` may report dirt or a burn of a media: null when it may, else
 * why not and which host holds it. A media that this host presents now is its
 * own, even when another host presents it too (the controllers of one NVM
 * subsystem reached from two hosts; two hosts presenting one key at once is
 * the custody rule's to settle, not a report's). A media an operator forgot
 * is nobody's until a device of it comes back.
 */
export function judgeMediaReport(host: string, w: MediaWhereabouts): MediaReportJudgement | null {
  if (w.devices.some((d) => d.host === host && d.present)) return null;
  if (w.forgotten) return { refusal: 'forgotten', holder: '' };
  const other = w.devices.find((d) => d.host !== host && d.present);
  if (other) return { refusal: 'other_host_presents', holder: other.host };
  if (w.stored && w.stored.host !== host) return { refusal: 'other_host_last_saw', holder: w.stored.host };
  return null;
}

/** RESOURCE_EXHAUSTED naming the count and the limit; nothing of the records is stored. */
function overLimit(host: string, message: string, count: number, limit: number, bound: string): BerthError {
  return new BerthError('RESOURCE_EXHAUSTED', message, {
    reason: 'MEDIA_RECORDS_OVER_LIMIT',
    metadata: { host, count: String(count), limit: String(limit), bound },
  });
}

/** The registration's media records beyond what one registration may carry, or null. */
export function registrationRecordsBoundBroken(host: string, count: number): BerthError | null {
  const limit = MEDIA_RECORD_LIMITS.perRegistration;
  if (count <= limit) return null;
  return overLimit(
    host,
    `media_records: ${count} records, more than the limit of ${limit} a registration may carry; nothing of them was stored`,
    count,
    limit,
    'per_registration',
  );
}

/**
 * The media rows the scheduler would keep for keys only `host` reported, past
 * its bound, or null: `kept` already, `adding` with this registration.
 */
export function hostRecordsBoundBroken(host: string, kept: number, adding: number): BerthError | null {
  const limit = MEDIA_RECORD_LIMITS.perHost;
  if (adding === 0 || kept + adding <= limit) return null;
  return overLimit(
    host,
    `media_records: host ${host} would have ${kept + adding} media records kept that only it reported (${kept} already, ${adding} new), more than the limit of ${limit}; nothing of them was stored (berth media forget removes media that will never come back)`,
    kept + adding,
    limit,
    'per_host',
  );
}

/** A record of a registration the scheduler refused, and which host holds the media ('' when none does). */
export interface RefusedMediaReport {
  key: string;
  reason: MediaRecordRefusal;
  holder: string;
}

/** What the scheduler did with a registration's media records. */
export interface MediaReportsTaken {
  /** Keys whose record changed. */
  changed: string[];
  /** Records refused: the media is another host's, or forgotten. */
  refused: RefusedMediaReport[];
}
