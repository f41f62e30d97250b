/**
 * A typed client for Berth's scheduler and agent services over the generated
 * grpc-js stubs (docs/sdk.md): promise-returning unary calls that take plain
 * objects (absent fields take the message's defaults) with a default
 * deadline, retries with backoff for calls the API declares safe to repeat
 * (`option idempotency_level`, read by retry-policy.ts), streams as async
 * iterables, watches that reconnect and resume where they were, bearer-token
 * and TLS options, and errors surfaced as BerthClientError carrying the gRPC
 * code name and the ErrorInfo reason. Every client's channel comes from
 * channel.ts: keepalive, reconnect backoff, message limits.
 */
import {
  Channel,
  type Client,
  type ClientReadableStream,
  connectivityState,
  Metadata,
  makeClientConstructor,
  type ServiceError,
  status,
} from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';
import {
  parseKeySet,
  publishedKeySet,
  type Verification,
  type VerifyOptions,
  verifyOffline,
} from '../erasure/verify.js';
import { AgentServiceClient } from '../gen/berth/agent/v1/agent.js';
import { AcceleratorRequestServiceClient } from '../gen/berth/scheduler/v1/accelerator_request.js';
import { CertificateServiceClient } from '../gen/berth/scheduler/v1/certificate.js';
import {
  DeviceServiceClient,
  type WatchCleanupRequest,
  type WatchCleanupResponse,
  type WatchDevicesRequest,
  type WatchDevicesResponse,
} from '../gen/berth/scheduler/v1/device_service.js';
import { HostServiceClient } from '../gen/berth/scheduler/v1/host.js';
import { InstanceServiceClient } from '../gen/berth/scheduler/v1/instance.js';
import { MigrationServiceClient } from '../gen/berth/scheduler/v1/migration.js';
import { PlacementServiceClient } from '../gen/berth/scheduler/v1/placement.js';
import { ProfileServiceClient } from '../gen/berth/scheduler/v1/profile.js';
import { RegistrationServiceClient } from '../gen/berth/scheduler/v1/registration.js';
import {
  Backoff,
  type ClientTls,
  channelCredentials,
  channelOptions,
  dialTarget,
  sleep,
} from '../transport/channel.js';
import { decodeServiceError } from '../transport/status.js';
import { type ClientFlagValues, loadClientTls, resolveClient } from './client-config.js';
import { completeRequest, type DeepPartial } from './request-messages.js';
import { isRetryable } from './retry-policy.js';

export { CertificateError } from '../erasure/certificate.js';
/**
 * Offline verification of an erasure certificate against a key set
 * (`parseKeySet` of what `berth host keys --save` writes): signature, the
 * key bound to the claimed host, chain link, identity; throws a
 * CertificateError saying what failed (docs/erasure-certificates.md).
 */
export {
  type HostKey,
  parseKeySet,
  type Verification,
  type VerifyOptions,
  verifyOffline as verifyErasureCertificate,
} from '../erasure/verify.js';
export { Backoff, type ClientTls, type DeepPartial };

export class BerthClientError extends Error {
  readonly code: number;
  readonly codeName: string;
  readonly reason: string | undefined;
  readonly fieldViolations: { field: string; description: string }[];
  readonly metadata: Record<string, string>;
  readonly method: string;

  constructor(method: string, err: ServiceError) {
    const d = decodeServiceError(err);
    super(d.message);
    this.name = 'BerthClientError';
    this.code = d.code;
    this.codeName = d.codeName;
    this.reason = d.reason;
    this.fieldViolations = d.fieldViolations;
    this.metadata = d.metadata;
    this.method = method;
  }
}

export interface ClientOptions {
  /**
   * `host:port`, or the replicas of one scheduler as `ip:port,ip:port` (the
   * channel uses the first that answers and moves on when it stops).
   */
  endpoint: string;
  /** Bearer token sent as `authorization: Bearer …`. */
  token?: string;
  /**
   * TLS: the CA verifying the server (else the system roots), a client
   * certificate and key for mutual TLS, the server name to verify when it is
   * not the endpoint's host. Without `tls`, the connection is plaintext.
   */
  tls?: ClientTls;
  /** Per-call deadline; default 30 s. */
  timeoutMs?: number;
  /** Attempts, on UNAVAILABLE, of calls declared NO_SIDE_EFFECTS or IDEMPOTENT; default 4. */
  retries?: number;
}

type Callback<Res> = (err: ServiceError | null, res: Res) => void;
type UnaryFn<Req, Res> = (req: Req, md: Metadata, opts: { deadline?: number }, cb: Callback<Res>) => unknown;

/**
 * Maps a generated client to its promise form: every unary method takes a
 * plain object (any field may be left out: it takes the message's default)
 * and returns a promise.
 */
export type Promisified<C> = {
  [K in keyof C as C[K] extends UnaryFn<infer _Req, infer _Res> ? K : never]: C[K] extends UnaryFn<
    infer Req,
    infer Res
  >
    ? (req: DeepPartial<Req>, opts?: { timeoutMs?: number }) => Promise<Res>
    : never;
};

/** One channel to `o.endpoint`, shared by every service client made on it. */
function openChannel(o: ClientOptions): Channel {
  return new Channel(dialTarget(o.endpoint), channelCredentials(o.tls), channelOptions(o.tls));
}

/**
 * The promise form of any grpc-js client of a Berth service: plain objects
 * completed with their defaults, deadline, bearer token, retries on
 * UNAVAILABLE for calls the API declares safe to repeat, BerthClientError.
 * Exported so a benchmark's baseline calls go through the same client code.
 */
export function promisify<C extends Client>(client: C, o: ClientOptions): Promisified<C> {
  const metadata = () => {
    const md = new Metadata();
    if (o.token) md.set('authorization', `Bearer ${o.token}`);
    return md;
  };
  return new Proxy({} as Promisified<C>, {
    get(_t, prop: string) {
      const fn = (client as unknown as Record<string, unknown>)[prop];
      if (typeof fn !== 'function') return undefined;
      return async (req: unknown, opts: { timeoutMs?: number } = {}) => {
        // The generated client's method carries its path; the API declares whether it is safe to repeat.
        const path = (fn as { path?: string }).path ?? '';
        const attempts = isRetryable(path) ? (o.retries ?? 4) : 1;
        const message = completeRequest(path, req);
        const backoff = new Backoff(200, 2_000);
        for (let i = 1; ; i++) {
          try {
            return await new Promise((resolve, reject) => {
              (fn as UnaryFn<unknown, unknown>).call(
                client,
                message,
                metadata(),
                { deadline: Date.now() + (opts.timeoutMs ?? o.timeoutMs ?? 30_000) },
                (err, res) => (err ? reject(err) : resolve(res)),
              );
            });
          } catch (err) {
            const se = err as ServiceError;
            if (i < attempts && se.code === status.UNAVAILABLE) {
              await sleep(backoff.next());
              // A client closed meanwhile answers with the last error, not with a call on a
              // shut-down channel (which grpc-js throws as a plain Error, seen as UNKNOWN).
              if (client.getChannel().getConnectivityState(false) !== connectivityState.SHUTDOWN) continue;
            }
            throw new BerthClientError(prop, se);
          }
        }
      };
    },
  });
}

/**
 * A server stream as an async iterable; errors become BerthClientError;
 * breaking out, or `signal` aborting, cancels it (the iteration then ends).
 */
export async function* iterate<Res>(
  method: string,
  stream: ClientReadableStream<Res>,
  signal?: AbortSignal,
  onOpen?: () => void,
): AsyncGenerator<Res> {
  // The server's headers: the stream is open (Berth's servers send them at once).
  if (onOpen) stream.once('metadata', onOpen);
  const cancel = () => stream.cancel();
  if (signal?.aborted) cancel();
  signal?.addEventListener('abort', cancel, { once: true });
  try {
    for await (const m of stream as AsyncIterable<Res>) yield m;
  } catch (err) {
    const se = err as ServiceError;
    if (se.code === status.CANCELLED) return;
    throw new BerthClientError(method, se);
  } finally {
    signal?.removeEventListener('abort', cancel);
    stream.cancel();
  }
}

/** How a watch that reconnects tells its caller what happens (docs/sdk.md). */
export interface WatchOptions {
  /** Stops the watch: the iteration ends (no error). */
  signal?: AbortSignal;
  /** The scheduler no longer has the events after the revision: the whole state comes again. */
  onRelist?: (err: BerthClientError) => void;
  /**
   * The stream broke (the scheduler restarted, the replica died, the network
   * cut): the watch opens it again after `delayMs`, resuming after `resumeAfter`.
   */
  onRetry?: (e: { error: BerthClientError; delayMs: number; resumeAfter: number; attempt: number }) => void;
  /** The stream is open again after a break (`attempts` tries, `downMs` after it broke). */
  onResumed?: (e: { resumeAfter: number; attempts: number; downMs: number }) => void;
  /** Backoff between attempts; default 200 ms doubling to 5 s, jittered. */
  backoff?: Backoff;
}

/**
 * Errors after which a watch is opened again: UNAVAILABLE — the server went
 * away (`Connection dropped` on a kill -9), is shutting down, or ended a
 * stream that never ends by itself.
 */
function isBreak(err: unknown): err is BerthClientError {
  return err instanceof BerthClientError && err.codeName === 'UNAVAILABLE';
}

/** grpc-js's words for a call that found no server at all (as opposed to one that lost it). */
function neverConnected(err: BerthClientError): boolean {
  return /No connection established|Name resolution failed/.test(err.message);
}

/** The scheduler is behind the revision a watch resumes from (its database was restored or replaced). */
function isAheadOfScheduler(err: unknown): err is BerthClientError {
  return (
    err instanceof BerthClientError &&
    err.codeName === 'INVALID_ARGUMENT' &&
    err.fieldViolations.some((v) => v.field === 'from_revision')
  );
}

/** A break of a stream that ended without an error (a server that closed it while shutting down). */
const endedByServer = (method: string) =>
  new BerthClientError(method, {
    code: status.UNAVAILABLE,
    details: 'the scheduler ended the stream',
    metadata: new Metadata(),
    name: 'Error',
    message: 'the scheduler ended the stream',
  });

export class SchedulerClient {
  readonly devices: Promisified<DeviceServiceClient>;
  readonly hosts: Promisified<HostServiceClient>;
  readonly profiles: Promisified<ProfileServiceClient>;
  readonly arqs: Promisified<AcceleratorRequestServiceClient>;
  readonly instances: Promisified<InstanceServiceClient>;
  readonly migrations: Promisified<MigrationServiceClient>;
  readonly registration: Promisified<RegistrationServiceClient>;
  readonly placement: Promisified<PlacementServiceClient>;
  /** Erasure certificates and the agents' keys (docs/erasure-certificates.md). */
  readonly certificates: Promisified<CertificateServiceClient>;
  /** Where it connects (as given). */
  readonly endpoint: string;
  private readonly channel: Channel;
  private readonly raw: { devices: DeviceServiceClient };
  private closed = false;

  /**
   * A client for the scheduler the CLI's client configuration names — the
   * file `berth up` and `berth config set` write, with BERTH_ENDPOINT,
   * BERTH_TOKEN and BERTH_TLS_* overriding it, as for every berth command
   * (docs/sdk.md). `overrides` take precedence over both.
   */
  static async fromClientConfig(
    overrides: ClientFlagValues & Pick<ClientOptions, 'timeoutMs' | 'retries'> = {},
  ): Promise<SchedulerClient> {
    const { timeoutMs, retries, ...flags } = overrides;
    const resolved = await resolveClient(flags);
    const tls = await loadClientTls(resolved.tls);
    return new SchedulerClient({
      endpoint: resolved.endpoint,
      ...(resolved.token ? { token: resolved.token } : {}),
      ...(tls ? { tls } : {}),
      ...(timeoutMs !== undefined ? { timeoutMs } : {}),
      ...(retries !== undefined ? { retries } : {}),
    });
  }

  constructor(private readonly options: ClientOptions) {
    this.endpoint = options.endpoint;
    this.channel = openChannel(options);
    // One channel (one connection per server) for every service.
    const on = { channelOverride: this.channel };
    const creds = channelCredentials(undefined);
    const devices = new DeviceServiceClient(options.endpoint, creds, on);
    this.devices = promisify(devices, options);
    this.hosts = promisify(new HostServiceClient(options.endpoint, creds, on), options);
    this.certificates = promisify(new CertificateServiceClient(options.endpoint, creds, on), options);
    this.profiles = promisify(new ProfileServiceClient(options.endpoint, creds, on), options);
    this.arqs = promisify(new AcceleratorRequestServiceClient(options.endpoint, creds, on), options);
    this.instances = promisify(new InstanceServiceClient(options.endpoint, creds, on), options);
    this.migrations = promisify(new MigrationServiceClient(options.endpoint, creds, on), options);
    this.registration = promisify(new RegistrationServiceClient(options.endpoint, creds, on), options);
    this.placement = promisify(new PlacementServiceClient(options.endpoint, creds, on), options);
    this.raw = { devices };
  }

  /**
   * Verifies an erasure certificate against the scheduler's published keys
   * of every host, each bound to its host (as `berth cleanup verify
   * --from-scheduler`); throws a CertificateError saying what failed.
   */
  async verifyErasureCertificate(jws: string, opts: VerifyOptions = {}): Promise<Verification> {
    const { keys } = await this.certificates.listAgentKeys({ host: '' });
    return verifyOffline(jws, parseKeySet(publishedKeySet(keys)), opts);
  }

  private md(): Metadata {
    const md = new Metadata();
    if (this.options.token) md.set('authorization', `Bearer ${this.options.token}`);
    return md;
  }

  /** WatchDevices as it is: one stream, which ends with the error that broke it (or when `signal` aborts). */
  watchDevices(req: DeepPartial<WatchDevicesRequest>, signal?: AbortSignal, onOpen?: () => void) {
    const path = '/berth.scheduler.v1.DeviceService/WatchDevices';
    return iterate(
      'watchDevices',
      this.raw.devices.watchDevices(completeRequest(path, req), this.md()),
      signal,
      onOpen,
    );
  }

  /**
   * WatchDevices that survives what a long-lived watch meets:
   * - a break (the scheduler restarts, the replica it was on dies, the
   *   network cuts): it opens the stream again with backoff and resumes after
   *   the last revision it yielded — no change is lost or repeated. A break
   *   during the initial state starts that again (`initial` messages, then
   *   `synced`), as the first attempt did.
   * - a revision the scheduler no longer keeps (REVISION_COMPACTED), or one
   *   it is behind (its database was restored): it re-lists — the whole state
   *   comes again, `initial` messages then `synced`, so a cache rebuilt from
   *   them is right — and goes on with changes.
   * Other errors (UNAUTHENTICATED, PERMISSION_DENIED, …) end it, and so does
   * finding no scheduler at the first attempt (nothing to resume yet: the
   * caller hears why at once). `options` hears each break, retry and
   * resumption.
   */
  async *watchDevicesResuming(
    req: DeepPartial<WatchDevicesRequest>,
    options: WatchOptions = {},
  ): AsyncGenerator<WatchDevicesResponse> {
    // Where a stream starts until the initial state is complete: the caller's
    // revision, or 0 once a re-list is needed.
    let start = req.fromRevision ?? 0;
    let from = start;
    let synced = start !== 0;
    const resumeAfter = () => (synced ? from : start);
    const session = new Reconnection(options, resumeAfter);
    while (!options.signal?.aborted && !this.closed) {
      try {
        const stream = this.watchDevices({ ...req, fromRevision: resumeAfter() }, options.signal, () =>
          session.opened(),
        );
        for await (const m of stream) {
          session.opened();
          if (m.synced) synced = true;
          if (synced) from = m.revision;
          yield m;
          if (options.signal?.aborted) return;
        }
        if (options.signal?.aborted || this.closed) return;
        throw endedByServer('watchDevices');
      } catch (err) {
        if (options.signal?.aborted || this.closed) return;
        if (
          err instanceof BerthClientError &&
          synced &&
          from !== 0 &&
          (err.reason === 'REVISION_COMPACTED' || isAheadOfScheduler(err))
        ) {
          options.onRelist?.(err);
          start = 0;
          from = 0;
          synced = false;
          continue;
        }
        await session.broke(err);
      }
    }
  }

  /**
   * WatchDevices that re-lists when the scheduler no longer keeps the events
   * after `fromRevision` (reason REVISION_COMPACTED); watchDevicesResuming
   * with only that. Kept for callers of earlier versions.
   */
  async *watchDevicesRelisting(
    req: DeepPartial<WatchDevicesRequest>,
    onRelist: (err: BerthClientError) => void = () => {},
  ): AsyncGenerator<WatchDevicesResponse> {
    let from = req.fromRevision ?? 0;
    for (;;) {
      try {
        for await (const m of this.watchDevices({ ...req, fromRevision: from })) {
          from = m.revision;
          yield m;
        }
        return;
      } catch (err) {
        if (!(err instanceof BerthClientError) || err.reason !== 'REVISION_COMPACTED' || from === 0)
          throw err;
        onRelist(err);
        from = 0;
      }
    }
  }

  /** WatchCleanup as it is: one stream (ended early when `signal` aborts). */
  watchCleanup(req: DeepPartial<WatchCleanupRequest>, signal?: AbortSignal, onOpen?: () => void) {
    const path = '/berth.scheduler.v1.DeviceService/WatchCleanup';
    return iterate(
      'watchCleanup',
      this.raw.devices.watchCleanup(completeRequest(path, req), this.md()),
      signal,
      onOpen,
    );
  }

  /**
   * WatchCleanup that survives a break like watchDevicesResuming: it opens
   * the stream again for the same job (the one its first event named) after
   * the last event it yielded, until the cleanup's terminal event.
   */
  async *watchCleanupResuming(
    req: DeepPartial<WatchCleanupRequest>,
    options: Omit<WatchOptions, 'onRelist'> = {},
  ): AsyncGenerator<WatchCleanupResponse> {
    let jobId = req.jobId ?? '';
    let after = req.fromSequence ?? 0;
    const session = new Reconnection(options, () => after);
    while (!options.signal?.aborted && !this.closed) {
      try {
        const stream = this.watchCleanup({ ...req, jobId, fromSequence: after }, options.signal, () =>
          session.opened(),
        );
        for await (const m of stream) {
          session.opened();
          if (m.event) {
            jobId = m.event.jobId || jobId;
            after = m.event.sequence;
          }
          yield m;
          if (options.signal?.aborted) return;
        }
        // WatchCleanup ends by itself after the terminal event.
        return;
      } catch (err) {
        if (options.signal?.aborted || this.closed) return;
        await session.broke(err);
      }
    }
  }

  close(): void {
    this.closed = true;
    this.channel.close();
  }
}

/**
 * The reconnection state of one resuming watch: whether it ever reached the
 * scheduler, the current break (since when, how many attempts), the backoff,
 * and what the caller is told.
 */
class Reconnection {
  private connected = false;
  private broken: { at: number; attempts: number } | null = null;
  private readonly backoff: Backoff;

  constructor(
    private readonly options: Omit<WatchOptions, 'onRelist'>,
    private readonly resumeAfter: () => number,
  ) {
    this.backoff = options.backoff ?? new Backoff(200, 5_000);
  }

  /** The stream is open (headers or a message came): a break is over. */
  opened(): void {
    this.connected = true;
    if (!this.broken) return;
    this.options.onResumed?.({
      resumeAfter: this.resumeAfter(),
      attempts: this.broken.attempts,
      downMs: Date.now() - this.broken.at,
    });
    this.broken = null;
    this.backoff.reset();
  }

  /** The stream broke with `err`: rethrows what is not a break, else waits the backoff. */
  async broke(err: unknown): Promise<void> {
    // A watch that never reached the scheduler has nothing to resume: the caller hears why at once.
    if (!isBreak(err) || (!this.connected && neverConnected(err))) throw err;
    this.broken ??= { at: Date.now(), attempts: 0 };
    this.broken.attempts++;
    const delayMs = this.backoff.next();
    this.options.onRetry?.({
      error: err,
      delayMs,
      resumeAfter: this.resumeAfter(),
      attempt: this.broken.attempts,
    });
    await sleep(delayMs, this.options.signal);
  }
}

/** Which Berth server answers at an endpoint. */
export type ServerKind = 'scheduler' | 'agent' | 'unknown';

const HealthClient = makeClientConstructor(
  healthService as unknown as Parameters<typeof makeClientConstructor>[0],
  'grpc.health.v1.Health',
);

/**
 * What serves at `endpoint`, asked of its open health service (no token
 * needed): a scheduler serves berth.scheduler.v1.DeviceService, an agent
 * berth.agent.v1.AgentService. For explaining an UNIMPLEMENTED.
 */
export async function identifyServer(
  endpoint: string,
  options: Pick<ClientOptions, 'tls' | 'timeoutMs'> = {},
): Promise<ServerKind> {
  const client = new HealthClient(endpoint, channelCredentials(undefined), {
    channelOverride: openChannel({ endpoint, ...options }),
  });
  const serves = (service: string) =>
    new Promise<boolean>((resolve) => {
      (client as unknown as Record<string, UnaryFn<{ service: string }, { status: string }>>).check!(
        { service },
        new Metadata(),
        { deadline: Date.now() + (options.timeoutMs ?? 5_000) },
        (err, res) => resolve(!err && res.status === 'SERVING'),
      );
    });
  try {
    if (await serves('berth.scheduler.v1.DeviceService')) return 'scheduler';
    if (await serves('berth.agent.v1.AgentService')) return 'agent';
    return 'unknown';
  } finally {
    client.close();
  }
}

export class AgentClient {
  readonly agent: Promisified<AgentServiceClient>;
  private readonly raw: AgentServiceClient;

  constructor(private readonly options: ClientOptions) {
    this.raw = new AgentServiceClient(options.endpoint, channelCredentials(undefined), {
      channelOverride: openChannel(options),
    });
    this.agent = promisify(this.raw, options);
  }

  private md(): Metadata {
    const md = new Metadata();
    if (this.options.token) md.set('authorization', `Bearer ${this.options.token}`);
    return md;
  }

  watchInventory(req: DeepPartial<Parameters<AgentServiceClient['watchInventory']>[0]>) {
    const path = '/berth.agent.v1.AgentService/WatchInventory';
    return iterate('watchInventory', this.raw.watchInventory(completeRequest(path, req), this.md()));
  }

  cleanupDevice(req: DeepPartial<Parameters<AgentServiceClient['cleanupDevice']>[0]>) {
    const path = '/berth.agent.v1.AgentService/CleanupDevice';
    return iterate('cleanupDevice', this.raw.cleanupDevice(completeRequest(path, req), this.md()));
  }

  close(): void {
    this.raw.close();
  }
}
