/**
 * Tells Nova that a bind ended: `accelerator-request-bound` events (status
 * `completed` or `failed`, tag = the ARQ's uuid, server_uuid = the instance)
 * to `POST /os-server-external-events` at compute microversion 2.82, as
 * Cyborg's nova_client.py sends them.
 *
 * The outbox is the ARQ record (`Arq.novaEvent`, written in the same unit as
 * the bind's outcome), so an event is owed exactly when a bind committed,
 * survives a restart, and is cleared only once Nova took it. Answers, as
 * Cyborg reads them: 200 delivered; 207 with every event 422 (the instance
 * is not on a host yet) dropped as Cyborg drops it, logged; 207 with other
 * per-event codes: 404 (no such instance) dropped, others logged and dropped;
 * no answer, 5xx, 401 (token renewed) or 429: kept and retried with backoff,
 * so a Nova that is down gets every event when it is back.
 *
 * Every scheduler on a database runs a sender; a claim in the database
 * decides which one sends each event (docs/decisions.md 77). A pass reads how
 * many events are owed, claims a page of those no live claim holds, sends
 * them, and records each as delivered. A bind holds its own event (claimed in
 * the bind's unit) until it is final, so no sender tells Nova `completed` for
 * a bind that is then undone. A claim that expired (its scheduler died or
 * stalled) is taken over; a send that began after a third of the claim's life
 * is left to the next pass, so a live sender finishes before its claim ends.
 */
import type { Logger } from 'pino';
import { Gauge, type Registry } from 'prom-client';
import type { Arq, NovaEvent } from '../domain/arq.js';
import type { TokenSource } from '../placement/keystone.js';
import type { UseCases } from '../usecases/use-cases.js';

export const NOVA_MICROVERSION = '2.82';
/** Events claimed in one pass. */
const PAGE_SIZE = 100;

export interface NovaEventsOptions {
  /** Nova's compute endpoint (…/v2.1). */
  url: string;
  credentials: TokenSource;
  timeoutMs: number;
  retryMaxMs: number;
  /**
   * How long a claim on an event lasts: a send's (at least 4 × timeoutMs, so a
   * live sender is done before it ends), and the wait between looks when other
   * schedulers hold what is owed. A bind's hold lasts this plus BIND_CONFIRM_MS.
   */
  claimTtlMs: number;
  /** Events claimed in one pass (default 100). */
  pageSize?: number;
  fetch?: typeof fetch;
}

/**
 * An upper bound on a bind's confirmation (its agents' RecordBinding, 10 s
 * deadline each, side by side, after a read of the agents' records, then the
 * undo's unit): a bind's hold on its event outlasts it by this.
 */
export const BIND_CONFIRM_MS = 30_000;

type Owed = { arq: string; event: NovaEvent };
/** What a pass found: retry with backoff, more to claim now, others hold what is owed, or nothing owed. */
type Next = 'retry' | 'more' | 'watch' | 'idle';

export class NovaEvents {
  private wake: (() => void) | null = null;
  private stopped = false;
  private loopDone: Promise<void> | null = null;
  private readonly abort = new AbortController();
  /** Events delivered (or dropped as Cyborg drops them) by this scheduler, for status and tests. */
  delivered = 0;
  /** Attempts that Nova did not take (down, 5xx): the events stay owed. */
  failedAttempts = 0;
  /**
   * Events Nova took from this scheduler after its claim on them had gone (it
   * expired and another scheduler took it over, or the event was cleared or
   * replaced meanwhile): Nova may have been told twice.
   */
  claimsLost = 0;
  lastError = '';
  /** Events owed at the last look, by every scheduler of the database (including binds not final yet). */
  owed = 0;

  constructor(
    private readonly useCases: UseCases,
    private readonly o: NovaEventsOptions,
    /** This scheduler's id: the owner of its claims. */
    private readonly owner: string,
    /** Whether this scheduler is alone on its database (SQLite): claims left by its predecessors are let go at start. */
    private readonly alone: boolean,
    private readonly logger: Logger,
  ) {}

  /** Nova's endpoint, for the Cyborg API's banner. */
  get url(): string {
    return this.o.url;
  }

  /** What a bind asked through the Cyborg API holds its event with until it is final. */
  get hold(): { holder: string; holdMs: number } {
    return { holder: this.owner, holdMs: this.o.claimTtlMs + BIND_CONFIRM_MS };
  }

  start(): void {
    this.loopDone = this.loop();
  }

  /** berth_cyborg_nova_events_* on the scheduler's registry (docs/operator-guide.md "Metrics"). */
  register(registry: Registry): void {
    const gauge = (name: string, help: string, read: () => number) =>
      new Gauge({
        name,
        help,
        registers: [registry],
        collect() {
          this.set(read());
        },
      });
    gauge(
      'berth_cyborg_nova_events_owed',
      'accelerator-request-bound events Nova has not taken yet (every scheduler of the database)',
      () => this.owed,
    );
    gauge(
      'berth_cyborg_nova_events_delivered',
      'Events Nova took (or refused for good) from this scheduler since the start',
      () => this.delivered,
    );
    gauge(
      'berth_cyborg_nova_events_failed_attempts',
      'Attempts to tell Nova that it did not answer or refused for now (the events stay owed) since the start',
      () => this.failedAttempts,
    );
    gauge(
      'berth_cyborg_nova_events_claims_lost',
      'Events Nova took from this scheduler after its claim on them had expired and been taken over (Nova may have been told twice) since the start',
      () => this.claimsLost,
    );
  }

  /** A bind ended: look at the outbox now. */
  poke(): void {
    this.wake?.();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.abort.abort();
    this.wake?.();
    await this.loopDone;
  }

  private async loop(): Promise<void> {
    let backoff = 200;
    if (this.alone) {
      // No other scheduler uses this database: what a claim holds is its dead predecessor's.
      const n = await this.useCases.releaseOthersNovaClaims(this.owner).catch(() => 0);
      if (n > 0) this.logger.info({ events: n }, 'Nova events: the claims of an earlier run let go');
    }
    while (!this.stopped) {
      let next: Next;
      try {
        next = await this.pass();
      } catch (err) {
        next = 'retry';
        this.lastError = (err as Error).message;
        this.logger.warn({ err: this.lastError }, 'Nova events: the outbox could not be read');
      }
      backoff = next === 'retry' ? Math.min(backoff * 2, this.o.retryMaxMs) : 200;
      // Nothing this scheduler can send now: look again within a claim's life, to take over one that expires.
      const waitMs = next === 'retry' ? backoff : next === 'more' ? 0 : this.o.claimTtlMs;
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, waitMs);
        this.wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
      this.wake = null;
    }
  }

  /** One pass: claim a page of what is owed and no live claim holds, send it, record it. */
  private async pass(): Promise<Next> {
    this.owed = await this.useCases.novaEventsOwedCount();
    if (this.owed === 0) return 'idle';
    const pageSize = this.o.pageSize ?? PAGE_SIZE;
    const claimedAt = Date.now();
    const claimed = await this.useCases.claimNovaEvents(this.owner, this.o.claimTtlMs, pageSize);
    if (claimed.length === 0) return 'watch';
    const byInstance = new Map<string, Owed[]>();
    for (const a of claimed.filter((a: Arq) => a.novaEvent)) {
      const e = { arq: a.uuid, event: a.novaEvent! };
      byInstance.set(e.event.instanceUuid, [...(byInstance.get(e.event.instanceUuid) ?? []), e]);
    }
    let next: Next = claimed.length === pageSize ? 'more' : 'watch';
    const groups = [...byInstance];
    for (const [i, [instance, events]] of groups.entries()) {
      // Stopping, or late in the claim's life: what is left goes back, for the next pass (or another scheduler).
      if (this.stopped || Date.now() - claimedAt > this.o.claimTtlMs / 3) {
        const rest = groups.slice(i).flatMap(([, es]) => es.map((e) => e.arq));
        await this.useCases.releaseNovaEvents(rest, this.owner);
        return this.stopped ? 'idle' : 'more';
      }
      const done = await this.send(instance, events);
      if (!done) {
        next = 'retry';
        // Retried with backoff by whichever scheduler claims it next.
        await this.useCases.releaseNovaEvents(
          events.map((e) => e.arq),
          this.owner,
        );
        continue;
      }
      for (const e of events) {
        const held = await this.useCases.novaEventDelivered(e.arq, e.event, this.owner);
        this.delivered++;
        this.owed--;
        if (!held) {
          this.claimsLost++;
          this.logger.warn(
            { arq: e.arq, instance },
            "Nova events: Nova took an event after this scheduler's claim on it had gone; it may have been told twice",
          );
        }
      }
    }
    return next;
  }

  /** true when the events are settled (taken, or refused for good); false to retry. */
  private async send(instance: string, events: Owed[], renewed = false): Promise<boolean> {
    const url = `${this.o.url.replace(/\/+$/, '')}/os-server-external-events`;
    const body = {
      events: events.map((e) => ({
        name: 'accelerator-request-bound',
        server_uuid: e.event.instanceUuid,
        tag: e.arq,
        status: e.event.status,
      })),
    };
    let res: Response;
    try {
      res = await (this.o.fetch ?? fetch)(url, {
        method: 'POST',
        headers: {
          'Content-Type': 'application/json',
          Accept: 'application/json',
          'X-Auth-Token': await this.o.credentials.token(),
          'OpenStack-API-Version': `compute ${NOVA_MICROVERSION}`,
          'X-OpenStack-Nova-API-Version': NOVA_MICROVERSION,
        },
        body: JSON.stringify(body),
        signal: AbortSignal.any([AbortSignal.timeout(this.o.timeoutMs), this.abort.signal]),
      });
    } catch (err) {
      return this.attemptFailed(instance, `Nova at ${url} does not answer: ${(err as Error).message}`);
    }
    const text = await res.text().catch(() => '');
    if (res.status === 200) {
      this.logger.info({ instance, events: body.events }, 'Nova took the accelerator-request-bound events');
      return true;
    }
    if (res.status === 207) {
      let codes: number[] = [];
      try {
        codes = ((JSON.parse(text) as { events?: Array<{ code?: number }> }).events ?? []).map((e) =>
          Number(e.code),
        );
      } catch {
        // judged below as "not all the same"
      }
      const set = new Set(codes);
      if (set.size === 1 && set.has(422)) {
        this.logger.info(
          { instance },
          'Nova: the instance is not yet associated with a host; event dropped as Cyborg drops it',
        );
      } else {
        this.logger.error(
          { instance, codes, answer: text.slice(0, 500) },
          'Nova refused accelerator-request-bound events; dropped',
        );
      }
      return true;
    }
    if (res.status === 401 && !renewed) {
      this.o.credentials.invalidate();
      return this.send(instance, events, true);
    }
    if (res.status >= 500 || res.status === 429 || res.status === 401 || res.status === 408) {
      return this.attemptFailed(instance, `Nova answered ${res.status}: ${text.slice(0, 200)}`);
    }
    this.logger.error(
      { instance, status: res.status, answer: text.slice(0, 500) },
      'Nova refused accelerator-request-bound events; dropped',
    );
    return true;
  }

  private attemptFailed(instance: string, why: string): false {
    this.failedAttempts++;
    this.lastError = why;
    this.logger.warn({ instance, err: why }, 'Nova events: not delivered; kept and retried');
    return false;
  }
}
