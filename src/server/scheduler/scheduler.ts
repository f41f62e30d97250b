/**
 * The scheduler process, composed: the use cases over a store, the runtime
 * (agent links, cleanup dispatcher, event hub, lease keeper, retention), the
 * application workflows (app/) and every berth.scheduler.v1 service on one
 * gRPC server. Its lifecycle is explicit (../lifecycle.ts, `SchedulerState`).
 */
import { createPrivateKey, type KeyObject, randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import type { Server } from 'node:http';
import { resolve } from 'node:path';
import type { Logger } from 'pino';
import { ConfigError } from '../../errors.js';
import type { HostName } from '../../identifiers.js';
import { createLogger } from '../../logging.js';
import { Authenticator } from '../grpc/auth/authenticator.js';
import type { AuthOptions } from '../grpc/auth/configuration.js';
import { authInterceptor, logAuthMode } from '../grpc/auth/interceptor.js';
import { mintSchedulerCredential } from '../grpc/auth/tokens.js';
import { GrpcServer, type ServiceBinding } from '../grpc/server.js';
import { agentChannelCredentials, loadTls, serverCredentials, type TlsFiles } from '../grpc/tls.js';
import { InstanceLock } from '../instance-lock.js';
import { Lifecycle, type LifecycleState } from '../lifecycle.js';
import { Metrics, serveMetrics } from '../metrics.js';
import { Teardown } from '../teardown.js';
import { Binding } from './app/binding.js';
import { Certificates } from './app/certificates.js';
import { Cleaning } from './app/cleaning.js';
import { CyborgBinds } from './app/cyborg-binds.js';
import { Devices } from './app/devices.js';
import { Hosts } from './app/hosts.js';
import { Instances } from './app/instances.js';
import { Migrations } from './app/migration.js';
import { Registration } from './app/registration.js';
import type { CyborgOptions } from './cyborg/config.js';
import { BerthTokenIdentity, KeystoneIdentity, NoAuthIdentity } from './cyborg/identity.js';
import { NovaEvents } from './cyborg/nova-events.js';
import { CyborgApi } from './cyborg/server.js';
import { HOST_INFLOW_LIMITS, type HostInflowLimits } from './domain/inventory-bounds.js';
import { everyRow } from './domain/pages.js';
import { DEFAULT_RETENTION, type RetentionPolicy } from './domain/retention.js';
import type { PlacementOptions } from './placement/config.js';
import { startPlacement, tokenSource } from './placement/placement.js';
import type { PlacementPort } from './placement/port.js';
import { schedulerSide } from './placement/scheduler-side.js';
import { AgentDirectory } from './runtime/agent-directory.js';
import { AgentLinks } from './runtime/agent-links.js';
import { CleanupDispatcher } from './runtime/cleanup-dispatcher.js';
import { DeviceFeed } from './runtime/device-feed.js';
import { EventHub } from './runtime/event-hub.js';
import { HistoryPruner } from './runtime/history-pruner.js';
import { type LeaseTiming, LinkLeaseKeeper } from './runtime/link-lease-keeper.js';
import { arqServiceBinding } from './services/arq-service.js';
import { certificateServiceBinding } from './services/certificate-service.js';
import { deviceServiceBinding } from './services/device-service.js';
import { hostServiceBinding } from './services/host-service.js';
import { instanceServiceBinding } from './services/instance-service.js';
import { migrationServiceBinding } from './services/migration-service.js';
import { placementServiceBinding } from './services/placement-service.js';
import { profileServiceBinding } from './services/profile-service.js';
import { registrationServiceBinding } from './services/registration-service.js';
import { isPostgresUrl } from './store/pg-store.js';
import { openPgStore, openSqliteStore } from './stores.js';
import type { UseCases } from './usecases/use-cases.js';

export interface SchedulerOptions {
  /** SQLite database file, or a `postgres://` URL (several schedulers may share one). */
  db?: string;
  /** Or the use cases over a store already opened (tests, benchmarks, other backends). */
  store?: UseCases;
  listen: string;
  logger?: Logger;
  heartbeatSeconds?: number;
  /**
   * Who may call what (src/server/grpc/auth/): `{mode: 'token', jwt, staticTokens,
   * certRoles}`, or `{mode: 'none'}` to switch authentication off explicitly.
   */
  auth?: AuthOptions;
  /**
   * TLS: `{cert, key}` serves TLS; with `ca` too, agents and clients must present a
   * certificate from that CA (mutual TLS). The same files are the scheduler's
   * client identity (and CA) when it dials agents.
   */
  tls?: TlsFiles;
  /**
   * The scheduler's credentials for agents (invariant 10): an Ed25519 private
   * key (PEM) that signs, per host, short-lived JWTs with `aud` = that host.
   * The agents hold the public key (`auth.scheduler_public_key_file`).
   */
  agentSigningKey?: string;
  /**
   * One bearer token sent to every agent (role `scheduler`): any host that
   * sees it can call every other agent. Only for a single-host lab, and only
   * with `insecureSharedAgentToken` set; logged as a warning at start.
   */
  agentToken?: string;
  insecureSharedAgentToken?: boolean;
  /**
   * Principal subject → the host it speaks for, written by the operator, for
   * principals whose subject is not their host name (invariant 10).
   */
  hostPrincipals?: Record<string, string>;
  /** host:port serving Prometheus /metrics; omitted = not served. */
  metricsListen?: string;
  /** How long history is kept (default DEFAULT_RETENTION: 7 days, 200,000 rows, request ids 24 h). */
  retention?: Partial<RetentionPolicy>;
  /** How often retention runs (default 60 s). */
  retentionIntervalMs?: number;
  /** Link leases when schedulers share a PostgreSQL database (default: 6 s TTL, a look every 2 s). */
  linkLeases?: Partial<LeaseTiming>;
  /** What one host may store and send (default HOST_INFLOW_LIMITS; tests lower it). */
  inventoryInflow?: Partial<HostInflowLimits>;
  /**
   * Report to OpenStack Placement, or clean Nova's one-time-use devices
   * (placement/config.ts; docs/operator-guide.md "Running with Nova and
   * Placement"). Absent: Placement is not used.
   */
  placement?: PlacementOptions;
  /**
   * Serve the part of Cyborg's v2 REST API that Nova calls, on its own
   * address (cyborg/, docs/cyborg.md). Needs Placement in report mode: Nova
   * binds by the Placement provider it allocated.
   */
  cyborg?: CyborgOptions;
  /** The fetch Placement and Keystone calls use (tests). */
  placementFetch?: typeof fetch;
  /** Extra services on the same server, behind the same interceptors (benchmarks' baseline method). */
  extraServices?: () => ServiceBinding[];
}

/** Why a scheduler that runs does not serve. */
export type DegradedReason =
  /** The database was found damaged: every call is refused (STORE_DAMAGED) until it is restored; never heals. */
  | 'store_damaged'
  /** A shared database does not answer: agents and load balancers go to another replica until it does. */
  | 'database_unreachable';

/**
 * starting → serving ⇄ degraded(database_unreachable) → stopping → stopped, or
 * degraded(store_damaged) until a restart. Health is SERVING only in `serving`.
 */
export type SchedulerState = LifecycleState<DegradedReason>;

export class Scheduler {
  private constructor(
    /** Identifies this scheduler in logs, RegisterResponse and `Host.followed_by`. */
    readonly id: string,
    readonly useCases: UseCases,
    readonly lifecycle: Lifecycle<DegradedReason>,
    readonly server: GrpcServer,
    /** The agent links this scheduler follows. */
    readonly links: AgentLinks,
    readonly metrics: Metrics,
    /** Placement reporting (placement/), when configured. */
    readonly placement: PlacementPort | null,
    readonly pruner: HistoryPruner,
    readonly leaseKeeper: LinkLeaseKeeper | null,
    /** Cyborg's v2 API for Nova, when configured. */
    readonly cyborg: CyborgApi | null,
    /** Everything start opened, closed in reverse by stop. */
    private readonly teardown: Teardown,
  ) {}

  static async start(options: SchedulerOptions): Promise<Scheduler> {
    const logger = (options.logger ?? createLogger()).child({ component: 'scheduler' });
    const inflow = { ...HOST_INFLOW_LIMITS, ...options.inventoryInflow };
    if (inflow.storedBytes > inflow.burstBytes) {
      // A snapshot of everything a host may store must fit in one burst, or it could never be taken.
      throw new ConfigError(
        `inventory inflow: storedBytes (${inflow.storedBytes}) must not exceed burstBytes (${inflow.burstBytes})`,
      );
    }

    const auth = new Authenticator(requireAuthOptions(options.auth));
    if (options.cyborg && options.placement?.mode !== 'report') {
      throw new ConfigError(
        "the Cyborg API needs Placement in report mode (--placement-url): Nova binds by the Placement provider of Berth's device",
      );
    }
    const tls = options.tls ? await loadTls(options.tls) : undefined;
    const credentialFor = agentCredential(options, logger);
    // One scheduler per SQLite file: a second one refuses, naming the first.
    const postgres = options.db !== undefined && isPostgresUrl(options.db);
    const lock =
      !options.store && options.db && options.db !== ':memory:' && !postgres
        ? InstanceLock.acquire(resolve(options.db), {
            what: `database ${options.db}`,
            kind: 'scheduler',
            hint: 'or give another --db',
          })
        : null;
    // A scheduler that did not stop cleanly leaves its write-ahead log beside
    // the database (SQLite deletes it only at a clean close). Without it, the
    // commits since the last checkpoint are gone: reported, never silently
    // accepted (docs/operator-guide.md "What survives what"). Checked before
    // opening, which creates a new one.
    const walLost =
      lock?.uncleanPredecessor && options.db && existsSync(options.db) && !existsSync(`${options.db}-wal`)
        ? lock.uncleanPredecessor
        : null;
    // What start opens is closed by one stack, last first: on a start that fails
    // half-way (guard) and at stop, alike.
    const teardown = new Teardown();
    if (lock) teardown.defer('the database lock', () => lock.release());
    const useCases = await teardown.guard(async () => {
      return (
        options.store ??
        (postgres ? await openPgStore(options.db!) : await openSqliteStore(options.db ?? ':memory:'))
      );
    });
    teardown.defer('the store', () => useCases.close());
    const id = randomUUID();
    const lifecycle = new Lifecycle<DegradedReason>(['store_damaged']);
    const hub = new EventHub();
    const metrics = new Metrics('scheduler');
    metrics.devicesGauge(() => useCases.deviceCounts());
    const dial = (host: string) => ({
      credentials: agentChannelCredentials(tls, host),
      ...(credentialFor ? { credential: credentialFor } : {}),
    });
    /** Placement reporting, told of this scheduler's links at once (set once it has started, below). */
    let placementConnection: ((host: HostName, connected: boolean) => void) | null = null;
    const links: AgentLinks = new AgentLinks({
      useCases,
      logger,
      metrics,
      inflow,
      dial,
      onConnection: (h, up) => {
        if (up) void dispatcher.dispatchBacklog(h);
        placementConnection?.(h, up);
      },
    });
    teardown.defer('the agent links', () => links.stopAll());
    const leases = useCases.leases;
    const dispatcher = new CleanupDispatcher(
      useCases,
      links,
      logger.child({ component: 'cleanup' }),
      metrics,
      leases !== undefined,
    );
    teardown.defer('the cleanup dispatcher', () => dispatcher.stop());
    // Every committed change — this scheduler's, and on a shared database
    // another's — wakes the watches and the dispatcher.
    useCases.onChange((change) => {
      hub.notify();
      dispatcher.committed(change);
    });
    const leaseKeeper = leases
      ? new LinkLeaseKeeper({
          useCases,
          leases,
          owner: id,
          links,
          afterTick: () => void dispatcher.dispatchFollowed(),
          // A shared database that stops answering (the keeper looks every 2 s):
          // degraded, so load balancers and agents go to another replica, until it answers again.
          onDatabase: (reachable, why) => {
            metrics.storeReachable(reachable);
            if (reachable) lifecycle.recovered('database_unreachable');
            else lifecycle.degrade('database_unreachable', why ?? '');
          },
          logger: logger.child({ component: 'link-leases' }),
          ...(options.linkLeases ? { timing: options.linkLeases } : {}),
        })
      : null;
    // Stopped, its hosts are adopted by the other schedulers on the database at their next look.
    if (leaseKeeper) teardown.defer('the link leases', () => leaseKeeper.stop());
    const agents = new AgentDirectory(links, useCases, dial);
    teardown.defer('the agent directory', () => agents.close());
    const cleaning = new Cleaning({ useCases, agents });
    // Placement is asked for its versions before serving: a server too old, or
    // credentials refused, stop the start with the reason (an unreachable one does not).
    const placementOptions = options.placement;
    const placement = placementOptions
      ? await teardown.guard(() =>
          startPlacement(placementOptions, schedulerSide({ useCases, hub, links }), {
            logger,
            registry: metrics.registry,
            ...(options.placementFetch ? { fetch: options.placementFetch } : {}),
          }),
        )
      : null;
    // With Nova owning the devices, no cleanup of Berth's own starts under a Nova instance.
    if (placement) dispatcher.setGate((d) => placement.heldOutside(d));
    if (placement) placementConnection = (h, up) => placement.hostConnection(h, up);
    // How bind claims are judged here: this scheduler's id, and alone on its database (SQLite) or not.
    const judge = { self: id, alone: leases === undefined };
    const binding = new Binding({ useCases, agents, judge, logger });
    const certificates = new Certificates({ useCases, logger });
    const instances = new Instances(useCases);
    // Operator-written principal subject → host: whose host an agent or a host-client speaks for (invariant 10).
    const hostPrincipals: ReadonlyMap<string, string> = new Map(Object.entries(options.hostPrincipals ?? {}));
    const registration = new Registration({
      useCases,
      links,
      claimLink: (host) => leaseKeeper?.claim(host) ?? Promise.resolve(true),
      hostPrincipals,
      schedulerId: id,
      heartbeatSeconds: options.heartbeatSeconds ?? 15,
      mediaRecordsRefused: (host, reason, count) => metrics.mediaRecordsRefused(host, reason, count),
      logger,
    });
    const services = [
      registrationServiceBinding(registration, logger),
      hostServiceBinding(new Hosts({ useCases, links, schedulerId: id, logger }), logger),
      deviceServiceBinding(
        {
          useCases,
          devices: new Devices({ useCases, hub, feed: new DeviceFeed(useCases), placement }),
          cleaning,
          hostPrincipals,
        },
        logger,
      ),
      profileServiceBinding(useCases, logger),
      arqServiceBinding({ useCases, binding, hostPrincipals }, logger),
      instanceServiceBinding({ useCases, instances }, logger),
      migrationServiceBinding(
        { useCases, migrations: new Migrations({ useCases, agents, binding, instances }) },
        logger,
      ),
      placementServiceBinding(placement, logger),
      certificateServiceBinding({ useCases, certificates }, logger),
      ...(options.extraServices?.() ?? []),
    ];
    const server = new GrpcServer({
      services,
      interceptors: [metrics.interceptor(), authInterceptor(auth, logger)],
      ...(tls ? { credentials: serverCredentials(tls) } : {}),
    });
    teardown.defer('the gRPC server', () => server.stop(2_000));
    // The watches end first, so that the server's graceful stop does not wait for them.
    teardown.defer('the watches', () => hub.close());
    // Placement reporting waits on the hub between passes (a closed hub never waits): it stops first.
    if (placement) teardown.defer('Placement reporting', () => placement.stop());
    logAuthMode(auth, logger, 'scheduler');
    await teardown.guard(() => server.listen(options.listen));
    let cyborg: CyborgApi | null = null;
    if (options.cyborg && placement) {
      const c = options.cyborg;
      const logged = logger.child({ component: 'cyborg' });
      const events = c.nova
        ? new NovaEvents(
            useCases,
            {
              url: c.nova.url,
              credentials: tokenSource(c.nova.auth, c.timeoutSeconds),
              timeoutMs: c.timeoutSeconds * 1000,
              retryMaxMs: c.retryMaxSeconds * 1000,
              claimTtlMs: c.nova.claimTtlSeconds * 1000,
            },
            id,
            // Alone on its database (SQLite): claims left by an earlier run are let go.
            leases === undefined,
            logged.child({ component: 'nova-events' }),
          )
        : null;
      cyborg = new CyborgApi({
        useCases,
        binds: new CyborgBinds({
          useCases,
          binding,
          placement,
          nodename: (host) => options.placement?.computeNodes[host] ?? host,
          judge,
          nova: events,
          logger: logged,
        }),
        events,
        certificates,
        placement,
        identity:
          c.auth.type === 'noauth'
            ? new NoAuthIdentity()
            : c.auth.type === 'berth'
              ? new BerthTokenIdentity(auth)
              : new KeystoneIdentity({
                  authUrl: c.auth.authUrl,
                  credentials: tokenSource(c.auth.credentials, c.timeoutSeconds),
                  timeoutMs: c.timeoutSeconds * 1000,
                  ...(options.placementFetch ? { fetch: options.placementFetch } : {}),
                }),
        // The same certificate as gRPC (docs/cyborg.md "TLS"); plain HTTP only when asked, behind a proxy.
        ...(tls?.cert && tls.key && !c.plaintext ? { tls: { cert: tls.cert, key: tls.key } } : {}),
        ...(c.trustProxyHeaders ? { trustProxyHeaders: true } : {}),
        logger: logged,
      });
      cyborg.events?.register(metrics.registry);
      const api = cyborg;
      teardown.defer('the Cyborg API', () => api.stop());
      await teardown.guard(() => api.listen(c.listen));
    }
    lock?.setEndpoint(server.address);
    // Health is SERVING in `serving` only; each transition is logged with its reason.
    server.setServing(false);
    lifecycle.onTransition((next) => {
      server.setServing(next.kind === 'serving');
      logTransition(logger, next, { address: server.address, schedulerId: id, db: options.db });
    });
    // A damaged database (found at start or by any later unit) stops the scheduler
    // serving: health NOT_SERVING, every call UNAVAILABLE with STORE_DAMAGED, and
    // the log and /metrics say why, until an operator restores it.
    useCases.onDamage((why) => {
      metrics.storeDamaged(why);
      lifecycle.degrade('store_damaged', why);
    });
    if (walLost) {
      metrics.storeCommitsLost(`${options.db}-wal`);
      logger.error(
        { db: options.db, previous: walLost },
        `the previous scheduler (pid ${walLost.pid}, started ${walLost.startedAt}) stopped without closing ` +
          `its database and its write-ahead log ${options.db}-wal is missing: the commits since the last ` +
          'checkpoint are lost (ARQs, profiles, bindings). Devices that held tenant data are cleaned again when ' +
          'their agents report them (docs/operator-guide.md "What survives what").',
      );
    }
    // Hosts known from before a restart are followed again as soon as their
    // agents re-register (within one heartbeat), or, on a shared database, when
    // this scheduler adopts them; until then they show as disconnected. Hosts
    // another live scheduler follows are left as it says.
    if (!lifecycle.is('store_damaged')) {
      await teardown.guard(async () => {
        const followedElsewhere = (await leases?.live()) ?? new Map<string, string>();
        // A page at a time: a fleet of 50,000 hosts is not held in memory to find the connected few.
        for await (const h of everyRow(
          (after) => useCases.hostsPage(after, 1000),
          (h) => h.name,
        )) {
          if (h.connected && !followedElsewhere.has(h.name)) await useCases.setHostConnected(h.name, false);
        }
      });
      leaseKeeper?.start();
    }
    // After the hosts known from before are marked disconnected: Placement never
    // sees a host as reachable that this scheduler has not heard from.
    if (!lifecycle.is('store_damaged')) placement?.start();
    const pruner = new HistoryPruner(
      useCases,
      { ...DEFAULT_RETENTION, ...options.retention },
      logger.child({ component: 'retention' }),
      options.retentionIntervalMs,
    );
    teardown.defer('the history pruner', () => pruner.stop());
    if (!lifecycle.is('store_damaged')) pruner.start();
    const scheduler = new Scheduler(
      id,
      useCases,
      lifecycle,
      server,
      links,
      metrics,
      placement,
      pruner,
      leaseKeeper,
      cyborg,
      teardown,
    );
    if (options.metricsListen) {
      const listen = options.metricsListen;
      const m = await teardown.guard(() => serveMetrics(listen, metrics.registry));
      teardown.defer('the metrics server', () => m.server.close());
      scheduler.metricsServer = m.server;
      scheduler.metricsAddress = m.address;
      logger.info({ metrics: `http://${scheduler.metricsAddress}/metrics` }, 'serving metrics');
    }
    lifecycle.started();
    return scheduler;
  }

  metricsServer: Server | null = null;
  /** host:port of /metrics, '' when not served. */
  metricsAddress = '';

  get address(): string {
    return this.server.address;
  }

  /** Where the scheduler is in its lifecycle (and why, when degraded). */
  get state(): SchedulerState {
    return this.lifecycle.state;
  }

  async stop(): Promise<void> {
    this.lifecycle.stopping();
    await this.teardown.run();
    this.lifecycle.stopped();
  }
}

/** One log line per lifecycle transition, naming the state and why. */
function logTransition(
  logger: Logger,
  next: SchedulerState,
  at: { address: string; schedulerId: string; db: string | undefined },
): void {
  switch (next.kind) {
    case 'serving':
      logger.info(
        { state: next.kind, address: at.address, schedulerId: at.schedulerId },
        'scheduler serving',
      );
      return;
    case 'degraded':
      if (next.reason === 'store_damaged') {
        logger.error(
          { state: next.kind, reason: next.reason, db: at.db, why: next.detail },
          'the database is damaged: serving nothing until it is restored',
        );
      } else {
        logger.error(
          { state: next.kind, reason: next.reason, why: next.detail },
          'the database does not answer: health NOT_SERVING until it does',
        );
      }
      return;
    case 'stopping':
    case 'stopped':
      logger.info({ state: next.kind }, `scheduler ${next.kind}`);
      return;
    case 'starting':
      return;
  }
}

/**
 * The one place that decides what a scheduler started without `auth` does: it
 * refuses to start. Only an explicit `{mode: 'none'}` (`--insecure-no-auth`)
 * switches authentication off.
 */
function requireAuthOptions(auth: AuthOptions | undefined): AuthOptions {
  if (auth) return auth;
  throw new ConfigError(
    'no authentication configured: give auth (static tokens, a JWT key or client-certificate roles), ' +
      "or switch it off explicitly with {mode: 'none'} / --insecure-no-auth",
  );
}

/**
 * What the scheduler presents to a host's agent: a JWT for that host alone,
 * minted from the signing key and re-minted before it expires; or, only when
 * explicitly allowed, one shared token.
 */
function agentCredential(options: SchedulerOptions, logger: Logger): ((host: string) => string) | undefined {
  if (options.agentSigningKey) {
    let key: KeyObject;
    try {
      key = createPrivateKey(options.agentSigningKey);
    } catch (err) {
      throw new ConfigError(`agent signing key: not a PEM private key: ${(err as Error).message}`);
    }
    mintSchedulerCredential(key, 'check'); // an unusable key fails at start, not at the first call
    const cache = new Map<string, { token: string; renewAt: number }>();
    return (host) => {
      const now = Date.now();
      const hit = cache.get(host);
      if (hit && hit.renewAt > now) return hit.token;
      const token = mintSchedulerCredential(key, host, 300);
      cache.set(host, { token, renewAt: now + 120_000 });
      return token;
    };
  }
  if (options.agentToken) {
    if (!options.insecureSharedAgentToken) {
      throw new ConfigError(
        'a shared agent token lets any host that sees it call every other agent: give an agent signing key, ' +
          'or allow it explicitly for a single-host lab (--insecure-shared-agent-token)',
      );
    }
    logger.warn(
      'INSECURE: one scheduler token is sent to every agent; any host that sees it can call every other agent',
    );
    const token = options.agentToken;
    return () => token;
  }
  return undefined;
}
