/**
 * The device-role metadata document (specs/device-role-tagging.txt):
 * `{"devices": [{type, bus, address, mac, devname | serial, path, tags}]}` for the
 * instance's NICs and disks (registered by the orchestration layer with
 * SetInstanceDevices) and Berth's passthrough devices, with the guest addresses
 * Berth assigned. A guest maps its role tags to hardware with it, so every
 * document served is checked against schema/device-metadata.schema.json.
 *
 * Berth's devices use a new type, `"passthrough"`, rather than reusing `nic`
 * or `disk`: a GPU or a VF is neither, a `nic` must carry a MAC Berth does not
 * know, and the schema is append-only — a new type is the one extension that
 * cannot change what an existing consumer reads from `nic`/`disk` entries.
 */

import { BerthError, type FieldViolation } from '../../../errors.js';
import { parseTag } from '../../../identifiers.js';
import type { DeviceRecord } from '../domain/device-state.js';
import type { InstanceDevices } from '../domain/instance.js';
import { duplicateTags } from '../domain/tags.js';
import {
  formatPciAddress,
  isPciAddress,
  type PciAddress,
  parsePciAddress,
  rootBusSlot,
  type TakenAddress,
} from './guest-address.js';
import type { Hostdev } from './hostdev-xml.js';
import { validateMetadata } from './metadata-schema.js';

export { validateMetadata } from './metadata-schema.js';

/** proto Nic. */
export interface NicInput {
  mac: string;
  /** Guest PCI address (`0000:00:03.0`), '' when unknown. */
  address: string;
  tag: string;
  /** Absent when the NIC is untagged on the wire (proto `optional`). */
  vlan?: number | undefined;
  model: string;
  /** The interface name the guest gives it (`eth0`); absent when the hypervisor sets none (proto `optional`). */
  devname?: string | undefined;
}

/** proto Disk. */
export interface DiskInput {
  serial: string;
  bus: string;
  address: string;
  path: string;
  tag: string;
}

export interface InstanceDevicesInput {
  nics: readonly NicInput[];
  disks: readonly DiskInput[];
}

/** The stored NICs/disks in the validator's input shape (proto `optional` vlan and devname → absent). */
export const devicesInput = (d: InstanceDevices): InstanceDevicesInput => ({
  nics: d.nics.map(({ vlan, devname, ...n }) => ({
    ...n,
    ...(vlan === null ? {} : { vlan }),
    ...(devname === null ? {} : { devname }),
  })),
  disks: d.disks,
});

/** One of Berth's bound devices, as the metadata document shows it. */
export interface PassthroughInput {
  guest: PciAddress;
  vendorId: string;
  productId: string;
  /** PCI, NVME ... (the scope a tag is unique in). */
  deviceType: string;
  tag: string;
}

export interface NicMetadata {
  type: 'nic';
  bus: 'pci';
  address?: string;
  mac: string;
  devname?: string;
  vlan?: number;
  tags: string[];
}

export interface DiskMetadata {
  type: 'disk';
  bus: MetadataBus;
  address?: string;
  serial?: string;
  path?: string;
  tags: string[];
}

export interface PassthroughMetadata {
  type: 'passthrough';
  bus: 'pci';
  address: string;
  vendor_id: string;
  product_id: string;
  device_type: string;
  tags: string[];
}

export type MetadataDevice = NicMetadata | DiskMetadata | PassthroughMetadata;

export interface DeviceMetadataDocument {
  devices: MetadataDevice[];
}

/** Buses the schema knows; a disk's `bus` in the document is one of these. */
export type MetadataBus = 'pci' | 'scsi' | 'ide' | 'usb' | 'none';

/**
 * Disk buses a client may register. `virtio` is accepted because that is what
 * a libvirt disk's target bus says; virtio-blk is a PCI device, so the
 * document shows it as bus `pci` with its PCI address, as Nova does.
 */
export const DISK_BUSES: Readonly<Record<string, MetadataBus>> = {
  pci: 'pci',
  virtio: 'pci',
  scsi: 'scsi',
  ide: 'ide',
  usb: 'usb',
  none: 'none',
};

/** Address syntax per bus, as the schema has it (the PCI one stricter: function 0-7). */
const ADDRESS_SYNTAX: Record<
  Exclude<MetadataBus, 'none'>,
  { test: (s: string) => boolean; example: string }
> = {
  pci: { test: isPciAddress, example: '0000:00:04.0' },
  scsi: { test: (s) => /^[0-9a-f]+:[0-9a-f]+:[0-9a-f]+:[0-9a-f]+$/.test(s), example: '0:0:0:0' },
  ide: { test: (s) => /^[01]:[01]$/.test(s), example: '0:1' },
  usb: { test: (s) => /^[0-9a-f]+:[0-9a-f]+$/.test(s), example: '1:2' },
};

const MAC = /^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$/;

/** IFNAMSIZ - 1: the kernel keeps interface names in 16 bytes with the NUL. */
export const DEVNAME_MAX_BYTES = 15;

/**
 * Why `name` cannot be a Linux network interface name, or null. The kernel's
 * rule (net/core/dev.c dev_valid_name): 1 to 15 bytes, not `.` or `..`, no
 * `/`, `:` or white space. Also refused: `%`, which makes the kernel treat the
 * name as a template (`eth%d` becomes eth0, eth1, ...: not the name asked
 * for), and anything but printable ASCII, which udev/systemd-networkd refuse
 * to name an interface with (ifname_valid).
 */
export function devnameProblem(name: string): string | null {
  if (name === '') return 'is empty: leave devname unset for a NIC without a name';
  if (name.length > DEVNAME_MAX_BYTES) {
    return `is ${name.length} characters, more than the ${DEVNAME_MAX_BYTES} of a Linux interface name`;
  }
  if (name === '.' || name === '..') return 'is not allowed as an interface name';
  const bad = [...name].find((ch) => ch < '!' || ch > '~' || ch === '/' || ch === ':' || ch === '%');
  if (bad !== undefined) {
    const shown = bad === ' ' ? 'a space' : /^[!-~]$/.test(bad) ? `"${bad}"` : JSON.stringify(bad);
    return `contains ${shown}: an interface name is printable ASCII without "/", ":", "%" or spaces`;
  }
  return null;
}
export const VLAN_MIN = 1;
export const VLAN_MAX = 4094;

function tagViolation(field: string, tag: string): FieldViolation | null {
  try {
    parseTag(field, tag);
    return null;
  } catch (e) {
    if (e instanceof BerthError && e.fieldViolations[0]) return e.fieldViolations[0];
    throw e;
  }
}

function invalid(violations: FieldViolation[]): BerthError {
  return new BerthError(
    'INVALID_ARGUMENT',
    violations.map((v) => `${v.field}: ${v.description}`).join('; '),
    {
      fieldViolations: violations,
    },
  );
}

/**
 * Check the NICs and disks the orchestration layer registers, all at once (one
 * INVALID_ARGUMENT listing every violation): tags follow Nova's rules and are
 * unique per device type; MACs are six hex octets; NIC devnames are Linux
 * interface names, unique per instance; disk buses are known and
 * addresses have their bus's syntax; VLANs are 1..4094; no two NICs/disks sit
 * at the same PCI address and none sits on a slot one of the instance's
 * hostdevs already has (`hostdevs`, e.g. `{owner: 'hostdev ua-gpu0', ...}`).
 * Returns the input normalised (lower-case MACs and buses).
 */
export function validateInstanceDevices(
  input: InstanceDevicesInput,
  hostdevs: readonly TakenAddress[] = [],
): InstanceDevicesInput {
  const v: FieldViolation[] = [];
  const pciOwners = new Map<string, string>();
  const hostdevSlots = new Map<number, TakenAddress>();
  for (const h of hostdevs) {
    const slot = isPciAddress(h.address) ? rootBusSlot(parsePciAddress(h.owner, h.address)) : null;
    if (slot !== null) hostdevSlots.set(slot, h);
  }
  const checkPci = (field: string, address: string) => {
    const prev = pciOwners.get(address);
    if (prev !== undefined) {
      v.push({ field, description: `address ${address} is already used by ${prev}` });
      return;
    }
    pciOwners.set(address, field);
    const slot = rootBusSlot(parsePciAddress(field, address));
    const h = slot === null ? undefined : hostdevSlots.get(slot);
    if (h)
      v.push({ field, description: `address ${address} is on the guest slot of ${h.owner} (${h.address})` });
  };

  const devnames = new Map<string, string>();
  const nics = input.nics.map((n, i) => {
    const f = `nics[${i}]`;
    const tv = tagViolation(`${f}.tag`, n.tag);
    if (tv) v.push(tv);
    if (!MAC.test(n.mac))
      v.push({ field: `${f}.mac`, description: `"${n.mac}" is not a MAC address like 52:54:00:12:34:56` });
    if (n.address !== '') {
      if (!ADDRESS_SYNTAX.pci.test(n.address)) {
        v.push({
          field: `${f}.address`,
          description: `"${n.address}" is not a PCI address like 0000:00:03.0`,
        });
      } else checkPci(`${f}.address`, n.address);
    }
    if (n.vlan !== undefined && !(Number.isInteger(n.vlan) && n.vlan >= VLAN_MIN && n.vlan <= VLAN_MAX)) {
      v.push({ field: `${f}.vlan`, description: `${n.vlan} is not a VLAN id in ${VLAN_MIN}..${VLAN_MAX}` });
    }
    if (n.devname !== undefined) {
      const problem = devnameProblem(n.devname);
      const prev = devnames.get(n.devname);
      if (problem !== null) v.push({ field: `${f}.devname`, description: `"${n.devname}" ${problem}` });
      else if (prev !== undefined) {
        v.push({
          field: `${f}.devname`,
          description: `"${n.devname}" is already the name of ${prev}: a guest's interface names are unique`,
        });
      } else devnames.set(n.devname, `${f}.devname`);
    }
    return { ...n, mac: n.mac.toLowerCase() };
  });

  const disks = input.disks.map((d, i) => {
    const f = `disks[${i}]`;
    const tv = tagViolation(`${f}.tag`, d.tag);
    if (tv) v.push(tv);
    const busName = d.bus.toLowerCase();
    const bus = Object.hasOwn(DISK_BUSES, busName) ? DISK_BUSES[busName] : undefined;
    if (bus === undefined) {
      v.push({
        field: `${f}.bus`,
        description: `"${d.bus}" is not a disk bus (one of ${Object.keys(DISK_BUSES).join(', ')})`,
      });
    } else if (d.address !== '') {
      if (bus === 'none') {
        v.push({
          field: `${f}.address`,
          description: `"${d.address}" given for bus none, which has no addresses`,
        });
      } else if (!ADDRESS_SYNTAX[bus].test(d.address)) {
        v.push({
          field: `${f}.address`,
          description: `"${d.address}" is not an address for bus ${busName} (like ${ADDRESS_SYNTAX[bus].example})`,
        });
      } else if (bus === 'pci') checkPci(`${f}.address`, d.address);
    }
    return { ...d, bus: busName };
  });

  v.push(
    ...duplicateTags(input.nics.map((n, i) => ({ field: `nics[${i}].tag`, deviceType: 'nic', tag: n.tag }))),
  );
  v.push(
    ...duplicateTags(
      input.disks.map((d, i) => ({ field: `disks[${i}].tag`, deviceType: 'disk', tag: d.tag })),
    ),
  );
  if (v.length > 0) throw invalid(v);
  return { nics, disks };
}

/**
 * The guest PCI addresses the instance's NICs and disks occupy, for
 * guest-address.ts to keep Berth's devices off them.
 */
export function registeredAddresses(input: InstanceDevicesInput): TakenAddress[] {
  const out: TakenAddress[] = [];
  input.nics.forEach((n, i) => {
    if (n.address !== '') out.push({ owner: `nics[${i}].address`, address: n.address });
  });
  input.disks.forEach((d, i) => {
    if (d.address !== '' && DISK_BUSES[d.bus.toLowerCase()] === 'pci') {
      out.push({ owner: `disks[${i}].address`, address: d.address });
    }
  });
  return out;
}

/** A passthrough entry for one of the instance's hostdevs and its device record. */
export const passthroughFromHostdev = (h: Hostdev, device: DeviceRecord): PassthroughInput => ({
  guest: h.guest,
  vendorId: device.vendorId,
  productId: device.productId,
  deviceType: device.type,
  tag: h.tag,
});

const tags = (tag: string): string[] => (tag === '' ? [] : [tag]);

/**
 * The document for an instance: NICs, then disks, then passthrough devices,
 * each in the order given (so it is the same every time it is served).
 * Untagged devices are listed with `"tags": []`, as the spec says ("will not
 * have any tags listed"). The NICs/disks are validated here too, so a caller
 * cannot serve a document from unchecked input.
 */
export function buildMetadata(
  devices: InstanceDevicesInput,
  passthrough: readonly PassthroughInput[],
): DeviceMetadataDocument {
  const hostdevAddresses = passthrough.map((p, i) => ({
    owner: `hostdevs[${i}]`,
    address: formatPciAddress(p.guest),
  }));
  const { nics, disks } = validateInstanceDevices(devices, hostdevAddresses);
  const v: FieldViolation[] = [];
  passthrough.forEach((p, i) => {
    const tv = tagViolation(`hostdevs[${i}].tag`, p.tag);
    if (tv) v.push(tv);
  });
  v.push(
    ...duplicateTags(
      // Every passthrough device (PCI or NVMe) is one `passthrough` entry: one tag scope.
      passthrough.map((p, i) => ({ field: `hostdevs[${i}].tag`, deviceType: 'passthrough', tag: p.tag })),
    ),
  );
  if (v.length > 0) throw invalid(v);

  const out: MetadataDevice[] = [];
  for (const n of nics) {
    out.push({
      type: 'nic',
      bus: 'pci',
      ...(n.address !== '' ? { address: n.address } : {}),
      mac: n.mac,
      ...(n.devname !== undefined ? { devname: n.devname } : {}),
      ...(n.vlan !== undefined ? { vlan: n.vlan } : {}),
      tags: tags(n.tag),
    });
  }
  for (const d of disks) {
    out.push({
      type: 'disk',
      bus: DISK_BUSES[d.bus]!,
      ...(d.address !== '' ? { address: d.address } : {}),
      ...(d.serial !== '' ? { serial: d.serial } : {}),
      ...(d.path !== '' ? { path: d.path } : {}),
      tags: tags(d.tag),
    });
  }
  for (const p of passthrough) {
    out.push({
      type: 'passthrough',
      bus: 'pci',
      address: formatPciAddress(p.guest),
      vendor_id: p.vendorId,
      product_id: p.productId,
      device_type: p.deviceType,
      tags: tags(p.tag),
    });
  }
  return { devices: out };
}

/**
 * GetDeviceMetadataResponse.json: the document serialised and checked against
 * the schema. A document that fails is Berth's bug, hence INTERNAL.
 */
export function renderMetadataJson(
  devices: InstanceDevicesInput,
  passthrough: readonly PassthroughInput[],
): string {
  const doc = buildMetadata(devices, passthrough);
  const { valid, errors } = validateMetadata(doc);
  if (!valid) {
    throw new BerthError('INTERNAL', `device metadata does not match its schema: ${errors.join('; ')}`);
  }
  return JSON.stringify(doc);
}
