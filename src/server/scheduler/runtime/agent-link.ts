/**
 * The scheduler's connection to one host agent. It dials the endpoint the agent
 * registered, follows WatchInventory (a snapshot, then deltas; resumed from the
 * last applied revision of the same agent epoch after a break, with jittered
 * backoff), and applies every message to the store in order. The calls the
 * scheduler makes to the agent (CleanupDevice, RecordBinding, PrepareMigration)
 * are AgentCalls, which a scheduler that does not follow the host makes too.
 */
import {
  type ChannelCredentials,
  type ClientReadableStream,
  credentials,
  Metadata,
  status,
} from '@grpc/grpc-js';
import type { Logger } from 'pino';
import {
  AgentServiceClient,
  type CleanupDeviceResponse,
  type MigrationDevice,
  type PrepareMigrationResponse,
  type WatchInventoryResponse,
} from '../../../gen/berth/agent/v1/agent.js';
import type { Device as AgentDevice } from '../../../gen/berth/agent/v1/device.js';
import { factsFromAgent } from '../convert.js';
import type { DeviceFacts } from '../domain/device-state.js';
import { INVENTORY_LIMITS, inventoryBoundBroken } from '../domain/inventory-bounds.js';
import type { Store } from '../store/store.js';
import { Backoff, sleep } from './backoff.js';
import type { EventHub } from './event-hub.js';

export const CLIENT_OPTIONS = {
  'grpc.keepalive_time_ms': 20_000,
  'grpc.keepalive_timeout_ms': 10_000,
  'grpc.keepalive_permit_without_calls': 1,
  'grpc.max_receive_message_length': 128 * 1024 * 1024,
  'grpc.initial_reconnect_backoff_ms': 200,
  'grpc.max_reconnect_backoff_ms': 5_000,
};

/** How a scheduler reaches one host's agent: the channel and the credential it presents. */
export interface AgentDialDeps {
  credentials?: ChannelCredentials;
  /** The bearer token for a call to this host's agent (the scheduler's credential for that host). */
  credential?: (host: string) => string;
}

export interface AgentLinkDeps extends AgentDialDeps {
  store: Store;
  hub: EventHub;
  logger: Logger;
  /** Called when the inventory stream is (re)established: the moment to dispatch cleanups. */
  onConnected: (host: string) => void;
}

/**
 * The calls a scheduler makes to one host's agent: CleanupDevice,
 * RecordBinding, PrepareMigration. Any scheduler sharing the database may make
 * them (a bind through a replica that does not follow the host); following the
 * inventory and dispatching cleanups is the link's, one scheduler's at a time.
 */
export class AgentCalls {
  readonly client: AgentServiceClient;

  constructor(
    readonly host: string,
    readonly endpoint: string,
    readonly features: readonly string[],
    private readonly dial: AgentDialDeps,
  ) {
    this.client = new AgentServiceClient(
      endpoint,
      dial.credentials ?? credentials.createInsecure(),
      CLIENT_OPTIONS,
    );
  }

  has(feature: string): boolean {
    return this.features.includes(feature);
  }

  /** Whether this is still the agent a host record describes (same endpoint and features). */
  matches(endpoint: string, features: readonly string[]): boolean {
    return this.endpoint === endpoint && this.features.join() === features.join();
  }

  cleanupDevice(address: string, jobId: string): ClientReadableStream<CleanupDeviceResponse> {
    // No deadline: a cleanup can run for hours (shred) and the dispatcher
    // re-attaches only when the link reconnects, so a deadline would strand the
    // job. A dead agent is detected by keepalive (20 s ping, 10 s timeout),
    // which ends the stream with UNAVAILABLE.
    return this.client.cleanupDevice({ address, jobId }, this.metadata());
  }

  /** RecordBinding: the agent records, durably, that the device is handed to a guest (bounded by a deadline). */
  recordBinding(address: string, arqUuid: string, instanceUuid: string, timeoutMs = 10_000): Promise<void> {
    return new Promise((resolve, reject) => {
      this.client.recordBinding(
        { address, arqUuid, instanceUuid },
        this.metadata(),
        { deadline: Date.now() + timeoutMs },
        (err) => (err ? reject(err) : resolve()),
      );
    });
  }

  /** ReleaseDevice: the agent clears its journal's record of the burn of the device's media (bounded by a deadline). */
  releaseDevice(address: string, mediaKey: string, timeoutMs = 10_000): Promise<void> {
    return new Promise((resolve, reject) => {
      this.client.releaseDevice(
        { address, mediaKey },
        this.metadata(),
        { deadline: Date.now() + timeoutMs },
        (err) => (err ? reject(err) : resolve()),
      );
    });
  }

  /** Runs PrepareMigration to completion (bounded by a deadline). */
  prepareMigration(
    migrationId: string,
    devices: MigrationDevice[],
    timeoutMs = 30_000,
  ): Promise<PrepareMigrationResponse[]> {
    return new Promise((resolve, reject) => {
      const out: PrepareMigrationResponse[] = [];
      const s = this.client.prepareMigration({ migrationId, devices }, this.metadata(), {
        deadline: Date.now() + timeoutMs,
      });
      s.on('data', (m: PrepareMigrationResponse) => out.push(m));
      s.on('error', reject);
      s.on('end', () => resolve(out));
    });
  }

  protected metadata(): Metadata {
    const md = new Metadata();
    if (this.dial.credential) md.set('authorization', `Bearer ${this.dial.credential(this.host)}`);
    return md;
  }

  close(): void {
    this.client.close();
  }
}

/**
 * A host's agent as a scheduler that does not follow it sees it: its calls,
 * and whether the scheduler that follows it says it is connected.
 */
export class RemoteAgent extends AgentCalls {
  isConnected = false;
}

/** What a bind, a clean or a migration needs of a host's agent, followed here or not. */
export type AgentHandle = AgentCalls & { readonly isConnected: boolean };

export class AgentLink extends AgentCalls {
  private readonly abort = new AbortController();
  private stream: ClientReadableStream<WatchInventoryResponse> | null = null;
  private epoch = '';
  private revision = 0;
  private connected = false;
  private readonly log: Logger;

  constructor(
    host: string,
    endpoint: string,
    features: readonly string[],
    private readonly deps: AgentLinkDeps,
  ) {
    super(host, endpoint, features, deps);
    this.log = deps.logger.child({ host, endpoint });
  }

  get isConnected(): boolean {
    return this.connected;
  }

  start(): void {
    void this.followLoop();
  }

  private async followLoop(): Promise<void> {
    const backoff = new Backoff();
    while (!this.abort.signal.aborted) {
      try {
        await this.followOnce(() => backoff.reset());
      } catch (err) {
        if (this.abort.signal.aborted) break;
        const e = err as { code?: number; message?: string };
        this.log.warn(
          { code: e.code, err: e.message },
          'inventory stream from the agent broke; reconnecting',
        );
      }
      // A link stopped on purpose (this scheduler stops, or another one took
      // the host over) says nothing of the agent: the host's state is not its to write.
      if (this.connected && !this.abort.signal.aborted) {
        this.connected = false;
        await this.deps.store.setHostConnected(this.host, false).catch(() => {});
        this.deps.hub.notify();
      }
      this.wake = new AbortController();
      await sleep(backoff.next(), AbortSignal.any([this.abort.signal, this.wake.signal]));
    }
  }

  private wake: AbortController | null = null;

  /**
   * The agent is alive (it just sent a heartbeat): retry the inventory stream
   * now instead of at the end of the backoff, so a link cut for long is back
   * within one heartbeat of the network healing.
   */
  poke(): void {
    this.wake?.abort();
  }

  private async followOnce(onMessage: () => void): Promise<void> {
    // No deadline: this stream lives as long as the link; keepalive (20 s ping,
    // 10 s timeout) detects a dead agent and the loop reconnects and resumes.
    const stream = this.client.watchInventory(
      { epoch: this.epoch, fromRevision: this.revision },
      this.metadata(),
    );
    this.stream = stream;
    try {
      for await (const msg of stream as AsyncIterable<WatchInventoryResponse>) {
        onMessage();
        await this.apply(msg);
        if (!this.connected) {
          this.connected = true;
          await this.deps.store.setHostConnected(this.host, true);
          this.log.info({ revision: msg.revision }, 'following the agent inventory');
          this.deps.onConnected(this.host);
        }
        this.deps.hub.notify();
      }
    } finally {
      this.stream = null;
    }
  }

  /** Devices of this host the scheduler holds (for the per-host bound). */
  private held = new Set<string>();

  /**
   * The agent's devices within the inventory bounds; the others are not stored
   * (one host must not break the fleet's listing) and logged with the limit.
   */
  private bounded(devices: AgentDevice[]): DeviceFacts[] {
    const out: DeviceFacts[] = [];
    for (const d of devices) {
      const facts = factsFromAgent(d);
      const broken = inventoryBoundBroken(facts);
      if (broken) {
        this.log.warn(
          { address: d.address.slice(0, 64), limit: broken },
          'device refused: beyond an inventory bound',
        );
        continue;
      }
      if (!this.held.has(d.address) && this.held.size >= INVENTORY_LIMITS.devicesPerHost) {
        this.log.warn(
          {
            address: d.address,
            limit: `more than ${INVENTORY_LIMITS.devicesPerHost} devices (devicesPerHost)`,
          },
          'device refused: beyond an inventory bound',
        );
        continue;
      }
      this.held.add(d.address);
      out.push(facts);
    }
    return out;
  }

  private async apply(msg: WatchInventoryResponse): Promise<void> {
    const ev = msg.event;
    if (!ev) return;
    const store = this.deps.store;
    if (ev.$case === 'snapshot') {
      this.held = new Set();
      await store.upsertInventory(this.host, {
        kind: 'snapshot',
        revision: msg.revision,
        devices: this.bounded(ev.value.devices),
      });
    } else {
      if (ev.$case === 'removed') this.held.delete(ev.value.address);
      await store.upsertInventory(this.host, {
        kind: 'delta',
        revision: msg.revision,
        added: ev.$case === 'added' ? this.bounded([ev.value]) : [],
        changed: ev.$case === 'changed' ? this.bounded([ev.value]) : [],
        removed: ev.$case === 'removed' ? [ev.value.address] : [],
      });
    }
    this.epoch = msg.epoch;
    this.revision = msg.revision;
  }

  stop(): void {
    this.abort.abort();
    this.stream?.cancel();
    this.close();
  }
}

/** Whether a gRPC failure means "the agent could not be reached" (retry later) rather than a refusal. */
export function isUnreachable(err: unknown): boolean {
  const code = (err as { code?: number }).code;
  return code === status.UNAVAILABLE || code === status.DEADLINE_EXCEEDED || code === status.CANCELLED;
}
