/**
 * The kubelet's device plugin API (issue 39 part 1, decision 74), end to end:
 * a real scheduler and agent on loopback, and a kubelet stand-in built from
 * the kubelet's own protos (test/helpers/kubelet.ts) serving Registration and
 * PodResourcesLister on unix sockets. Judged from the media (the simulator's
 * backing files) and from the scheduler's record, not from what the plugin
 * says of itself.
 */
import { access, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Metadata, type ServiceError } from '@grpc/grpc-js';
import { afterEach, describe, expect, it } from 'vitest';
import { SchedulerClient } from '../../src/client/sdk.js';
import { DeviceState } from '../../src/gen/berth/scheduler/v1/device.js';
import type {
  AllocateResponse,
  ListAndWatchResponse,
  PreferredAllocationResponse,
} from '../../src/gen/k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.js';
import type { StaticToken } from '../../src/server/grpc/auth/configuration.js';
import { generateStaticToken } from '../../src/server/grpc/auth/tokens.js';
import type { SimHostDefinition } from '../../src/sim/host.js';
import { plantTenantData, readableTenantData, spreadTenantWrites } from '../../src/sim/nvme-cli/index.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import { expectCode } from '../helpers/errors.js';
import { createAndBind, createClassProfile, getDevice } from '../helpers/invariants.js';
import { KubeletStandIn } from '../helpers/kubelet.js';
import { makeSpecNodes, podmanWithCdiDevice } from '../helpers/podman-cdi.js';
import { available, podmanRunc } from '../helpers/prerequisites.js';
import { eventually } from '../helpers/wait.js';

const HOST = 'k8s-host';
const HOST_B = 'k8s-host-b';
const MIB = 1 << 20;
const CLEAN = '0000:01:00.0';
const OTHER = '0000:02:00.0';
const RESOURCE = 'berth.dev/nvme';
const NVME_CLASS = 'CUSTOM_NVME_144D_A824';

/** Two drives of one class; the second, never cleaned by Berth, is dirty at first sight (a long scrub: `slowSecond`). */
function definition(opts: { secondClean: boolean }, host = HOST): SimHostDefinition {
  const drive = { vendorId: '144d', productId: 'a824', model: 'PM1733 (simulated)', caps: { ces: true } };
  return {
    host,
    pci: { functions: [] },
    pciDeviceSpec: [],
    nvme: [
      {
        ...drive,
        serial: 'SER-A',
        address: CLEAN,
        controller: 'nvme0',
        sanitizeMs: 200,
        namespaces: [{ nsid: 1, sizeBytes: MIB }],
      },
      {
        ...drive,
        serial: 'SER-B',
        address: OTHER,
        controller: 'nvme1',
        sanitizeMs: opts.secondClean ? 200 : 600_000,
        namespaces: [{ nsid: 1, sizeBytes: MIB }],
      },
    ],
    nvmeDeviceSpec: [
      { vendor_id: '144d', address: CLEAN, assume_clean: true },
      { vendor_id: '144d', address: OTHER, ...(opts.secondClean ? { assume_clean: true } : {}) },
    ],
  };
}

/**
 * Authentication on, and a second host (HOST_B, no plugin) beside the
 * plugin's: each agent registers with its own token, the plugin calls with
 * `pluginToken` (read from its scheduler_token_file), the cluster's client
 * with `admin`.
 */
interface TwoHosts {
  tokens: StaticToken[];
  agentTokens: Record<string, string>;
  admin: string;
  pluginToken: string;
}

async function start(
  k: KubeletStandIn,
  opts: { secondClean: boolean; cdiDir?: string; twoHosts?: TwoHosts },
): Promise<Cluster> {
  const auth = opts.twoHosts;
  const tokenFile = join(k.dir, 'scheduler-token');
  if (auth) await writeFile(tokenFile, auth.pluginToken, { mode: 0o600 });
  const c = await startCluster([definition(opts), ...(auth ? [definition(opts, HOST_B)] : [])], {
    agentConfig: (raw) =>
      raw['host'] !== HOST
        ? raw
        : {
            ...raw,
            kubernetes: {
              device_plugin: {
                enabled: true,
                kubelet_socket_dir: k.pluginDir,
                pod_resources_socket: k.podResourcesSocket,
                resource_names: { [NVME_CLASS]: RESOURCE },
                poll_interval: 0.1,
                unclaimed_grace: 3600,
                ...(opts.cdiDir ? { cdi: true, cdi_dir: opts.cdiDir } : {}),
                ...(auth ? { scheduler_token_file: tokenFile } : {}),
              },
            },
          },
    ...(auth
      ? {
          scheduler: { auth: { mode: 'token', staticTokens: auth.tokens } },
          agent: (host: string) => ({ schedulerToken: auth.agentTokens[host]! }),
          clientToken: auth.admin,
        }
      : {}),
  });
  await c.waitForDevices(HOST, 2);
  if (auth) await c.waitForDevices(HOST_B, 2);
  return c;
}

/** Every list ListAndWatch streams, and a wait for one that satisfies a predicate. */
/** The plugin's registration of RESOURCE with the kubelet, once it has come. */
async function registration(k: KubeletStandIn) {
  const reg = await eventually(
    async () => k.registrations.find((r) => r.resourceName === RESOURCE),
    (r) => r !== undefined,
    15_000,
  );
  return reg!;
}

function watch(k: KubeletStandIn, endpoint: string) {
  const client = k.plugin(endpoint);
  const lists: ListAndWatchResponse[] = [];
  const stream = client.listAndWatch({});
  stream.on('data', (m: ListAndWatchResponse) => lists.push(m));
  stream.on('error', () => {});
  const health = (m: ListAndWatchResponse | undefined, id: string) =>
    m?.devices.find((d) => d.ID === id)?.health;
  return {
    client,
    lists,
    health: (id: string) => health(lists.at(-1), id),
    until: (pred: (health: (id: string) => string | undefined) => boolean) =>
      eventually(
        async () => lists.at(-1),
        (m) => m !== undefined && pred((id) => health(m, id)),
        30_000,
      ),
    close: () => {
      stream.cancel();
      client.close();
    },
  };
}

type Plugin = ReturnType<typeof watch>['client'];

const allocate = (p: Plugin, ids: string[]) =>
  new Promise<AllocateResponse>((resolve, reject) =>
    p.allocate(
      { containerRequests: [{ devicesIds: ids }] },
      new Metadata(),
      (err: ServiceError | null, r?: AllocateResponse) => (err || !r ? reject(err) : resolve(r)),
    ),
  );

const refusal = (p: Plugin, ids: string[]) =>
  allocate(p, ids).then(
    () => null,
    (err: ServiceError) => err,
  );

/** Waits until the plugin has looked at pod-resources `n` more times: a negative check waits on this signal. */
async function polls(c: Cluster, n: number): Promise<void> {
  const plugin = c.host(HOST).agent!.devicePlugin!;
  const target = plugin.polls + n;
  await eventually(
    async () => plugin.polls,
    (p) => p >= target,
    15_000,
  );
}

describe('the kubelet device plugin', () => {
  let c: Cluster | undefined;
  let k: KubeletStandIn | undefined;
  afterEach(async () => {
    await c?.stop();
    await k?.stop();
    c = undefined;
    k = undefined;
  });

  it('registers, offers only clean devices, allocates with KubeVirt variable and VFIO nodes, and scrubs with proof at the pod end before the device is Healthy again', async () => {
    k = await KubeletStandIn.start();
    c = await start(k, { secondClean: true });
    const reg = await registration(k);
    expect(reg.version).toBe('v1beta1');
    expect(reg.options?.getPreferredAllocationAvailable).toBe(true);
    const w = watch(k, reg.endpoint);
    await w.until((h) => h(CLEAN) === 'Healthy' && h(OTHER) === 'Healthy');

    const preferredIds = await new Promise<PreferredAllocationResponse>((resolve, reject) =>
      w.client.getPreferredAllocation(
        {
          containerRequests: [
            { availableDeviceIDs: [OTHER, CLEAN], mustIncludeDeviceIDs: [], allocationSize: 1 },
          ],
        },
        (err: ServiceError | null, r?: PreferredAllocationResponse) => (err || !r ? reject(err) : resolve(r)),
      ),
    );
    expect(preferredIds.containerResponses[0]!.deviceIDs).toHaveLength(1);

    const res = await allocate(w.client, [CLEAN]);
    const group = c.host(HOST).agent!.inventory.get(CLEAN)!.iommuGroup;
    const container = res.containerResponses[0]!;
    expect(container.envs).toEqual({ PCI_RESOURCE_BERTH_DEV_NVME: CLEAN });
    expect(container.devices.map((d) => d.containerPath)).toEqual(['/dev/vfio/vfio', `/dev/vfio/${group}`]);
    // The scheduler holds it (no other bind may take it), for the allocation's instance.
    const held = await getDevice(c.client, HOST, CLEAN);
    expect(held.deviceState).toBe(DeviceState.DEVICE_STATE_ALLOCATED);
    expect(held.instanceUuid).toMatch(/^k8s-dp-/);
    await w.until((h) => h(CLEAN) === 'Unhealthy' && h(OTHER) === 'Healthy');

    // The pod runs and writes; while pod-resources reports it, the device stays held.
    k.pods.set('vm-1', { [RESOURCE]: [CLEAN] });
    await plantTenantData(c.host(HOST).sim.nvmeStatePath, 'nvme0', spreadTenantWrites(1));
    await polls(c, 3);
    expect((await getDevice(c.client, HOST, CLEAN)).deviceState).toBe(DeviceState.DEVICE_STATE_ALLOCATED);

    // The kubelet going down holds everything: nothing is released on a guess.
    k.podResourcesUp = false;
    k.pods.clear();
    await polls(c, 3);
    expect((await getDevice(c.client, HOST, CLEAN)).deviceState).toBe(DeviceState.DEVICE_STATE_ALLOCATED);

    // The pod is gone as pod-resources reports it: Berth's release, Unhealthy throughout.
    k.podResourcesUp = true;
    const healthyAgain = await w.until((h) => h(CLEAN) === 'Healthy');
    expect(healthyAgain).toBeDefined();
    expect(await readableTenantData(c.host(HOST).sim.nvmeStatePath, 'nvme0')).toEqual([]);
    // The agent's judge accepted the proof; the scheduler records the outcome it streams a moment later.
    const after = await eventually(
      () => getDevice(c!.client, HOST, CLEAN),
      (d) => d.deviceState === DeviceState.DEVICE_STATE_AVAILABLE,
      15_000,
    );
    expect(after.lastCleanup?.proof?.method).toBeTruthy();
    const certs = await c.client.certificates.listErasureCertificates({
      of: { $case: 'instanceUuid', value: held.instanceUuid },
    });
    expect(certs.certificates.length).toBeGreaterThan(0);
    // Between the allocation and the scrub's proof, no list said Healthy.
    const states = w.lists.map((m) => m.devices.find((d) => d.ID === CLEAN)?.health);
    const firstUnhealthy = states.indexOf('Unhealthy');
    expect(states.slice(firstUnhealthy, states.lastIndexOf('Healthy'))).not.toContain('Healthy');
    w.close();
  }, 90_000);

  it("with a host-client token: the plugin holds and releases its host's devices; every call for another host's device or ARQ is refused naming it (decision 90)", async () => {
    const t = {
      admin: generateStaticToken(),
      agentA: generateStaticToken(),
      agentB: generateStaticToken(),
      hostClient: generateStaticToken(),
    };
    k = await KubeletStandIn.start();
    c = await start(k, {
      secondClean: true,
      twoHosts: {
        tokens: [
          { token: t.admin, roles: ['admin'] },
          { token: t.agentA, roles: ['agent'], subject: HOST },
          { token: t.agentB, roles: ['agent'], subject: HOST_B },
          { token: t.hostClient, roles: ['host-client'], subject: HOST },
        ],
        agentTokens: { [HOST]: t.agentA, [HOST_B]: t.agentB },
        admin: t.admin,
        pluginToken: t.hostClient,
      },
    });
    const reg = await registration(k);
    const w = watch(k, reg.endpoint);
    await w.until((h) => h(CLEAN) === 'Healthy');

    // Profiles stay an admin's: the plugin's own is made beforehand.
    const noProfile = await refusal(w.client, [CLEAN]);
    expect(noProfile?.details).toContain('ProfileService/CreateProfile requires role admin');
    const profile = await createClassProfile(c.client, 'k8s-custom-nvme-144d-a824', NVME_CLASS);

    // The plugin's flow with the narrow token: Allocate holds, the pod's end releases.
    await allocate(w.client, [CLEAN]);
    const held = await getDevice(c.client, HOST, CLEAN);
    expect(held.deviceState).toBe(DeviceState.DEVICE_STATE_ALLOCATED);
    expect(held.instanceUuid).toMatch(/^k8s-dp-/);
    k.pods.set('vm-1', { [RESOURCE]: [CLEAN] });
    await polls(c, 2);
    k.pods.clear();
    await eventually(
      () => getDevice(c!.client, HOST, CLEAN),
      (d) => d.deviceState === DeviceState.DEVICE_STATE_AVAILABLE,
      30_000,
    );

    // Host B's device and ARQ, through the five calls with host A's token.
    const bDevice = await getDevice(c.client, HOST_B, CLEAN);
    const bArq = await createAndBind(c.client, profile, 'tenant-b', HOST_B);
    const narrow = new SchedulerClient({
      endpoint: c.scheduler.address,
      timeoutMs: 15_000,
      token: t.hostClient,
    });
    try {
      const denied = async (p: Promise<unknown>) => {
        const e = await expectCode(p, 'PERMISSION_DENIED', 'PRINCIPAL_NOT_FOR_HOST');
        expect(e.message).toContain(`may act only for host ${HOST}, not for host ${HOST_B}`);
      };
      await denied(getDevice(narrow, HOST_B, CLEAN));
      await denied(narrow.devices.getDevice({ device: { ref: { $case: 'uuid', value: bDevice.uuid } } }));
      expect((await getDevice(narrow, HOST, OTHER)).host).toBe(HOST);
      expect((await narrow.profiles.getProfile({ name: profile })).profile?.name).toBe(profile);
      await expectCode(createClassProfile(narrow, 'wider', NVME_CLASS), 'PERMISSION_DENIED');
      const [mine] = (
        await narrow.arqs.createAcceleratorRequests({ profileName: profile, requestId: '', tags: [] })
      ).acceleratorRequests;
      const bindTo = (host: string, deviceUuids: string[] = []) =>
        narrow.arqs.bindAcceleratorRequests({
          bindings: [{ arqUuid: mine!.uuid, instanceUuid: 'stolen', host, tag: '', deviceUuids }],
        });
      await denied(bindTo(HOST_B));
      await denied(bindTo(HOST_B, [bDevice.uuid]));
      // No bind without a host: the field is required, and with it the bind stays on host A.
      await expectCode(bindTo(''), 'INVALID_ARGUMENT');
      await expectCode(bindTo(HOST, [bDevice.uuid]), 'FAILED_PRECONDITION', 'NO_ALLOCATABLE_DEVICE');
      await denied(narrow.arqs.deleteAcceleratorRequests({ uuids: [bArq.uuid], instanceUuid: '' }));
      await denied(narrow.arqs.deleteAcceleratorRequests({ uuids: [], instanceUuid: 'tenant-b' }));
      // Nothing of host B moved: its ARQ bound, its devices as they were.
      expect((await c.client.arqs.getAcceleratorRequest({ uuid: bArq.uuid })).acceleratorRequest?.host).toBe(
        HOST_B,
      );
      const bNow = await getDevice(c.client, HOST_B, CLEAN);
      expect(bNow.instanceUuid).toBe('tenant-b');
      expect((await getDevice(c.client, HOST_B, OTHER)).deviceState).toBe(DeviceState.DEVICE_STATE_AVAILABLE);
      // Its own unbound ARQ (what the plugin deletes after a refused bind) goes.
      expect(
        (await narrow.arqs.deleteAcceleratorRequests({ uuids: [mine!.uuid], instanceUuid: '' })).deletedUuids,
      ).toEqual([mine!.uuid]);
    } finally {
      narrow.close();
      w.close();
    }
  }, 120_000);

  it('refuses a dirty device and one a gRPC bind holds (both Unhealthy), and an unknown device id with a status naming the field', async () => {
    k = await KubeletStandIn.start();
    c = await start(k, { secondClean: false });
    const reg = await registration(k);
    const w = watch(k, reg.endpoint);
    await w.until((h) => h(CLEAN) === 'Healthy' && h(OTHER) === 'Unhealthy');

    const dirty = await refusal(w.client, [OTHER]);
    expect(dirty?.code).toBe(9 /* FAILED_PRECONDITION */);
    expect(dirty?.details).toContain(`device ${OTHER}`);
    expect(dirty?.details).toMatch(/dirty|being cleaned/);

    const unknown = await refusal(w.client, ['0000:99:00.0']);
    expect(unknown?.code).toBe(3 /* INVALID_ARGUMENT */);
    expect(unknown?.details).toContain('container_requests[0].devices_ids[0]');
    const garbage = await refusal(w.client, ['not-a-device']);
    expect(garbage?.code).toBe(3);
    expect(garbage?.details).toContain('"not-a-device"');

    // The scheduler's side of a hold: a bind restricted to a device that is not allocatable is refused.
    await createClassProfile(c.client, 'nvme', NVME_CLASS);
    const [arq] = (
      await c.client.arqs.createAcceleratorRequests({ profileName: 'nvme', requestId: '', tags: [] })
    ).acceleratorRequests;
    const bindOnly = (deviceUuids: string[]) =>
      c!.client.arqs.bindAcceleratorRequests({
        bindings: [{ arqUuid: arq!.uuid, instanceUuid: 'restricted', host: HOST, tag: '', deviceUuids }],
      });
    await expectCode(
      bindOnly([(await getDevice(c.client, HOST, OTHER)).uuid]),
      'FAILED_PRECONDITION',
      'NO_ALLOCATABLE_DEVICE',
    );
    await expectCode(bindOnly(['not-a-uuid']), 'INVALID_ARGUMENT');
    await expect(bindOnly(['not-a-uuid'])).rejects.toThrow(/bindings\[0\]\.device_uuids\[0\]/);
    await c.client.arqs.deleteAcceleratorRequests({ uuids: [arq!.uuid], instanceUuid: '' });

    // A gRPC (OpenStack-style) bind takes the clean one: Kubernetes must not get it.
    const bound = await createAndBind(c.client, 'nvme', 'openstack-vm', HOST);
    expect(bound.deviceAddress).toBe(CLEAN);
    await w.until((h) => h(CLEAN) === 'Unhealthy');
    const taken = await refusal(w.client, [CLEAN]);
    expect(taken?.code).toBe(9);
    expect(taken?.details).toContain('openstack-vm');
    expect((await getDevice(c.client, HOST, CLEAN)).instanceUuid).toBe('openstack-vm');
    w.close();
  }, 60_000);

  it("keeps a pod's device held across an agent restart and releases it, scrubbed, once the pod ends", async () => {
    k = await KubeletStandIn.start();
    c = await start(k, { secondClean: true });
    const reg = await registration(k);
    const first = watch(k, reg.endpoint);
    await first.until((h) => h(CLEAN) === 'Healthy');
    await allocate(first.client, [CLEAN]);
    first.close();
    const instance = (await getDevice(c.client, HOST, CLEAN)).instanceUuid;
    k.pods.set('vm-1', { [RESOURCE]: [CLEAN] });
    await plantTenantData(c.host(HOST).sim.nvmeStatePath, 'nvme0', spreadTenantWrites(1));

    await c.host(HOST).stop();
    await c.host(HOST).start();
    // Registered again by the new agent: at least once more (a loaded machine may see it register twice,
    // as the kubelet allows: the last registration of a resource wins).
    const again = await eventually(
      async () => k!.registrations.filter((r) => r.resourceName === RESOURCE),
      (r) => r.length >= 2,
      15_000,
    );
    const w = watch(k, again[again.length - 1]!.endpoint);
    await w.until((h) => h(CLEAN) === 'Unhealthy');
    await polls(c, 3);
    expect((await getDevice(c.client, HOST, CLEAN)).instanceUuid).toBe(instance);

    k.pods.clear();
    await w.until((h) => h(CLEAN) === 'Healthy');
    expect(await readableTenantData(c.host(HOST).sim.nvmeStatePath, 'nvme0')).toEqual([]);
    const certs = await c.client.certificates.listErasureCertificates({
      of: { $case: 'instanceUuid', value: instance },
    });
    expect(certs.certificates.length).toBeGreaterThan(0);
    w.close();
  }, 90_000);

  it('with cdi: Allocate also answers CDI device names that resolve in the spec it wrote, and the spec goes with the release', async () => {
    const cdiDir = await mkdtemp(join(tmpdir(), 'berth-dp-cdi-'));
    try {
      k = await KubeletStandIn.start();
      c = await start(k, { secondClean: true, cdiDir });
      const reg = await registration(k);
      const w = watch(k, reg.endpoint);
      await w.until((h) => h(CLEAN) === 'Healthy' && h(OTHER) === 'Healthy');

      const container = (await allocate(w.client, [CLEAN, OTHER])).containerResponses[0]!;
      // The envs and device nodes stay for runtimes that read no CDI.
      expect(container.envs).toEqual({ PCI_RESOURCE_BERTH_DEV_NVME: `${CLEAN},${OTHER}` });
      expect(container.devices[0]!.containerPath).toBe('/dev/vfio/vfio');
      const instance = (await getDevice(c.client, HOST, CLEAN)).instanceUuid;
      expect((await getDevice(c.client, HOST, OTHER)).instanceUuid).toBe(instance);
      expect(container.cdiDevices.map((d) => d.name)).toEqual([
        `berth.dev/pci=${instance}-pci-0000-01-00-0`,
        `berth.dev/pci=${instance}-pci-0000-02-00-0`,
      ]);
      const files = await readdir(cdiDir);
      expect(files).toEqual([`berth.dev-${instance}.json`]);
      const spec = JSON.parse(await readFile(join(cdiDir, files[0]!), 'utf8'));
      const inv = c.host(HOST).agent!.inventory;
      expect(spec.kind).toBe('berth.dev/pci');
      expect(spec.containerEdits.env).toEqual([`PCI_RESOURCE_BERTH_DEV_NVME=${CLEAN},${OTHER}`]);
      expect(spec.containerEdits.deviceNodes).toEqual([
        { path: '/dev/vfio/vfio', hostPath: container.devices[0]!.hostPath, type: 'c', permissions: 'rw' },
      ]);
      // Every name answered is a device of the spec, with its own variable and its IOMMU group's node.
      for (const [i, address] of [CLEAN, OTHER].entries()) {
        const name = container.cdiDevices[i]!.name.split('=')[1];
        const dev = spec.devices.find((d: { name: string }) => d.name === name);
        expect(dev.containerEdits.env).toEqual([`BERTH_PCI_0000_0${i + 1}_00_0=${address}`]);
        const group = inv.get(address)!.iommuGroup;
        const groupNode = spec.devices
          .flatMap(
            (d: { containerEdits: { deviceNodes?: { path: string }[] } }) =>
              d.containerEdits.deviceNodes ?? [],
          )
          .map((n: { path: string }) => n.path);
        expect(groupNode).toContain(`/dev/vfio/${group}`);
      }

      // Held while the pod runs; gone once Berth released both devices (and Healthy only after the scrub).
      k.pods.set('vm-1', { [RESOURCE]: [CLEAN, OTHER] });
      await polls(c, 3);
      await access(join(cdiDir, files[0]!));
      k.pods.clear();
      await eventually(
        () => readdir(cdiDir),
        (f) => f.length === 0,
        30_000,
      );
      await w.until((h) => h(CLEAN) === 'Healthy' && h(OTHER) === 'Healthy');
      w.close();
    } finally {
      await rm(cdiDir, { recursive: true, force: true });
    }
  }, 90_000);

  it.skipIf(!available(podmanRunc(), "a container started by podman from the device plugin's CDI spec"))(
    "podman with runc starts a container from the device plugin's CDI name: it sees KubeVirt's variable and the VFIO nodes",
    async () => {
      k = await KubeletStandIn.start();
      // podman 4.3 reads CDI specs only from /etc/cdi and /var/run/cdi.
      c = await start(k, { secondClean: true, cdiDir: '/var/run/cdi' });
      const reg = await registration(k);
      const w = watch(k, reg.endpoint);
      await w.until((h) => h(CLEAN) === 'Healthy');
      const container = (await allocate(w.client, [CLEAN])).containerResponses[0]!;
      const instance = (await getDevice(c.client, HOST, CLEAN)).instanceUuid;
      const specFile = join('/var/run/cdi', `berth.dev-${instance}.json`);
      try {
        await makeSpecNodes(JSON.parse(await readFile(specFile, 'utf8')));
        const stdout = await podmanWithCdiDevice(container.cdiDevices[0]!.name, instance);
        const group = c.host(HOST).agent!.inventory.get(CLEAN)!.iommuGroup;
        expect(stdout).toContain(`PCI_RESOURCE_BERTH_DEV_NVME=${CLEAN}\n`);
        expect(stdout).toContain(`BERTH_PCI_0000_01_00_0=${CLEAN}\n`);
        expect(stdout).toMatch(/^c.* 1, +3 .* vfio$/m);
        expect(stdout).toMatch(new RegExp(`^c.* 1, +3 .* ${group}$`, 'm'));
        // The pod's end as pod-resources reports it: the spec goes with the release.
        k.pods.set('vm-1', { [RESOURCE]: [CLEAN] });
        await polls(c, 2);
        k.pods.clear();
        await eventually(
          () =>
            access(specFile).then(
              () => true,
              () => false,
            ),
          (present) => !present,
          30_000,
        );
      } finally {
        await rm(specFile, { force: true });
        w.close();
      }
    },
    180_000,
  );

  it('registers again when the kubelet restarts (its socket recreated)', async () => {
    k = await KubeletStandIn.start();
    c = await start(k, { secondClean: true });
    await eventually(
      async () => k!.registrations.length,
      (n) => n === 1,
      15_000,
    );
    await k.restart();
    await eventually(
      async () => k!.registrations.length,
      (n) => n === 2,
      15_000,
    );
    const w = watch(k, k.registrations[1]!.endpoint);
    await w.until((h) => h(CLEAN) === 'Healthy');
    w.close();
  }, 60_000);
});
