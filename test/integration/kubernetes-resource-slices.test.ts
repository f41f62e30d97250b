/**
 * This host's ResourceSlices (issue 39, decision 76), end to end: a real
 * scheduler and agent on loopback, the agent publishing through
 * @kubernetes/client-node to a stand-in API server (test/helpers/kube-apiserver.ts,
 * which validates every object against Kubernetes' own schema). Judged from
 * the media (the simulator's backing files) at the moment a slice brings a
 * device back, and from the scheduler's record.
 */
import { createHash } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import type { SimHostDefinition } from '../../src/sim/host.js';
import { plantTenantData, readableTenantData, spreadTenantWrites } from '../../src/sim/nvme-cli/index.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import { createAndBind, createClassProfile, getDevice, settledDevice } from '../helpers/invariants.js';
import { KubeApiServerStandIn, type StoredSlice } from '../helpers/kube-apiserver.js';
import { eventually } from '../helpers/wait.js';

const HOST = 'k8s-host';
const MIB = 1 << 20;
const FIRST = '0000:01:00.0';
const SECOND = '0000:02:00.0';
const NVME_CLASS = 'CUSTOM_NVME_144D_A824';
const name = (address: string) => `pci-${address.replace(/[:.]/g, '-')}`;

function definition(): SimHostDefinition {
  const drive = { vendorId: '144d', productId: 'a824', model: 'PM1733 (simulated)', caps: { ces: true } };
  return {
    host: HOST,
    pci: { functions: [] },
    pciDeviceSpec: [],
    nvme: [
      {
        ...drive,
        serial: 'SER-A',
        address: FIRST,
        controller: 'nvme0',
        sanitizeMs: 200,
        namespaces: [{ nsid: 1, sizeBytes: MIB }],
      },
      {
        ...drive,
        serial: 'SER-B',
        address: SECOND,
        controller: 'nvme1',
        sanitizeMs: 200,
        namespaces: [{ nsid: 1, sizeBytes: MIB }],
      },
    ],
    nvmeDeviceSpec: [
      { vendor_id: '144d', address: FIRST, assume_clean: true },
      { vendor_id: '144d', address: SECOND, assume_clean: true },
    ],
  };
}

describe("the agent's ResourceSlices", () => {
  let c: Cluster | undefined;
  let api: KubeApiServerStandIn | undefined;
  afterEach(async () => {
    await c?.stop();
    await api?.stop();
    c = undefined;
    api = undefined;
  });

  async function start(): Promise<Cluster> {
    api = await KubeApiServerStandIn.start();
    const url = api.url;
    const cluster = await startCluster([definition()], {
      agentConfig: (raw) => ({
        ...raw,
        kubernetes: {
          api_server: { url },
          resource_slices: { enabled: true, driver: 'berth.dev', resync_interval: 1, retry_interval: 0.05 },
        },
      }),
    });
    await cluster.waitForDevices(HOST, 2);
    await createClassProfile(cluster.client, 'nvme', NVME_CLASS);
    return cluster;
  }

  it("withdraws a tenant's device and publishes it again only after the scrub's proof, its bytes gone", async () => {
    c = await start();
    const writes: { devices: string[]; tenantBytes: number }[] = [];
    api!.beforeWrite = async (s: StoredSlice) => {
      const devices = (s.spec.devices ?? []).map((d) => d.name);
      // What the media holds at the moment a slice offers the device.
      const tenantBytes = devices.includes(name(FIRST))
        ? (await readableTenantData(c!.host(HOST).sim.nvmeStatePath, 'nvme0')).length
        : 0;
      writes.push({ devices, tenantBytes });
    };
    await eventually(
      () => api!.devicesOf(HOST),
      (d) => d.length === 2,
      15_000,
    );
    const [slice] = api!.slices.values();
    expect(slice!.spec.nodeName).toBe(HOST);
    expect(slice!.spec.devices![0]!.attributes).toMatchObject({
      'resource.kubernetes.io/pciBusID': { string: FIRST },
      vendor: { string: '144d' },
      product: { string: 'a824' },
      resourceClass: { string: NVME_CLASS },
    });
    // A simulated drive's key (nvme:<subsystem NQN>) is longer than 64 bytes: published by its digest only.
    const key = c.host(HOST).agent!.inventory.get(FIRST)!.media!.key;
    expect(Buffer.byteLength(key)).toBeGreaterThan(64);
    expect(slice!.spec.devices![0]!.attributes!.mediaKey).toBeUndefined();
    expect(slice!.spec.devices![0]!.attributes!.mediaKeySha256).toEqual({
      string: createHash('sha256').update(key).digest('hex'),
    });

    const bound = await createAndBind(c.client, 'nvme', 'vm-1', HOST);
    expect(bound.deviceAddress).toBe(FIRST);
    await eventually(
      () => api!.devicesOf(HOST),
      (d) => d.join() === name(SECOND),
      15_000,
    );
    const withdrawn = writes.length;
    await plantTenantData(c.host(HOST).sim.nvmeStatePath, 'nvme0', spreadTenantWrites(1));

    await c.client.arqs.deleteAcceleratorRequests({ uuids: [bound.uuid], instanceUuid: '' });
    await eventually(
      () => api!.devicesOf(HOST),
      (d) => d.length === 2,
      30_000,
    );
    const back = writes.findIndex((w, i) => i >= withdrawn && w.devices.includes(name(FIRST)));
    expect(writes.slice(withdrawn - 1, back).every((w) => !w.devices.includes(name(FIRST)))).toBe(true);
    expect(writes[back]!.tenantBytes).toBe(0);
    expect(await readableTenantData(c.host(HOST).sim.nvmeStatePath, 'nvme0')).toEqual([]);
    const after = await settledDevice(c.client, HOST, FIRST);
    expect(after.lastCleanup?.proof?.method).toBeTruthy();
    const certs = await c.client.certificates.listErasureCertificates({
      of: { $case: 'instanceUuid', value: 'vm-1' },
    });
    expect(certs.certificates.length).toBeGreaterThan(0);
    expect(api!.requests.every((r) => r.status < 400)).toBe(true);
  }, 90_000);

  it('keeps binding while the API server is down, and the slices catch up when it is back', async () => {
    c = await start();
    await eventually(
      () => api!.devicesOf(HOST),
      (d) => d.length === 2,
      15_000,
    );
    await api!.down();
    const bound = await createAndBind(c.client, 'nvme', 'vm-2', HOST);
    expect((await getDevice(c.client, HOST, bound.deviceAddress)).instanceUuid).toBe('vm-2');
    expect(api!.devicesOf(HOST)).toHaveLength(2);
    await api!.up();
    const other = bound.deviceAddress === FIRST ? SECOND : FIRST;
    await eventually(
      () => api!.devicesOf(HOST),
      (d) => d.join() === name(other),
      15_000,
    );
    const generations = new Set([...api!.slices.values()].map((s) => s.spec.pool.generation));
    expect(generations.size).toBe(1);
    expect([...generations][0]).toBeGreaterThan(1);
  }, 60_000);
});
