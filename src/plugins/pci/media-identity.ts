/**
 * The media identity of a plain PCI function (docs/media-identity.md):
 *
 * - PCI_DSN: the PCIe Device Serial Number, which the card keeps in any slot
 *   and on any host. Every function of a multi-function card reports the same
 *   serial (PCIe Base Specification), so the key adds the function's
 *   slot.function (`00.1`), which a card keeps when it moves; a VF has no
 *   serial of its own (or its PF's): its key is its PF's serial and function
 *   plus its VF index, so the VFs of one card stay separate units of tenancy.
 * - PCI_SLOT: no serial. The host, the address and the ids: it follows the
 *   slot, not the card — a card moved to another slot is a new one, another
 *   card of the same model in this slot is the same one.
 */
import type { MediaIdentity } from '../types.js';

const EMPTY = { subsystemNqn: '', serial: '', model: '', namespaces: [] };

/** `0000:3b:00.1` → `00.1`: what a card's functions keep in any slot. */
function devfn(address: string): string {
  return address.slice(address.lastIndexOf(':') + 1);
}

export function dsnIdentity(
  vendorId: string,
  dsn: string,
  address: string,
  vf?: { pfAddress: string; index: number },
): MediaIdentity {
  const key = vf
    ? `pci-dsn:${vendorId}:${dsn}:${devfn(vf.pfAddress)}:vf${vf.index}`
    : `pci-dsn:${vendorId}:${dsn}:${devfn(address)}`;
  return { ...EMPTY, key, kind: 'PCI_DSN', deviceSerialNumber: dsn };
}

export function slotIdentity(
  host: string,
  fn: {
    address: string;
    vendorId: string;
    productId: string;
    subsystemVendorId?: string;
    subsystemProductId?: string;
  },
): MediaIdentity {
  const key = `pci-slot:${host}:${fn.address}:${fn.vendorId}:${fn.productId}:${fn.subsystemVendorId ?? ''}:${fn.subsystemProductId ?? ''}`;
  return { ...EMPTY, key, kind: 'PCI_SLOT', deviceSerialNumber: '' };
}

/** Longest media key accepted from a driver (an NQN is at most 223 bytes). */
export const MAX_MEDIA_KEY = 512;
const KEY_RE = /^[\x21-\x7e][\x20-\x7e]*$/;

/** Why a driver-reported identity cannot be used (the agent then gives the slot's), or null. */
export function mediaIdentityProblem(m: MediaIdentity): string | null {
  if (
    typeof m.key !== 'string' ||
    m.key.length === 0 ||
    m.key.length > MAX_MEDIA_KEY ||
    !KEY_RE.test(m.key)
  ) {
    return `media key ${JSON.stringify(String(m.key).slice(0, 80))} is not 1-${MAX_MEDIA_KEY} printable ASCII characters`;
  }
  if (!['NVME_SUBSYSTEM', 'PCI_DSN', 'PCI_SLOT'].includes(m.kind))
    return `media kind ${JSON.stringify(m.kind)} is unknown`;
  const prefix = { NVME_SUBSYSTEM: 'nvme:', PCI_DSN: 'pci-dsn:', PCI_SLOT: 'pci-slot:' }[m.kind];
  if (!m.key.startsWith(prefix))
    return `media key ${JSON.stringify(m.key)} of kind ${m.kind} does not start with ${prefix}`;
  if (!Array.isArray(m.namespaces)) return 'media namespaces is not a list';
  return null;
}
