/**
 * Custody of media across hosts (DESIGN invariant 15, decision 62), end to
 * end: a real scheduler and real agents on simulated hosts, with moves the
 * simulator does not make by itself. Judged from the drive's backing file and
 * from what a second tenant can bind, never from what Berth says of itself.
 *
 * - Issue 38, break 1: a drive and a one-time-use GPU go from host B to host
 *   A, tenant 1 uses both there, A dies, the scheduler's database is deleted
 *   or restored from a copy taken while both were in B, and both go back into
 *   B — in both orders of registration. Tenant 2 never gets the drive with
 *   tenant 1's bytes (they are gone from the backing file before it can bind
 *   it) nor the GPU (held with a custody reason until an operator's release).
 * - Two drives claiming one NQN at once are both held, and neither is cleaned.
 * - A host that booted again: its media's custody broke.
 */
import { copyFile, rm } from 'node:fs/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { type Device, DeviceState, Health } from '../../src/gen/berth/scheduler/v1/device.js';
import type { SimHostDefinition } from '../../src/sim/host.js';
import { plantTenantData, readableTenantData, spreadTenantWrites } from '../../src/sim/nvme-cli/index.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import { expectCode } from '../helpers/errors.js';
import {
  createAndBind,
  createClassProfile,
  getDevice,
  settledDevice,
  uuidRef,
} from '../helpers/invariants.js';
import { eventually } from '../helpers/wait.js';

const A = 'hosta';
const B = 'hostb';
const MIB = 1 << 20;
const NVME_CLASS = 'CUSTOM_NVME_144D_A824';
const GPU_CLASS = 'CUSTOM_PCI_10DE_25B6';
const GPU = '0000:65:00.0';
const GPU_FUNCTION = {
  address: GPU,
  vendorId: '10de',
  productId: '25b6',
  classCode: '030200',
  driver: 'vfio-pci',
  deviceSerialNumber: 'a0-b1-c2-d3-e4-f5-06-17',
};
/** The drive that travels, at 01:00.0 as nvme0 on either host. */
const DRIVE = '0000:01:00.0';

const drive = (serial: string, address: string, controller: string, nqn?: string) => ({
  address,
  vendorId: '144d',
  productId: 'a824',
  controller,
  serial,
  model: 'PM1733 (simulated)',
  caps: { ces: true },
  namespaces: [{ nsid: 1, sizeBytes: MIB }],
  sanitizeMs: 200,
  ...(nqn ? { subsysnqn: nqn } : {}),
});

/**
 * Host B holds the travelling drive and the GPU; host A has a drive of its
 * own at 02:00.0 (its NVMe driver runs) and a free slot at 01:00.0. The
 * fleet's device_spec declares the drives and the GPU clean at first sight
 * (assume_clean: for the GPU, that it is unused), so that custody, not
 * first sight, is what is tested.
 */
function definitions(): SimHostDefinition[] {
  const common = {
    pciDeviceSpec: [
      { vendor_id: '10de', product_id: '25b6', managed: false, one_time_use: true, assume_clean: true },
    ],
    nvmeDeviceSpec: [{ vendor_id: '144d', assume_clean: true }],
  };
  return [
    { host: A, pci: { functions: [] }, nvme: [drive('SER-LOCAL', '0000:02:00.0', 'nvme1')], ...common },
    { host: B, pci: { functions: [GPU_FUNCTION] }, nvme: [drive('SER-A', DRIVE, 'nvme0')], ...common },
  ];
}

const isAllocatable = (d: Device | null) => d?.allocatable === true;
/** The scheduler's last word from the device's host: seen by its last discovery (a device gone is unhealthy). */
const isPresent = (d: Device | null): d is Device => d?.health === Health.HEALTH_HEALTHY;

describe('custody of media across hosts', { timeout: 120_000 }, () => {
  let c: Cluster;
  afterEach(async () => {
    await c?.stop();
  });

  /** A device as the scheduler has it now, or null. */
  const maybe = (host: string, address: string) => getDevice(c.client, host, address).catch(() => null);

  /** Waits until the scheduler sees the device on `host` present, and returns it. */
  const present = (host: string, address: string) =>
    eventually(() => maybe(host, address), isPresent, 20_000) as Promise<Device>;

  /**
   * Moves the drive and the GPU from one host's sysfs to the other's; when
   * the first host's agent runs, once the scheduler has seen them leave it.
   */
  async function carry(from: string, to: string) {
    const d = await c.host(from).sim.detachNvme('nvme0');
    await c.host(from).sim.sysfs.removeFunction(GPU);
    if (c.host(from).agent) {
      for (const address of [DRIVE, GPU]) {
        await eventually(
          () => maybe(from, address),
          (x) => x !== null && !isPresent(x),
          15_000,
        );
      }
    }
    await c.host(to).sim.insertNvme(d, { address: DRIVE, controller: 'nvme0' });
    await c.host(to).sim.sysfs.addFunction(GPU_FUNCTION);
  }

  async function release(host: string, address: string) {
    const d = await getDevice(c.client, host, address);
    await c.client.devices.releaseDevice({ device: uuidRef(d.uuid), generation: d.generation });
  }

  /**
   * Both live in B, whose journal says the drive is clean (declared, so that
   * its first certificate is A's: one chain per media across hosts is
   * another change of issue 38); both move to A; tenant 1 binds both there
   * and writes to the drive; A dies.
   */
  async function tenantOneOnA(): Promise<string> {
    c = await startCluster(definitions());
    await c.waitForDevices(B, 2);
    await createClassProfile(c.client, 'nvme', NVME_CLASS);
    await createClassProfile(c.client, 'gpu', GPU_CLASS);
    expect((await getDevice(c.client, B, DRIVE)).allocatable).toBe(true);
    const snapshot = `${c.dbPath}.both-in-b`;
    await copyFile(c.dbPath, snapshot);

    await carry(B, A);
    // On A the drive is of unknown history (custody changed hands): scrubbed before its offer.
    // The GPU is held for an operator, who releases it.
    const gpuOnA = await present(A, GPU);
    expect([gpuOnA.burned, gpuOnA.allocatable]).toEqual([true, false]);
    // Either record may say it first: the scheduler (custody changed hands) or A's agent (a
    // one-time-use media it first saw after its first discovery, with no record).
    expect(gpuOnA.unallocatableReason).toMatch(
      new RegExp(
        `custody changed: ${A} reports it after ${B} did|the agent of host ${A}: one-time-use media seen with no record`,
      ),
    );
    await release(A, GPU);
    await eventually(() => maybe(A, DRIVE), isAllocatable, 30_000);
    await eventually(() => maybe(A, GPU), isAllocatable, 10_000);
    const t1Drive = await createAndBind(c.client, 'nvme', 'tenant-1', A);
    const t1Gpu = await createAndBind(c.client, 'gpu', 'tenant-1', A);
    expect([t1Drive.deviceAddress, t1Gpu.deviceAddress].sort()).toEqual([DRIVE, GPU].sort());
    await plantTenantData(c.host(A).sim.nvmeStatePath, 'nvme0', spreadTenantWrites(1));
    expect(await readableTenantData(c.host(A).sim.nvmeStatePath, 'nvme0')).not.toEqual([]);
    await c.host(A).stop();
    return snapshot;
  }

  /** The scheduler's database is deleted, or replaced by `snapshot`. */
  async function loseDatabase(snapshot: string | null) {
    await c.scheduler.stop();
    for (const suffix of ['', '-wal', '-shm']) await rm(`${c.dbPath}${suffix}`, { force: true });
    if (snapshot) await copyFile(snapshot, c.dbPath);
    await c.restartScheduler();
    // A deleted database lost the profiles too (a restored one has them).
    await createClassProfile(c.client, 'nvme', NVME_CLASS).catch(() => {});
    await createClassProfile(c.client, 'gpu', GPU_CLASS).catch(() => {});
  }

  /**
   * What tenant 2 gets on B: it tries the drive until it has it, and at that
   * moment the backing file holds none of tenant 1's bytes; the GPU it never
   * gets until an operator releases it.
   */
  async function tenantTwoOnB(custodyReason: boolean) {
    const gpu = await present(B, GPU);
    expect([gpu.burned, gpu.allocatable]).toEqual([true, false]);
    if (custodyReason)
      expect(gpu.unallocatableReason).toMatch(/held for an operator's release.*custody broke/);
    await expectCode(
      createAndBind(c.client, 'gpu', 'tenant-2', B),
      'FAILED_PRECONDITION',
      'NO_ALLOCATABLE_DEVICE',
    );

    await present(B, DRIVE);
    const state = c.host(B).sim.nvmeStatePath;
    const got = await eventually(
      () => createAndBind(c.client, 'nvme', 'tenant-2', B).catch(() => null),
      (arq) => arq !== null,
      30_000,
    ).catch(() => null);
    if (got) {
      // Bound: nothing cleans an allocated drive, so what the file holds now is what tenant 2 got.
      expect(got.deviceAddress).toBe(DRIVE);
      expect(await readableTenantData(state, 'nvme0')).toEqual([]);
    } else {
      // Never offered: its scrub ran (the bytes are gone) but the certificate of B's chain
      // follows A's link (issue 38, break 3: one chain per media across hosts, another change).
      const d = await settledDevice(c.client, B, DRIVE);
      expect(d.deviceState).toBe(DeviceState.DEVICE_STATE_ERROR);
      expect(await readableTenantData(state, 'nvme0')).toEqual([]);
    }
    await c.client.arqs.deleteAcceleratorRequests({ uuids: [], instanceUuid: 'tenant-2' });
    // Only an operator's release gives the GPU out again.
    await release(B, GPU);
    const t2Gpu = await createAndBind(c.client, 'gpu', 'tenant-2-gpu', B);
    expect(t2Gpu.deviceAddress).toBe(GPU);
  }

  for (const restored of [false, true]) {
    const db = restored ? 'restored from a copy taken while both were in B' : 'deleted';
    it(`database ${db}; B registers before A comes back: the drive is scrubbed before tenant 2 gets it, the GPU held`, async () => {
      const snapshot = await tenantOneOnA();
      await loseDatabase(restored ? snapshot : null);
      // Both go back into B, whose agent runs (it registers with the scheduler at once).
      await carry(A, B);
      await tenantTwoOnB(true);
      // A comes back and reports what its journal holds; the GPU stays with tenant 2.
      await c.host(A).start();
      await c.waitForDevices(A, 1);
      expect((await getDevice(c.client, B, GPU)).instanceUuid).toBe('tenant-2-gpu');
    });

    it(`database ${db}; A comes back first: the drive is scrubbed before tenant 2 gets it, the GPU held`, async () => {
      const snapshot = await tenantOneOnA();
      await c.host(B).stop();
      await loseDatabase(restored ? snapshot : null);
      await carry(A, B);
      await c.host(A).start();
      await c.host(B).start();
      await tenantTwoOnB(false);
    });
  }

  it('two drives claiming one NQN at once are both held, with a reason naming both, and neither is cleaned; the one left is scrubbed', async () => {
    const nqn = 'nqn.2014-08.org.example:generic-firmware';
    const common = {
      pci: { functions: [] },
      pciDeviceSpec: [],
      nvmeDeviceSpec: [{ vendor_id: '144d', assume_clean: true }],
    };
    c = await startCluster([
      { host: A, nvme: [drive('SER-ONE', DRIVE, 'nvme0', nqn)], ...common },
      { host: B, nvme: [drive('SER-TWO', DRIVE, 'nvme0', nqn)], ...common },
    ]);
    await createClassProfile(c.client, 'nvme', NVME_CLASS);
    await plantTenantData(c.host(A).sim.nvmeStatePath, 'nvme0', spreadTenantWrites(1));
    for (const host of [A, B]) {
      const d = await eventually(
        () => getDevice(c.client, host, DRIVE),
        (x) => x.unallocatableReason.includes('two different media claim key'),
        15_000,
      );
      expect(d.allocatable).toBe(false);
      expect(d.unallocatableReason).toContain(
        `${A} ${DRIVE} and ${B} ${DRIVE} differ in serial SER-ONE and SER-TWO`,
      );
      expect(d.deviceState).toBe(DeviceState.DEVICE_STATE_AVAILABLE);
    }
    for (const host of [A, B]) {
      await expectCode(
        createAndBind(c.client, 'nvme', `t-${host}`, host),
        'FAILED_PRECONDITION',
        'NO_ALLOCATABLE_DEVICE',
      );
    }
    // Never cleaned while both claim the key: a cleanup of one would mark both clean.
    expect(await readableTenantData(c.host(A).sim.nvmeStatePath, 'nvme0')).not.toEqual([]);
    // B's is pulled: A's is of unknown history, scrubbed before it is offered.
    await c.host(B).sim.detachNvme('nvme0');
    await eventually(() => maybe(A, DRIVE), isAllocatable, 30_000);
    expect(await readableTenantData(c.host(A).sim.nvmeStatePath, 'nvme0')).toEqual([]);
  });

  it('a host that booted again: its drive is scrubbed and its GPU held; an agent restart on the same boot keeps custody', async () => {
    c = await startCluster([definitions()[1]!]);
    await c.waitForDevices(B, 2);
    await createClassProfile(c.client, 'gpu', GPU_CLASS);
    const before = await getDevice(c.client, B, DRIVE);
    expect([before.allocatable, (await getDevice(c.client, B, GPU)).allocatable]).toEqual([true, true]);
    // The agent restarts on the same boot: nothing changes.
    await c.host(B).stop();
    await c.host(B).start();
    const same = await eventually(
      () => maybe(B, GPU),
      (d) => isPresent(d) && d.allocatable,
      10_000,
    );
    expect(same?.burned).toBe(false);
    const drive = await getDevice(c.client, B, DRIVE);
    expect([drive.allocatable, drive.lastCleanup]).toEqual([true, before.lastCleanup]);

    // The host is off; meanwhile someone writes to the drive; it boots again.
    await c.host(B).stop();
    await plantTenantData(c.host(B).sim.nvmeStatePath, 'nvme0', spreadTenantWrites(1));
    await c.host(B).sim.reboot();
    await c.host(B).start();
    const gpu = await eventually(
      () => maybe(B, GPU),
      (d) => d?.burned === true,
      10_000,
    );
    expect(gpu?.unallocatableReason).toContain('the host started again');
    await expectCode(
      createAndBind(c.client, 'gpu', 'tenant-2', B),
      'FAILED_PRECONDITION',
      'NO_ALLOCATABLE_DEVICE',
    );
    await eventually(
      () => maybe(B, DRIVE),
      (x) => isAllocatable(x) && Boolean(x?.lastCleanup?.proof?.method),
      30_000,
    );
    expect(await readableTenantData(c.host(B).sim.nvmeStatePath, 'nvme0')).toEqual([]);
  });
});
