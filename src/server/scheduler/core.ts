/** What every scheduler service handler needs: the store, the hub, the agent links, the dispatcher. */
import type { Logger } from 'pino';
import type { Metrics } from '../metrics.js';
import type { PlacementPort } from './placement/port.js';
import type { AgentDirectory } from './runtime/agent-directory.js';
import type { AgentLink } from './runtime/agent-link.js';
import type { CleanupDispatcher } from './runtime/cleanup-dispatcher.js';
import type { DeviceFeed } from './runtime/device-feed.js';
import type { EventHub } from './runtime/event-hub.js';
import type { Store } from './store/store.js';

export interface SchedulerCore {
  store: Store;
  hub: EventHub;
  /** Recent device events, read once for all WatchDevices streams. */
  feed: DeviceFeed;
  /** The agent links this scheduler follows (one per host; with several schedulers, the hosts it holds the lease of). */
  links: Map<string, AgentLink>;
  /** Every host's agent for the calls a request makes, followed here or by another scheduler. */
  agents: AgentDirectory;
  dispatcher: CleanupDispatcher;
  logger: Logger;
  metrics: Metrics;
  /** Identifies this scheduler in logs and RegisterResponse. */
  schedulerId: string;
  /** Seconds between agent re-registrations we ask for. */
  heartbeatSeconds: number;
  /** Operator-written principal subject → host (invariant 10); otherwise a subject names its host. */
  hostPrincipals: ReadonlyMap<string, string>;
  /** (Re)creates the link to a host's agent. */
  connectAgent(host: string, endpoint: string, features: string[]): void;
  /**
   * Whether this scheduler may follow `host`'s agent: always with a database of
   * its own; with a shared one, when it holds (or just took) the host's lease.
   */
  claimLink(host: string): Promise<boolean>;
  /** Placement reporting (placement/), when configured; null otherwise. */
  placement: PlacementPort | null;
}
