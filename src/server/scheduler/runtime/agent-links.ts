/**
 * The agent links this scheduler follows, one per host (with several
 * schedulers on one database, the hosts it holds the lease of): dialled when
 * an agent registers or a lease is adopted, stopped when another scheduler
 * takes the host, the host is deleted, or the scheduler stops. Each host keeps
 * its inflow budget across links, so an agent that registers again (a new
 * link) does not start with a full one.
 */
import type { Logger } from 'pino';
import type { HostName } from '../../../identifiers.js';
import type { Metrics } from '../../metrics.js';
import { type HostInflowLimits, InflowBudget } from '../domain/inventory-bounds.js';
import type { UseCases } from '../usecases/use-cases.js';
import { type AgentDialDeps, AgentLink } from './agent-link.js';

export interface AgentLinksDeps {
  useCases: UseCases;
  logger: Logger;
  metrics: Metrics;
  inflow: HostInflowLimits;
  /** The channel and credential for a host's agent. */
  dial: (host: string) => AgentDialDeps;
  /**
   * A link's inventory stream is (re)established (`connected`: the moment to
   * dispatch the host's cleanups), or it broke and the host is written
   * disconnected.
   */
  onConnection: (host: HostName, connected: boolean) => void;
}

export class AgentLinks {
  private readonly links = new Map<string, AgentLink>();
  private readonly budgets = new Map<string, InflowBudget>();

  constructor(private readonly deps: AgentLinksDeps) {}

  get(host: string): AgentLink | undefined {
    return this.links.get(host);
  }

  has(host: string): boolean {
    return this.links.has(host);
  }

  get size(): number {
    return this.links.size;
  }

  /** The hosts followed here. */
  hosts(): HostName[] {
    return [...this.links.values()].map((l) => l.host);
  }

  /** (Re)creates the link to a host's agent and starts following it. */
  connect(host: HostName, endpoint: string, features: string[]): void {
    this.links.get(host)?.stop();
    const budget = this.budgets.get(host) ?? new InflowBudget(this.deps.inflow, Date.now());
    this.budgets.set(host, budget);
    const { useCases, logger, metrics, inflow, dial, onConnection } = this.deps;
    const link = new AgentLink(host, endpoint, features, {
      useCases,
      logger,
      ...dial(host),
      metrics,
      inflow,
      budget,
      onConnection,
    });
    this.links.set(host, link);
    link.start();
  }

  /** Stops following a host; whether it was followed here. */
  drop(host: string): boolean {
    const link = this.links.get(host);
    if (!link) return false;
    link.stop();
    this.links.delete(host);
    return true;
  }

  stopAll(): void {
    for (const host of this.hosts()) this.drop(host);
  }
}
