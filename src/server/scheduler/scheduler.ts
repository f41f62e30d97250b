/**
 * The scheduler process: the store, the agent links, the cleanup dispatcher
 * and every berth.scheduler.v1 service on one gRPC server. Lifecycle:
 * open store → serve → (agents register) → stop (streams end, links close).
 */
import { createPrivateKey, type KeyObject, randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import type { Server } from 'node:http';
import { resolve } from 'node:path';
import type { Logger } from 'pino';
import { ConfigError } from '../../errors.js';
import { createLogger } from '../../logging.js';
import {
  Authenticator,
  type AuthOptions,
  authInterceptor,
  logAuthMode,
  mintSchedulerCredential,
} from '../grpc/auth.js';
import { GrpcServer, type ServiceBinding } from '../grpc/server.js';
import { agentChannelCredentials, loadTls, serverCredentials, type TlsFiles } from '../grpc/tls.js';
import { InstanceLock } from '../instance-lock.js';
import { Metrics, serveMetrics } from '../metrics.js';
import type { SchedulerCore } from './core.js';
import { HOST_INFLOW_LIMITS, type HostInflowLimits, InflowBudget } from './domain/inventory-bounds.js';
import type { PlacementOptions } from './placement/config.js';
import { startPlacement } from './placement/placement.js';
import { schedulerSide } from './placement/scheduler-side.js';
import { AgentDirectory } from './runtime/agent-directory.js';
import { AgentLink } from './runtime/agent-link.js';
import { CleanupDispatcher } from './runtime/cleanup-dispatcher.js';
import { DeviceFeed } from './runtime/device-feed.js';
import { EventHub } from './runtime/event-hub.js';
import { HistoryPruner } from './runtime/history-pruner.js';
import { type LeaseTiming, LinkLeaseKeeper } from './runtime/link-lease-keeper.js';
import { arqServiceBinding } from './services/arq-service.js';
import { deviceServiceBinding } from './services/device-service.js';
import { hostServiceBinding } from './services/host-service.js';
import { instanceServiceBinding } from './services/instance-service.js';
import { migrationServiceBinding } from './services/migration-service.js';
import { placementServiceBinding } from './services/placement-service.js';
import { profileServiceBinding } from './services/profile-service.js';
import { registrationServiceBinding } from './services/registration-service.js';
import { isPostgresUrl, openPgStore } from './store/pg-store.js';
import { openSqliteStore } from './store/sqlite-store.js';
import type { RetentionPolicy, Store } from './store/store.js';
import { DEFAULT_RETENTION } from './usecases/retention.js';

export interface SchedulerOptions {
  /** SQLite database file, or a `postgres://` URL (several schedulers may share one). */
  db?: string;
  /** Or a store already opened (tests, other backends). */
  store?: Store;
  listen: string;
  logger?: Logger;
  heartbeatSeconds?: number;
  /**
   * Who may call what (src/server/grpc/auth.ts): `{mode: 'token', jwt, staticTokens,
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
  /** The fetch Placement and Keystone calls use (tests). */
  placementFetch?: typeof fetch;
  /** Extra services (instances, migrations) registered by later modules. */
  extraServices?: (core: SchedulerCore) => ServiceBinding[];
}

export class Scheduler {
  private constructor(
    readonly core: SchedulerCore,
    readonly server: GrpcServer,
    private readonly lock: InstanceLock | null,
    readonly pruner: HistoryPruner,
    readonly leaseKeeper: LinkLeaseKeeper | null,
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
    // accepted (issue 19). Checked before opening, which creates a new one.
    const walLost =
      lock?.uncleanPredecessor && options.db && existsSync(options.db) && !existsSync(`${options.db}-wal`)
        ? lock.uncleanPredecessor
        : null;
    let store: Store;
    try {
      store =
        options.store ??
        (postgres ? await openPgStore(options.db!) : await openSqliteStore(options.db ?? ':memory:'));
    } catch (err) {
      lock?.release();
      throw err;
    }
    const hub = new EventHub();
    const metrics = new Metrics('scheduler');
    metrics.devicesGauge(() => store.deviceCounts());
    const links = new Map<string, AgentLink>();
    const leases = store.leases;
    const dispatcher = new CleanupDispatcher(
      store,
      hub,
      (h) => links.get(h),
      logger.child({ component: 'cleanup' }),
      metrics,
      leases !== undefined,
    );
    // Changes committed through another scheduler on the same database wake this
    // one's watches, and its dispatcher (a release made there of a host followed here).
    store.onChange?.(() => {
      hub.notify();
      if (links.size > 0) dispatcher.wake();
    });
    // Cleanups a unit queued on its own (media holding data nobody cleans).
    store.onCleanupsQueued?.((hosts) => {
      hub.notify();
      for (const h of hosts) void dispatcher.dispatchBacklog(h);
    });
    const schedulerId = randomUUID();
    const dial = (host: string) => ({
      credentials: agentChannelCredentials(tls, host),
      ...(credentialFor ? { credential: credentialFor } : {}),
    });
    const budgets = new Map<string, InflowBudget>();
    const connectAgent = (host: string, endpoint: string, features: string[]) => {
      links.get(host)?.stop();
      let budget = budgets.get(host);
      if (!budget) {
        budget = new InflowBudget(inflow, Date.now());
        budgets.set(host, budget);
      }
      const link = new AgentLink(host, endpoint, features, {
        store,
        hub,
        logger,
        ...dial(host),
        metrics,
        inflow,
        budget,
        onConnected: (h) => void dispatcher.dispatchBacklog(h),
      });
      links.set(host, link);
      link.start();
    };
    let databaseReachable: (reachable: boolean, why?: string) => void = () => {};
    const leaseKeeper = leases
      ? new LinkLeaseKeeper({
          store,
          leases,
          owner: schedulerId,
          links,
          connect: connectAgent,
          afterTick: () => void dispatcher.dispatchFollowed(),
          onDatabase: (reachable, why) => databaseReachable(reachable, why),
          logger: logger.child({ component: 'link-leases' }),
          ...(options.linkLeases ? { timing: options.linkLeases } : {}),
        })
      : null;
    const core: SchedulerCore = {
      store,
      hub,
      feed: new DeviceFeed(store),
      links,
      agents: new AgentDirectory(links, store, dial),
      dispatcher,
      logger,
      metrics,
      schedulerId,
      heartbeatSeconds: options.heartbeatSeconds ?? 15,
      hostPrincipals: new Map(Object.entries(options.hostPrincipals ?? {})),
      connectAgent,
      claimLink: (host) => leaseKeeper?.claim(host) ?? Promise.resolve(true),
      placement: null,
    };
    // Placement is asked for its versions before serving: a server too old, or
    // credentials refused, stop the start with the reason (an unreachable one does not).
    const placement = options.placement
      ? await startPlacement(options.placement, schedulerSide(core), {
          logger,
          registry: metrics.registry,
          ...(options.placementFetch ? { fetch: options.placementFetch } : {}),
        }).catch(async (err: unknown) => {
          await store.close();
          lock?.release();
          throw err;
        })
      : null;
    core.placement = placement;
    // With Nova owning the devices, no cleanup of Berth's own starts under a Nova instance.
    if (placement) dispatcher.setGate((d) => placement.heldOutside(d));
    const services = [
      registrationServiceBinding(core),
      hostServiceBinding(core),
      deviceServiceBinding(core),
      profileServiceBinding(core),
      arqServiceBinding(core),
      instanceServiceBinding(core),
      migrationServiceBinding(core),
      placementServiceBinding(core),
      ...(options.extraServices?.(core) ?? []),
    ];
    const server = new GrpcServer({
      services,
      interceptors: [metrics.interceptor(), authInterceptor(auth, logger)],
      ...(tls ? { credentials: serverCredentials(tls) } : {}),
    });
    logAuthMode(auth, logger, 'scheduler');
    try {
      await server.listen(options.listen);
    } catch (err) {
      await placement?.stop();
      await server.stop(0);
      await store.close();
      lock?.release();
      throw err;
    }
    lock?.setEndpoint(server.address);
    // A damaged database (found at start or by any later unit) stops the scheduler
    // serving: health NOT_SERVING, every call UNAVAILABLE with STORE_DAMAGED, and
    // the log and /metrics say why, until an operator restores it.
    let damaged = false;
    // A shared database that stops answering (the lease keeper looks every 2 s):
    // health NOT_SERVING, so load balancers and agents go to another replica,
    // until it answers again.
    let reachable = true;
    databaseReachable = (ok, why) => {
      metrics.storeReachable(ok);
      if (ok === reachable || damaged) return;
      reachable = ok;
      server.setServing(ok);
      if (ok) logger.warn('the database answers again: serving');
      else logger.error({ why }, 'the database does not answer: health NOT_SERVING until it does');
    };
    store.onDamage?.((why) => {
      damaged = true;
      server.setServing(false);
      metrics.storeDamaged(why);
      logger.error({ db: options.db, why }, 'the database is damaged: serving nothing until it is restored');
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
    if (!damaged) {
      const followedElsewhere = (await leases?.live()) ?? new Map<string, string>();
      for (const h of await store.listHosts()) {
        if (h.connected && !followedElsewhere.has(h.name)) await store.setHostConnected(h.name, false);
      }
      leaseKeeper?.start();
    }
    // After the hosts known from before are marked disconnected: Placement never
    // sees a host as reachable that this scheduler has not heard from.
    if (!damaged) placement?.start();
    const pruner = new HistoryPruner(
      store,
      { ...DEFAULT_RETENTION, ...options.retention },
      logger.child({ component: 'retention' }),
      options.retentionIntervalMs,
    );
    if (!damaged) pruner.start();
    logger.info({ address: server.address, schedulerId }, 'scheduler serving');
    const scheduler = new Scheduler(core, server, lock, pruner, leaseKeeper);
    if (options.metricsListen) {
      try {
        const m = await serveMetrics(options.metricsListen, metrics.registry);
        scheduler.metricsServer = m.server;
        scheduler.metricsAddress = m.address;
      } catch (err) {
        await scheduler.stop();
        throw err;
      }
      logger.info({ metrics: `http://${scheduler.metricsAddress}/metrics` }, 'serving metrics');
    }
    return scheduler;
  }

  metricsServer: Server | null = null;
  /** host:port of /metrics, '' when not served. */
  metricsAddress = '';

  get address(): string {
    return this.server.address;
  }

  get store(): Store {
    return this.core.store;
  }

  async stop(): Promise<void> {
    await this.core.placement?.stop();
    this.core.dispatcher.stop();
    await this.pruner.stop();
    // Its hosts are adopted by the other schedulers on the database at their next look.
    await this.leaseKeeper?.stop();
    this.core.hub.close();
    for (const l of this.core.links.values()) l.stop();
    this.core.agents.close();
    await this.server.stop(2_000);
    this.metricsServer?.close();
    await this.core.store.close();
    this.lock?.release();
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
