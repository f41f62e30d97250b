/**
 * The kubelet's DRA plugin API (dra/v1, and v1beta1 for older kubelets;
 * the kubelet's own protos), served by the agent for its devices (issue 39
 * part 2, decision 75).
 *
 * - Registration: a `pluginregistration/v1` socket `<driver>-reg.sock` in the
 *   kubelet's plugins_registry directory answers GetInfo (a `DRAPlugin`
 *   named after the driver, its endpoint `dra.sock` in plugin_dir, the
 *   services `v1.DRAPlugin`, `v1beta1.DRAPlugin`, `v1.DRAResourceHealth`).
 * - NodePrepareResources: a claim's devices are the results of its
 *   allocation on the API server that are Berth's (./dra-claims.ts); each
 *   must be clean and allocatable at that moment (./offer.ts), and is held
 *   in the scheduler like any bind (./scheduler-hold.ts: the agent's journal
 *   records the tenancy before the answer). Then a CDI spec (./cdi.ts) and
 *   the answer: the CDI device ids. A device that may not be given is the
 *   claim's error: nothing of that claim is held.
 * - NodeUnprepareResources: Berth's release of every hold of the claim (scrub
 *   with proof, certificate), then the CDI spec goes.
 * - Both idempotent by claim UID from a checkpoint (./dra-checkpoint.ts).
 * - DRAResourceHealth.NodeWatchResources: each device HEALTHY while it is
 *   clean and allocatable or held for a claim the checkpoint records, UNHEALTHY otherwise
 *   (dirty, being scrubbed, in error, held by another bind).
 */
import { randomUUID } from 'node:crypto';
import { mkdir, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import type { ChannelCredentials, Server, ServerWritableStream } from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { invalidArgument } from '../../../errors.js';
import {
  type Claim,
  DRAPluginService,
  type NodePrepareResourceResponse,
  type NodePrepareResourcesRequest,
  type NodePrepareResourcesResponse,
  type NodeUnprepareResourceResponse,
  type NodeUnprepareResourcesRequest,
  type NodeUnprepareResourcesResponse,
} from '../../../gen/k8s.io/kubelet/pkg/apis/dra/v1/api.js';
import { DRAPluginService as DRAPluginServiceV1beta1 } from '../../../gen/k8s.io/kubelet/pkg/apis/dra/v1beta1/api.js';
import {
  type DeviceHealth,
  DRAResourceHealthService,
  HealthStatus,
  type NodeWatchResourcesRequest,
  type NodeWatchResourcesResponse,
} from '../../../gen/k8s.io/kubelet/pkg/apis/dra-health/v1/api.js';
import {
  type PluginInfo,
  type RegistrationServer,
  RegistrationService,
  type RegistrationStatus,
} from '../../../gen/k8s.io/kubelet/pkg/apis/pluginregistration/v1/api.js';
import type { DiscoveredDevice } from '../../../plugins/types.js';
import { unary } from '../../grpc/handlers.js';
import {
  type CdiInput,
  cdiId,
  cdiSpec,
  cdiSpecPath,
  ownVariable,
  removeCdiSpec,
  writeCdiSpec,
} from './cdi.js';
import type { DraConfig } from './config.js';
import type { DraCheckpoint, PreparedDevice } from './dra-checkpoint.js';
import { ClaimProblem, type ClaimReader, type ClaimRef } from './dra-claims.js';
import { draDeviceName, kubevirtVariable, type PluginAgent, resourceNameOf, whyNotOffered } from './offer.js';
import { SchedulerHolds } from './scheduler-hold.js';
import { serveUnix } from './unix-socket.js';

/** The instance a claim's devices are bound to in the scheduler: how its holds are known again. */
const instanceOf = (uid: string) => `k8s-dra-${uid}`;

/** The service names the kubelet looks for in GetInfo's supported_versions. */
export const DRA_SERVICES = ['v1.DRAPlugin', 'v1beta1.DRAPlugin', 'v1.DRAResourceHealth'] as const;

/** Seconds between health lists sent even without a change, and the timeout the kubelet is told. */
const HEALTH_RESEND_MS = 10_000;
const HEALTH_TIMEOUT_S = 60;

// The kubelet's claim reference: a namespace (DNS label), a name (DNS subdomain), a UID.
const DNS_LABEL = /^(?=.{1,63}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const UID = /^[A-Za-z0-9][-A-Za-z0-9]{0,127}$/;

export interface DraPluginOptions {
  config: DraConfig;
  agent: PluginAgent;
  claims: ClaimReader;
  checkpoint: DraCheckpoint;
  scheduler: string;
  credentials?: ChannelCredentials;
  token?: string;
}

type Watcher = {
  call: ServerWritableStream<NodeWatchResourcesRequest, NodeWatchResourcesResponse>;
  last: string;
};

export class KubeletDraPlugin {
  private readonly holds: SchedulerHolds;
  private readonly logger: Logger;
  private readonly watchers = new Set<Watcher>();
  private servers: Server[] = [];
  private unsubscribe: (() => void) | null = null;
  private resend: NodeJS.Timeout | null = null;
  /** Prepares and unprepares one at a time: a device is checked and held without another call between. */
  private lane: Promise<unknown> = Promise.resolve();
  /** The kubelet's last NotifyRegistrationStatus (null: none yet). */
  registered: RegistrationStatus | null = null;

  constructor(private readonly options: DraPluginOptions) {
    this.logger = options.agent.logger.child({ component: 'dra-plugin' });
    this.holds = new SchedulerHolds(
      options.scheduler,
      options.agent.host,
      options.credentials,
      options.token,
    );
  }

  private get config(): DraConfig {
    return this.options.config;
  }

  private get inventory() {
    return this.options.agent.inventory;
  }

  /** The plugin's socket, the endpoint GetInfo names. */
  get endpoint(): string {
    return join(this.config.pluginDir, 'dra.sock');
  }

  /** The registration socket the kubelet's plugin watcher finds. */
  get registrationSocket(): string {
    return join(this.config.pluginsRegistryDir, `${this.config.driverName}-reg.sock`);
  }

  /** This host's pool: its devices' `pool` in slices and allocation results. */
  private get pool(): string {
    return this.config.pool;
  }

  async start(): Promise<void> {
    await mkdir(this.config.pluginDir, { recursive: true });
    await mkdir(this.config.pluginsRegistryDir, { recursive: true });
    await mkdir(this.config.cdiDir, { recursive: true });
    const log = this.logger;
    this.servers.push(
      await serveUnix(this.endpoint, (s) => {
        const handlers = {
          nodePrepareResources: unary('NodePrepareResources', log, (req: NodePrepareResourcesRequest) =>
            this.serial(() => this.prepare(req.claims)),
          ),
          nodeUnprepareResources: unary('NodeUnprepareResources', log, (req: NodeUnprepareResourcesRequest) =>
            this.serial(() => this.unprepare(req.claims)),
          ),
        };
        s.addService(DRAPluginService, handlers);
        s.addService(DRAPluginServiceV1beta1, handlers);
        s.addService(DRAResourceHealthService, {
          nodeWatchResources: (call: Watcher['call']) => this.watch(call),
        });
      }),
    );
    this.servers.push(
      await serveUnix(this.registrationSocket, (s) =>
        s.addService(RegistrationService, {
          getInfo: unary(
            'GetInfo',
            log,
            async (): Promise<PluginInfo> => ({
              type: 'DRAPlugin',
              name: this.config.driverName,
              endpoint: this.endpoint,
              supportedVersions: [...DRA_SERVICES],
            }),
          ),
          notifyRegistrationStatus: unary(
            'NotifyRegistrationStatus',
            log,
            async (req: RegistrationStatus) => {
              this.registered = req;
              if (req.pluginRegistered)
                log.info(`the kubelet registered DRA driver ${this.config.driverName}`);
              else
                log.error(
                  { error: req.error },
                  `the kubelet refused DRA driver ${this.config.driverName}: ${req.error}`,
                );
              return {};
            },
          ),
        } satisfies RegistrationServer),
      ),
    );
    this.unsubscribe = this.inventory.subscribe(() => this.publish(false));
    this.resend = setInterval(() => this.publish(true), HEALTH_RESEND_MS);
    this.resend.unref();
    this.logger.info(
      {
        endpoint: this.endpoint,
        registration: this.registrationSocket,
        prepared: this.options.checkpoint.entries().length,
      },
      `serving DRA driver ${this.config.driverName} for pool ${this.pool}`,
    );
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.lane.then(fn);
    this.lane = run.catch(() => {});
    return run;
  }

  // --- requests ---------------------------------------------------------------------------------

  /** The claims of a request, each reference complete and well formed (INVALID_ARGUMENT naming the field otherwise). */
  private refs(claims: Claim[]): ClaimRef[] {
    return claims.map((c, i) => {
      const bad = (field: string, v: string, want: string) =>
        invalidArgument(`claims[${i}].${field}`, `${JSON.stringify(v.slice(0, 80))} is not ${want}`);
      if (!DNS_LABEL.test(c.namespace)) throw bad('namespace', c.namespace, 'a namespace (a DNS label)');
      if (!DNS_SUBDOMAIN.test(c.name)) throw bad('name', c.name, 'a ResourceClaim name (a DNS subdomain)');
      if (!UID.test(c.uid)) throw bad('uid', c.uid, 'a claim UID');
      return { namespace: c.namespace, name: c.name, uid: c.uid };
    });
  }

  private async prepare(claims: Claim[]): Promise<NodePrepareResourcesResponse> {
    const out: NodePrepareResourcesResponse['claims'] = {};
    for (const ref of this.refs(claims)) out[ref.uid] = await this.prepareOne(ref);
    return { claims: out };
  }

  private async unprepare(claims: Claim[]): Promise<NodeUnprepareResourcesResponse> {
    const out: NodeUnprepareResourcesResponse['claims'] = {};
    for (const ref of this.refs(claims)) out[ref.uid] = await this.unprepareOne(ref);
    return { claims: out };
  }

  private answer(devices: readonly PreparedDevice[]): NodePrepareResourceResponse {
    return {
      devices: devices.map((d) => ({
        requestNames: [d.request],
        poolName: d.pool,
        deviceName: d.device,
        cdiDeviceIds: d.cdiDeviceIds,
      })),
      error: '',
    };
  }

  private async prepareOne(ref: ClaimRef): Promise<NodePrepareResourceResponse> {
    const what = `claim ${ref.namespace}/${ref.name} (${ref.uid})`;
    const refuse = (why: string): NodePrepareResourceResponse => {
      this.logger.warn({ claim: ref }, `not preparing ${what}: ${why}`);
      return { devices: [], error: `${what}: ${why}` };
    };
    const known = this.options.checkpoint.get(ref.uid);
    // Prepared already (the kubelet asks again, or the agent restarted): the same answer.
    if (known?.state === 'prepared') return this.answer(known.devices);
    let chosen: { request: string; device: string; d: DiscoveredDevice }[];
    try {
      chosen = this.chosen(ref, await this.options.claims.results(ref));
    } catch (err) {
      if (err instanceof ClaimProblem) return refuse(err.message);
      throw err;
    }
    // Written before any hold: a restart between the two finds the same holds (same request ids) or releases them.
    const nonce = known?.nonce ?? randomUUID().slice(0, 8);
    const instance = instanceOf(ref.uid);
    await this.options.checkpoint.put({ ...ref, nonce, state: 'preparing', devices: [] });
    let holds: { arqUuid: string }[];
    try {
      holds = await this.holds.holdAll(
        chosen.map(({ d }) => ({
          address: d.address,
          cls: d.resourceClass,
          instance,
          requestId: `${instance}-${nonce}-${d.address}`,
        })),
        (address) => this.inventory.get(address)?.mediaRecord,
      );
    } catch (err) {
      await this.options.checkpoint.remove(ref.uid);
      return refuse((err as Error).message);
    }
    const name = (device: string) => `${ref.uid}-${device}`;
    const devices: PreparedDevice[] = chosen.map(({ request, device, d }, i) => ({
      request,
      pool: this.pool,
      device,
      address: d.address,
      arqUuid: holds[i]!.arqUuid,
      cdiDeviceIds: [cdiId(this.config.driverName, name(device))],
    }));
    const inputs: CdiInput[] = chosen.map(({ device, d }) => ({
      name: name(device),
      address: d.address,
      iommuGroup: d.iommuGroup,
      variable: kubevirtVariable(resourceNameOf(d.resourceClass, this.config)),
      own: ownVariable(device),
    }));
    const spec = cdiSpecPath(this.config.cdiDir, this.config.driverName, ref.uid);
    try {
      await writeCdiSpec(spec, cdiSpec(this.config.driverName, this.options.agent.devRoot, inputs));
      await this.options.checkpoint.put({ ...ref, nonce, state: 'prepared', devices });
    } catch (err) {
      for (const h of holds) await this.holds.release(h.arqUuid).catch(() => {});
      await removeCdiSpec(spec).catch(() => {});
      await this.options.checkpoint.remove(ref.uid).catch(() => {});
      return refuse(`cannot write its CDI spec or checkpoint: ${(err as Error).message}`);
    }
    this.publish(false);
    this.logger.info(
      { claim: ref, instance, devices: devices.map((d) => `${d.device}=${d.address}`) },
      `prepared ${what}: ${devices.map((d) => d.address).join(', ') || 'no device of Berth'}`,
    );
    return this.answer(devices);
  }

  /** The claim's devices on this host, each one Berth may give now; a ClaimProblem names the first that it may not. */
  private chosen(
    ref: ClaimRef,
    results: { request: string; device: string }[],
  ): { request: string; device: string; d: DiscoveredDevice }[] {
    const byName = new Map(
      this.inventory
        .list()
        .filter((d) => d.supportsCleaning)
        .map((d) => [draDeviceName(d.address), d]),
    );
    const seen = new Set<string>();
    const out: { request: string; device: string; d: DiscoveredDevice }[] = [];
    for (const r of results) {
      const d = byName.get(r.device);
      if (!d) throw new ClaimProblem(`device ${r.device} is not a device Berth cleans in pool ${this.pool}`);
      if (seen.has(d.address)) continue;
      seen.add(d.address);
      const rec = d.mediaRecord;
      // Held for this very claim: a prepare the agent did not finish (its restart); the hold is found again.
      const ours = rec?.condition === 'held' && rec.instanceUuid === instanceOf(ref.uid);
      const why = ours ? null : whyNotOffered(this.options.agent, d);
      if (why)
        throw new ClaimProblem(`device ${d.address} (${r.device}) is not clean and allocatable: ${why}`);
      out.push({ request: r.request, device: r.device, d });
    }
    return out;
  }

  private async unprepareOne(ref: ClaimRef): Promise<NodeUnprepareResourceResponse> {
    const what = `claim ${ref.namespace}/${ref.name} (${ref.uid})`;
    const instance = instanceOf(ref.uid);
    const entry = this.options.checkpoint.get(ref.uid);
    // Every hold of the claim: those the checkpoint records, and any the journal records for its instance.
    const arqs = new Set(entry?.devices.map((d) => d.arqUuid));
    for (const d of this.inventory.list()) {
      const rec = d.mediaRecord;
      if (rec?.condition === 'held' && rec.instanceUuid === instance) arqs.add(rec.arqUuid);
    }
    try {
      for (const arq of arqs) await this.holds.release(arq);
      await removeCdiSpec(cdiSpecPath(this.config.cdiDir, this.config.driverName, ref.uid));
      await this.options.checkpoint.remove(ref.uid);
    } catch (err) {
      const why = (err as { details?: string }).details || (err as Error).message;
      this.logger.warn({ claim: ref, err: why }, `cannot unprepare ${what} yet`);
      return { error: `${what}: cannot release it yet: ${why}` };
    }
    this.publish(false);
    if (arqs.size > 0) {
      this.logger.info(
        { claim: ref, instance, arqs: [...arqs] },
        `unprepared ${what}: released (scrubbed with proof before it is offered again)`,
      );
    }
    return { error: '' };
  }

  // --- health ------------------------------------------------------------------------------------

  /** Whether `d` is held for a claim the checkpoint records (being prepared or prepared): healthy for its pod. */
  private givenToClaim(d: DiscoveredDevice, instances: Set<string>): boolean {
    const rec = d.mediaRecord;
    return rec?.condition === 'held' && instances.has(rec.instanceUuid);
  }

  private health(): DeviceHealth[] {
    const instances = new Set(this.options.checkpoint.entries().map((e) => instanceOf(e.uid)));
    const now = Math.floor(Date.now() / 1000);
    return this.inventory
      .list()
      .filter((d) => d.supportsCleaning)
      .map((d) => {
        const given = this.givenToClaim(d, instances);
        const why = given ? null : whyNotOffered(this.options.agent, d);
        return {
          device: { poolName: this.pool, deviceName: draDeviceName(d.address) },
          health: why === null ? HealthStatus.HEALTHY : HealthStatus.UNHEALTHY,
          lastUpdatedTime: now,
          healthCheckTimeoutSeconds: HEALTH_TIMEOUT_S,
          message: (why ?? (given ? 'given to a claim' : 'clean and allocatable')).slice(0, 1024),
        };
      });
  }

  /** What a watcher is sent, without the times (a change is a change of this). */
  private static key(list: DeviceHealth[]): string {
    return JSON.stringify(list.map((h) => [h.device?.deviceName, h.health, h.message]));
  }

  private watch(call: Watcher['call']): void {
    const list = this.health();
    const w: Watcher = { call, last: KubeletDraPlugin.key(list) };
    this.watchers.add(w);
    call.on('cancelled', () => this.watchers.delete(w));
    call.on('close', () => this.watchers.delete(w));
    call.write({ devices: list });
  }

  /** Streams the health list to every watcher when it changed (or always: `again`, the periodic resend). */
  private publish(again: boolean): void {
    if (this.watchers.size === 0) return;
    const list = this.health();
    const key = KubeletDraPlugin.key(list);
    for (const w of this.watchers) {
      if (!again && w.last === key) continue;
      w.last = key;
      w.call.write({ devices: list });
    }
  }

  async stop(): Promise<void> {
    this.unsubscribe?.();
    if (this.resend) clearInterval(this.resend);
    for (const w of this.watchers) w.call.end();
    this.watchers.clear();
    for (const s of this.servers) s.forceShutdown();
    this.servers = [];
    await unlink(this.registrationSocket).catch(() => {});
    await unlink(this.endpoint).catch(() => {});
    this.holds.close();
  }
}
