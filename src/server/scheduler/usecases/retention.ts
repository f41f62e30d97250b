/**
 * Use cases: retention (docs/decisions.md 32). The device event log,
 * finished cleanup jobs and idempotency keys are kept for a window and under a
 * row cap, then removed in small units so that pruning never holds the
 * database for long. What may go is decided here, once for every backend; the
 * port only lists rows oldest first and deletes by key. Nothing a decision
 * rests on goes: a device's latest cleanup job (`device show` reports its
 * proof) and the newest event (the current revision stays readable). A watch
 * resumed from before what was removed is told to re-list.
 */

import { BerthError } from '../../../errors.js';
import { DEFAULT_CERTIFICATE_MS, type PruneCounts, type RetentionPolicy } from '../domain/retention.js';
import type { UseCaseDeps } from './context.js';
import { write } from './unit.js';
import type { FinishedJobKey, UnitOfWork } from './unit-of-work.js';

/** Rows removed per unit: small enough that a bind waits a few ms at most behind one. */
export const PRUNE_BATCH = 500;

/** What one unit of a pass may remove: at most `limit` rows, oldest first. */
interface PruneLimits {
  /** Rows older than this instant (ISO 8601) may go. */
  before: string;
  /** Beyond this many rows the oldest go, whatever their age. */
  keepNewest: number;
  limit: number;
}

/**
 * The oldest events that are older than the window or beyond the cap, as
 * one range from the start of the log; never the newest event.
 */
async function pruneDeviceEvents(uow: UnitOfWork, q: PruneLimits): Promise<number> {
  const newest = await uow.currentRevision();
  const beyondCap = newest - q.keepNewest;
  let upTo = 0;
  for (const e of await uow.oldestDeviceEvents(q.limit)) {
    if (e.revision >= newest) break;
    if (e.at >= q.before && e.revision > beyondCap) break;
    upTo = e.revision;
  }
  return upTo === 0 ? 0 : uow.deleteDeviceEventsThrough(upTo);
}

/**
 * Finished cleanup jobs (with their events), oldest finished first, while
 * older than the window or beyond the cap of finished jobs; never a device's
 * latest job.
 */
async function pruneCleanupJobs(uow: UnitOfWork, q: PruneLimits): Promise<number> {
  const overCap = Math.max(0, (await uow.finishedCleanupJobCount()) - q.keepNewest);
  let removed = 0;
  let after: FinishedJobKey | null = null;
  for (;;) {
    const page = await uow.finishedCleanupJobs(after, q.limit);
    for (const j of page) {
      if (j.latestOfDevice) continue;
      if (j.finishedAt >= q.before && removed >= overCap) return removed;
      removed += await uow.deleteCleanupJob(j.jobId);
      if (removed >= q.limit) return removed;
    }
    if (page.length < q.limit) return removed;
    after = page[page.length - 1]!;
  }
}

/**
 * Erasure certificates received before the window, oldest first; never a
 * media's newest (the next certificate of the media chains to it). No cap:
 * they are the record an auditor asks for.
 */
async function pruneCertificates(uow: UnitOfWork, q: PruneLimits): Promise<number> {
  let removed = 0;
  for (const c of await uow.oldestCertificates(q.before, q.limit)) {
    const newest = await uow.lastCertificate(c.mediaKey);
    if (newest && newest.seq <= c.seq) continue;
    removed += await uow.deleteCertificate(c.hash);
  }
  return removed;
}

/** Idempotency keys, oldest first, while older than their window or beyond the cap. */
async function pruneIdempotencyKeys(uow: UnitOfWork, q: PruneLimits): Promise<number> {
  const overCap = Math.max(0, (await uow.idempotencyKeyCount()) - q.keepNewest);
  let removed = 0;
  for (const k of await uow.oldestIdempotencyKeys(q.limit)) {
    if (k.createdAt >= q.before && removed >= overCap) break;
    removed += await uow.deleteIdempotencyKey(k.key);
  }
  return removed;
}

/**
 * One retention pass: units of at most `batch` rows each until nothing is left
 * to remove; `between` runs between units (the caller yields to other work there).
 */
export async function pruneHistory(
  deps: UseCaseDeps,
  policy: RetentionPolicy,
  options: { batch?: number; between?: () => Promise<void> } = {},
): Promise<PruneCounts> {
  const batch = options.batch ?? PRUNE_BATCH;
  const now = deps.clock().getTime();
  const limits = (windowMs: number): PruneLimits => ({
    before: new Date(now - windowMs).toISOString(),
    keepNewest: policy.maxRows,
    limit: batch,
  });
  const counts: PruneCounts = { deviceEvents: 0, cleanupJobs: 0, idempotencyKeys: 0, certificates: 0 };
  const passes: Array<
    [keyof PruneCounts, PruneLimits, (uow: UnitOfWork, q: PruneLimits) => Promise<number>]
  > = [
    ['deviceEvents', limits(policy.historyMs), pruneDeviceEvents],
    ['cleanupJobs', limits(policy.historyMs), pruneCleanupJobs],
    ['idempotencyKeys', limits(policy.requestIdMs), pruneIdempotencyKeys],
    ['certificates', limits(policy.certificateMs ?? DEFAULT_CERTIFICATE_MS), pruneCertificates],
  ];
  for (const [what, q, prune] of passes) {
    for (;;) {
      const removed = await write(deps, (tx) => prune(tx.uow, q));
      counts[what] += removed;
      if (removed < batch) break;
      await options.between?.();
    }
  }
  return counts;
}

/** The answer to a watch resumed from a revision retention already removed. */
export function revisionCompacted(revision: number, compacted: number): BerthError {
  return new BerthError(
    'FAILED_PRECONDITION',
    `from_revision ${revision} is older than the oldest device event kept (${compacted + 1}): ` +
      're-list (watch from revision 0) and resume from the revision it ends with',
    {
      reason: 'REVISION_COMPACTED',
      metadata: { from_revision: String(revision), compacted: String(compacted) },
    },
  );
}
