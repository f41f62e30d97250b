/** An instance's registered NICs and disks, and its bound devices with their guest addresses. */

import type { Arq } from './arq.js';
import type { DeviceRecord } from './device-state.js';

export interface Nic {
  mac: string;
  address: string;
  tag: string;
  vlan: number | null;
  model: string;
  /** The guest's interface name; null for none (and in records written before it existed). */
  devname: string | null;
}

export interface Disk {
  serial: string;
  bus: string;
  address: string;
  path: string;
  tag: string;
}

export interface InstanceDevices {
  nics: Nic[];
  disks: Disk[];
}

/** A NIC as a request gives it: `vlan` and `devname` absent (proto `optional`) rather than null. */
type GivenNic = Omit<Nic, 'vlan' | 'devname'> & { vlan?: number | undefined; devname?: string | undefined };

/** The stored form of NICs and disks as a request gives them (absent `vlan`/`devname` → null). */
export function instanceDevices(devices: {
  nics: readonly GivenNic[];
  disks: readonly Disk[];
}): InstanceDevices {
  return {
    nics: devices.nics.map((n) => ({
      mac: n.mac,
      address: n.address,
      tag: n.tag,
      vlan: n.vlan ?? null,
      model: n.model,
      devname: n.devname ?? null,
    })),
    disks: devices.disks.map((d) => ({
      serial: d.serial,
      bus: d.bus,
      address: d.address,
      path: d.path,
      tag: d.tag,
    })),
  };
}

/** A bound ARQ of an instance with its device; `arq.guestAddress` is set. */
export interface GuestBinding {
  arq: Arq;
  device: DeviceRecord;
}
