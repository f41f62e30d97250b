/**
 * Placement as one link: the microversion negotiated at start, the traits the
 * server knows as standard, and whether it answers (with the log lines and
 * the times an operator needs when it does not). Both modes (reporter.ts,
 * one-time-use.ts) go through it.
 */
import type { Logger } from 'pino';
import { ConfigError } from '../../../errors.js';
import { microversionAtLeast, PINNED_MICROVERSION, type PlacementApi, PlacementUnreachable } from './api.js';
import { OWNER_TRAIT } from './names.js';

/** Placement answered, and what it said makes Berth unable to work with it at all. */
export class PlacementIncompatible extends ConfigError {}

export class PlacementConnection {
  reachable = false;
  lastError = 'not contacted yet';
  unreachableSince: Date | null = null;
  lastContactAt: Date | null = null;
  serverMaxVersion = '';
  standardTraits: ReadonlySet<string> = new Set();
  private negotiated = false;
  private lastDownLog = 0;

  constructor(
    readonly api: PlacementApi,
    private readonly logger: Logger,
    /** Called when reachability changes (metrics). */
    private readonly onChange: (reachable: boolean) => void = () => {},
  ) {}

  /**
   * GET / (the versions), then the traits the server knows: once per process,
   * before anything else. A server older than the pinned microversion is
   * refused (PlacementIncompatible), never half used.
   */
  async ready(): Promise<void> {
    if (this.negotiated) return;
    const v = await this.api.versions();
    this.serverMaxVersion = v.max;
    if (
      !microversionAtLeast(v.max, PINNED_MICROVERSION) ||
      !microversionAtLeast(PINNED_MICROVERSION, v.min)
    ) {
      throw new PlacementIncompatible(
        `Placement at ${this.api.url} serves microversions ${v.min} to ${v.max}; Berth needs ${PINNED_MICROVERSION} ` +
          '(reserved equal to total, which is how a device is held back: Placement from the Rocky release on)',
      );
    }
    const all = await this.api.listTraits();
    this.standardTraits = new Set(all.filter((t) => !t.startsWith('CUSTOM_')));
    await this.api.ensureTrait(OWNER_TRAIT);
    this.negotiated = true;
    this.ok();
    this.logger.info(
      {
        url: this.api.url,
        microversion: PINNED_MICROVERSION,
        serverMax: v.max,
        standardTraits: this.standardTraits.size,
      },
      'Placement: microversion negotiated',
    );
  }

  ok(): void {
    this.lastContactAt = new Date();
    if (this.reachable) return;
    const after = this.unreachableSince ? (Date.now() - this.unreachableSince.getTime()) / 1000 : 0;
    this.reachable = true;
    this.lastError = '';
    if (this.unreachableSince) {
      this.logger.warn(
        { url: this.api.url, downSeconds: Math.round(after) },
        `Placement answers again after ${Math.round(after)} s: catching up`,
      );
    }
    this.unreachableSince = null;
    this.onChange(true);
  }

  /** Placement did not answer: logged at the first failure and once a minute after, with how far behind Berth is. */
  down(err: PlacementUnreachable, behind: () => string): void {
    const now = Date.now();
    this.lastError = err.message;
    if (this.reachable || this.unreachableSince === null) {
      this.reachable = false;
      this.unreachableSince = new Date();
      this.lastDownLog = now;
      this.onChange(false);
      this.logger.error(
        { url: this.api.url, err: err.message },
        `Placement does not answer: Berth keeps working and holds the changes (${behind()}); retrying`,
      );
    } else if (now - this.lastDownLog >= 60_000) {
      this.lastDownLog = now;
      this.logger.error(
        {
          url: this.api.url,
          err: err.message,
          downSeconds: Math.round((now - this.unreachableSince.getTime()) / 1000),
        },
        `Placement still does not answer (${behind()})`,
      );
    }
  }
}

/** Exponential backoff with jitter for an unreachable Placement (0.5 s … cap). */
export class RetryDelay {
  private n = 0;
  constructor(private readonly capMs = 30_000) {}
  next(): number {
    const base = Math.min(this.capMs, 500 * 2 ** this.n);
    this.n = Math.min(this.n + 1, 16);
    return Math.round(base / 2 + (Math.random() * base) / 2);
  }
  reset(): void {
    this.n = 0;
  }
}

export { PlacementUnreachable };
