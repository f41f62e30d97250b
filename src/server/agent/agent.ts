/**
 * The host agent: loads drivers, validates the host, discovers, serves
 * berth.agent.v1.AgentService, registers with the scheduler, follows hotplug
 * and runs cleanups. Hotplug (decision 56): the kernel's uevents name the
 * functions that came, went or changed, and only those (with what depends on
 * them) are re-read; a full rescan runs every hotplug.rescan_interval as a
 * safety net, and every discovery_interval while no event source is followed.
 * Lifecycle (`AgentState`): starting → serving ⇄ degraded(drivers_failing)
 * → stopping → stopped.
 */
import { randomUUID } from 'node:crypto';
import { mkdir, readFile } from 'node:fs/promises';
import type { Server } from 'node:http';
import type { Logger } from 'pino';
import { failedPrecondition, invalidArgument, notFound } from '../../errors.js';
import { type GetAgentInfoResponse, HotplugState } from '../../gen/berth/agent/v1/agent.js';
import { isPciAddress, parsePciAddress } from '../../identifiers.js';
import { createLogger } from '../../logging.js';
import type { CommandRunner } from '../../plugins/command-runner.js';
import { DRIVER_API_VERSION } from '../../plugins/driver.js';
import { readHostUse } from '../../plugins/host-use.js';
import { readNvmeSubsystemFunctions } from '../../plugins/nvme/sysfs-nvme.js';
import { MAX_MEDIA_KEY } from '../../plugins/pci/media-identity.js';
import { readIommuGroupMembers, readPciFunctionSync } from '../../plugins/pci/sysfs-reader.js';
import type { DiscoveredDevice, MediaRecord } from '../../plugins/types.js';
import { BERTH_VERSION } from '../../version.js';
import { Authenticator } from '../grpc/auth/authenticator.js';
import type { AuthOptions } from '../grpc/auth/configuration.js';
import { authInterceptor, logAuthMode } from '../grpc/auth/interceptor.js';
import { GrpcServer } from '../grpc/server.js';
import { channelCredentials, loadTls, serverCredentials } from '../grpc/tls.js';
import { Lifecycle, type LifecycleState } from '../lifecycle.js';
import { mediaRecordToProto } from '../media-proto.js';
import { type DeviceCount, Metrics, serveMetrics } from '../metrics.js';
import { agentServiceBinding } from './agent-service.js';
import { CleanupJournal } from './cleanup-journal.js';
import { CleanupRunner } from './cleanup-runner.js';
import { type AgentConfig, agentAuthOptions } from './config.js';
import { Coalescer, type SourceStatus, UdevadmSource } from './hotplug.js';
import { Inventory, type InventoryDiff } from './inventory.js';
import { resourceApiClient } from './kubelet/api-server.js';
import { KubeletDevicePlugin } from './kubelet/device-plugin.js';
import { DraCheckpoint } from './kubelet/dra-checkpoint.js';
import { ClaimReader } from './kubelet/dra-claims.js';
import { KubeletDraPlugin } from './kubelet/dra-plugin.js';
import type { ResourceSlicePublisher } from './kubelet/slice-publisher.js';
import { logObserved, publicRecord, recordFor, reportedMedia, seenMedia, withRecords } from './media.js';
import { type HostDiscovery, PluginHost } from './plugin-host.js';
import { RegistrationLoop } from './registration.js';
import { loadOrCreateSigningKey, retiredPublicKeys, type SigningKey } from './signing-key.js';
import { type Uevent, ueventTarget } from './uevent.js';

/** The grpc.health.v1 service name that is SERVING while kernel events are followed. */
export const HOTPLUG_HEALTH_SERVICE = 'berth.agent.v1.Hotplug';

/** Counters of how discovery ran (GetAgentInfo's hotplug status, /metrics). */
interface DiscoveryCounts {
  events: number;
  partialPasses: number;
  fullPasses: number;
  functionsReread: number;
}

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

/** Certificates one registration carries at most (bytes of JWS); more go in the registrations after. */
const CERTIFICATE_BYTES_PER_REGISTRATION = 1_500_000;

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
  /** The next full rediscovery (rescan_interval while following events, else discovery_interval). */
  private timer: NodeJS.Timeout | null = null;
  private readonly lifecycle = new Lifecycle<AgentDegradedReason>();
  /** Discovery passes run one at a time, in order: full ones and hotplug ones alike. */
  private lane: Promise<unknown> = Promise.resolve();
  /** A full pass asked for and not started yet: later callers share it. */
  private queuedFull: Promise<InventoryDiff> | null = null;
  /** The kernel's uevents (null with hotplug.source none). */
  private source: UdevadmSource | null = null;
  private readonly coalescer: Coalescer;
  private sourceStatus: SourceStatus;
  readonly counts: DiscoveryCounts = { events: 0, partialPasses: 0, fullPasses: 0, functionsReread: 0 };
  private resolveStopped!: () => void;
  readonly stopped = new Promise<void>((r) => {
    this.resolveStopped = r;
  });
  endpoint = '';
  /** The next registration sends every certificate held (at start, and when the scheduler asks). */
  private sendAllCertificates = true;
  /** The keys this agent signed with before (rotated), for a scheduler that pins afresh. */
  private readonly retiredKeys: string[];
  /** Bytes of certificates one registration carries at most. */
  certificateShare = CERTIFICATE_BYTES_PER_REGISTRATION;
  /** While sending every certificate: where the next registration's share starts. */
  private certificateCursor = 0;
  /** The certificate lists of registrations that sent a share of every certificate held. */
  private readonly fullSends = new WeakMap<string[], { end: number; total: number }>();

  /**
   * What a registration carries: a share of every certificate held (oldest
   * first per media), or those no scheduler stores yet — at most
   * CERTIFICATE_BYTES_PER_REGISTRATION of them (the scheduler takes 4 MiB a message).
   */
  private certificatesToSend(): string[] {
    const all = this.sendAllCertificates;
    const list = this.journal.certificates({ undeliveredOnly: !all });
    const start = all ? Math.min(this.certificateCursor, list.length) : 0;
    const out: string[] = [];
    let bytes = 0;
    for (let i = start; i < list.length; i++) {
      const jws = list[i]!.jws;
      if (out.length > 0 && bytes + jws.length > this.certificateShare) break;
      out.push(jws);
      bytes += jws.length;
    }
    if (all) this.fullSends.set(out, { end: start + out.length, total: list.length });
    return out;
  }

  /** After a registration's answer: whether to register again at once (more certificates to send). */
  private certificatesAnswered(
    res: { storedCertificates: string[]; sendCertificates: boolean },
    sent: string[],
  ): boolean {
    if (res.storedCertificates.length > 0) this.journal.markDelivered(res.storedCertificates);
    const full = this.fullSends.get(sent);
    if (full) {
      if (full.end < full.total) {
        this.certificateCursor = full.end;
        return true;
      }
      this.sendAllCertificates = false;
      this.certificateCursor = 0;
      return false;
    }
    if (res.sendCertificates && this.journal.certificates().length > 0) {
      // The scheduler started to follow us (a restart, a lost database): all of them, at once.
      this.sendAllCertificates = true;
      this.certificateCursor = 0;
      return true;
    }
    return false;
  }

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
    const settle = config.hotplug.settleMs;
    this.coalescer = new Coalescer({
      settleMs: settle,
      // A busy source still gets its changes out: at most ten settle windows (and 100 ms) after the first.
      maxDelayMs: Math.max(100, settle * 10),
      run: (batch) =>
        this.refresh(batch).then(
          () => {},
          (err) => this.logger.error({ err }, 'hotplug rediscovery failed'),
        ),
    });
    this.sourceStatus = {
      state: config.hotplug.source === 'none' ? 'off' : 'starting',
      message: '',
      since: new Date(),
      restarts: 0,
    };
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
    if (share !== undefined) agent.certificateShare = share;
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
    this.logger.info(
      {
        endpoint: this.endpoint,
        devices: this.inventory.list().length,
        drivers: this.host.drivers.map((d) => d.name),
      },
      'agent serving',
    );
    this.metrics.hotplug(() => ({ up: this.sourceStatus.state === 'following', ...this.counts }));
    this.startHotplug();
    this.scheduleRescan();
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
          certificates: this.certificatesToSend(),
          retiredSigningKeys: this.retiredKeys,
        }),
        onResponse: (res, req) => this.certificatesAnswered(res, req.certificates),
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
    if (cfg.devicePlugin && cfg.scheduler) {
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

  /**
   * Runs a full discovery after any pass running now; callers that come
   * before it starts share it.
   */
  rediscover(): Promise<InventoryDiff> {
    if (this.queuedFull) return this.queuedFull;
    const pass = this.lane.then(() => {
      this.queuedFull = null;
      return this.fullPass();
    });
    this.queuedFull = pass;
    this.lane = pass.catch(() => {});
    return pass;
  }

  /** One full discovery, applied; run in the lane only. */
  private async fullPass(): Promise<InventoryDiff> {
    const result = await this.host.discover({ strict: false });
    this.counts.fullPasses++;
    const diff = this.applyDiscovery(result.devices, result.failedDrivers, false);
    this.judgeDrivers(result.failedDrivers, true);
    this.logChanges(diff, 'full');
    return diff;
  }

  /**
   * Hotplug: re-reads the functions kernel events named, with those whose
   * records depend on them (the closure below), and applies what changed
   * there only. A batch naming over half the inventory is a full pass.
   */
  refresh(addresses: ReadonlySet<string>): Promise<InventoryDiff> {
    const pass = this.lane.then(async () => {
      const scope = this.closure(addresses);
      // Many functions changed at once (a bus rescan): one full pass reads them more cheaply.
      if (scope.size > Math.max(64, this.inventory.size / 2)) return this.fullPass();
      const t0 = performance.now();
      const result = await this.host.discoverAt([...scope], (a) => !scope.has(a) && this.inventory.has(a));
      const t1 = performance.now();
      this.counts.partialPasses++;
      this.counts.functionsReread += scope.size;
      const diff = this.applySome(scope, result);
      this.judgeDrivers(result.failedDrivers, false);
      this.logger.debug(
        {
          events: [...addresses],
          reread: scope.size,
          discoverMs: Math.round(t1 - t0),
          applyMs: Math.round(performance.now() - t1),
        },
        'hotplug: functions re-read',
      );
      this.logChanges(diff, 'uevent');
      return diff;
    });
    this.lane = pass.catch(() => {});
    return pass;
  }

  /**
   * The functions to re-read for events about `addresses`: each of them, its
   * PF (a VF's media and matching go through it; a PF whose VFs come or go
   * changes), the members of its IOMMU group before and now (a group's
   * foreign members make its devices unallocatable), the devices that named
   * it as a peer, and the devices reaching the same media (one NVM subsystem
   * through several controllers).
   */
  private closure(addresses: ReadonlySet<string>): Set<string> {
    const scope = new Set<string>();
    const root = this.config.sysfsRoot;
    for (const a of addresses) {
      if (!isPciAddress(a)) continue;
      scope.add(a);
      const prev = this.inventory.get(a);
      if (prev?.physfn) scope.add(prev.physfn);
      for (const p of prev?.iommuGroupPeers ?? []) scope.add(p);
      const now = readPciFunctionSync(root, a);
      if (now?.physfn) scope.add(now.physfn);
      if (now?.iommuGroup != null) for (const p of readIommuGroupMembers(root, now.iommuGroup)) scope.add(p);
    }
    const keys = new Set<string>();
    for (const a of scope) {
      const key = this.inventory.get(a)?.media?.key;
      if (key) keys.add(key);
    }
    for (const d of this.inventory.list()) {
      if (d.iommuGroupPeers.some((p) => addresses.has(p))) scope.add(d.address);
      if (d.media && keys.has(d.media.key)) scope.add(d.address);
    }
    return scope;
  }

  /** A partial discovery into the journal's record of media and the inventory (applyDiscovery for `scope`). */
  private applySome(scope: ReadonlySet<string>, result: HostDiscovery): InventoryDiff {
    // The ledger judges a media by all the devices that reach it: those found now, and the
    // inventory's others with the same key.
    const keys = new Set<string>();
    for (const d of result.devices) if (d.media) keys.add(d.media.key);
    for (const a of scope) {
      const key = this.inventory.get(a)?.media?.key;
      if (key) keys.add(key);
    }
    const seen = [
      ...result.devices,
      ...this.inventory.list().filter((d) => !scope.has(d.address) && d.media && keys.has(d.media.key)),
    ];
    // The media this pass's functions reached: one it no longer sees anywhere here left custody.
    const except = new Set<string>();
    for (const d of this.inventory.list()) {
      if (d.media && scope.has(d.address) && result.failedDrivers.includes(d.driver)) except.add(d.media.key);
    }
    try {
      logObserved(
        this.logger,
        this.journal.media.observe(seenMedia(seen, this.config.host), this.journal.legacyHolds(), undefined, {
          keys,
          except,
        }),
        seen,
      );
    } catch (err) {
      this.logger.error({ err }, 'cannot record what this discovery saw of media in the journal');
    }
    // A full pass does not log its exclusions again either; a PF with VFs is excluded at every VF's event.
    for (const ex of result.excluded) this.logger.debug(ex, 'device excluded');
    return this.inventory.applySome(
      scope,
      withRecords(result.devices, this.journal.media),
      result.failedDrivers,
    );
  }

  /**
   * A driver whose discovery failed degrades the agent; only a full pass in
   * which every driver answered says they recovered (a partial one asked
   * each driver about a few functions only).
   */
  private judgeDrivers(failed: readonly string[], full: boolean): void {
    if (failed.length > 0) this.lifecycle.degrade('drivers_failing', failed.join(', '));
    else if (full) this.lifecycle.recovered('drivers_failing');
  }

  private logChanges(diff: InventoryDiff, trigger: 'full' | 'uevent'): void {
    const n = diff.added.length + diff.changed.length + diff.removed.length;
    if (n === 0) return;
    this.logger.info(
      {
        trigger,
        added: diff.added.map((d) => `${d.address} ${d.media?.key ?? ''}`.trim()),
        changed: diff.changed.map((d) => d.address),
        removed: diff.removed,
      },
      'inventory changed',
    );
  }

  /** Starts following the kernel's uevents, when configured. */
  private startHotplug(): void {
    if (this.config.hotplug.source !== 'udevadm' || this.lifecycle.ending) return;
    this.server?.health.setStatus(HOTPLUG_HEALTH_SERVICE, 'NOT_SERVING');
    this.source = new UdevadmSource({
      command: this.config.hotplug.udevadm,
      logger: this.logger.child({ component: 'hotplug' }),
      onEvent: (e) => this.onUevent(e),
      onStatus: (s) => this.onSourceStatus(s),
    });
    this.source.start();
  }

  /** The running event source's pid (tests kill it); null when none runs. */
  get hotplugSourcePid(): number | null {
    return this.source?.pid ?? null;
  }

  private onUevent(e: Uevent): void {
    this.counts.events++;
    this.logger.debug({ action: e.action, devpath: e.devpath, subsystem: e.subsystem, at: e.at }, 'uevent');
    const target = ueventTarget(e);
    if (!target) return;
    if (target.kind === 'function') {
      this.coalescer.add([target.address]);
      return;
    }
    // A multipath namespace head: every controller of its subsystem (those the inventory knows too,
    // for a subsystem already gone).
    const members = readNvmeSubsystemFunctions(this.config.sysfsRoot, target.name);
    this.coalescer.add(members);
  }

  private onSourceStatus(s: SourceStatus): void {
    const was = this.sourceStatus.state;
    this.sourceStatus = s;
    this.server?.health.setStatus(
      HOTPLUG_HEALTH_SERVICE,
      s.state === 'following' ? 'SERVING' : 'NOT_SERVING',
    );
    if (s.state === 'following' && was !== 'following') {
      // Whatever changed before the source listened (since the first discovery, or while it was
      // down) had no event: one full pass covers it. What the host uses is looked at first, so a
      // change after this look is one the next look sees.
      this.lastHostUse = null;
      this.lane = this.lane.then(() => this.watchHostUse()).catch(() => {});
      void this.rediscover().catch((err) => this.logger.error({ err }, 'rediscovery failed'));
    }
    if ((s.state === 'following') !== (was === 'following')) this.scheduleRescan();
  }

  /** What the host used at the last look: address → its uses (null before the first look). */
  private lastHostUse: Map<string, string> | null = null;
  private hostUseTimer: NodeJS.Timeout | null = null;

  /**
   * The host starting or ceasing to use a function (a file system mounted on
   * it, an address on its interface) comes with no uevent. While events are
   * followed, it is looked at every discovery_interval instead (a few procfs
   * files, not a scan of every function), and the functions whose use changed
   * are re-read like those an event names. While polling, the full pass sees it.
   */
  private async watchHostUse(): Promise<void> {
    if (this.hostUseTimer) clearTimeout(this.hostUseTimer);
    this.hostUseTimer = null;
    if (this.lifecycle.ending || this.sourceStatus.state !== 'following') return;
    try {
      const use = await readHostUse({
        sysfsRoot: this.config.sysfsRoot,
        devRoot: this.config.devRoot,
        procRoot: this.config.procRoot,
      });
      const now = new Map([...use].map(([a, u]) => [a, u.join('; ')]));
      const last = this.lastHostUse;
      this.lastHostUse = now;
      if (last) {
        const changed = [...new Set([...now.keys(), ...last.keys()])].filter(
          (a) => now.get(a) !== last.get(a),
        );
        if (changed.length > 0) {
          this.logger.info({ changed }, 'what the host uses changed: re-reading those functions');
          this.coalescer.add(changed);
        }
      }
    } catch (err) {
      this.logger.warn({ err }, 'cannot read what the host uses; the full rescan will');
    }
    if (this.lifecycle.ending || this.sourceStatus.state !== 'following') return;
    this.hostUseTimer = setTimeout(() => {
      this.hostUseTimer = null;
      void this.watchHostUse();
    }, this.config.discoveryInterval * 1000);
    this.hostUseTimer.unref();
  }

  /** Seconds until the next full rediscovery: the safety net while following events, the poll otherwise. */
  get fullRescanInterval(): number {
    return this.sourceStatus.state === 'following'
      ? this.config.hotplug.rescanInterval
      : this.config.discoveryInterval;
  }

  private scheduleRescan(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (this.lifecycle.ending) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.rediscover()
        .catch((err) => this.logger.error({ err }, 'rediscovery failed'))
        .finally(() => {
          if (this.timer === null) this.scheduleRescan();
        });
    }, this.fullRescanInterval * 1000);
    this.timer.unref();
  }

  /** Resolves once the events received so far are applied (tests). */
  async hotplugSettled(): Promise<void> {
    await this.coalescer.idle();
    await this.lane;
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
    // Media of a driver that failed is not looked for: its devices keep their last state.
    const except = new Set<string>();
    for (const d of this.inventory.list())
      if (d.media && failedDrivers.includes(d.driver)) except.add(d.media.key);
    try {
      logObserved(
        this.logger,
        this.journal.media.observe(
          seenMedia(devices, this.config.host),
          this.journal.legacyHolds(),
          undefined,
          {
            keys: 'all',
            except,
          },
        ),
        devices,
      );
    } catch (err) {
      if (strict) throw err;
      this.logger.error({ err }, 'cannot record what this discovery saw of media in the journal');
    }
    return this.inventory.apply(withRecords(devices, this.journal.media), failedDrivers);
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
      hotplug: {
        source: this.config.hotplug.source,
        state: HOTPLUG_STATES[this.sourceStatus.state],
        message: this.sourceStatus.message,
        since: this.sourceStatus.since,
        fullRescanIntervalSeconds: this.fullRescanInterval,
        events: this.counts.events,
        partialPasses: this.counts.partialPasses,
        fullPasses: this.counts.fullPasses,
        functionsReread: this.counts.functionsReread,
        sourceRestarts: this.sourceStatus.restarts,
      },
    };
  }

  get address(): string {
    return this.server?.address ?? '';
  }

  /** Graceful stop: no new work, running cleanups end as interrupted, streams close. */
  async stop(): Promise<void> {
    if (this.lifecycle.ending) return this.stopped;
    this.lifecycle.stopping();
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (this.hostUseTimer) clearTimeout(this.hostUseTimer);
    this.hostUseTimer = null;
    await this.source?.stop();
    if (this.source) this.server?.health.setStatus(HOTPLUG_HEALTH_SERVICE, 'NOT_SERVING');
    await this.coalescer.close();
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

const HOTPLUG_STATES: Record<SourceStatus['state'], HotplugState> = {
  off: HotplugState.HOTPLUG_STATE_OFF,
  starting: HotplugState.HOTPLUG_STATE_STARTING,
  following: HotplugState.HOTPLUG_STATE_FOLLOWING,
  failed: HotplugState.HOTPLUG_STATE_FAILED,
};
