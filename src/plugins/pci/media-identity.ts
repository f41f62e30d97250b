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

/**
 * A PCI media identity, written out field by field: a discovery builds one per
 * function (4,368 on the large host), and `{ ...EMPTY, key, … }` cost ~20 ms
 * of CPU a pass against <1 ms for the literal (bench/README.md, "Regressions
 * of 2026-11-26").
 */
function pciIdentity(key: string, kind: 'PCI_DSN' | 'PCI_SLOT', deviceSerialNumber: string): MediaIdentity {
  return { key, kind, subsystemNqn: '', serial: '', model: '', namespaces: [], deviceSerialNumber };
}

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
  return pciIdentity(key, 'PCI_DSN', dsn);
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
  return pciIdentity(key, 'PCI_SLOT', '');
}

/** Longest media key accepted from a driver (an NQN is at most 223 bytes). */
export const MAX_MEDIA_KEY = 512;
const KEY_RE = /^[\x21-\x7e][\x20-\x7e]*$/;

/** The key's prefix for each kind of media. */
const KEY_PREFIX: ReadonlyMap<string, string> = new Map([
  ['NVME_SUBSYSTEM', 'nvme:'],
  ['PCI_DSN', 'pci-dsn:'],
  ['PCI_SLOT', 'pci-slot:'],
]);

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
  const prefix = KEY_PREFIX.get(m.kind);
  if (prefix === undefined) return `media kind ${JSON.stringify(m.kind)} is unknown`;
  if (!m.key.startsWith(prefix))
    return `media key ${JSON.stringify(m.key)} of kind ${m.kind} does not start with ${prefix}`;
  if (!Array.isArray(m.namespaces)) return 'media namespaces is not a list';
  return null;
}
