/**
 * The kubelet's device plugin API (deviceplugin/v1beta1, the kubelet's own
 * proto), served by the agent for its devices (issue 39, decision 74).
 *
 * - One plugin per resource class, each on its own unix socket in the
 *   kubelet's directory, registered with the kubelet's `Registration`. Every
 *   poll looks at the kubelet's socket: a new one (the kubelet restarted, and
 *   removed the plugins' sockets) is served and registered again.
 * - `ListAndWatch`: `Healthy` only while the device is clean and allocatable
 *   (./offer.ts); every change is streamed.
 * - `Allocate`: refused for a device not clean and allocatable at that moment;
 *   otherwise held in the scheduler like any bind (./scheduler-hold.ts), which
 *   has this agent's journal record the tenancy before the answer; then
 *   KubeVirt's `PCI_RESOURCE_<NAME>` and the VFIO nodes; with `cdi`, also a
 *   CDI spec per container (./cdi.ts, removed when Berth releases its
 *   devices) and its fully-qualified device names.
 * - Release: the kubelet never says. pod-resources (`List`) says which devices
 *   pods hold; a device this plugin gave that no pod holds any more (once seen
 *   held, or never seen within unclaimed_grace) is released through the
 *   scheduler: scrub with proof, certificate, and `Healthy` only after.
 *   When pod-resources does not answer, nothing is released: hold, never guess.
 */
import { randomUUID } from 'node:crypto';
import { mkdir, stat, unlink } from 'node:fs/promises';
import { basename, join } from 'node:path';
import {
  type ChannelCredentials,
  credentials,
  Metadata,
  type Server,
  type ServerWritableStream,
  type ServiceError,
} from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { BerthError, failedPrecondition, invalidArgument } from '../../../errors.js';
import {
  type AllocateResponse,
  type ContainerAllocateResponse,
  DevicePluginService,
  type Empty,
  type ListAndWatchResponse,
  RegistrationClient,
} from '../../../gen/k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.js';
import {
  type ListPodResourcesResponse,
  PodResourcesListerClient,
} from '../../../gen/k8s.io/kubelet/pkg/apis/podresources/v1/api.js';
import { isPciAddress } from '../../../identifiers.js';
import type { DiscoveredDevice } from '../../../plugins/types.js';
import { unary } from '../../grpc/handlers.js';
import type { Inventory } from '../inventory.js';
import {
  type CdiInput,
  cdiId,
  cdiSpec,
  cdiSpecPath,
  ownVariable,
  removeCdiSpec,
  writeCdiSpec,
} from './cdi.js';
import type { DevicePluginConfig } from './config.js';
import {
  draDeviceName,
  kubevirtVariable,
  type PluginAgent,
  preferred,
  resourceNameOf,
  whyNotOffered,
} from './offer.js';
import { type Hold, SchedulerHolds } from './scheduler-hold.js';
import { dial, serveUnix } from './unix-socket.js';

/** The instance name of a device plugin allocation: how its holds are known again after a restart. */
const INSTANCE_PREFIX = 'k8s-dp-';

export interface DevicePluginOptions {
  config: DevicePluginConfig;
  agent: PluginAgent;
  scheduler: string;
  credentials?: ChannelCredentials;
  token?: string;
}

/** A device this plugin gave the kubelet, held in the scheduler. */
interface Allocation extends Hold {
  address: string;
  since: number;
  /** Seen held by a pod in pod-resources. */
  seen: boolean;
}

/** One resource class's plugin: its server, socket and watchers. */
interface Resource {
  cls: string;
  name: string;
  socket: string;
  server: Server | null;
  watchers: Set<{ call: ServerWritableStream<Empty, ListAndWatchResponse>; last: string }>;
}

export class KubeletDevicePlugin {
  private readonly resources = new Map<string, Resource>();
  private readonly allocations = new Map<string, Allocation>();
  /** ARQs whose release the scheduler took: not released again while their cleanup runs. */
  private readonly released = new Set<string>();
  private readonly holds: SchedulerHolds;
  private readonly podResources: InstanceType<typeof PodResourcesListerClient>;
  private readonly logger: Logger;
  private timer: NodeJS.Timeout | null = null;
  private unsubscribe: (() => void) | null = null;
  /** The kubelet socket's inode when every resource registered with it; null until then. */
  private registeredWith: number | null = null;
  /** pod-resources answered at the last look (logged once per change). */
  private listing: boolean | null = null;
  private stopped = false;
  /** Allocations one at a time: a device is checked and held without another Allocate between. */
  private lane: Promise<unknown> = Promise.resolve();
  /** Resolves after each poll (tests wait on it: `polls`). */
  polls = 0;

  constructor(private readonly options: DevicePluginOptions) {
    this.logger = options.agent.logger.child({ component: 'device-plugin' });
    this.holds = new SchedulerHolds(
      options.scheduler,
      options.agent.host,
      options.credentials,
      options.token,
    );
    this.podResources = new PodResourcesListerClient(
      dial(options.config.podResourcesSocket),
      credentials.createInsecure(),
    );
  }

  private get config(): DevicePluginConfig {
    return this.options.config;
  }

  private get inventory(): Inventory {
    return this.options.agent.inventory;
  }

  start(): void {
    this.unsubscribe = this.inventory.subscribe(() => this.publish());
    void this.tick();
  }

  /** The devices of resource class `cls`. */
  private devicesOf(cls: string): DiscoveredDevice[] {
    return this.inventory.list().filter((d) => d.resourceClass === cls);
  }

  private whyNot(d: DiscoveredDevice | undefined): string | null {
    return whyNotOffered(this.options.agent, d);
  }

  /** The resource classes of the inventory, each with its plugin (new classes get one at the next poll). */
  private syncResources(): void {
    for (const d of this.inventory.list()) {
      if (!d.supportsCleaning || this.resources.has(d.resourceClass)) continue;
      const name = resourceNameOf(d.resourceClass, this.config);
      const file = `berth-${name.replace(/[^A-Za-z0-9_.-]/g, '_')}.sock`;
      this.resources.set(d.resourceClass, {
        cls: d.resourceClass,
        name,
        socket: join(this.config.kubeletSocketDir, file),
        server: null,
        watchers: new Set(),
      });
    }
  }

  private listFor(r: Resource): ListAndWatchResponse {
    return {
      devices: this.devicesOf(r.cls).map((d) => ({
        ID: d.address,
        health: this.whyNot(d) === null ? 'Healthy' : 'Unhealthy',
        topology: d.numaNode >= 0 ? { nodes: [{ ID: d.numaNode }] } : undefined,
      })),
    };
  }

  /** Streams each resource's list to its watchers when it changed. */
  private publish(): void {
    for (const r of this.resources.values()) {
      if (r.watchers.size === 0) continue;
      const list = this.listFor(r);
      const text = JSON.stringify(list);
      for (const w of r.watchers) {
        if (w.last === text) continue;
        w.last = text;
        w.call.write(list);
      }
    }
  }

  private async tick(): Promise<void> {
    if (this.stopped) return;
    try {
      this.syncResources();
      await this.followKubelet();
      this.adoptHolds();
      await this.releaseFreed();
      this.publish();
    } catch (err) {
      this.logger.error({ err }, 'device plugin poll failed');
    }
    this.polls++;
    if (this.stopped) return;
    this.timer = setTimeout(() => void this.tick(), this.config.pollIntervalMs);
    this.timer.unref();
  }

  /** Serves and registers every resource when the kubelet's socket is new (a kubelet start or restart). */
  private async followKubelet(): Promise<void> {
    const kubelet = join(this.config.kubeletSocketDir, 'kubelet.sock');
    const ino = await stat(kubelet).then(
      (s) => s.ino,
      () => null,
    );
    if (ino === null) {
      if (this.registeredWith !== null)
        this.logger.warn({ socket: kubelet }, 'the kubelet socket is gone; waiting for it');
      this.registeredWith = null;
      return;
    }
    const resources = [...this.resources.values()];
    const gone = await Promise.all(
      resources.map((r) =>
        stat(r.socket).then(
          () => r.server === null,
          () => true,
        ),
      ),
    );
    // A new kubelet: every resource again; the same one: those whose socket is gone (or new).
    const again = ino === this.registeredWith ? resources.filter((_, i) => gone[i]) : resources;
    for (const r of again) {
      await this.serve(r);
      await this.register(kubelet, r);
    }
    this.registeredWith = ino;
  }

  private async serve(r: Resource): Promise<void> {
    if (r.server) {
      for (const w of r.watchers) w.call.end();
      r.watchers.clear();
      r.server.forceShutdown();
      r.server = null;
    }
    const server = await serveUnix(r.socket, (s) => s.addService(DevicePluginService, this.handlers(r)));
    r.server = server;
  }

  private async register(kubelet: string, r: Resource): Promise<void> {
    const client = new RegistrationClient(dial(kubelet), credentials.createInsecure());
    try {
      await new Promise<void>((resolve, reject) =>
        client.register(
          {
            version: 'v1beta1',
            endpoint: basename(r.socket),
            resourceName: r.name,
            options: { preStartRequired: false, getPreferredAllocationAvailable: true },
          },
          new Metadata(),
          { deadline: Date.now() + 5_000 },
          (err: ServiceError | null) => (err ? reject(err) : resolve()),
        ),
      );
      this.logger.info({ resource: r.name, socket: r.socket }, `registered ${r.name} with the kubelet`);
    } finally {
      client.close();
    }
  }

  private handlers(r: Resource) {
    const log = this.logger.child({ resource: r.name });
    return {
      getDevicePluginOptions: unary('GetDevicePluginOptions', log, async () => ({
        preStartRequired: false,
        getPreferredAllocationAvailable: true,
      })),
      listAndWatch: (call: ServerWritableStream<Empty, ListAndWatchResponse>) => {
        const list = this.listFor(r);
        const w = { call, last: JSON.stringify(list) };
        r.watchers.add(w);
        call.on('cancelled', () => r.watchers.delete(w));
        call.on('close', () => r.watchers.delete(w));
        call.write(list);
      },
      getPreferredAllocation: unary(
        'GetPreferredAllocation',
        log,
        async (req: {
          containerRequests: {
            availableDeviceIDs: string[];
            mustIncludeDeviceIDs: string[];
            allocationSize: number;
          }[];
        }) => ({
          containerResponses: req.containerRequests.map((c) => ({
            deviceIDs: preferred(
              c.availableDeviceIDs
                .map((a) => this.inventory.get(a))
                .filter((d): d is DiscoveredDevice => d !== undefined && d.resourceClass === r.cls),
              c.mustIncludeDeviceIDs,
              c.allocationSize,
            ),
          })),
        }),
      ),
      allocate: unary('Allocate', log, (req: { containerRequests: { devicesIds: string[] }[] }) => {
        const run = this.lane.then(() => this.allocate(r, req.containerRequests));
        this.lane = run.catch(() => {});
        return run;
      }),
      preStartContainer: unary('PreStartContainer', log, async () => ({})),
    };
  }

  /** The devices of one Allocate, checked (every one) before any is held. */
  private checked(r: Resource, requests: { devicesIds: string[] }[]): DiscoveredDevice[][] {
    if (requests.length === 0)
      throw invalidArgument('container_requests', 'at least one container request is required');
    return requests.map((c, i) => {
      if (c.devicesIds.length === 0) {
        throw invalidArgument(`container_requests[${i}].devices_ids`, 'at least one device id is required');
      }
      return c.devicesIds.map((id, j) => {
        const field = `container_requests[${i}].devices_ids[${j}]`;
        const d = isPciAddress(id) ? this.inventory.get(id) : undefined;
        if (!d || d.resourceClass !== r.cls) {
          throw invalidArgument(
            field,
            `${JSON.stringify(id.slice(0, 80))} is not a device of ${r.name} on host ${this.options.agent.host}`,
          );
        }
        const why = this.whyNot(d);
        if (why) {
          throw failedPrecondition(
            'DEVICE_NOT_ALLOCATABLE',
            `device ${id} (${r.name}) is not clean and allocatable: ${why}`,
            {
              address: id,
              host: this.options.agent.host,
            },
          );
        }
        return d;
      });
    });
  }

  private async allocate(r: Resource, requests: { devicesIds: string[] }[]): Promise<AllocateResponse> {
    const devices = this.checked(r, requests);
    const since = Date.now();
    // One instance per container: its devices' holds, certificates and CDI spec.
    const instances = devices.map(() => `${INSTANCE_PREFIX}${randomUUID()}`);
    const wanted = devices.flatMap((list, i) =>
      list.map((d) => ({
        address: d.address,
        cls: r.cls,
        instance: instances[i]!,
        requestId: `${instances[i]}-${d.address}`,
      })),
    );
    const held: Allocation[] = (
      await this.holds.holdAll(wanted, (address) => this.inventory.get(address)?.mediaRecord)
    ).map((h, i) => ({ ...h, address: wanted[i]!.address, since, seen: false }));
    const cdi = this.config.cdi;
    if (cdi) {
      try {
        await mkdir(cdi.dir, { recursive: true });
        for (const [i, list] of devices.entries()) {
          await writeCdiSpec(
            cdiSpecPath(cdi.dir, cdi.vendor, instances[i]!),
            cdiSpec(cdi.vendor, this.options.agent.devRoot, this.cdiInputs(r, instances[i]!, list)),
          );
        }
      } catch (err) {
        for (const h of held) await this.holds.release(h.arqUuid).catch(() => {});
        for (const i of instances) await removeCdiSpec(cdiSpecPath(cdi.dir, cdi.vendor, i)).catch(() => {});
        throw new BerthError(
          'INTERNAL',
          `cannot write the CDI spec in ${cdi.dir}: ${(err as Error).message}`,
        );
      }
    }
    for (const a of held) this.allocations.set(a.address, a);
    this.publish();
    this.logger.info(
      { resource: r.name, devices: held.map((a) => `${a.address}=${a.instance}`) },
      `allocated to the kubelet: ${held.map((a) => a.address).join(', ')}`,
    );
    return { containerResponses: devices.map((list, i) => this.containerResponse(r, list, instances[i]!)) };
  }

  /** A container's devices in its CDI spec: named `<instance>-<DRA device name>`. */
  private cdiInputs(r: Resource, instance: string, list: DiscoveredDevice[]): CdiInput[] {
    return list.map((d) => ({
      name: `${instance}-${draDeviceName(d.address)}`,
      address: d.address,
      iommuGroup: d.iommuGroup,
      variable: kubevirtVariable(r.name),
      own: ownVariable(draDeviceName(d.address)),
    }));
  }

  private containerResponse(
    r: Resource,
    list: DiscoveredDevice[],
    instance: string,
  ): ContainerAllocateResponse {
    const cdi = this.config.cdi;
    const vfio = (node: string) => ({
      containerPath: `/dev/vfio/${node}`,
      hostPath: join(this.options.agent.devRoot, 'vfio', node),
      permissions: 'mrw',
    });
    const groups = [...new Set(list.map((d) => d.iommuGroup).filter((g): g is number => g !== null))];
    return {
      envs: { [kubevirtVariable(r.name)]: list.map((d) => d.address).join(',') },
      mounts: [],
      devices: [vfio('vfio'), ...groups.map((g) => vfio(String(g)))],
      annotations: {},
      cdiDevices: cdi
        ? this.cdiInputs(r, instance, list).map((d) => ({ name: cdiId(cdi.vendor, d.name) }))
        : [],
    };
  }

  /** Holds of this plugin the journal records that this process does not follow (given before a restart). */
  private adoptHolds(): void {
    // A released ARQ is followed until its device's record no longer names it (the scrub ended).
    const named = new Set(this.inventory.list().map((d) => d.mediaRecord?.arqUuid ?? ''));
    for (const arq of this.released) if (!named.has(arq)) this.released.delete(arq);
    for (const r of this.resources.values()) {
      for (const d of this.devicesOf(r.cls)) {
        const rec = d.mediaRecord;
        if (rec?.condition !== 'held' || !rec.instanceUuid.startsWith(INSTANCE_PREFIX)) continue;
        if (this.allocations.has(d.address) || this.released.has(rec.arqUuid)) continue;
        this.allocations.set(d.address, {
          address: d.address,
          arqUuid: rec.arqUuid,
          instance: rec.instanceUuid,
          since: rec.since,
          seen: false,
        });
      }
    }
  }

  /** What pod-resources says pods hold, or null when it does not answer. */
  private async podDevices(): Promise<Set<string> | null> {
    const names = new Set([...this.resources.values()].map((r) => r.name));
    try {
      const res = await new Promise<ListPodResourcesResponse>((resolve, reject) =>
        this.podResources.list(
          {},
          new Metadata(),
          { deadline: Date.now() + 5_000 },
          (err: ServiceError | null, v?: ListPodResourcesResponse) => (err || !v ? reject(err) : resolve(v)),
        ),
      );
      if (this.listing !== true) this.logger.info('pod-resources answers: devices no pod holds are released');
      this.listing = true;
      const out = new Set<string>();
      for (const pod of res.podResources) {
        for (const c of pod.containers) {
          for (const d of c.devices) if (names.has(d.resourceName)) for (const id of d.deviceIds) out.add(id);
        }
      }
      return out;
    } catch (err) {
      if (this.listing !== false) {
        this.logger.warn(
          { socket: this.config.podResourcesSocket, err: (err as Error).message },
          'pod-resources does not answer: every device given to a pod stays held until it does',
        );
      }
      this.listing = false;
      return null;
    }
  }

  private async releaseFreed(): Promise<void> {
    if (this.allocations.size === 0) return;
    const held = await this.podDevices();
    if (!held) return;
    const now = Date.now();
    for (const a of [...this.allocations.values()]) {
      if (held.has(a.address)) {
        a.seen = true;
        continue;
      }
      if (!a.seen && now - a.since < this.config.unclaimedGraceMs) continue;
      try {
        await this.holds.release(a.arqUuid);
        this.allocations.delete(a.address);
        this.released.add(a.arqUuid);
        await this.removeSpecOf(a.instance);
        this.logger.info(
          { address: a.address, instance: a.instance, arqUuid: a.arqUuid },
          `device ${a.address} is no longer held by a pod: released (scrubbed before it is offered again)`,
        );
      } catch (err) {
        this.logger.warn(
          { address: a.address, err: (err as Error).message },
          `cannot release ${a.address} yet; retrying`,
        );
      }
    }
  }

  /** The CDI spec of a container goes once Berth released every device of it. */
  private async removeSpecOf(instance: string): Promise<void> {
    const cdi = this.config.cdi;
    if (!cdi || [...this.allocations.values()].some((a) => a.instance === instance)) return;
    await removeCdiSpec(cdiSpecPath(cdi.dir, cdi.vendor, instance)).catch((err: Error) =>
      this.logger.warn({ instance, err: err.message }, `cannot remove the CDI spec of ${instance}`),
    );
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.unsubscribe?.();
    for (const r of this.resources.values()) {
      for (const w of r.watchers) w.call.end();
      r.server?.forceShutdown();
      await unlink(r.socket).catch(() => {});
    }
    this.holds.close();
    this.podResources.close();
  }
}
