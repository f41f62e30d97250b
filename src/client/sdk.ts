/**
 * A typed client for Berth's scheduler and agent services over the generated
 * grpc-js stubs: promise-returning unary calls with a default deadline,
 * retries with backoff for calls the API declares safe to repeat
 * (`option idempotency_level`, read by retry-policy.ts), streams as async
 * iterables, bearer-token and TLS options, and errors surfaced as BerthClientError
 * carrying the gRPC code name and the ErrorInfo reason.
 */
import {
  type CallOptions,
  type ChannelCredentials,
  type Client,
  type ClientReadableStream,
  connectivityState,
  credentials as grpcCredentials,
  Metadata,
  makeClientConstructor,
  type ServiceError,
  status,
} from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';
import { AgentServiceClient } from '../gen/berth/agent/v1/agent.js';
import { AcceleratorRequestServiceClient } from '../gen/berth/scheduler/v1/accelerator_request.js';
import { DeviceServiceClient, type WatchDevicesResponse } from '../gen/berth/scheduler/v1/device_service.js';
import { HostServiceClient } from '../gen/berth/scheduler/v1/host.js';
import { InstanceServiceClient } from '../gen/berth/scheduler/v1/instance.js';
import { MigrationServiceClient } from '../gen/berth/scheduler/v1/migration.js';
import { PlacementServiceClient } from '../gen/berth/scheduler/v1/placement.js';
import { ProfileServiceClient } from '../gen/berth/scheduler/v1/profile.js';
import { RegistrationServiceClient } from '../gen/berth/scheduler/v1/registration.js';
import { decodeServiceError } from '../server/grpc/status.js';
import { isRetryable } from './retry-policy.js';

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
  /** host:port */
  endpoint: string;
  /** Bearer token sent as `authorization: Bearer …`. */
  token?: string;
  /** TLS: PEM contents. Without `tls`, the connection is plaintext. */
  tls?: { ca?: Buffer; cert?: Buffer; key?: Buffer };
  /** Per-call deadline; default 30 s. */
  timeoutMs?: number;
  /** Attempts, on UNAVAILABLE, of calls declared NO_SIDE_EFFECTS or IDEMPOTENT; default 4. */
  retries?: number;
}

type Callback<Res> = (err: ServiceError | null, res: Res) => void;
type UnaryFn<Req, Res> = (req: Req, md: Metadata, opts: Partial<CallOptions>, cb: Callback<Res>) => unknown;

/** Maps a generated client to its promise form: every unary method returns a promise. */
export type Promisified<C> = {
  [K in keyof C as C[K] extends UnaryFn<infer _Req, infer _Res> ? K : never]: C[K] extends UnaryFn<
    infer Req,
    infer Res
  >
    ? (req: Req, opts?: { timeoutMs?: number }) => Promise<Res>
    : never;
};

function creds(o: ClientOptions): ChannelCredentials {
  if (!o.tls) return grpcCredentials.createInsecure();
  return grpcCredentials.createSsl(o.tls.ca ?? null, o.tls.key ?? null, o.tls.cert ?? null);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * The promise form of any grpc-js client: deadline, bearer token, retries on
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
        const attempts = isRetryable((fn as { path?: string }).path ?? '') ? (o.retries ?? 4) : 1;
        for (let i = 1; ; i++) {
          try {
            return await new Promise((resolve, reject) => {
              (fn as UnaryFn<unknown, unknown>).call(
                client,
                req,
                metadata(),
                { deadline: Date.now() + (opts.timeoutMs ?? o.timeoutMs ?? 30_000) },
                (err, res) => (err ? reject(err) : resolve(res)),
              );
            });
          } catch (err) {
            const se = err as ServiceError;
            if (i < attempts && se.code === status.UNAVAILABLE) {
              await sleep(Math.min(2_000, 100 * 2 ** i) * (0.5 + Math.random() / 2));
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

/** A server stream as an async iterable; errors become BerthClientError; breaking out cancels it. */
export async function* iterate<Res>(method: string, stream: ClientReadableStream<Res>): AsyncGenerator<Res> {
  try {
    for await (const m of stream as AsyncIterable<Res>) yield m;
  } catch (err) {
    const se = err as ServiceError;
    if (se.code === status.CANCELLED) return;
    throw new BerthClientError(method, se);
  } finally {
    stream.cancel();
  }
}

export class SchedulerClient {
  readonly devices: Promisified<DeviceServiceClient>;
  readonly hosts: Promisified<HostServiceClient>;
  readonly profiles: Promisified<ProfileServiceClient>;
  readonly arqs: Promisified<AcceleratorRequestServiceClient>;
  readonly instances: Promisified<InstanceServiceClient>;
  readonly migrations: Promisified<MigrationServiceClient>;
  readonly registration: Promisified<RegistrationServiceClient>;
  readonly placement: Promisified<PlacementServiceClient>;
  private readonly raw: {
    devices: DeviceServiceClient;
    all: Client[];
  };

  constructor(private readonly options: ClientOptions) {
    const c = creds(options);
    const devices = new DeviceServiceClient(options.endpoint, c);
    const hosts = new HostServiceClient(options.endpoint, c);
    const profiles = new ProfileServiceClient(options.endpoint, c);
    const arqs = new AcceleratorRequestServiceClient(options.endpoint, c);
    const instances = new InstanceServiceClient(options.endpoint, c);
    const migrations = new MigrationServiceClient(options.endpoint, c);
    const registration = new RegistrationServiceClient(options.endpoint, c);
    const placement = new PlacementServiceClient(options.endpoint, c);
    this.devices = promisify(devices, options);
    this.hosts = promisify(hosts, options);
    this.profiles = promisify(profiles, options);
    this.arqs = promisify(arqs, options);
    this.instances = promisify(instances, options);
    this.migrations = promisify(migrations, options);
    this.registration = promisify(registration, options);
    this.placement = promisify(placement, options);
    this.raw = {
      devices,
      all: [devices, hosts, profiles, arqs, instances, migrations, registration, placement],
    };
  }

  private md(): Metadata {
    const md = new Metadata();
    if (this.options.token) md.set('authorization', `Bearer ${this.options.token}`);
    return md;
  }

  watchDevices(req: Parameters<DeviceServiceClient['watchDevices']>[0]) {
    return iterate('watchDevices', this.raw.devices.watchDevices(req, this.md()));
  }

  /**
   * WatchDevices that outlives retention: when the scheduler no longer keeps
   * the events after `fromRevision` (reason REVISION_COMPACTED, at the start or
   * for a watcher that fell that far behind) it re-lists — the whole state
   * comes again (`initial: true` messages, then `synced`), so a cache rebuilt
   * from them is right — and goes on with changes. `onRelist` hears why.
   */
  async *watchDevicesRelisting(
    req: Parameters<DeviceServiceClient['watchDevices']>[0],
    onRelist: (err: BerthClientError) => void = () => {},
  ): AsyncGenerator<WatchDevicesResponse> {
    let from = req.fromRevision;
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

  watchCleanup(req: Parameters<DeviceServiceClient['watchCleanup']>[0]) {
    return iterate('watchCleanup', this.raw.devices.watchCleanup(req, this.md()));
  }

  close(): void {
    for (const c of this.raw.all) c.close();
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
  const client = new HealthClient(endpoint, creds({ endpoint, ...options }));
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
    this.raw = new AgentServiceClient(options.endpoint, creds(options));
    this.agent = promisify(this.raw, options);
  }

  private md(): Metadata {
    const md = new Metadata();
    if (this.options.token) md.set('authorization', `Bearer ${this.options.token}`);
    return md;
  }

  watchInventory(req: Parameters<AgentServiceClient['watchInventory']>[0]) {
    return iterate('watchInventory', this.raw.watchInventory(req, this.md()));
  }

  cleanupDevice(req: Parameters<AgentServiceClient['cleanupDevice']>[0]) {
    return iterate('cleanupDevice', this.raw.cleanupDevice(req, this.md()));
  }

  close(): void {
    this.raw.close();
  }
}
