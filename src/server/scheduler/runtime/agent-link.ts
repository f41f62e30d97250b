/**
 * The scheduler's connection to one host agent. It dials the endpoint the agent
 * registered, follows WatchInventory (a snapshot, then deltas; resumed from the
 * last applied revision of the same agent epoch after a break, with jittered
 * backoff), and applies every message to the store in order. The calls the
 * scheduler makes to the agent (CleanupDevice, RecordBinding, PrepareMigration)
 * are AgentCalls, which a scheduler that does not follow the host makes too.
 */
import type { Readable } from 'node:stream';
import {
  type ChannelCredentials,
  type ClientReadableStream,
  credentials,
  Metadata,
  type ServiceError,
  status,
} from '@grpc/grpc-js';
import type { Logger } from 'pino';
import {
  AgentServiceClient,
  type CertificateLink,
  type CleanupDeviceResponse,
  type MigrationDevice,
  type PrepareMigrationResponse,
  type WatchInventoryResponse,
} from '../../../gen/berth/agent/v1/agent.js';
import type { Device as AgentDevice } from '../../../gen/berth/agent/v1/device.js';
import { type HostName, isPciAddress, type PciAddress } from '../../../identifiers.js';
import { Backoff, CHANNEL_OPTIONS, sleep } from '../../../transport/channel.js';
import { decodeServiceError } from '../../grpc/status.js';
import type { Metrics } from '../../metrics.js';
import type { AgentCallFailure } from '../app/agent-port.js';
import { factsFromAgent } from '../convert.js';
import type { DeviceFacts } from '../domain/device-state.js';
import {
  factsBytes,
  HOST_INFLOW_LIMITS,
  type HostInflowLimits,
  INVENTORY_LIMITS,
  InflowBudget,
  inventoryBoundBroken,
} from '../domain/inventory-bounds.js';
import type { UseCases } from '../usecases/use-cases.js';

/**
 * The channel module's options (keepalive, reconnect backoff), with one host's
 * largest inventory message as the receive limit (domain/inventory-bounds.ts
 * HOST_INFLOW_LIMITS).
 */
export const CLIENT_OPTIONS = {
  ...CHANNEL_OPTIONS,
  'grpc.max_receive_message_length': HOST_INFLOW_LIMITS.messageBytes,
};

/** How a scheduler reaches one host's agent: the channel and the credential it presents. */
export interface AgentDialDeps {
  credentials?: ChannelCredentials;
  /** The bearer token for a call to this host's agent (the scheduler's credential for that host). */
  credential?: (host: string) => string;
}

export interface AgentLinkDeps extends AgentDialDeps {
  useCases: UseCases;
  logger: Logger;
  /** Called once the host is written connected (the stream is (re)established) or disconnected. */
  onConnection: (host: HostName, connected: boolean) => void;
  /** What one host may store and send (default HOST_INFLOW_LIMITS). */
  inflow?: HostInflowLimits;
  /**
   * The host's inflow budget, kept by the scheduler across links, so an agent
   * that registers again (a new link) does not start with a full one.
   */
  budget?: InflowBudget;
  /** Counts refused updates (berth_inventory_refused_total). */
  metrics?: Metrics;
}

/** Refused devices are logged at most this often per host (with the count since). */
const REFUSAL_LOG_INTERVAL_MS = 10_000;

/** An inventory update the host's inflow budget cannot take now: the stream is dropped until it refills. */
class InflowRefused extends Error {
  constructor(
    readonly bytes: number,
    readonly waitMs: number,
  ) {
    super(`an update of ${bytes} bytes is beyond the host's inflow budget`);
  }
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
    readonly host: HostName,
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

  /** CleanupDevice, stating the last link of the media's certificate chain the scheduler holds (null: none). */
  cleanupDevice(
    address: string,
    jobId: string,
    previous: CertificateLink | null = null,
  ): ClientReadableStream<CleanupDeviceResponse> {
    // No deadline: a cleanup can run for hours (shred) and the dispatcher
    // re-attaches only when the link reconnects, so a deadline would strand the
    // job. A dead agent is detected by keepalive (20 s ping, 10 s timeout),
    // which ends the stream with UNAVAILABLE.
    return this.client.cleanupDevice(
      { address, jobId, previousCertificate: previous ?? undefined },
      this.metadata(),
    );
  }

  /** RecordBinding: the agent records, durably, that the device is handed to a guest (bounded by a deadline). */
  recordBinding(
    address: string,
    arqUuid: string,
    instanceUuid: string,
    projectId: string,
    timeoutMs = 10_000,
  ): Promise<void> {
    return new Promise((resolve, reject) => {
      this.client.recordBinding(
        { address, arqUuid, instanceUuid, projectId },
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

/** A host's agent as the directory hands it out: its calls, and whether its follower is connected. */
export type AgentCallsHandle = AgentCalls & { readonly isConnected: boolean };

export class AgentLink extends AgentCalls {
  private readonly abort = new AbortController();
  private stream: ClientReadableStream<WatchInventoryResponse> | null = null;
  private epoch = '';
  private revision = 0;
  private connected = false;
  private readonly log: Logger;

  constructor(
    host: HostName,
    endpoint: string,
    features: readonly string[],
    private readonly deps: AgentLinkDeps,
  ) {
    super(host, endpoint, features, deps);
    this.log = deps.logger.child({ host, endpoint });
    this.inflow = deps.inflow ?? HOST_INFLOW_LIMITS;
    this.budget = deps.budget ?? new InflowBudget(this.inflow, Date.now());
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
      let pause: number | null = null;
      try {
        await this.followOnce(() => backoff.reset());
      } catch (err) {
        if (this.abort.signal.aborted) break;
        pause = this.onStreamError(err);
      }
      // A link stopped on purpose (this scheduler stops, or another one took
      // the host over) says nothing of the agent: the host's state is not its to write.
      if (this.connected && !this.abort.signal.aborted) {
        this.connected = false;
        const written = await this.deps.useCases.setHostConnected(this.host, false).then(
          () => true,
          () => false,
        );
        if (written) this.deps.onConnection(this.host, false);
      }
      this.wake = new AbortController();
      // A refused update waits for the budget to refill (a heartbeat does not cut it short).
      if (pause !== null) await sleep(pause, this.abort.signal);
      else await sleep(backoff.next(), AbortSignal.any([this.abort.signal, this.wake.signal]));
    }
  }

  private wake: AbortController | null = null;

  /** Logs why the stream ended; the time to wait before resuming when the host went beyond a bound, else null. */
  private onStreamError(err: unknown): number | null {
    if (err instanceof InflowRefused) {
      this.refuse('inflow_rate', {
        bytes: err.bytes,
        limit: `${this.inflow.bytesPerSecond} bytes/s, bursts of ${this.inflow.burstBytes} (bytesPerSecond, burstBytes)`,
        resumeInMs: err.waitMs,
      });
      return err.waitMs;
    }
    const e = err as { code?: number; message?: string };
    if (e.code === status.RESOURCE_EXHAUSTED) {
      this.refuse('message_bytes', {
        limit: `inventory messages of at most ${this.inflow.messageBytes} bytes (messageBytes)`,
        err: e.message,
      });
      return null;
    }
    this.log.warn({ code: e.code, err: e.message }, 'inventory stream from the agent broke; reconnecting');
    return null;
  }

  /** One refusal of this host's inventory: a log line naming the limit and a metric. */
  private refuse(reason: string, detail: Record<string, unknown>): void {
    this.deps.metrics?.inventoryRefused(this.host, reason);
    this.log.warn(
      { reason, ...detail },
      "host's inventory update refused: beyond a bound; other hosts are unaffected",
    );
  }

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
      for await (const msgs of inBatches<WatchInventoryResponse>(stream, INVENTORY_BATCH)) {
        onMessage();
        for (const part of inventoryUnits(msgs)) await this.apply(part);
        const msg = msgs[msgs.length - 1]!;
        if (!this.connected) {
          this.connected = true;
          await this.deps.useCases.setHostConnected(this.host, true);
          this.log.info({ revision: msg.revision }, 'following the agent inventory');
          this.deps.onConnection(this.host, true);
        }
      }
    } finally {
      this.stream = null;
    }
  }

  /** Devices of this host the scheduler holds, with the bytes each counts for (the per-host bounds). */
  private held = new Map<string, number>();
  private readonly inflow: HostInflowLimits;
  private readonly budget: InflowBudget;
  private refusedLoggedAt = Number.NEGATIVE_INFINITY;
  private refusedSinceLog = 0;

  /**
   * The agent's devices within the inventory bounds, and what the host then
   * holds; the others are not stored (one host must not break the fleet's
   * listing) and logged with the limit.
   */
  private bounded(
    devices: AgentDevice[],
    held: Map<string, number>,
  ): { facts: DeviceFacts[]; held: Map<string, number>; stored: number; refused: number } {
    const out: DeviceFacts[] = [];
    let total = [...held.values()].reduce((a, b) => a + b, 0);
    let stored = 0;
    let refusedBytes = 0;
    // One log line per update, not per device: a host refused by the thousand must not flood the log.
    const refused: { count: number; first: string; limit: string } = { count: 0, first: '', limit: '' };
    for (const [i, d] of devices.entries()) {
      const facts = factsFromAgent(d, `devices[${i}]`);
      const broken = inventoryBoundBroken(facts);
      const size = factsBytes(facts);
      const was = held.get(d.address);
      const limit = broken
        ? broken
        : was === undefined && held.size >= INVENTORY_LIMITS.devicesPerHost
          ? `more than ${INVENTORY_LIMITS.devicesPerHost} devices (devicesPerHost)`
          : total - (was ?? 0) + size > this.inflow.storedBytes
            ? `more than ${this.inflow.storedBytes} bytes of devices on one host (storedBytes)`
            : null;
      if (limit) {
        if (refused.count++ === 0) Object.assign(refused, { first: d.address.slice(0, 64), limit });
        refusedBytes += size;
        continue;
      }
      total += size - (was ?? 0);
      held.set(d.address, size);
      stored += size;
      out.push(facts);
    }
    if (refused.count > 0) {
      this.deps.metrics?.inventoryRefused(this.host, 'device_bound', refused.count);
      this.refusedSinceLog += refused.count;
      const now = Date.now();
      if (now - this.refusedLoggedAt >= REFUSAL_LOG_INTERVAL_MS) {
        this.log.warn(
          { refused: this.refusedSinceLog, address: refused.first, limit: refused.limit },
          'devices refused: beyond an inventory bound (the latest one named; one line per 10 s)',
        );
        this.refusedLoggedAt = now;
        this.refusedSinceLog = 0;
      }
    }
    return { facts: out, held, stored, refused: refusedBytes };
  }

  /** Spends the host's inflow budget on an update, or refuses it (InflowRefused) with the time to wait. */
  private charge(bytes: number): void {
    const now = Date.now();
    if (!this.budget.take(bytes, now)) throw new InflowRefused(bytes, this.budget.waitMs(bytes, now));
  }

  /**
   * One unit for a snapshot, or for changes of distinct addresses that came
   * together (a PF's VFs enabled at once: one unit, not one each).
   */
  private async apply(msgs: WatchInventoryResponse[]): Promise<void> {
    const last = msgs[msgs.length - 1];
    if (!last) return;
    const store = this.deps.useCases;
    const first = msgs[0]!.event;
    if (first?.$case === 'snapshot') {
      // A snapshot is charged what it stores (at most storedBytes, so it always
      // fits a full budget); its size is bounded by messageBytes.
      const { facts, held, stored } = this.bounded(first.value.devices, new Map());
      this.charge(stored);
      await store.upsertInventory(this.host, { kind: 'snapshot', revision: last.revision, devices: facts });
      this.held = held;
    } else {
      const held = new Map(this.held);
      const added: AgentDevice[] = [];
      const changed: AgentDevice[] = [];
      const removed: PciAddress[] = [];
      let charged = 0;
      for (const { event: ev } of msgs) {
        if (ev?.$case === 'removed') {
          held.delete(ev.value.address);
          // A removal of an address the agent could never have reported matches nothing.
          if (isPciAddress(ev.value.address)) removed.push(ev.value.address);
          // A removal costs little, but not nothing: a stream of them is a stream of events.
          charged += 256;
        } else if (ev?.$case === 'added') added.push(ev.value);
        else if (ev?.$case === 'changed') changed.push(ev.value);
      }
      const bounded = this.bounded([...added, ...changed], held);
      // A change counts whether it is stored or refused.
      this.charge(Math.max(charged + bounded.stored + bounded.refused, 256));
      const stored = new Set(bounded.facts.map((f) => f.address));
      const addedAt = new Set(added.map((d) => d.address));
      await store.upsertInventory(this.host, {
        kind: 'delta',
        revision: last.revision,
        added: bounded.facts.filter((f) => addedAt.has(f.address)),
        changed: bounded.facts.filter((f) => stored.has(f.address) && !addedAt.has(f.address)),
        removed,
      });
      this.held = held;
    }
    this.epoch = last.epoch;
    this.revision = last.revision;
  }

  stop(): void {
    this.abort.abort();
    this.stream?.cancel();
    this.close();
  }
}

/** Inventory messages taken together at most (what one unit applies). */
const INVENTORY_BATCH = 1024;

/**
 * How long a batch gathers messages at most, from its first (decision 97): a
 * burst the agent streamed for 0.4 s was one unit, applied only at its end.
 */
const INVENTORY_BATCH_WAIT_MS = 40;

/**
 * The messages of a stream a batch at a time (at most `max`), as a group
 * commit: the first waits, the rest are those that arrived behind it. The
 * stream is read as fast as it delivers (flowing, paused only while `max`
 * wait unread), so what comes while a batch is applied is the next batch, and
 * a turn of the event loop brings every message decoded by then, not only the
 * 16 a gRPC client stream buffers (decision 87 read 16 a turn; decision 97).
 * A batch keeps gathering while each turn brings more, and ends at the first
 * two turns that bring none, at `max` messages, or `maxWaitMs` after it began
 * however busy the stream. Messages received before the stream failed are
 * yielded before its error.
 */
export async function* inBatches<T>(
  stream: NodeJS.ReadableStream,
  max: number,
  maxWaitMs: number = INVENTORY_BATCH_WAIT_MS,
): AsyncGenerator<T[]> {
  const queue: T[] = [];
  let ended = false;
  let failed: { error: unknown } | null = null;
  let wake: (() => void) | null = null;
  const signal = () => {
    const w = wake;
    wake = null;
    w?.();
  };
  const onData = (m: T) => {
    queue.push(m);
    if (queue.length >= max) stream.pause();
    signal();
  };
  const onEnd = () => {
    ended = true;
    signal();
  };
  const onError = (error: unknown) => {
    failed = { error };
    signal();
  };
  stream.on('data', onData);
  stream.on('end', onEnd);
  stream.on('error', onError);
  try {
    for (;;) {
      while (queue.length === 0) {
        if (failed) throw (failed as { error: unknown }).error;
        if (ended) return;
        await new Promise<void>((r) => {
          wake = r;
        });
      }
      const until = performance.now() + maxWaitMs;
      for (let idle = 0, seen = queue.length; queue.length < max && idle < 2 && performance.now() < until; ) {
        await new Promise<void>((r) => setImmediate(r));
        idle = queue.length === seen ? idle + 1 : 0;
        seen = queue.length;
      }
      const batch = queue.splice(0, max);
      if (queue.length < max && stream.isPaused() && !ended) stream.resume();
      yield batch;
    }
  } finally {
    stream.off('data', onData);
    stream.off('end', onEnd);
    stream.off('error', onError);
    // A stream left behind may still fail (a cancelled call says CANCELLED): not an unhandled error.
    stream.on('error', () => {});
    // As a for-await over the stream would: a consumer that stops early ends the stream.
    if (!ended && !failed) (stream as Readable).destroy();
  }
}

/**
 * Inventory messages cut into what one unit each applies, in order: a
 * snapshot alone; otherwise a run of changes in which no address comes twice
 * (a device added and removed again is two units, as it was two changes).
 */
export function inventoryUnits(msgs: readonly WatchInventoryResponse[]): WatchInventoryResponse[][] {
  const out: WatchInventoryResponse[][] = [];
  let run: WatchInventoryResponse[] = [];
  let addresses = new Set<string>();
  for (const m of msgs) {
    const ev = m.event;
    if (!ev) continue;
    const address = ev.$case === 'snapshot' ? null : ev.value.address;
    if (address === null || addresses.has(address)) {
      if (run.length > 0) out.push(run);
      run = [];
      addresses = new Set();
    }
    if (address === null) {
      out.push([m]);
      continue;
    }
    run.push(m);
    addresses.add(address);
  }
  if (run.length > 0) out.push(run);
  return out;
}

/** Whether a gRPC failure means "the agent could not be reached" (retry later) rather than a refusal. */
export function isUnreachable(err: unknown): boolean {
  const code = (err as { code?: number }).code;
  return code === status.UNAVAILABLE || code === status.DEADLINE_EXCEEDED || code === status.CANCELLED;
}

/** What a rejected AgentCalls call means. */
export function agentCallFailure(err: unknown): AgentCallFailure {
  const e = decodeServiceError(err as ServiceError);
  return {
    unreachable: isUnreachable(err),
    unimplemented: (err as { code?: number }).code === status.UNIMPLEMENTED,
    reason: e.reason && e.reason !== e.codeName ? e.reason : '',
    message: e.message,
  };
}
