import { afterEach, describe, expect, it } from 'vitest';
import { KubeApiServerStandIn } from '../../../../test/helpers/kube-apiserver.js';
import { captureLogs } from '../../../../test/helpers/logs.js';
import { eventually } from '../../../../test/helpers/wait.js';
import type { DiscoveredDevice, MediaRecord } from '../../../plugins/types.js';
import { Inventory } from '../inventory.js';
import { resourceApiClient } from './api-server.js';
import { ResourceSlicePublisher } from './slice-publisher.js';
import type { ResourceSlicesConfig } from './slices-config.js';

const record = (over: Partial<MediaRecord> = {}): MediaRecord => ({
  key: 'k',
  condition: 'clean',
  burned: false,
  since: 1,
  lastAddress: '',
  arqUuid: '',
  instanceUuid: '',
  reason: '',
  ...over,
});

const addr = (i: number) => `0000:${(i >> 3).toString(16).padStart(2, '0')}:00.${i & 7}`;
const name = (i: number) => `pci-${addr(i).replace(/[:.]/g, '-')}`;

const device = (i: number, over: Partial<DiscoveredDevice> = {}) =>
  ({
    address: addr(i),
    vendorId: '144d',
    productId: 'a824',
    numaNode: 0,
    iommuGroup: i,
    resourceClass: 'CUSTOM_NVME',
    health: 'healthy',
    healthReason: '',
    supportsCleaning: true,
    unallocatableReason: '',
    media: { key: `nvme:drive-${i}` },
    mediaRecord: record({ key: `nvme:drive-${i}` }),
    ...over,
  }) as DiscoveredDevice;

const CONFIG: ResourceSlicesConfig = {
  driver: 'berth.dev',
  pool: 'h1',
  nodeName: 'node-1',
  resyncMs: 60_000,
  retryMs: 50,
};

describe('ResourceSlice publisher (stand-in API server, @kubernetes/client-node)', () => {
  let api: KubeApiServerStandIn | undefined;
  let pub: ResourceSlicePublisher | undefined;
  afterEach(async () => {
    await pub?.stop();
    await api?.stop();
    pub = undefined;
    api = undefined;
  });

  async function start(
    devices: DiscoveredDevice[],
    config: Partial<ResourceSlicesConfig> = {},
    requestTimeoutMs?: number,
  ) {
    api = await KubeApiServerStandIn.start();
    const inventory = new Inventory();
    inventory.apply(devices);
    const logs = captureLogs();
    const cleaning = new Set<string>();
    pub = new ResourceSlicePublisher({
      config: { ...CONFIG, ...config },
      api: await resourceApiClient({ url: api.url, tokenFile: null, caFile: null }),
      inventory,
      isCleaning: (k) => cleaning.has(k),
      logger: logs.logger,
      ...(requestTimeoutMs ? { requestTimeoutMs } : {}),
    });
    pub.start();
    return { inventory, logs, cleaning };
  }

  const set = (inventory: Inventory, i: number, condition: MediaRecord['condition']) =>
    inventory.update((d) =>
      d.address === addr(i) ? { ...d, mediaRecord: { ...d.mediaRecord!, condition } } : null,
    );
  const writes = () => api!.requests.filter((r) => r.method !== 'GET');
  const generations = () => new Set([...api!.slices.values()].map((s) => s.spec.pool.generation));

  it('publishes the clean devices, withdraws one when it is held and dirty, and brings it back when it is clean again', async () => {
    const { inventory } = await start([
      device(0),
      device(1),
      device(2, { mediaRecord: record({ condition: 'dirty' }) }),
    ]);
    await eventually(
      () => api!.devicesOf('h1'),
      (d) => d.length === 2,
    );
    expect(api!.devicesOf('h1')).toEqual([name(0), name(1)]);
    const [slice] = api!.slices.values();
    expect(slice!.metadata.name).toBe('node-1-berth.dev-0');
    expect(slice!.spec).toMatchObject({
      driver: 'berth.dev',
      nodeName: 'node-1',
      pool: { name: 'h1', generation: 1, resourceSliceCount: 1 },
    });
    expect(writes()).toEqual([
      { method: 'POST', path: '/apis/resource.k8s.io/v1/resourceslices', status: 201 },
    ]);

    set(inventory, 0, 'held');
    await eventually(
      () => api!.devicesOf('h1'),
      (d) => d.length === 1,
    );
    expect(api!.devicesOf('h1')).toEqual([name(1)]);
    expect(generations()).toEqual(new Set([2]));
    set(inventory, 0, 'dirty');
    set(inventory, 2, 'clean');
    await eventually(
      () => api!.devicesOf('h1').join(),
      (d) => d === [name(1), name(2)].join(),
    );
    set(inventory, 0, 'clean');
    await eventually(
      () => api!.devicesOf('h1').join(),
      (d) => d === [name(0), name(1), name(2)].join(),
    );
    expect(writes().every((w) => w.status < 300)).toBe(true);
    expect(
      writes()
        .slice(1)
        .every((w) => w.method === 'PUT'),
    ).toBe(true);

    // A sync with nothing changed writes nothing.
    const before = writes().length;
    const syncs = pub!.syncs;
    pub!.kick();
    await eventually(
      () => pub!.syncs,
      (n) => n > syncs,
    );
    expect(writes().length).toBe(before);
  });

  it('splits a large pool into slices of one generation, and deletes the slices a smaller pool no longer needs', async () => {
    const { inventory } = await start(Array.from({ length: 200 }, (_, i) => device(i)));
    await eventually(
      () => api!.slices.size,
      (n) => n === 2,
    );
    expect([...api!.slices.values()].map((s) => s.spec.devices!.length).sort()).toEqual([128, 72]);
    expect(generations()).toEqual(new Set([1]));
    inventory.apply(Array.from({ length: 10 }, (_, i) => device(i)));
    await eventually(
      () => api!.slices.size,
      (n) => n === 1,
    );
    expect(api!.devicesOf('h1')).toHaveLength(10);
    expect(generations()).toEqual(new Set([2]));
    expect(
      api!.requests.some(
        (r) => r.method === 'DELETE' && r.path.endsWith('node-1-berth.dev-1') && r.status === 200,
      ),
    ).toBe(true);
  });

  it('leaves slices of other pools, drivers and nodes alone', async () => {
    api = await KubeApiServerStandIn.start();
    const other = (n: string, driver: string, nodeName: string, pool: string) => ({
      apiVersion: 'resource.k8s.io/v1',
      kind: 'ResourceSlice',
      metadata: { name: n },
      spec: { driver, nodeName, pool: { name: pool, generation: 5, resourceSliceCount: 1 }, devices: [] },
    });
    api.plant(other('gpu', 'gpu.example.com', 'node-1', 'h1'));
    api.plant(other('elsewhere', 'berth.dev', 'node-2', 'h2'));
    api.plant(other('other-pool', 'berth.dev', 'node-1', 'h9'));
    const inventory = new Inventory();
    inventory.apply([device(0)]);
    pub = new ResourceSlicePublisher({
      config: CONFIG,
      api: await resourceApiClient({ url: api.url, tokenFile: null, caFile: null }),
      inventory,
      isCleaning: () => false,
      logger: captureLogs().logger,
    });
    pub.start();
    await eventually(
      () => api!.devicesOf('h1'),
      (d) => d.length === 1,
    );
    expect([...api.slices.keys()].sort()).toEqual(['elsewhere', 'gpu', 'node-1-berth.dev-0', 'other-pool']);
  });

  it('withdraws a device while it is being cleaned, though its record still says clean', async () => {
    const { inventory, cleaning } = await start([device(0), device(1)]);
    await eventually(
      () => api!.devicesOf('h1'),
      (d) => d.length === 2,
    );
    cleaning.add('nvme:drive-1');
    set(inventory, 1, 'clean'); // no change to the record: the kick comes from the next look
    pub!.kick();
    await eventually(
      () => api!.devicesOf('h1'),
      (d) => d.length === 1,
    );
    expect(api!.devicesOf('h1')).toEqual([name(0)]);
  });

  it('answers a 409 (another writer changed the slice, or created it first) by reading again and retrying', async () => {
    const { inventory, logs } = await start([device(0)]);
    await eventually(
      () => api!.devicesOf('h1'),
      (d) => d.length === 1,
    );
    let raced = false;
    api!.onRequest = (method, n) => {
      if (method === 'PUT' && n && !raced) {
        raced = true;
        api!.touch(n);
      }
    };
    set(inventory, 0, 'held');
    await eventually(
      () => api!.devicesOf('h1'),
      (d) => d.length === 0,
    );
    expect(api!.requests.filter((r) => r.status === 409).map((r) => r.method)).toEqual(['PUT']);
    const failed = await logs.waitFor((l) => l.msg === 'publishing ResourceSlices failed; retrying');
    expect(failed[0]).toMatchObject({ status: 409, error: expect.stringContaining('Conflict') });

    // A create racing Berth's: AlreadyExists, then a replace at the version read.
    api!.onRequest = (method) => {
      if (method === 'POST') {
        api!.onRequest = null;
        api!.plant({
          apiVersion: 'resource.k8s.io/v1',
          kind: 'ResourceSlice',
          metadata: { name: 'node-1-berth.dev-1' },
          spec: {
            driver: 'berth.dev',
            nodeName: 'node-1',
            pool: { name: 'h1', generation: 1, resourceSliceCount: 1 },
            devices: [],
          },
        });
      }
    };
    inventory.apply(Array.from({ length: 130 }, (_, i) => device(i)));
    await eventually(
      () => api!.devicesOf('h1'),
      (d) => d.length === 130,
      15_000,
    );
    expect(api!.requests.filter((r) => r.status === 409).map((r) => r.method)).toEqual(['PUT', 'POST']);
    expect(generations().size).toBe(1);
  });

  it('keeps working while the API server is down, logs and retries, and catches up with what changed meanwhile', async () => {
    const { inventory, logs } = await start([device(0), device(1)]);
    await eventually(
      () => api!.devicesOf('h1'),
      (d) => d.length === 2,
    );
    await api!.down();
    set(inventory, 0, 'held');
    await logs.waitFor((l) => l.msg === 'publishing ResourceSlices failed; retrying', { count: 2 });
    const failed = logs.matching((l) => l.msg === 'publishing ResourceSlices failed; retrying');
    expect(failed[0]).toMatchObject({ status: null, failures: 1, retryInMs: 50 });
    expect(failed[1]).toMatchObject({ failures: 2, retryInMs: 100 });
    // Meanwhile the host moves on: device 1 is held too, device 0 is back.
    set(inventory, 1, 'held');
    set(inventory, 0, 'clean');
    expect(api!.devicesOf('h1')).toEqual([name(0), name(1)]);
    await api!.up();
    await logs.waitFor((l) => l.msg === 'ResourceSlices caught up');
    await eventually(
      () => api!.devicesOf('h1'),
      (d) => d.join() === name(0),
    );
    // One generation, past the one written before the outage (a sync may have caught an interim state on the way).
    expect([...generations()]).toEqual([pub!.generation]);
    expect(pub!.generation).toBeGreaterThan(1);
  });

  it('aborts a call the API server never answers, and retries', async () => {
    const { inventory, logs } = await start([device(0), device(1)], {}, 300);
    await eventually(
      () => api!.devicesOf('h1'),
      (d) => d.length === 2,
    );
    api!.hang = true;
    set(inventory, 0, 'held');
    const [failed] = await logs.waitFor((l) => l.msg === 'publishing ResourceSlices failed; retrying');
    expect(failed).toMatchObject({ status: null, error: expect.stringMatching(/abort/i) });
    api!.hang = false;
    await logs.waitFor((l) => l.msg === 'ResourceSlices caught up');
    await eventually(
      () => api!.devicesOf('h1'),
      (d) => d.join() === name(1),
    );
  });
});
