/**
 * The host agent: loads drivers, validates the host, discovers, serves
 * berth.agent.v1.AgentService, registers with the scheduler, follows hotplug
 * and runs cleanups. Hotplug (decision 56): the kernel's uevents name the
 * functions that came, went or changed, and only those (with what depends on
 * them) are re-read; a full rescan runs every hotplug.rescan_interval as a
 * safety net, and every discovery_interval while no event source is followed.
 * Lifecycle (`AgentState`): starting → serving ⇄ degraded(drivers_failing)
 * → stopping → stopped. Its parts: discovery-loop.ts (the passes, hotplug,
 * the rescans) with host-use-watch.ts, certificate-outbox.ts (what a
 * registration carries of the certificates), agent-info.ts (GetAgentInfo).
 */
import { randomUUID } from 'node:crypto';
import { mkdir, readFile } from 'node:fs/promises';
import type { Server } from 'node:http';
import type { Logger } from 'pino';
import { failedPrecondition, invalidArgument, notFound } from '../../errors.js';
import type { GetAgentInfoResponse } from '../../gen/berth/agent/v1/agent.js';
import { parsePciAddress } from '../../identifiers.js';
import { createLogger } from '../../logging.js';
import type { CommandRunner } from '../../plugins/command-runner.js';
import { MAX_MEDIA_KEY } from '../../plugins/pci/media-identity.js';
import type { MediaRecord } from '../../plugins/types.js';
import { BERTH_VERSION } from '../../version.js';
import { Authenticator } from '../grpc/auth/authenticator.js';
import type { AuthOptions } from '../grpc/auth/configuration.js';
import { authInterceptor, logAuthMode } from '../grpc/auth/interceptor.js';
import { GrpcServer } from '../grpc/server.js';
import { channelCredentials, loadTls, serverCredentials } from '../grpc/tls.js';
import { Lifecycle, type LifecycleState } from '../lifecycle.js';
import { mediaRecordToProto } from '../media-proto.js';
import { type DeviceCount, Metrics, serveMetrics } from '../metrics.js';
import { agentInfo } from './agent-info.js';
import { agentServiceBinding } from './agent-service.js';
import { CertificateOutbox } from './certificate-outbox.js';
import { CleanupJournal } from './cleanup-journal.js';
import { CleanupRunner } from './cleanup-runner.js';
import { type AgentConfig, agentAuthOptions } from './config.js';
import { DiscoveryLoop } from './discovery-loop.js';
import { Inventory, type InventoryDiff } from './inventory.js';
import { resourceApiClient } from './kubelet/api-server.js';
import type { KubeletDevicePlugin } from './kubelet/device-plugin.js';
import type { KubeletDraPlugin } from './kubelet/dra-plugin.js';
import type { ResourceSlicePublisher } from './kubelet/slice-publisher.js';
import { publicRecord, recordFor, reportedMedia } from './media.js';
import { PluginHost } from './plugin-host.js';
import { RegistrationLoop } from './registration.js';
import { loadOrCreateSigningKey, retiredPublicKeys, type SigningKey } from './signing-key.js';

/** The grpc.health.v1 service name that is SERVING while kernel events are followed. */
export const HOTPLUG_HEALTH_SERVICE = 'berth.agent.v1.Hotplug';

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
  /** Bytes of certificates one registration carries at most (default 1.5 MB; tests make it small). */
  certificateBytesPerRegistration?: number;
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
  /** The kubelet's device plugin API (kubernetes.device_plugin); null when not enabled. */
  devicePlugin: KubeletDevicePlugin | null = null;
  /** The kubelet's DRA plugin API (kubernetes.dra); null when not enabled. */
  dra: KubeletDraPlugin | null = null;
  /** This host's ResourceSlices on the API server (kubernetes.resource_slices); null when not enabled. */
  resourceSlices: ResourceSlicePublisher | null = null;
  private readonly lifecycle = new Lifecycle<AgentDegradedReason>();
  /** Discovery passes, hotplug and the full rescans (discovery-loop.ts). */
  readonly discovery: DiscoveryLoop;
  private resolveStopped!: () => void;
  readonly stopped = new Promise<void>((r) => {
    this.resolveStopped = r;
  });
  endpoint = '';
  /** The keys this agent signed with before (rotated), for a scheduler that pins afresh. */
  private readonly retiredKeys: string[];
  /** The erasure certificates registrations carry (certificate-outbox.ts). */
  readonly outbox: CertificateOutbox;

  private constructor(
    readonly config: AgentConfig,
    readonly logger: Logger,
    readonly host: PluginHost,
    readonly cleanups: CleanupRunner,
    readonly journal: CleanupJournal,
    readonly bootId: string,
    readonly features: string[],
    readonly metrics: Metrics,
    /** Signs the erasure certificates (signing-key.ts). */
    readonly signingKey: SigningKey,
  ) {
    this.retiredKeys = retiredPublicKeys(config.stateDir).map((k) => JSON.stringify(k));
    this.outbox = new CertificateOutbox(journal);
    this.discovery = new DiscoveryLoop({
      config,
      logger,
      host,
      inventory: this.inventory,
      journal,
      lifecycle: this.lifecycle,
      health: (status) => this.server?.health.setStatus(HOTPLUG_HEALTH_SERVICE, status),
    });
  }

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
    const host = await PluginHost.loadFor(config, { runner: options.runner, logger });
    await host.initHost();
    const share = options.certificateBytesPerRegistration;
    const first = await host.discover({ strict: true });
    const signingKey = loadOrCreateSigningKey(config.stateDir);
    if (signingKey.created) {
      logger.info({ keyId: signingKey.kid, path: signingKey.path }, 'erasure certificate signing key made');
    }
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
        signer: { key: () => signingKey, host: config.host },
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
      signingKey,
    );
    if (share !== undefined) agent.outbox.certificateShare = share;
    const inventory = agent.inventory;
    metrics.devicesGauge(() => {
      const counts = new Map<string, DeviceCount>();
      for (const d of inventory.list()) {
        const key = `${d.type}/${d.health}/${d.resourceClass}`;
        const c = counts.get(key) ?? {
          type: d.type,
          state: d.health,
          resourceClass: d.resourceClass,
          count: 0,
        };
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
      const custody = journal.media.startCustody(bootId);
      if (custody.broken > 0) {
        logger.warn(
          { previousBootId: custody.previous, bootId, media: custody.broken },
          `the host booted since the agent last ran: the custody of ${custody.broken} media records broke; each is scrubbed (cleaned media) or held for an operator (one-time use) when seen`,
        );
      }
      agent.discovery.applyDiscovery(first.devices, [], true);
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
    this.logger.info(
      {
        endpoint: this.endpoint,
        devices: this.inventory.list().length,
        drivers: this.host.drivers.map((d) => d.name),
      },
      'agent serving',
    );
    this.metrics.hotplug(() => ({
      up: this.discovery.sourceStatus.state === 'following',
      ...this.discovery.counts,
    }));
    this.discovery.start();
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
          signingKey: JSON.stringify(this.signingKey.publicJwk),
          certificates: this.outbox.certificatesToSend(),
          retiredSigningKeys: this.retiredKeys,
        }),
        onResponse: (res, req) => this.outbox.certificatesAnswered(res, req.certificates),
      });
      this.registration.start();
    }
    // The kubelet plugins' scheduler calls: their own token (kubernetes.*.scheduler_token_file) or the agent's.
    const pluginToken = async (own: string | null) =>
      own ? { token: (await readFile(own, 'utf8')).trim() } : schedulerToken ? { token: schedulerToken } : {};
    const pluginAgent = {
      host: cfg.host,
      devRoot: cfg.devRoot,
      inventory: this.inventory,
      isCleaning: (key: string) => this.cleanups.isCleaning(key),
      logger: this.logger,
    };
    // The kubelet plugins (with their generated Kubernetes protos) load only for an agent configured with them.
    if (cfg.devicePlugin && cfg.scheduler) {
      const { KubeletDevicePlugin } = await import('./kubelet/device-plugin.js');
      this.devicePlugin = new KubeletDevicePlugin({
        config: cfg.devicePlugin,
        agent: pluginAgent,
        scheduler: cfg.scheduler,
        credentials: channelCredentials(tls),
        ...(await pluginToken(cfg.devicePlugin.schedulerTokenFile)),
      });
      this.devicePlugin.start();
    }
    if (cfg.dra && cfg.scheduler && cfg.kubernetesApiServer) {
      const [{ KubeletDraPlugin }, { ClaimReader }, { DraCheckpoint }] = await Promise.all([
        import('./kubelet/dra-plugin.js'),
        import('./kubelet/dra-claims.js'),
        import('./kubelet/dra-checkpoint.js'),
      ]);
      this.dra = new KubeletDraPlugin({
        config: cfg.dra,
        agent: pluginAgent,
        claims: new ClaimReader(
          await resourceApiClient(cfg.kubernetesApiServer),
          cfg.dra.driverName,
          cfg.dra.pool,
        ),
        checkpoint: await DraCheckpoint.load(cfg.dra.checkpointFile),
        scheduler: cfg.scheduler,
        credentials: channelCredentials(tls),
        ...(await pluginToken(cfg.dra.schedulerTokenFile)),
      });
      await this.dra.start();
    }
    if (cfg.resourceSlices && cfg.kubernetesApiServer) {
      // Imported only here: it loads the Kubernetes client library (about 80 MB), which only such an agent pays.
      const { ResourceSlicePublisher } = await import('./kubelet/slice-publisher.js');
      this.resourceSlices = new ResourceSlicePublisher({
        config: cfg.resourceSlices,
        api: await resourceApiClient(cfg.kubernetesApiServer),
        inventory: this.inventory,
        isCleaning: (key) => this.cleanups.isCleaning(key),
        logger: this.logger,
      });
      this.resourceSlices.start();
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

  /** Counters of how discovery ran. */
  get counts(): DiscoveryLoop['counts'] {
    return this.discovery.counts;
  }

  /** Runs a full discovery after any pass running now (discovery-loop.ts). */
  rediscover(): Promise<InventoryDiff> {
    return this.discovery.rediscover();
  }

  /** The running event source's pid (tests kill it); null when none runs. */
  get hotplugSourcePid(): number | null {
    return this.discovery.hotplugSourcePid;
  }

  /** Resolves once the events received so far are applied (tests). */
  hotplugSettled(): Promise<void> {
    return this.discovery.hotplugSettled();
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
    parsePciAddress('address', address);
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
    return agentInfo(this);
  }

  get address(): string {
    return this.server?.address ?? '';
  }

  /** Graceful stop: no new work, running cleanups end as interrupted, streams close. */
  async stop(): Promise<void> {
    if (this.lifecycle.ending) return this.stopped;
    this.lifecycle.stopping();
    await this.discovery.stop();
    this.registration?.stop();
    await this.devicePlugin?.stop();
    await this.dra?.stop();
    await this.resourceSlices?.stop();
    await this.cleanups.stop();
    this.resolveStopped();
    await this.server?.stop(2_000);
    this.metricsServer?.close();
    this.journal.close();
    this.lifecycle.stopped();
  }
}
