/**
 * Use cases: retention (issue 19). The device event log, finished cleanup
 * jobs and idempotency keys are kept for a window and under a row cap, then
 * removed in small units so that pruning never holds the database for long;
 * nothing a decision rests on goes (a device's latest cleanup, the newest
 * event). A watch resumed from before what was removed is told to re-list.
 */

import { BerthError } from '../../../errors.js';
import type { PruneCounts, RetentionPolicy } from '../store/store.js';
import type { PruneQuery } from '../store/unit-of-work.js';
import type { UseCaseDeps } from './context.js';
import { write } from './unit.js';

export const DEFAULT_RETENTION: RetentionPolicy = Object.freeze({
  historyMs: 7 * 86_400_000,
  maxRows: 200_000,
  requestIdMs: 86_400_000,
});

/** Rows removed per unit: small enough that a bind waits a few ms at most behind one. */
export const PRUNE_BATCH = 500;

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
  const query = (windowMs: number): PruneQuery => ({
    before: new Date(now - windowMs).toISOString(),
    keepNewest: policy.maxRows,
    limit: batch,
  });
  const counts: PruneCounts = { deviceEvents: 0, cleanupJobs: 0, idempotencyKeys: 0 };
  const passes: Array<
    [keyof PruneCounts, PruneQuery, 'pruneDeviceEvents' | 'pruneCleanupJobs' | 'pruneIdempotencyKeys']
  > = [
    ['deviceEvents', query(policy.historyMs), 'pruneDeviceEvents'],
    ['cleanupJobs', query(policy.historyMs), 'pruneCleanupJobs'],
    ['idempotencyKeys', query(policy.requestIdMs), 'pruneIdempotencyKeys'],
  ];
  for (const [what, q, method] of passes) {
    for (;;) {
      const removed = await write(deps, (tx) => tx.uow[method](q));
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
