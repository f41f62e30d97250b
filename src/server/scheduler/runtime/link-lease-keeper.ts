/**
 * Several schedulers on one database (docs/decisions.md 37): each
 * host's agent link — inventory follow, cleanup dispatch and re-attach — is
 * owned by one scheduler at a time, through a lease in the database.
 *
 * Every `intervalMs` the keeper
 * 1. renews this scheduler's leases; a link whose lease another scheduler took
 *    (this one stalled past the TTL) is stopped, and a link whose agent moved
 *    to another endpoint is dialled again there;
 * 2. adopts hosts whose lease expired (their owner died without a word, or
 *    stopped): claims the lease and dials the stored endpoint; the link's
 *    snapshot and `dispatchBacklog` re-attach running cleanups by job id;
 * 3. wakes links whose agent is heard from (its heartbeats reach another
 *    scheduler) while the link is down, and says "connected" again in the
 *    database for links that are (another scheduler may have written otherwise).
 *
 * With a TTL of 6 s and a look every 2 s, a host whose owner died is owned
 * again within 8 s of its last renewal, plus the time to dial.
 */
import type { Logger } from 'pino';
import type { LeasedHost, LinkLeases } from '../usecases/unit-of-work.js';
import type { UseCases } from '../usecases/use-cases.js';
import type { AgentLinks } from './agent-links.js';

export interface LeaseTiming {
  /** How long a lease lasts without renewal. */
  ttlMs: number;
  /** How often leases are renewed and expired ones adopted. */
  intervalMs: number;
}

export const DEFAULT_LEASE_TIMING: LeaseTiming = { ttlMs: 6_000, intervalMs: 2_000 };

export interface LinkLeaseKeeperDeps {
  useCases: UseCases;
  leases: LinkLeases;
  /** This scheduler's id: the lease owner. */
  owner: string;
  /** The links followed here: dialled (again) for a lease taken, stopped for a lease lost. */
  links: AgentLinks;
  /** After each look: dispatch the cleanups of the hosts followed here. */
  afterTick: () => void;
  /** After each look: whether the database answered it (and why not). */
  onDatabase?: (reachable: boolean, why?: string) => void;
  logger: Logger;
  timing?: Partial<LeaseTiming>;
}

export class LinkLeaseKeeper {
  readonly timing: LeaseTiming;
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private stopped = false;
  /** The agent's last heartbeat seen by the keeper while its link was down (poke once per heartbeat). */
  private readonly heard = new Map<string, string>();

  constructor(private readonly deps: LinkLeaseKeeperDeps) {
    this.timing = { ...DEFAULT_LEASE_TIMING, ...deps.timing };
  }

  /** Takes (or keeps) the lease on `host` for this scheduler: whether it may follow it (never once stopping). */
  claim(host: string): Promise<boolean> {
    if (this.stopped) return Promise.resolve(false);
    return this.deps.leases.claim(host, this.deps.owner, this.timing.ttlMs);
  }

  start(): void {
    const loop = () => {
      if (this.stopped) return;
      this.running = this.tick()
        .then(() => this.deps.onDatabase?.(true))
        .catch((err) => {
          const why = (err as Error).message;
          this.deps.logger.warn({ err: why }, 'link leases: this look failed; next one soon');
          if (!this.stopped) this.deps.onDatabase?.(false, why);
        })
        .finally(() => {
          this.running = null;
          if (!this.stopped) this.timer = setTimeout(loop, this.timing.intervalMs);
        });
    };
    loop();
  }

  /** One look: renew, adopt, wake. Exposed for tests. */
  async tick(): Promise<void> {
    const { leases, owner, links, logger } = this.deps;
    // Only the links asked about: one a registration opens meanwhile has a fresh lease.
    const asked = links.hosts();
    const held = await leases.renew(owner, asked, this.timing.ttlMs);
    if (this.stopped) return;
    const heldNow = new Set(held.map((h) => h.host));
    for (const host of asked) {
      if (!links.has(host) || heldNow.has(host)) continue;
      logger.warn(
        { host },
        'another scheduler follows this host now (this one did not renew its lease in time); link closed here',
      );
      links.drop(host);
      this.heard.delete(host);
    }
    for (const h of held) await this.keepUp(h);
    for (const h of await leases.expired()) {
      if (this.stopped) return;
      if (!(await leases.claim(h.host, owner, this.timing.ttlMs))) continue;
      logger.info(
        { host: h.host, endpoint: h.endpoint },
        'adopted the link of a host whose scheduler went away (its lease expired)',
      );
      links.connect(h.host, h.endpoint, h.features);
    }
    this.deps.afterTick();
  }

  private async keepUp(h: LeasedHost): Promise<void> {
    const link = this.deps.links.get(h.host);
    if (!link) return;
    if (!link.matches(h.endpoint, h.features)) {
      // The agent registered a new endpoint through another scheduler.
      this.deps.links.connect(h.host, h.endpoint, h.features);
      return;
    }
    if (link.isConnected) {
      this.heard.delete(h.host);
      if (!h.connected) await this.deps.useCases.setHostConnected(h.host, true);
      return;
    }
    if (this.heard.get(h.host) !== h.lastSeen) {
      this.heard.set(h.host, h.lastSeen);
      link.poke();
    }
  }

  /** Stops looking and expires this scheduler's leases, so the others adopt its hosts at their next look. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running;
    await this.deps.leases
      .release(this.deps.owner)
      .catch((err) =>
        this.deps.logger.warn(
          { err: (err as Error).message },
          'link leases: could not release them; they expire',
        ),
      );
  }
}
