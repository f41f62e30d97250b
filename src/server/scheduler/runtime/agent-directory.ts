/**
 * Every host's agent as this scheduler can reach it: the links it follows
 * (core.links) and, when several schedulers share the database, the agents
 * another scheduler follows, dialled directly for the calls a request needs
 * (RecordBinding for a bind, PrepareMigration, a clean's capability check).
 * Whether such an agent is connected is what its follower wrote in the
 * database, read again before each request that needs it (`refresh`).
 */
import type { Store } from '../store/store.js';
import { type AgentDialDeps, type AgentHandle, type AgentLink, RemoteAgent } from './agent-link.js';

export class AgentDirectory {
  private readonly remote = new Map<string, RemoteAgent>();

  constructor(
    private readonly links: ReadonlyMap<string, AgentLink>,
    private readonly store: Store,
    private readonly dial: (host: string) => AgentDialDeps,
  ) {}

  /** The host's agent: followed here, or (with `refresh` first) followed by another scheduler. */
  get(host: string): AgentHandle | undefined {
    return this.links.get(host) ?? this.remote.get(host);
  }

  /**
   * Reads from the database the hosts among `hosts` that this scheduler does
   * not follow (only where schedulers share the database): their endpoint,
   * features and whether their follower is connected to them.
   */
  async refresh(hosts: Iterable<string>): Promise<void> {
    if (!this.store.leases) return;
    for (const name of new Set(hosts)) {
      if (this.links.has(name)) continue;
      const h = await this.store.getHost(name).catch(() => null);
      let agent = this.remote.get(name);
      if (!h) {
        agent?.close();
        this.remote.delete(name);
        continue;
      }
      if (!agent || agent.endpoint !== h.endpoint || agent.features.join() !== h.features.join()) {
        agent?.close();
        agent = new RemoteAgent(name, h.endpoint, h.features, this.dial(name));
        this.remote.set(name, agent);
      }
      agent.isConnected = h.connected;
    }
  }

  close(): void {
    for (const a of this.remote.values()) a.close();
    this.remote.clear();
  }
}
