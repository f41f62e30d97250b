/**
 * The host agent: loads drivers, validates the host, discovers, serves
 * berth.agent.v1.AgentService, registers with the scheduler, rediscovers on an
 * interval (so hotplug and removal reach the scheduler within one interval),
 * and runs cleanups. Lifecycle (`AgentState`): starting → serving ⇄
 * degraded(drivers_failing) → stopping → stopped.
 */
import { randomUUID } from 'node:crypto';
import { mkdir, readFile } from 'node:fs/promises';
import type { Server } from 'node:http';
import type { Logger } from 'pino';
import { failedPrecondition, invalidArgument, notFound } from '../../errors.js';
import type { GetAgentInfoResponse } from '../../gen/berth/agent/v1/agent.js';
import { createLogger } from '../../logging.js';
import type { CommandRunner } from '../../plugins/command-runner.js';
import { DRIVER_API_VERSION } from '../../plugins/driver.js';
import { ExecRunner } from '../../plugins/exec-runner.js';
import { MAX_MEDIA_KEY } from '../../plugins/pci/media-identity.js';
import { assertPciAddress } from '../../plugins/pci/sysfs-reader.js';
import type { DiscoveredDevice, MediaRecord } from '../../plugins/types.js';
import { BERTH_VERSION } from '../../version.js';
import { Authenticator, type AuthOptions, authInterceptor, logAuthMode } from '../grpc/auth.js';
import { GrpcServer } from '../grpc/server.js';
import { channelCredentials, loadTls, serverCredentials } from '../grpc/tls.js';
import { Lifecycle, type LifecycleState } from '../lifecycle.js';
import { mediaRecordToProto } from '../media-proto.js';
import { Metrics, serveMetrics } from '../metrics.js';
import { agentServiceBinding } from './agent-service.js';
import { CleanupJournal } from './cleanup-journal.js';
import { CleanupRunner } from './cleanup-runner.js';
import { type AgentConfig, agentAuthOptions } from './config.js';
import { Inventory, type InventoryDiff } from './inventory.js';
import { publicRecord, recordFor, reportedMedia, seenMedia, withRecords } from './media.js';
import type { ObserveResult } from './media-ledger.js';
import { PluginHost } from './plugin-host.js';
import { RegistrationLoop } from './registration.js';

/**
 * What this agent can do, advertised at registration; the scheduler checks
 * these before relying on a capability. `binding.v1`: it records bindings
 * (RecordBinding) and reports the devices it holds as dirty. `media.v1`: its
 * devices carry their media identity and journal record, its registrations
 * every held, dirty or burned media, and it serves ReleaseDevice
 * (docs/media-identity.md).
 */
export const AGENT_FEATURES = ['inventory.v1', 'cleanup.v1', 'migration.v1', 'binding.v1', 'media.v1'];

/** Why a serving agent is degraded. */
export type AgentDegradedReason =
  /** A driver's discovery fails (a broken driver degrades the host, it does not stop the agent): its devices keep their last state. */
  'drivers_failing';

/**
 * starting → serving ⇄ degraded(drivers_failing) → stopping → stopped. Health
 * is SERVING while serving or degraded (its API answers, its other drivers'
 * devices are current), NOT_SERVING otherwise.
 */
export type AgentState = LifecycleState<AgentDegradedReason>;

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
  private readonly lifecycle = new Lifecycle<AgentDegradedReason>();
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

  /** Where the agent is in its lifecycle (and why, when degraded). */
  get state(): AgentState {
    return this.lifecycle.state;
  }

  get isStopping(): boolean {
    return this.lifecycle.ending;
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
      procRoot: config.procRoot,
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
        onMediaChanged: (r) => agent?.mediaChanged(r.key),
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
    if (journal.prunedMedia > 0) {
      logger.info(
        { pruned: journal.prunedMedia },
        'media records of clean media not seen for 90 days pruned',
      );
    }
    cleanups.recover();
    try {
      agent.applyDiscovery(first.devices, [], true);
    } catch (err) {
      journal.close();
      throw err;
    }
    for (const ex of first.excluded) logger.warn(ex, 'device excluded');
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
    const authOptions = options.auth ?? (await agentAuthOptions(cfg));
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
    // Health follows the lifecycle from here on; each transition is one log line.
    this.server.setServing(false);
    this.lifecycle.onTransition((next, previous) => this.transitioned(next, previous));
    if (cfg.metricsListen) {
      const m = await serveMetrics(cfg.metricsListen, this.metrics.registry);
      this.metricsServer = m.server;
      this.metricsAddress = m.address;
      this.logger.info({ metrics: `http://${m.address}/metrics` }, 'serving metrics');
    }
    this.endpoint = this.config.advertise ?? bound;
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
          heldDevices: this.cleanups.heldDevices().map((h) => ({ ...h, since: new Date(h.since) })),
          mediaRecords: this.mediaReport().map(mediaRecordToProto),
        }),
      });
      this.registration.start();
    }
    this.lifecycle.started();
  }

  private transitioned(next: AgentState, previous: AgentState): void {
    this.server?.setServing(next.kind === 'serving' || next.kind === 'degraded');
    const state = next.kind;
    switch (next.kind) {
      case 'serving':
        if (previous.kind === 'starting') {
          this.logger.info(
            {
              state,
              endpoint: this.endpoint,
              devices: this.inventory.list().length,
              drivers: this.host.drivers.map((d) => d.name),
            },
            'agent serving',
          );
        } else {
          this.logger.info({ state }, 'every driver discovers again');
        }
        return;
      case 'degraded':
        this.logger.warn(
          { state, reason: next.reason, drivers: next.detail },
          'a driver fails to discover: its devices keep their last state until it discovers again',
        );
        return;
      case 'stopping':
      case 'stopped':
        this.logger.info({ state }, `agent ${state}`);
        return;
      case 'starting':
        return;
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
        const diff = this.applyDiscovery(result.devices, result.failedDrivers, false);
        if (result.failedDrivers.length > 0) {
          this.lifecycle.degrade('drivers_failing', result.failedDrivers.join(', '));
        } else {
          this.lifecycle.recovered('drivers_failing');
        }
        const n = diff.added.length + diff.changed.length + diff.removed.length;
        if (n > 0) {
          this.logger.info(
            {
              added: diff.added.map((d) => `${d.address} ${d.media?.key ?? ''}`.trim()),
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

  /**
   * A discovery's devices into the journal's record of media (first sight,
   * new addresses, holds recorded by address) and into the inventory, each
   * with what the journal says of its media. At start (`strict`) a journal
   * that cannot be written stops the agent; later the pass goes on with what
   * the journal holds (a device whose media has no record shows dirty).
   */
  applyDiscovery(
    devices: DiscoveredDevice[],
    failedDrivers: readonly string[],
    strict: boolean,
  ): InventoryDiff {
    try {
      this.logObserved(
        this.journal.media.observe(seenMedia(devices, this.config.host), this.journal.legacyHolds()),
        devices,
      );
    } catch (err) {
      if (strict) throw err;
      this.logger.error({ err }, 'cannot record what this discovery saw of media in the journal');
    }
    return this.inventory.apply(withRecords(devices, this.journal.media), failedDrivers);
  }

  private logObserved(o: ObserveResult, devices: DiscoveredDevice[]): void {
    const at = (address: string) => devices.find((d) => d.address === address);
    for (const c of o.created) {
      const d = at(c.address);
      this.logger.info(
        {
          media: c.key,
          kind: d?.media?.kind,
          address: c.address,
          condition: c.condition,
          ...(d?.media?.serial ? { serial: d.media.serial } : {}),
          ...(c.inheritedFrom ? { inheritedFrom: c.inheritedFrom } : {}),
        },
        c.condition === 'dirty'
          ? `media ${c.key} seen for the first time at ${c.address}: never cleaned by Berth, it is cleaned before its first offer`
          : `media ${c.key} seen for the first time at ${c.address}`,
      );
    }
    for (const x of o.declared) {
      const entry = at(x.address)?.attributes.device_spec ?? 'its device_spec entry';
      this.logger.info(
        { media: x.key, address: x.address, deviceSpec: entry },
        `media ${x.key} at ${x.address} declared clean by device_spec entry ${entry} (assume_clean), not cleaned before its first offer`,
      );
    }
    for (const m of o.moved) {
      this.logger.warn(
        { media: m.key, from: m.from, to: m.to, condition: m.condition },
        `media ${m.key}, last seen at ${m.from}, is now at ${m.to} (${m.condition})`,
      );
    }
    for (const h of o.migrated) {
      this.logger.info(
        { address: h.address, media: h.key, arqUuid: h.arqUuid },
        `the hold of ${h.address} for ARQ ${h.arqUuid}, recorded by address, now follows its media ${h.key}`,
      );
    }
  }

  /** The journal changed its record of `key`: the devices that reach it say so (a `changed` event each). */
  mediaChanged(key: string): void {
    this.inventory.update((d) => {
      if (d.media?.key !== key) return null;
      const mediaRecord = recordFor(d, this.journal.media);
      return mediaRecord ? { ...d, mediaRecord } : null;
    });
  }

  /** The media records for a registration; a warning when the bound leaves some out. */
  private mediaReport(): MediaRecord[] {
    const { records, leftOut } = reportedMedia(this.journal.media);
    if (leftOut !== this.mediaLeftOut) {
      this.mediaLeftOut = leftOut;
      if (leftOut > 0) {
        this.logger.warn(
          { reported: records.length, leftOut },
          `the journal holds ${records.length + leftOut} held, dirty or burned media records; a registration carries ${records.length}, the oldest dirty ones are left out`,
        );
      }
    }
    return records;
  }

  private mediaLeftOut = 0;

  /**
   * ReleaseDevice: an operator releases the one-time-use device at `address`,
   * whose media the caller names: the burn is cleared in the journal,
   * durably, before the answer. Releasing media that is not burned changes
   * nothing (a retry is safe).
   */
  releaseDevice(address: string, mediaKey: string): MediaRecord {
    assertPciAddress(address);
    if (typeof mediaKey !== 'string' || mediaKey.length === 0 || mediaKey.length > MAX_MEDIA_KEY) {
      throw invalidArgument(
        'media_key',
        `${JSON.stringify(String(mediaKey).slice(0, 80))} is not a media key (1-${MAX_MEDIA_KEY} characters)`,
      );
    }
    const device = this.inventory.get(address);
    if (!device) throw notFound('device', address);
    const key = device.media?.key ?? '';
    if (key !== mediaKey) {
      throw failedPrecondition(
        'MEDIA_CHANGED',
        `device ${address} on ${this.config.host} now reaches media ${key || '(unknown)'}, not ${mediaKey}: release what is there by its own key`,
        { address, media_key: key },
      );
    }
    const before = this.journal.media.get(key);
    const after = this.journal.media.release(key);
    if (before?.burned) {
      this.logger.info({ address, media: key }, `the burn of media ${key} at ${address} was released`);
      this.mediaChanged(key);
    }
    return (after ? publicRecord(after) : recordFor(device, this.journal.media))!;
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
    if (this.lifecycle.ending) return this.stopped;
    this.lifecycle.stopping();
    if (this.timer) clearInterval(this.timer);
    this.registration?.stop();
    await this.cleanups.stop();
    this.resolveStopped();
    await this.server?.stop(2_000);
    this.metricsServer?.close();
    this.journal.close();
    this.lifecycle.stopped();
  }
}
