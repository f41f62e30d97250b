/**
 * The kubelet's DRA plugin API (issue 39 part 2, decision 75), end to end: a
 * real scheduler and agent on loopback, a kubelet stand-in built from the
 * kubelet's own protos (test/helpers/kubelet-dra.ts) that registers the
 * plugin and calls it on unix sockets, and an API server stand-in serving
 * the ResourceClaims, read by the agent with Kubernetes' client library.
 * Judged from the media (the simulator's backing files), the scheduler's
 * record and the files the plugin writes; the CDI spec is read by podman.
 */
import { randomUUID } from 'node:crypto';
import { access, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { ServiceError } from '@grpc/grpc-js';
import { afterEach, describe, expect, it } from 'vitest';
import { DeviceState } from '../../src/gen/berth/scheduler/v1/device.js';
import { HealthStatus } from '../../src/gen/k8s.io/kubelet/pkg/apis/dra-health/v1/api.js';
import { generateStaticToken } from '../../src/server/grpc/auth/tokens.js';
import type { SimHostDefinition } from '../../src/sim/host.js';
import { plantTenantData, readableTenantData, spreadTenantWrites } from '../../src/sim/nvme-cli/index.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import { createAndBind, createClassProfile, getDevice } from '../helpers/invariants.js';
import { ApiServerStandIn, DraKubelet, resourceClaim } from '../helpers/kubelet-dra.js';
import { makeSpecNodes, podmanWithCdiDevice } from '../helpers/podman-cdi.js';
import { available, podmanRunc } from '../helpers/prerequisites.js';
import { eventually } from '../helpers/wait.js';

const HOST = 'k8s-host';
const MIB = 1 << 20;
const CLEAN = '0000:01:00.0';
const OTHER = '0000:02:00.0';
const CLEAN_NAME = 'pci-0000-01-00-0';
const OTHER_NAME = 'pci-0000-02-00-0';
const NVME_CLASS = 'CUSTOM_NVME_144D_A824';
const DRIVER = 'berth.dev';
const VARIABLE = 'PCI_RESOURCE_BERTH_DEV_NVME';

/** Two drives of one class; the second, never cleaned by Berth, is dirty at first sight unless `secondClean`. */
function definition(opts: { secondClean: boolean }): SimHostDefinition {
  const drive = { vendorId: '144d', productId: 'a824', model: 'PM1733 (simulated)', caps: { ces: true } };
  return {
    host: HOST,
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

async function start(
  k: DraKubelet,
  api: ApiServerStandIn,
  opts: { secondClean: boolean; cdiDir?: string; auth?: { admin: string; agent: string; plugin: string } },
): Promise<Cluster> {
  // With authentication on: the agent's token, the plugin's (scheduler_token_file), the cluster client's.
  const auth = opts.auth;
  const tokenFile = join(k.dir, 'scheduler-token');
  if (auth) await writeFile(tokenFile, auth.plugin, { mode: 0o600 });
  const c = await startCluster([definition(opts)], {
    ...(auth
      ? {
          scheduler: {
            auth: {
              mode: 'token',
              staticTokens: [
                { token: auth.admin, roles: ['admin'] },
                { token: auth.agent, roles: ['agent'], subject: HOST },
                { token: auth.plugin, roles: ['host-client'], subject: HOST },
              ],
            },
          },
          agent: { schedulerToken: auth.agent },
          clientToken: auth.admin,
        }
      : {}),
    agentConfig: (raw) => ({
      ...raw,
      kubernetes: {
        // Not served; its names give KubeVirt's variable for DRA too.
        device_plugin: { resource_names: { [NVME_CLASS]: 'berth.dev/nvme' } },
        api_server: { url: api.url, ca_file: api.caFile, token_file: api.tokenFile },
        dra: {
          enabled: true,
          plugins_registry_dir: k.registryDir,
          plugin_dir: k.pluginDir,
          cdi_dir: opts.cdiDir ?? k.cdiDir,
          checkpoint_file: k.checkpointFile,
          ...(auth ? { scheduler_token_file: tokenFile } : {}),
        },
      },
    }),
  });
  await c.waitForDevices(HOST, 2);
  return c;
}

/** The kubelet's plugin watcher: waits for the registration socket, then GetInfo and the status. */
async function registered(k: DraKubelet) {
  const socket = join(k.registryDir, `${DRIVER}-reg.sock`);
  await eventually(
    () =>
      access(socket).then(
        () => true,
        () => false,
      ),
    (there) => there,
    15_000,
  );
  return k.register(socket);
}

type Health = ReturnType<DraKubelet['health']>;
const healthOf = (h: Health, i: number, name: string) =>
  h.lists[i]?.devices.find((d) => d.device?.deviceName === name)?.health;

/** Waits for a list, from index `from` on, in which `name` has `status`; its index. */
async function until(h: Health, name: string, status: HealthStatus, from = 0): Promise<number> {
  const at = () => h.lists.findIndex((_, i) => i >= from && healthOf(h, i, name) === status);
  await eventually(
    async () => at(),
    (i) => i >= 0,
    30_000,
  );
  return at();
}

const ref = (name: string, uid: string) => ({ namespace: 'default', name, uid });
const ours = (request: string, device: string) => ({ request, driver: DRIVER, pool: HOST, device });
const cdiSpecFile = (dir: string, uid: string) => join(dir, `${DRIVER}-${uid}.json`);

describe('the kubelet DRA plugin', () => {
  let c: Cluster | undefined;
  let k: DraKubelet | undefined;
  let api: ApiServerStandIn | undefined;
  afterEach(async () => {
    await c?.stop();
    await k?.stop();
    await api?.stop();
    c = undefined;
    k = undefined;
    api = undefined;
  });

  it('registers, prepares a claim from its allocation (CDI spec, ids), answers a second prepare the same, and unprepares: scrubbed with proof before HEALTHY again', async () => {
    k = await DraKubelet.start();
    api = await ApiServerStandIn.start();
    c = await start(k, api, { secondClean: true });
    const info = await registered(k);
    expect(info).toMatchObject({ type: 'DRAPlugin', name: DRIVER, endpoint: join(k.pluginDir, 'dra.sock') });
    expect(info.supportedVersions).toEqual(['v1.DRAPlugin', 'v1beta1.DRAPlugin', 'v1.DRAResourceHealth']);
    expect(c.host(HOST).agent!.dra!.registered?.pluginRegistered).toBe(true);
    const h = k.health(info.endpoint);
    await until(h, CLEAN_NAME, HealthStatus.HEALTHY);
    expect(h.lists.at(-1)!.devices.every((d) => d.device?.poolName === HOST)).toBe(true);

    const uid = randomUUID();
    // Another driver's result in the same claim is not Berth's.
    api.put(
      resourceClaim('default', 'vm-1', uid, [
        ours('nvme', CLEAN_NAME),
        { request: 'gpu', driver: 'gpu.example.com', pool: HOST, device: 'gpu-0' },
      ]),
    );
    const p = k.plugin(info.endpoint);
    const preparing = h.lists.length;
    const res = await p.prepare([ref('vm-1', uid)]);
    const cdiId = `${DRIVER}/pci=${uid}-${CLEAN_NAME}`;
    expect(res.claims[uid]).toEqual({
      devices: [{ requestNames: ['nvme'], poolName: HOST, deviceName: CLEAN_NAME, cdiDeviceIds: [cdiId] }],
      error: '',
    });
    expect(api.asked).toEqual([`GET /apis/resource.k8s.io/v1/namespaces/default/resourceclaims/vm-1`]);
    // The scheduler holds it for the claim: no other bind can take it.
    const held = await getDevice(c.client, HOST, CLEAN);
    expect(held.deviceState).toBe(DeviceState.DEVICE_STATE_ALLOCATED);
    expect(held.instanceUuid).toBe(`k8s-dra-${uid}`);
    // The CDI spec: the VFIO nodes and KubeVirt's variable.
    const group = c.host(HOST).agent!.inventory.get(CLEAN)!.iommuGroup;
    const spec = JSON.parse(await readFile(cdiSpecFile(k.cdiDir, uid), 'utf8'));
    expect(spec.cdiVersion).toBe('0.5.0');
    expect(spec.kind).toBe(`${DRIVER}/pci`);
    expect(spec.containerEdits.env).toEqual([`${VARIABLE}=${CLEAN}`]);
    expect(spec.containerEdits.deviceNodes.map((n: { path: string }) => n.path)).toEqual(['/dev/vfio/vfio']);
    expect(spec.devices).toHaveLength(1);
    expect(spec.devices[0].name).toBe(`${uid}-${CLEAN_NAME}`);
    expect(spec.devices[0].containerEdits.deviceNodes.map((n: { path: string }) => n.path)).toEqual([
      `/dev/vfio/${group}`,
    ]);

    // Two prepares of one claim: the same answer, from the checkpoint, and still one hold.
    api.claims.clear();
    expect(await p.prepare([ref('vm-1', uid)])).toEqual(res);
    expect(api.asked).toHaveLength(1);
    expect((await getDevice(c.client, HOST, CLEAN)).arqUuid).toBe(held.arqUuid);
    await until(h, CLEAN_NAME, HealthStatus.HEALTHY, h.lists.length - 1);

    // The pod writes; then its end: the kubelet unprepares.
    await plantTenantData(c.host(HOST).sim.nvmeStatePath, 'nvme0', spreadTenantWrites(1));
    const before = h.lists.length;
    // Held for the claim, it is healthy for its pod: no list said otherwise since the prepare.
    for (let i = preparing; i < before; i++) expect(healthOf(h, i, CLEAN_NAME)).toBe(HealthStatus.HEALTHY);
    expect((await p.unprepare([ref('vm-1', uid)])).claims[uid]).toEqual({ error: '' });
    await expect(access(cdiSpecFile(k.cdiDir, uid))).rejects.toThrow();
    const unhealthy = await until(h, CLEAN_NAME, HealthStatus.UNHEALTHY, before);
    const healthy = await until(h, CLEAN_NAME, HealthStatus.HEALTHY, unhealthy);
    expect(await readableTenantData(c.host(HOST).sim.nvmeStatePath, 'nvme0')).toEqual([]);
    for (let i = unhealthy; i < healthy; i++) expect(healthOf(h, i, CLEAN_NAME)).toBe(HealthStatus.UNHEALTHY);
    const after = await eventually(
      () => getDevice(c!.client, HOST, CLEAN),
      (d) => d.deviceState === DeviceState.DEVICE_STATE_AVAILABLE,
      15_000,
    );
    expect(after.lastCleanup?.proof?.method).toBeTruthy();
    const certs = await c.client.certificates.listErasureCertificates({
      of: { $case: 'instanceUuid', value: `k8s-dra-${uid}` },
    });
    expect(certs.certificates.length).toBeGreaterThan(0);
    // An unprepare of a claim the plugin does not know (any more) succeeds.
    expect((await p.unprepare([ref('vm-1', uid)])).claims[uid]).toEqual({ error: '' });
    expect((await p.unprepare([ref('never', randomUUID())])).claims).toBeDefined();
    h.close();
    p.close();
  }, 120_000);

  it('holds and releases a claim with a host-client token for its host (decision 90)', async () => {
    k = await DraKubelet.start();
    api = await ApiServerStandIn.start();
    const auth = {
      admin: generateStaticToken(),
      agent: generateStaticToken(),
      plugin: generateStaticToken(),
    };
    c = await start(k, api, { secondClean: true, auth });
    const info = await registered(k);
    const h = k.health(info.endpoint);
    await until(h, CLEAN_NAME, HealthStatus.HEALTHY);
    const p = k.plugin(info.endpoint);
    const uid = randomUUID();
    api.put(resourceClaim('default', 'vm-hc', uid, [ours('nvme', CLEAN_NAME)]));
    // Profiles stay an admin's: until the plugin's own is made, the claim is refused naming the call.
    const first = await p.prepare([ref('vm-hc', uid)]);
    expect(first.claims[uid]!.error).toContain('ProfileService/CreateProfile requires role admin');
    await createClassProfile(c.client, 'k8s-custom-nvme-144d-a824', NVME_CLASS);
    const res = await p.prepare([ref('vm-hc', uid)]);
    expect(res.claims[uid]!.error).toBe('');
    expect((await getDevice(c.client, HOST, CLEAN)).instanceUuid).toBe(`k8s-dra-${uid}`);
    expect((await p.unprepare([ref('vm-hc', uid)])).claims[uid]).toEqual({ error: '' });
    await eventually(
      () => getDevice(c!.client, HOST, CLEAN),
      (d) => d.deviceState === DeviceState.DEVICE_STATE_AVAILABLE,
      30_000,
    );
    h.close();
    p.close();
  }, 120_000);

  it('keeps a prepared claim across an agent restart (v1beta1), answers from the checkpoint, and unprepares after it', async () => {
    k = await DraKubelet.start();
    api = await ApiServerStandIn.start();
    c = await start(k, api, { secondClean: true });
    const info = await registered(k);
    const uid = randomUUID();
    api.put(resourceClaim('default', 'vm-2', uid, [ours('nvme', OTHER_NAME)]));
    const old = k.plugin(info.endpoint, 'v1beta1');
    const first = await old.prepare([ref('vm-2', uid)]);
    expect(first.claims[uid]!.error).toBe('');
    old.close();
    await plantTenantData(c.host(HOST).sim.nvmeStatePath, 'nvme1', spreadTenantWrites(1));

    await c.host(HOST).stop();
    api.claims.clear(); // the agent must not need the API server for what it prepared
    await c.host(HOST).start();
    const again = await registered(k);
    const p = k.plugin(again.endpoint, 'v1beta1');
    expect(await p.prepare([ref('vm-2', uid)])).toEqual(first);
    expect((await getDevice(c.client, HOST, OTHER)).instanceUuid).toBe(`k8s-dra-${uid}`);
    const h = k.health(again.endpoint);
    await until(h, OTHER_NAME, HealthStatus.HEALTHY);

    const before = h.lists.length;
    expect((await p.unprepare([ref('vm-2', uid)])).claims[uid]).toEqual({ error: '' });
    const unhealthy = await until(h, OTHER_NAME, HealthStatus.UNHEALTHY, before);
    await until(h, OTHER_NAME, HealthStatus.HEALTHY, unhealthy);
    expect(await readableTenantData(c.host(HOST).sim.nvmeStatePath, 'nvme1')).toEqual([]);
    const certs = await c.client.certificates.listErasureCertificates({
      of: { $case: 'instanceUuid', value: `k8s-dra-${uid}` },
    });
    expect(certs.certificates.length).toBeGreaterThan(0);
    const checkpoint = JSON.parse(await readFile(k.checkpointFile, 'utf8'));
    expect(checkpoint.claims).toEqual({});
    h.close();
    p.close();
  }, 120_000);

  it('refuses a dirty device, a device a gRPC bind holds, a claim it cannot read; a malformed request is INVALID_ARGUMENT naming the field', async () => {
    k = await DraKubelet.start();
    api = await ApiServerStandIn.start();
    c = await start(k, api, { secondClean: false });
    const info = await registered(k);
    const p = k.plugin(info.endpoint);
    const h = k.health(info.endpoint);
    await until(h, OTHER_NAME, HealthStatus.UNHEALTHY);

    const dirty = randomUUID();
    api.put(resourceClaim('default', 'dirty', dirty, [ours('nvme', OTHER_NAME)]));
    const refused = (await p.prepare([ref('dirty', dirty)])).claims[dirty]!;
    expect(refused.devices).toEqual([]);
    expect(refused.error).toContain(`device ${OTHER}`);
    expect(refused.error).toMatch(/dirty|being cleaned/);
    expect((await getDevice(c.client, HOST, OTHER)).instanceUuid).toBe('');
    await expect(access(cdiSpecFile(k.cdiDir, dirty))).rejects.toThrow();

    // A gRPC (OpenStack-style) bind takes the clean one: Kubernetes must not get it.
    await createClassProfile(c.client, 'nvme', NVME_CLASS);
    const bound = await createAndBind(c.client, 'nvme', 'openstack-vm', HOST);
    expect(bound.deviceAddress).toBe(CLEAN);
    await until(h, CLEAN_NAME, HealthStatus.UNHEALTHY);
    const taken = randomUUID();
    api.put(resourceClaim('default', 'taken', taken, [ours('nvme', CLEAN_NAME)]));
    const res = (await p.prepare([ref('taken', taken)])).claims[taken]!;
    expect(res.error).toContain('openstack-vm');
    expect((await getDevice(c.client, HOST, CLEAN)).instanceUuid).toBe('openstack-vm');
    // Its unprepare (the kubelet gives up on the pod) must not release the OpenStack bind.
    expect((await p.unprepare([ref('taken', taken)])).claims[taken]).toEqual({ error: '' });
    expect((await getDevice(c.client, HOST, CLEAN)).instanceUuid).toBe('openstack-vm');

    // What the API server says otherwise: absent, another object by that name, another pool's device.
    const missing = randomUUID();
    expect((await p.prepare([ref('missing', missing)])).claims[missing]!.error).toContain(
      'ResourceClaim default/missing is not on the API server',
    );
    const renamed = randomUUID();
    api.put(resourceClaim('default', 'renamed', randomUUID(), [ours('nvme', CLEAN_NAME)]));
    expect((await p.prepare([ref('renamed', renamed)])).claims[renamed]!.error).toMatch(/has uid .*, not/);
    const unknown = randomUUID();
    api.put(resourceClaim('default', 'unknown', unknown, [ours('nvme', 'pci-0000-99-00-0')]));
    expect((await p.prepare([ref('unknown', unknown)])).claims[unknown]!.error).toContain(
      'device pci-0000-99-00-0 is not a device Berth cleans',
    );

    // Malformed requests: the whole call is INVALID_ARGUMENT, naming the field.
    const malformed = async (claims: { namespace: string; name: string; uid: string }[], field: string) => {
      const err = (await p.prepare(claims).then(
        () => null,
        (e: ServiceError) => e,
      )) as ServiceError | null;
      expect(err?.code).toBe(3);
      expect(err?.details).toContain(field);
    };
    await malformed([{ namespace: '', name: 'x', uid: randomUUID() }], 'claims[0].namespace');
    await malformed([ref('ok', randomUUID()), ref('Not_A_Name', randomUUID())], 'claims[1].name');
    await malformed([ref('x', '')], 'claims[0].uid');
    await malformed([ref('x', '../../etc/passwd')], 'claims[0].uid');
    const un = await p.unprepare([{ namespace: 'default', name: 'x', uid: '' }]).then(
      () => null,
      (e: ServiceError) => e,
    );
    expect(un?.code).toBe(3);
    expect(un?.details).toContain('claims[0].uid');
    h.close();
    p.close();
  }, 90_000);

  it.skipIf(!available(podmanRunc(), 'a container started by podman from the DRA CDI spec'))(
    "podman with runc starts a container from Berth's CDI device id: it sees KubeVirt's variable and the VFIO nodes",
    async () => {
      k = await DraKubelet.start();
      api = await ApiServerStandIn.start();
      // podman 4.3 reads CDI specs only from /etc/cdi and /var/run/cdi.
      c = await start(k, api, { secondClean: true, cdiDir: '/var/run/cdi' });
      const info = await registered(k);
      const uid = randomUUID();
      api.put(resourceClaim('default', 'vm-3', uid, [ours('nvme', CLEAN_NAME)]));
      const p = k.plugin(info.endpoint);
      const res = await p.prepare([ref('vm-3', uid)]);
      const [cdiId] = res.claims[uid]!.devices[0]!.cdiDeviceIds;
      const specFile = cdiSpecFile('/var/run/cdi', uid);
      const spec = JSON.parse(await readFile(specFile, 'utf8'));
      try {
        await makeSpecNodes(spec);
        const stdout = await podmanWithCdiDevice(cdiId!, uid);
        const group = c.host(HOST).agent!.inventory.get(CLEAN)!.iommuGroup;
        expect(stdout).toContain(`${VARIABLE}=${CLEAN}\n`);
        expect(stdout).toMatch(/^c.* 1, +3 .* vfio$/m);
        expect(stdout).toMatch(new RegExp(`^c.* 1, +3 .* ${group}$`, 'm'));
        expect((await p.unprepare([ref('vm-3', uid)])).claims[uid]).toEqual({ error: '' });
        await expect(access(specFile)).rejects.toThrow();
      } finally {
        await rm(specFile, { force: true });
        p.close();
      }
    },
    180_000,
  );
});
