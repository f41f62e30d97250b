/**
 * Every host's agent as this scheduler can reach it: the links it follows
 * (agent-links.ts) and, when several schedulers share the database, the agents
 * another scheduler follows, dialled directly for the calls a request needs
 * (RecordBinding for a bind, PrepareMigration, a clean's capability check).
 * Whether such an agent is connected is what its follower wrote in the
 * database: for a bind, the host row its unit locked (`view` judges it
 * without making a client; `observe` makes the client after the commit), for
 * the other requests read again, at most once a second per host (`refresh`).
 */
import { unlessNotFound } from '../../../errors.js';
import type { HostName } from '../../../identifiers.js';
import type { AgentCallFailure, AgentPort, AgentView } from '../app/agent-port.js';
import type { HostRecord } from '../domain/host.js';
import type { UseCases } from '../usecases/use-cases.js';
import { type AgentCallsHandle, type AgentDialDeps, agentCallFailure, RemoteAgent } from './agent-link.js';
import type { AgentLinks } from './agent-links.js';

/**
 * How long what the database said of a host followed elsewhere is trusted.
 * Staleness is safe: the call the request then makes (RecordBinding) is what
 * proves the agent is there, and a bind it does not confirm is undone.
 */
const FRESH_MS = 1_000;
/** Direct clients kept at most (least recently used closed first): one channel each. */
const MAX_REMOTE = 256;

export class AgentDirectory implements AgentPort {
  private readonly remote = new Map<string, RemoteAgent>();
  private readonly checkedAt = new Map<string, number>();

  constructor(
    private readonly links: AgentLinks,
    private readonly useCases: UseCases,
    private readonly dial: (host: string) => AgentDialDeps,
  ) {}

  /** The host's agent: followed here, or (with `refresh` first) followed by another scheduler. */
  get(host: string): AgentCallsHandle | undefined {
    return this.links.get(host) ?? this.remote.get(host);
  }

  /**
   * Reads from the database the hosts among `hosts` that this scheduler does
   * not follow (only where schedulers share the database): their endpoint,
   * features and whether their follower is connected to them. A host the
   * database no longer has loses its client; a database that does not answer
   * changes nothing here and rejects (it says nothing of the host).
   */
  async refresh(hosts: Iterable<HostName>): Promise<void> {
    if (!this.useCases.leases) return;
    const now = Date.now();
    for (const name of new Set(hosts)) {
      if (this.links.has(name) || now - (this.checkedAt.get(name) ?? -Infinity) < FRESH_MS) continue;
      const h = await this.useCases.getHost(name).catch(unlessNotFound);
      if (h) {
        this.observe(h);
      } else {
        this.remote.get(name)?.close();
        this.remote.delete(name);
        this.checkedAt.delete(name);
      }
    }
  }

  /**
   * The host's agent as the links and the record say, made of nothing but
   * them: no client is made, closed or kept (a bind's unit judges its gate by it).
   */
  view(h: HostRecord): AgentView | undefined {
    const own = this.links.get(h.name);
    if (own || !this.useCases.leases) return own;
    return { host: h.name, isConnected: h.connected, has: (f) => h.features.includes(f) };
  }

  /**
   * The host's agent to call, given its record as just read (a bind's unit
   * read it under a lock): followed here, or another scheduler's, as the record says.
   */
  observe(h: HostRecord): AgentCallsHandle | undefined {
    const own = this.links.get(h.name);
    if (own || !this.useCases.leases) return own;
    let agent = this.remote.get(h.name);
    if (!agent?.matches(h.endpoint, h.features)) {
      agent?.close();
      agent = new RemoteAgent(h.name, h.endpoint, h.features, this.dial(h.name));
    }
    // Most recently used last; the oldest go past MAX_REMOTE.
    this.remote.delete(h.name);
    this.remote.set(h.name, agent);
    for (const [name, old] of this.remote) {
      if (this.remote.size <= MAX_REMOTE) break;
      old.close();
      this.remote.delete(name);
      this.checkedAt.delete(name);
    }
    agent.isConnected = h.connected;
    this.checkedAt.set(h.name, Date.now());
    return agent;
  }

  failure(err: unknown): AgentCallFailure {
    return agentCallFailure(err);
  }

  close(): void {
    for (const a of this.remote.values()) a.close();
    this.remote.clear();
    this.checkedAt.clear();
  }
}
