/**
 * Runs retention in the background (docs/decisions.md 32): one pass at start and then
 * every `intervalMs`, each pass in small units with a yield to the event loop
 * between them, so binds never wait behind a whole pass. A failing pass is
 * logged and retried at the next tick; it never stops the scheduler.
 */
import type { Logger } from 'pino';
import type { PruneCounts, RetentionPolicy } from '../domain/retention.js';
import type { UseCases } from '../usecases/use-cases.js';

export class HistoryPruner {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<PruneCounts | null> | null = null;
  private stopped = false;

  constructor(
    private readonly useCases: UseCases,
    private readonly policy: RetentionPolicy,
    private readonly logger: Logger,
    private readonly intervalMs = 60_000,
  ) {}

  start(): void {
    void this.pass();
    this.timer = setInterval(() => void this.pass(), this.intervalMs);
    this.timer.unref();
  }

  /** One pass now (or the one already running); null when it failed or the pruner stopped. */
  pass(): Promise<PruneCounts | null> {
    if (this.stopped) return Promise.resolve(null);
    this.running ??= this.useCases
      .pruneHistory(this.policy, { between: () => new Promise((r) => setImmediate(r)) })
      .then(
        (counts) => {
          if (counts.deviceEvents + counts.cleanupJobs + counts.idempotencyKeys > 0) {
            this.logger.info({ pruned: counts }, 'history pruned (retention)');
          }
          return counts;
        },
        (err: unknown) => {
          if (!this.stopped) this.logger.warn({ err }, 'retention pass failed; retried at the next tick');
          return null;
        },
      )
      .finally(() => {
        this.running = null;
      });
    return this.running;
  }

  /** Stops the timer and waits for a running pass (its units finish, none start). */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    await this.running;
  }
}
