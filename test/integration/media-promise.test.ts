/**
 * The promise, end to end (DESIGN invariants 11–13, docs/media-identity.md):
 * a real scheduler and real agents on simulated hosts, with inputs the
 * simulator does not produce by itself — a drive put back in another slot
 * while its host was down, one NVM subsystem reached through two controllers,
 * a burned card whose scheduler database is lost or rolled back. Every verdict
 * is judged from the media (the simulator's backing files) and from what a
 * next tenant could bind, not from what Berth says of itself.
 */
import { copyFile, rm } from 'node:fs/promises';
import { credentials } from '@grpc/grpc-js';
import { afterEach, describe, expect, it } from 'vitest';
import { type Device, DeviceState } from '../../src/gen/berth/scheduler/v1/device.js';
import {
  DeviceServiceClient,
  type WatchDevicesResponse,
} from '../../src/gen/berth/scheduler/v1/device_service.js';
import type { SimHostDefinition } from '../../src/sim/host.js';
import { plantTenantData, readableTenantData, spreadTenantWrites } from '../../src/sim/nvme-cli/index.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import { expectCode } from '../helpers/errors.js';
import {
  createAndBind,
  createClassProfile,
  expectInvariant1,
  getDevice,
  settledDevice,
  stateName,
} from '../helpers/invariants.js';
import { eventually } from '../helpers/wait.js';

const HOST = 'media-host';
const MIB = 1 << 20;
const NVME_CLASS = 'CUSTOM_NVME_144D_A824';
const GPU_CLASS = 'CUSTOM_PCI_10DE_25B6';

/** One NVMe drive (or a dual-port one: two controllers of one subsystem) and a one-time-use GPU with a DSN. */
function definition(opts: { dualPort?: boolean } = {}): SimHostDefinition {
  const drive = {
    vendorId: '144d',
    productId: 'a824',
    serial: 'SER-A',
    model: 'PM1733 (simulated)',
    caps: { ces: true },
    sanitizeMs: 300,
  };
  return {
    host: HOST,
    pci: {
      functions: [
        {
          address: '0000:65:00.0',
          vendorId: '10de',
          productId: '25b6',
          classCode: '030200',
          driver: 'vfio-pci',
          deviceSerialNumber: 'a0-b1-c2-d3-e4-f5-06-17',
        },
      ],
    },
    nvme: opts.dualPort
      ? [
          {
            ...drive,
            address: '0000:01:00.0',
            controller: 'nvme0',
            subsystem: 0,
            cntlid: 1,
            namespaces: [{ nsid: 1, sizeBytes: MIB }],
          },
          { ...drive, address: '0000:02:00.0', controller: 'nvme1', subsystem: 0, cntlid: 2, namespaces: [] },
        ]
      : [
          {
            ...drive,
            address: '0000:01:00.0',
            controller: 'nvme0',
            namespaces: [{ nsid: 1, sizeBytes: MIB }],
          },
        ],
    // The GPU is unused at first sight: without assume_clean, a one-time-use device with no record is held.
    pciDeviceSpec: [
      { vendor_id: '10de', product_id: '25b6', managed: false, one_time_use: true, assume_clean: true },
    ],
    // Declared clean at first sight, so the test's first tenant can be bound at once.
    nvmeDeviceSpec: [{ vendor_id: '144d', assume_clean: true }],
  };
}

/** Every state a device at `address` is seen in, by WatchDevices, from now on. */
function watchStates(endpoint: string, address: string) {
  const seen: Device[] = [];
  const raw = new DeviceServiceClient(endpoint, credentials.createInsecure());
  const stream = raw.watchDevices({ filter: undefined, fromRevision: 0 });
  stream.on('data', (m: WatchDevicesResponse) => {
    if (m.device?.address === address && m.device.host === HOST) {
      expectInvariant1(m.device);
      seen.push(m.device);
    }
  });
  stream.on('error', () => {});
  return {
    seen,
    stop: () => {
      stream.cancel();
      raw.close();
    },
  };
}

/** Whether a record was offered (allocatable) before its media's cleanup was proven. */
const offeredDirty = (seen: Device[]) => {
  let cleaned = false;
  for (const d of seen) {
    if (d.lastCleanup?.outcome === 1 /* SUCCEEDED */ && d.lastCleanup.proof?.method) cleaned = true;
    if (d.allocatable && !cleaned) return d;
  }
  return null;
};

describe('tenant data follows the media, end to end', () => {
  let c: Cluster;
  afterEach(async () => {
    await c?.stop();
  });

  it('a dirty drive put back in another slot while its host was down is cleaned before anyone can bind it', async () => {
    c = await startCluster([definition()]);
    await c.waitForDevices(HOST, 2);
    const sim = c.host(HOST).sim;
    await createClassProfile(c.client, 'nvme', NVME_CLASS);
    await createAndBind(c.client, 'nvme', 'tenant-1', HOST);
    await plantTenantData(sim.nvmeStatePath, 'nvme0', spreadTenantWrites(1));
    expect(await readableTenantData(sim.nvmeStatePath, 'nvme0')).not.toEqual([]);

    // The host goes down; the tenant's instance is deleted meanwhile (the device waits, reserved).
    await c.host(HOST).stop();
    await c.client.arqs.deleteAcceleratorRequests({ uuids: [], instanceUuid: 'tenant-1' });
    expect(stateName((await getDevice(c.client, HOST, '0000:01:00.0')).deviceState)).toBe(
      'DEVICE_STATE_PENDING_CLEANING',
    );
    // The drive goes back in another slot, with the tenant's bytes on it.
    await sim.moveNvme('nvme0', '0000:06:00.0');
    expect(await readableTenantData(sim.nvmeStatePath, 'nvme0')).not.toEqual([]);

    const watch = watchStates(c.scheduler.address, '0000:06:00.0');
    await c.host(HOST).start();
    // A next tenant tries at once: nothing dirty may be handed out.
    const early = await createAndBind(c.client, 'nvme', 'tenant-2', HOST).then(
      (arq) => arq,
      () => null,
    );
    const moved = await eventually(
      () => getDevice(c.client, HOST, '0000:06:00.0').catch(() => null),
      (d) =>
        d !== null &&
        (d.deviceState === DeviceState.DEVICE_STATE_AVAILABLE ||
          d.deviceState === DeviceState.DEVICE_STATE_ALLOCATED) &&
        d.lastCleanup?.proof?.method !== undefined &&
        d.lastCleanup.proof.method !== '',
      30_000,
    );
    watch.stop();
    // Cleaned with proof before it was offered, and the media holds no tenant byte.
    expect(offeredDirty(watch.seen)).toBeNull();
    expect(moved!.media?.key).toBe((await getDevice(c.client, HOST, '0000:01:00.0')).media?.key);
    expect(await readableTenantData(sim.nvmeStatePath, 'nvme0')).toEqual([]);
    if (early) {
      // Bound only after the cleanup: the bind waited behind the cleanup, never got the dirty media.
      expect(early.deviceAddress).not.toBe('0000:01:00.0');
    }
    // The empty slot it left can no longer be cleaned: its record goes to error, never available.
    const old = await settledDevice(c.client, HOST, '0000:01:00.0');
    expect(stateName(old.deviceState)).toBe('DEVICE_STATE_ERROR');
  });

  it('two controllers of one NVM subsystem: the second is never given to another tenant, and the shared media is cleaned before either is offered again', async () => {
    c = await startCluster([definition({ dualPort: true })]);
    await c.waitForDevices(HOST, 3);
    const sim = c.host(HOST).sim;
    await createClassProfile(c.client, 'nvme', NVME_CLASS);
    const first = await createAndBind(c.client, 'nvme', 'tenant-1', HOST);
    await plantTenantData(sim.nvmeStatePath, 'nvme0', spreadTenantWrites(1));
    const addresses = ['0000:01:00.0', '0000:02:00.0'];
    const mine = first;
    const sibling = addresses.find((a) => a !== mine.deviceAddress)!;
    const s = await getDevice(c.client, HOST, sibling);
    expect([s.allocatable, s.reserved]).toEqual([false, 1]);
    expect(s.unallocatableReason).toContain(`held through ${HOST} ${mine.deviceAddress}`);
    await expectCode(
      createAndBind(c.client, 'nvme', 'tenant-2', HOST),
      'FAILED_PRECONDITION',
      'NO_ALLOCATABLE_DEVICE',
    );

    await c.client.arqs.deleteAcceleratorRequests({ uuids: [], instanceUuid: 'tenant-1' });
    const released = await settledDevice(c.client, HOST, mine.deviceAddress);
    expect(stateName(released.deviceState)).toBe('DEVICE_STATE_AVAILABLE');
    expect(await readableTenantData(sim.nvmeStatePath, 'nvme0')).toEqual([]);
    const second = await createAndBind(c.client, 'nvme', 'tenant-2', HOST);
    expect(addresses).toContain(second.deviceAddress);
  });

  it("a burned card stays burned when the scheduler's database is lost, or rolled back to before the burn", async () => {
    c = await startCluster([definition()]);
    await c.waitForDevices(HOST, 2);
    await createClassProfile(c.client, 'gpu', GPU_CLASS);
    const before = `${c.dbPath}.before-burn`;
    await copyFile(c.dbPath, before);
    await createAndBind(c.client, 'gpu', 'tenant-1', HOST);
    await c.client.arqs.deleteAcceleratorRequests({ uuids: [], instanceUuid: 'tenant-1' });
    expect((await getDevice(c.client, HOST, '0000:65:00.0')).burned).toBe(true);

    const burnedAfterRestart = async () => {
      await c.waitForDevices(HOST, 2);
      const gpu = await eventually(
        () => getDevice(c.client, HOST, '0000:65:00.0'),
        (d) => d.burned,
        15_000,
      );
      expect(gpu.allocatable).toBe(false);
      await createClassProfile(c.client, 'gpu', GPU_CLASS).catch(() => {});
      await expectCode(
        createAndBind(c.client, 'gpu', 'tenant-2', HOST),
        'FAILED_PRECONDITION',
        'NO_ALLOCATABLE_DEVICE',
      );
    };

    // Rolled back: an older copy of the database, from before the bind.
    await c.scheduler.stop();
    for (const suffix of ['', '-wal', '-shm']) await rm(`${c.dbPath}${suffix}`, { force: true });
    await copyFile(before, c.dbPath);
    await c.restartScheduler();
    await burnedAfterRestart();

    // Lost altogether.
    await c.scheduler.stop();
    for (const suffix of ['', '-wal', '-shm']) await rm(`${c.dbPath}${suffix}`, { force: true });
    await c.restartScheduler();
    await burnedAfterRestart();

    // Only an operator's release un-burns it, in both records.
    const gpu = await getDevice(c.client, HOST, '0000:65:00.0');
    const { device } = await c.client.devices.releaseDevice({
      device: { ref: { $case: 'uuid', value: gpu.uuid } },
      generation: gpu.generation,
    });
    expect(device?.burned).toBe(false);
    await c.host(HOST).stop();
    await c.host(HOST).start();
    await c.waitForDevices(HOST, 2);
    expect((await getDevice(c.client, HOST, '0000:65:00.0')).burned).toBe(false);
  });
});
