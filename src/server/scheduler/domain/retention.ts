/** How long the scheduler keeps history (docs/operator-guide.md "Retention"). */

export interface RetentionPolicy {
  /** Device events and finished cleanup jobs older than this go (ms). */
  historyMs: number;
  /** At most this many device events, finished cleanup jobs and idempotency keys each. */
  maxRows: number;
  /** Request ids are honoured for this long (ms); a retry after it makes a new request. */
  requestIdMs: number;
  /**
   * Erasure certificates received longer ago than this go (ms), except each
   * media's newest; no row cap (default 3,650 days).
   */
  certificateMs?: number;
}

/** Rows one retention pass removed. */
export interface PruneCounts {
  deviceEvents: number;
  cleanupJobs: number;
  idempotencyKeys: number;
  certificates: number;
}

/** Erasure certificates are kept ten years by default (docs/erasure-certificates.md). */
export const DEFAULT_CERTIFICATE_MS = 3_650 * 86_400_000;

export const DEFAULT_RETENTION: RetentionPolicy = Object.freeze({
  historyMs: 7 * 86_400_000,
  maxRows: 200_000,
  requestIdMs: 86_400_000,
  certificateMs: DEFAULT_CERTIFICATE_MS,
});
