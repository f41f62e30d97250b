/**
 * The host agent: loads drivers, validates the host, discovers, serves
 * berth.agent.v1.AgentService, registers with the scheduler, rediscovers on an
 * interval (so hotplug and removal reach the scheduler within one interval),
 * and runs cleanups. Lifecycle: starting → serving → stopping → stopped.
 */
import { randomUUID } from 'node:crypto';
import { mkdir, readFile } from 'node:fs/promises';
import type { Server } from 'node:http';
import type { Logger } from 'pino';
import { ConfigError } from '../../errors.js';
import type { GetAgentInfoResponse } from '../../gen/berth/agent/v1/agent.js';
import { createLogger } from '../../logging.js';
import type { CommandRunner } from '../../plugins/command-runner.js';
import { DRIVER_API_VERSION } from '../../plugins/driver.js';
import { ExecRunner } from '../../plugins/exec-runner.js';
import { BERTH_VERSION } from '../../version.js';
import {
  Authenticator,
  type AuthOptions,
  authInterceptor,
  loadAuthOptions,
  logAuthMode,
} from '../grpc/auth.js';
import { GrpcServer } from '../grpc/server.js';
import { channelCredentials, loadTls, serverCredentials } from '../grpc/tls.js';
import { Metrics, serveMetrics } from '../metrics.js';
import { agentServiceBinding } from './agent-service.js';
import { CleanupJournal } from './cleanup-journal.js';
import { CleanupRunner } from './cleanup-runner.js';
import type { AgentConfig } from './config.js';
import { Inventory, type InventoryDiff } from './inventory.js';
import { PluginHost } from './plugin-host.js';
import { RegistrationLoop } from './registration.js';

/** What this agent can do; the scheduler checks these before relying on a capability. */
/**
 * What this agent can do, advertised at registration. `binding.v1`: it records
 * bindings (RecordBinding) and reports the devices it holds as dirty.
 */
export const AGENT_FEATURES = ['inventory.v1', 'cleanup.v1', 'migration.v1', 'binding.v1'];

export interface AgentOptions {
  config: AgentConfig;
  logger?: Logger;
  runner?: CommandRunner;
  /** Override the advertised features (tests of older agents). */
  features?: string[];
  /** File holding the host's boot id; default /proc/sys/kernel/random/boot_id. */
  bootIdFile?: string;
  /** Who may call this agent; overrides the config's `auth` section (`berth up`, tests). */
  auth?: AuthOptions;
  /** Token sent with Register; overrides `scheduler_token_file`. */
  schedulerToken?: string;
}

async function readBootId(file: string): Promise<string> {
  try {
    return (await readFile(file, 'utf8')).trim();
  } catch {
    return `unknown-${randomUUID()}`;
  }
}

export class Agent {
  readonly inventory = new Inventory();
  readonly startedAt = new Date();
  private server: GrpcServer | null = null;
  private metricsServer: Server | null = null;
  /** host:port of /metrics, '' when not served. */
  metricsAddress = '';
  private registration: RegistrationLoop | null = null;
  private timer: NodeJS.Timeout | null = null;
  private discovering: Promise<InventoryDiff> | null = null;
  private stopping = false;
  private resolveStopped!: () => void;
  readonly stopped = new Promise<void>((r) => {
    this.resolveStopped = r;
  });
  endpoint = '';

  private constructor(
    readonly config: AgentConfig,
    readonly logger: Logger,
    readonly host: PluginHost,
    readonly cleanups: CleanupRunner,
    readonly journal: CleanupJournal,
    readonly bootId: string,
    readonly features: string[],
    readonly metrics: Metrics,
  ) {}

  get isStopping(): boolean {
    return this.stopping;
  }

  /**
   * Starts an agent. Config errors, a failing initHost, a failing first
   * discovery and two drivers claiming one device all reject here, before
   * anything is served.
   */
  static async start(options: AgentOptions): Promise<Agent> {
    const { config } = options;
    const logger = (options.logger ?? createLogger()).child({ component: 'agent', host: config.host });
    await mkdir(config.stateDir, { recursive: true });
    const host = await PluginHost.load(config, {
      sysfsRoot: config.sysfsRoot,
      devRoot: config.devRoot,
      stateDir: config.stateDir,
      hostname: config.host,
      runner: options.runner ?? new ExecRunner(),
      logger,
    });
    await host.initHost();
    const first = await host.discover({ strict: true });
    const journal = new CleanupJournal(config.stateDir);
    const bootId = await readBootId(options.bootIdFile ?? '/proc/sys/kernel/random/boot_id');
    let agent: Agent | null = null;
    const metrics = new Metrics('agent');
    const cleanups = new CleanupRunner(
      journal,
      host,
      (a) => agent?.inventory.get(a),
      logger.child({ component: 'cleanup' }),
      {
        defaultTimeoutMs: 900_000,
        onOutcome: (action, outcome, seconds) => metrics.observeCleanup(action, outcome, seconds),
      },
    );
    agent = new Agent(
      config,
      logger,
      host,
      cleanups,
      journal,
      bootId,
      options.features ?? AGENT_FEATURES,
      metrics,
    );
    const inventory = agent.inventory;
    metrics.devicesGauge(() => {
      const counts = new Map<string, { host: string; type: string; state: string; count: number }>();
      for (const d of inventory.list()) {
        const key = `${d.type}/${d.health}`;
        const c = counts.get(key) ?? { host: config.host, type: d.type, state: d.health, count: 0 };
        c.count++;
        counts.set(key, c);
      }
      return [...counts.values()];
    });
    agent.inventory.apply(first.devices);
    for (const ex of first.excluded) logger.warn(ex, 'device excluded');
    cleanups.recover();
    try {
      await agent.serve(options);
    } catch (err) {
      journal.close();
      throw err;
    }
    return agent;
  }

  private async serve(options: AgentOptions): Promise<void> {
    const cfg = this.config;
    const authOptions =
      options.auth ?? (cfg.auth ? await loadAuthOptions(cfg.auth, cfg.host) : requireAgentAuth(undefined));
    const auth = new Authenticator(authOptions);
    const tls = cfg.tls ? await loadTls(cfg.tls) : undefined;
    const schedulerToken =
      options.schedulerToken ??
      (cfg.schedulerTokenFile ? (await readFile(cfg.schedulerTokenFile, 'utf8')).trim() : undefined);
    this.server = new GrpcServer({
      services: [agentServiceBinding(this, this.logger)],
      interceptors: [this.metrics.interceptor(), authInterceptor(auth, this.logger)],
      ...(tls ? { credentials: serverCredentials(tls) } : {}),
    });
    logAuthMode(auth, this.logger, 'agent');
    const bound = await this.server.listen(this.config.listen);
    if (cfg.metricsListen) {
      const m = await serveMetrics(cfg.metricsListen, this.metrics.registry);
      this.metricsServer = m.server;
      this.metricsAddress = m.address;
      this.logger.info({ metrics: `http://${m.address}/metrics` }, 'serving metrics');
    }
    this.endpoint = this.config.advertise ?? bound;
    this.logger.info(
      {
        endpoint: this.endpoint,
        devices: this.inventory.list().length,
        drivers: this.host.drivers.map((d) => d.name),
      },
      'agent serving',
    );
    this.timer = setInterval(() => {
      void this.rediscover().catch((err) => this.logger.error({ err }, 'rediscovery failed'));
    }, this.config.discoveryInterval * 1000);
    this.timer.unref();
    if (this.config.schedulers.length > 0) {
      this.registration = new RegistrationLoop({
        schedulers: this.config.schedulers,
        credentials: channelCredentials(tls),
        ...(schedulerToken ? { token: schedulerToken } : {}),
        intervalMs: this.config.registerInterval * 1000,
        logger: this.logger,
        request: () => ({
          host: this.config.host,
          endpoint: this.endpoint,
          bootId: this.bootId,
          epoch: this.inventory.epoch,
          agentVersion: BERTH_VERSION,
          features: this.features,
          drivers: this.host.drivers.map((d) => d.name),
          heldDevices: this.cleanups.heldDevices().map(({ address, arqUuid, instanceUuid, since }) => ({
            address,
            arqUuid,
            instanceUuid,
            since: new Date(since),
            // Filled in when the journal follows media (docs/media-identity.md).
            mediaKey: '',
          })),
          mediaRecords: [],
        }),
      });
      this.registration.start();
    }
  }

  /** Resolves once the scheduler accepted a registration (tests and `berth up`). */
  get registered(): Promise<void> {
    return this.registration?.registered ?? Promise.resolve();
  }

  /** Runs discovery now; concurrent callers share one run. */
  rediscover(): Promise<InventoryDiff> {
    if (this.discovering) return this.discovering;
    this.discovering = (async () => {
      try {
        const result = await this.host.discover({ strict: false });
        const diff = this.inventory.apply(result.devices, result.failedDrivers);
        const n = diff.added.length + diff.changed.length + diff.removed.length;
        if (n > 0) {
          this.logger.info(
            {
              added: diff.added.map((d) => d.address),
              changed: diff.changed.map((d) => d.address),
              removed: diff.removed,
            },
            'inventory changed',
          );
        }
        return diff;
      } finally {
        this.discovering = null;
      }
    })();
    return this.discovering;
  }

  info(): GetAgentInfoResponse {
    return {
      host: this.config.host,
      agentVersion: BERTH_VERSION,
      bootId: this.bootId,
      epoch: this.inventory.epoch,
      drivers: this.host.loaded.map((l) => ({
        name: l.driver.name,
        apiVersion: l.driver.apiVersion ?? DRIVER_API_VERSION,
        supportsCleaning: l.driver.supportsCleaning,
        source: l.source,
      })),
      features: this.features,
      startedAt: this.startedAt,
    };
  }

  get address(): string {
    return this.server?.address ?? '';
  }

  /** Graceful stop: no new work, running cleanups end as interrupted, streams close. */
  async stop(): Promise<void> {
    if (this.stopping) return this.stopped;
    this.stopping = true;
    if (this.timer) clearInterval(this.timer);
    this.registration?.stop();
    this.server?.setServing(false);
    await this.cleanups.stop();
    this.resolveStopped();
    await this.server?.stop(2_000);
    this.metricsServer?.close();
    this.journal.close();
    this.logger.info('agent stopped');
  }
}

/**
 * The one place that decides what an agent without an `auth` section (and no
 * AgentOptions.auth) does: it refuses to serve. Only `auth: {mode: none}` /
 * `--insecure-no-auth` switch authentication off.
 */
function requireAgentAuth(auth: AuthOptions | undefined): AuthOptions {
  if (auth) return auth;
  throw new ConfigError(
    'auth: no authentication configured: give auth.static_tokens_file, a jwt_* key or cert_roles, ' +
      'or switch it off explicitly with auth: {mode: none} / --insecure-no-auth',
  );
}
