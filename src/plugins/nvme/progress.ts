/** Progress reporting helpers shared by the NVMe cleanup steps. */
import type { CleanupContext } from '../driver.js';
import type { CleanupProgress } from '../types.js';

/** Minimum interval between progress events of one tight loop (chunks, read-back). */
const PROGRESS_EVERY_MS = 250;

export function pct(done: number, total: number): number {
  return total <= 0 ? 100 : Math.min(100, Math.round((done / total) * 10000) / 100);
}

/**
 * A reporter that passes at most one event per PROGRESS_EVERY_MS (unless
 * forced) and never lets the percent go down.
 */
export function progressThrottle(ctx: CleanupContext): (p: CleanupProgress, force?: boolean) => void {
  let last = 0;
  let lastPercent = -1;
  return (p, force = false) => {
    const now = Date.now();
    if (!force && now - last < PROGRESS_EVERY_MS) return;
    if (p.percent !== undefined) {
      if (p.percent < lastPercent) return;
      lastPercent = p.percent;
    }
    last = now;
    ctx.progress(p);
  };
}
