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
 */
import type { Logger } from 'pino';
import { Gauge, type Registry } from 'prom-client';
import type { Arq } from '../domain/arq.js';
import type { TokenSource } from '../placement/keystone.js';
import type { UseCases } from '../usecases/use-cases.js';

export const NOVA_MICROVERSION = '2.82';

export interface NovaEventsOptions {
  /** Nova's compute endpoint (…/v2.1). */
  url: string;
  credentials: TokenSource;
  timeoutMs: number;
  retryMaxMs: number;
  fetch?: typeof fetch;
}

type Owed = { arq: string; instance: string; status: 'completed' | 'failed' };

export class NovaEvents {
  private wake: (() => void) | null = null;
  private stopped = false;
  private loopDone: Promise<void> | null = null;
  private readonly abort = new AbortController();
  /** Events delivered (or dropped as Cyborg drops them), for status and tests. */
  delivered = 0;
  /** Attempts that Nova did not take (down, 5xx): the events stay owed. */
  failedAttempts = 0;
  lastError = '';
  /** Events owed at the last pass (including those whose bind still runs). */
  owed = 0;

  constructor(
    private readonly useCases: UseCases,
    private readonly o: NovaEventsOptions,
    /** Whether the ARQ's bind is still running here (its outcome is not final yet). */
    private readonly inFlight: (arqUuid: string) => boolean,
    private readonly logger: Logger,
  ) {}

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
      'accelerator-request-bound events Nova has not taken yet',
      () => this.owed,
    );
    gauge(
      'berth_cyborg_nova_events_delivered',
      'Events Nova took (or refused for good) since the start',
      () => this.delivered,
    );
    gauge(
      'berth_cyborg_nova_events_failed_attempts',
      'Attempts to tell Nova that it did not answer or refused for now (the events stay owed) since the start',
      () => this.failedAttempts,
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
    while (!this.stopped) {
      let retry = false;
      try {
        retry = await this.pass();
      } catch (err) {
        retry = true;
        this.lastError = (err as Error).message;
        this.logger.warn({ err: this.lastError }, 'Nova events: the outbox could not be read');
      }
      backoff = retry ? Math.min(backoff * 2, this.o.retryMaxMs) : 200;
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, retry ? backoff : 30_000);
        this.wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
      this.wake = null;
    }
  }

  /** One pass over the outbox; true when something is still owed and must be retried. */
  private async pass(): Promise<boolean> {
    const all = await this.useCases.novaEventsOwed();
    this.owed = all.length;
    const owed: Owed[] = all
      .filter((a: Arq) => a.novaEvent && !this.inFlight(a.uuid))
      .map((a) => ({ arq: a.uuid, instance: a.novaEvent!.instanceUuid, status: a.novaEvent!.status }));
    const byInstance = new Map<string, Owed[]>();
    for (const e of owed) byInstance.set(e.instance, [...(byInstance.get(e.instance) ?? []), e]);
    let retry = false;
    for (const [instance, events] of byInstance) {
      if (this.stopped) return false;
      const done = await this.send(instance, events);
      if (!done) {
        retry = true;
        continue;
      }
      for (const e of events) {
        await this.useCases.novaEventDelivered(e.arq, { instanceUuid: e.instance, status: e.status });
        this.delivered++;
        this.owed--;
      }
    }
    return retry;
  }

  /** true when the events are settled (taken, or refused for good); false to retry. */
  private async send(instance: string, events: Owed[], renewed = false): Promise<boolean> {
    const url = `${this.o.url.replace(/\/+$/, '')}/os-server-external-events`;
    const body = {
      events: events.map((e) => ({
        name: 'accelerator-request-bound',
        server_uuid: e.instance,
        tag: e.arq,
        status: e.status,
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
