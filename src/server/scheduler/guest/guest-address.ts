/**
 * Guest PCI addresses for passthrough devices, chosen by Berth.
 *
 * Why Berth picks them at all: the device-role metadata document maps a tag to
 * the guest address, so the address must be known before the guest boots and
 * must not move while the device stays bound (a guest that found "db" at
 * 0000:00:11.0 yesterday must find it there after a reboot or a live
 * migration). The scheduler therefore stores the address with the binding and
 * only asks this module for an address when a device is new to the instance.
 *
 * The layout: domain 0000, bus 00, function 0, one device per slot, slots
 * 0x10..0x1f. Slots 0x00..0x0f are left to the hypervisor: libvirt assigns
 * addresses to the devices it adds on its own (host bridge at 00.0, the
 * PIIX/ICH bridge, VGA, the memballoon, virtio NICs and disks without an
 * explicit address, USB controllers) from the lowest free slot upwards, so they
 * land in the low slots; keeping Berth's devices out of that range means
 * neither side has to know the other's choices to avoid a clash. Function 0 on
 * its own slot because a passthrough device is a separate endpoint, not a
 * function of a multifunction device, and it keeps every device hot-unpluggable
 * by itself.
 *
 * Caveat for q35 machines: the ICH9 chipset sits at 00:1f.x (and USB at 1d/1a
 * when present), so a q35 guest with more than 10 Berth devices will collide
 * with them; the slots already in use should then be passed in `taken`.
 */

import { BerthError, invalidArgument } from '../../../errors.js';
import { isPciAddress as isCanonicalPciAddress, pciAddressParts } from '../../../identifiers.js';

/** Lower-case hex without 0x, as the proto's PciAddress. */
export interface PciAddress {
  domain: string;
  bus: string;
  slot: string;
  function: string;
}

/** First slot Berth hands out; 0x00-0x0f belong to the hypervisor's own devices. */
export const FIRST_GUEST_SLOT = 0x10;
/** Last slot on a conventional PCI bus (5-bit slot number). */
export const LAST_GUEST_SLOT = 0x1f;

/** Whether `s` is a PCI address in the canonical `0000:00:10.0` form (the one rule: src/identifiers.ts). */
export const isPciAddress = (s: string): boolean => isCanonicalPciAddress(s);

/** Parse `0000:3b:02.0` into its fields; INVALID_ARGUMENT naming `field` and the value otherwise. */
export function parsePciAddress(field: string, s: string): PciAddress {
  if (!isCanonicalPciAddress(s))
    throw invalidArgument(field, `"${s}" is not a PCI address like 0000:00:10.0`);
  return pciAddressParts(s);
}

/** `0000:3b:02.0` form of an address. */
export const formatPciAddress = (a: PciAddress): string => `${a.domain}:${a.bus}:${a.slot}.${a.function}`;

/** The Berth guest address for a slot number. */
export const guestAddressForSlot = (slot: number): PciAddress => ({
  domain: '0000',
  bus: '00',
  slot: slot.toString(16).padStart(2, '0'),
  function: '0',
});

/**
 * The slot an address occupies on the guest's root bus, or null when it is on
 * another domain/bus (it cannot collide with Berth's devices then).
 */
export function rootBusSlot(a: PciAddress): number | null {
  if (a.domain !== '0000' || a.bus !== '00') return null;
  return Number.parseInt(a.slot, 16);
}

/** Something already on the guest's PCI bus, named for error messages. */
export interface TakenAddress {
  /** e.g. `nics[0].address`, `hostdev ua-gpu0`. */
  owner: string;
  /** `0000:00:03.0` form. */
  address: string;
}

/**
 * The lowest free Berth slot given the addresses the instance already uses
 * (its other hostdevs and its registered NICs and disks). Deterministic: the
 * same inputs give the same address. RESOURCE_EXHAUSTED when slots 0x10-0x1f
 * are all taken.
 */
export function assignGuestAddress(taken: readonly TakenAddress[]): PciAddress {
  const used = new Set<number>();
  for (const t of taken) {
    const slot = rootBusSlot(parsePciAddress(t.owner, t.address));
    if (slot !== null) used.add(slot);
  }
  for (let slot = FIRST_GUEST_SLOT; slot <= LAST_GUEST_SLOT; slot++) {
    if (!used.has(slot)) return guestAddressForSlot(slot);
  }
  throw new BerthError(
    'RESOURCE_EXHAUSTED',
    `guest PCI bus 0000:00 is full: slots 0x${FIRST_GUEST_SLOT.toString(16)}-0x${LAST_GUEST_SLOT.toString(16)} are all taken`,
    { reason: 'GUEST_PCI_BUS_FULL' },
  );
}

/** A hostdev of the instance, with the guest address stored for it (null when new). */
export interface HostdevSlotRequest {
  /** Stable key, e.g. the ARQ uuid. */
  id: string;
  guest: string | null;
}

/**
 * Guest addresses for all of an instance's hostdevs: stored addresses are kept
 * as they are (stability for the life of a binding), new devices get the lowest
 * free slot in the order given (the caller passes bind order, so the result is
 * deterministic). Two hostdevs, or a hostdev and a NIC/disk, on the same slot is
 * FAILED_PRECONDITION: stored state that contradicts itself must not be papered
 * over by moving a device.
 */
export function planGuestAddresses(
  hostdevs: readonly HostdevSlotRequest[],
  others: readonly TakenAddress[],
): Map<string, PciAddress> {
  const taken: TakenAddress[] = [...others];
  const bySlot = new Map<number, string>();
  // NICs and disks may share a slot among themselves (functions of one
  // multifunction device); metadata.ts checks their own collisions.
  for (const o of others) {
    const slot = rootBusSlot(parsePciAddress(o.owner, o.address));
    if (slot !== null && !bySlot.has(slot)) bySlot.set(slot, o.owner);
  }
  const claim = (t: TakenAddress, a: PciAddress) => {
    const slot = rootBusSlot(a);
    if (slot !== null) {
      const prev = bySlot.get(slot);
      if (prev !== undefined) {
        throw new BerthError(
          'FAILED_PRECONDITION',
          `${t.owner} at ${t.address} is on the same guest slot as ${prev}`,
          {
            reason: 'GUEST_ADDRESS_CONFLICT',
            metadata: { address: t.address },
          },
        );
      }
      bySlot.set(slot, t.owner);
    }
    taken.push(t);
  };
  const out = new Map<string, PciAddress>();
  for (const h of hostdevs) {
    if (h.guest === null) continue;
    const owner = `hostdev ${h.id}`;
    const a = parsePciAddress(owner, h.guest);
    claim({ owner, address: h.guest }, a);
    out.set(h.id, a);
  }
  for (const h of hostdevs) {
    if (h.guest !== null) continue;
    const a = assignGuestAddress(taken);
    const address = formatPciAddress(a);
    claim({ owner: `hostdev ${h.id}`, address }, a);
    out.set(h.id, a);
  }
  return out;
}
