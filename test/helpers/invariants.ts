/**
 * Checks and small builders shared by the fault and crash tests: invariant 1
 * on every device a test touches, and profiles that pick one specific simulated NVMe
 * controller by its capability traits (so a test knows which device it binds).
 */
import { expect } from 'vitest';
import { BerthClientError, type SchedulerClient } from '../../src/client/sdk.js';
import type { Device } from '../../src/gen/berth/scheduler/v1/device.js';
import { DeviceState } from '../../src/gen/berth/scheduler/v1/device.js';
import { LiveMigratable } from '../../src/gen/berth/scheduler/v1/profile.js';
import type { SimHostDefinition } from '../../src/sim/host.js';
import { eventually } from './wait.js';

export const noFilter = { host: '', type: 0, state: 0, resourceClass: '' };

export const stateName = (s: DeviceState): string => DeviceState[s] ?? String(s);

/** Invariant 1: reserved = total exactly when the device is not allocatable. */
export function expectInvariant1(devices: Device | Device[]): void {
  for (const d of Array.isArray(devices) ? devices : [devices]) {
    const summary = `${d.host} ${d.address} ${stateName(d.deviceState)} burned=${d.burned} reserved=${d.reserved}/${d.total} allocatable=${d.allocatable} (${d.unallocatableReason})`;
    expect(d.total, summary).toBe(1);
    expect(d.reserved === d.total, `invariant 1: ${summary}`).toBe(!d.allocatable);
    // allocatable implies the state machine's own conditions.
    if (d.allocatable) {
      expect(d.deviceState, summary).toBe(DeviceState.DEVICE_STATE_AVAILABLE);
      expect(d.burned, summary).toBe(false);
    }
  }
}

/** Every device of a host (or all), checked for invariant 1 on the way. */
export async function listChecked(client: SchedulerClient, host = ''): Promise<Device[]> {
  const { devices } = await client.devices.listDevices({
    filter: { ...noFilter, host },
    pageSize: 0,
    pageToken: '',
  });
  expectInvariant1(devices);
  return devices;
}

export async function getDevice(client: SchedulerClient, host: string, address: string): Promise<Device> {
  const { device } = await client.devices.getDevice({
    device: { ref: { $case: 'hostAddress', value: { host, address } } },
  });
  if (!device) throw new Error(`GetDevice ${host} ${address} returned no device`);
  expectInvariant1(device);
  return device;
}

/** The device, or undefined while the scheduler does not know it (NOT_FOUND: its inventory not applied yet). */
export async function knownDevice(
  client: SchedulerClient,
  host: string,
  address: string,
): Promise<Device | undefined> {
  try {
    return await getDevice(client, host, address);
  } catch (err) {
    if (err instanceof BerthClientError && err.codeName === 'NOT_FOUND') return undefined;
    throw err;
  }
}

/**
 * Waits until a device's cleanup has settled — available or error — and
 * returns it (checked against invariant 1 on every read). A device the
 * scheduler does not know yet (NOT_FOUND: its agent registered, its inventory
 * not applied yet) is waited for like an unsettled one.
 */
export async function settledDevice(
  client: SchedulerClient,
  host: string,
  address: string,
  timeoutMs = 30_000,
): Promise<Device> {
  const d = await eventually(
    async () => (await knownDevice(client, host, address)) ?? `${host} ${address} not found yet`,
    (v) =>
      typeof v !== 'string' &&
      (v.deviceState === DeviceState.DEVICE_STATE_AVAILABLE ||
        v.deviceState === DeviceState.DEVICE_STATE_ERROR),
    timeoutMs,
  );
  return d as Device;
}

export const uuidRef = (uuid: string) => ({ ref: { $case: 'uuid' as const, value: uuid } });

/**
 * Traits that single out each controller of demoHostDefinition: nvme0 is the
 * only one with crypto erase, nvme1 has block erase without it, nvme2 only write
 * zeroes, nvme3 nothing (shred).
 */
export const NVME_PICK = {
  nvme0: { required: ['HW_NVME_CES'], forbidden: [] },
  nvme1: { required: ['HW_NVME_BES'], forbidden: ['HW_NVME_CES'] },
  nvme2: { required: ['HW_NVME_WZS'], forbidden: ['HW_NVME_CES', 'HW_NVME_BES'] },
  nvme3: { required: [], forbidden: ['HW_NVME_CES', 'HW_NVME_BES', 'HW_NVME_WZS'] },
} as const;

export type NvmeName = keyof typeof NVME_PICK;

/** A profile named `pick-<ctrl>` that matches exactly that demo controller. */
export async function createNvmeProfile(client: SchedulerClient, ctrl: NvmeName): Promise<string> {
  const name = `pick-${ctrl}`;
  await client.profiles.createProfile({
    profile: {
      name,
      uuid: '',
      description: `the simulated ${ctrl} only`,
      groups: [
        {
          resourceClass: '',
          vendorId: '144d',
          productId: 'a824',
          requiredTraits: [...NVME_PICK[ctrl].required],
          forbiddenTraits: [...NVME_PICK[ctrl].forbidden],
          liveMigratable: LiveMigratable.LIVE_MIGRATABLE_UNSPECIFIED,
          count: 1,
        },
      ],
      createdAt: undefined,
    },
  });
  return name;
}

/** A profile of `count` devices of one resource class. */
export async function createClassProfile(
  client: SchedulerClient,
  name: string,
  resourceClass: string,
  count = 1,
): Promise<string> {
  await client.profiles.createProfile({
    profile: {
      name,
      uuid: '',
      description: '',
      groups: [
        {
          resourceClass,
          vendorId: '',
          productId: '',
          requiredTraits: [],
          forbiddenTraits: [],
          liveMigratable: LiveMigratable.LIVE_MIGRATABLE_UNSPECIFIED,
          count,
        },
      ],
      createdAt: undefined,
    },
  });
  return name;
}

/** Creates one ARQ from `profile` and binds it to `instance` on `host`; returns the bound ARQ. */
export async function createAndBind(
  client: SchedulerClient,
  profile: string,
  instance: string,
  host: string,
) {
  const [arq] = (
    await client.arqs.createAcceleratorRequests({ profileName: profile, requestId: '', tags: [] })
  ).acceleratorRequests;
  if (!arq) throw new Error(`profile ${profile} produced no ARQ`);
  const [bound] = (
    await client.arqs.bindAcceleratorRequests({
      bindings: [{ arqUuid: arq.uuid, instanceUuid: instance, host, tag: '' }],
    })
  ).acceleratorRequests;
  if (!bound) throw new Error('bind returned no ARQ');
  return bound;
}

/**
 * A host with only SR-IOV VFs (Intel X710, product 154c, resource class
 * CUSTOM_PCI_8086_154C): exactly `vfs` allocatable devices, nothing to clean,
 * so binds race for a known number of devices.
 */
export function vfHostDefinition(host: string, vfs: number, busBase = 0x60): SimHostDefinition {
  return {
    host,
    pci: {
      pfs: [
        {
          address: `0000:${busBase.toString(16).padStart(2, '0')}:00.0`,
          vendorId: '8086',
          productId: '1572',
          driver: 'i40e',
          numaNode: 0,
          totalVfs: Math.max(vfs, 1),
          numVfs: vfs,
          vf: { productId: '154c', driver: 'vfio-pci' },
        },
      ],
      functions: [],
    },
    nvme: [],
    pciDeviceSpec: [{ vendor_id: '8086', product_id: '154c' }],
    nvmeDeviceSpec: [],
  };
}

export const VF_CLASS = 'CUSTOM_PCI_8086_154C';
