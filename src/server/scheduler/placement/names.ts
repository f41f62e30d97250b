/**
 * How Berth names its devices in Placement: the way Nova's own PCI translator
 * (nova/compute/pci_placement_translator.py) names them, so that an operator's
 * flavors and device profiles mean the same devices whether Nova or Berth
 * reports them. Pure functions; checked against Nova's code itself in
 * test/integration/placement-nova-names.test.ts.
 *
 * - Provider name: `<hypervisor hostname>_<PCI address in upper case>`; a VF
 *   is counted on its PF's provider (PlacementView._get_rp_name_for_child).
 * - Resource class: the device_spec's `resource_class` (normalised), else
 *   `CUSTOM_PCI_<VENDOR>_<PRODUCT>` — for NVMe devices too: Nova has no NVMe
 *   class, and a flavor written for Nova's reporting must keep matching.
 * - Traits: the device_spec's traits normalised as Nova does
 *   (_normalize_traits: a name Placement knows as standard is kept, anything
 *   else is upper-cased and made CUSTOM_), `HW_PCI_LIVE_MIGRATABLE`,
 *   `HW_PCI_ONE_TIME_USE`, and Berth's owner trait. Not Nova's
 *   COMPUTE_MANAGED_PCI_DEVICE: Nova treats a provider with it as its own
 *   (it removes the ones it does not know, and refuses to start with
 *   report_in_placement off while any exists).
 * - Provider uuid: Nova draws a random one; Berth derives it (UUID v5 of the
 *   provider name), so a provider deleted when its device went away comes
 *   back with the same uuid, and a uuid maps to its devices without a store.
 */
import { createHash } from 'node:crypto';
import { isPciAddress, type PciAddress, parseTrait } from '../../../identifiers.js';
import type { DeviceRecord } from '../domain/device-state.js';

/** Berth's owner trait (os-traits has OWNER_NOVA and OWNER_CYBORG; a third owner must be custom). */
export const OWNER_TRAIT = parseTrait('OWNER_TRAIT', 'CUSTOM_OWNER_BERTH');
export const ONE_TIME_USE_TRAIT = parseTrait('ONE_TIME_USE_TRAIT', 'HW_PCI_ONE_TIME_USE');
export const LIVE_MIGRATABLE_TRAIT = parseTrait('LIVE_MIGRATABLE_TRAIT', 'HW_PCI_LIVE_MIGRATABLE');
/** Traits Berth's agents put on devices for Berth's own profiles; Placement gets their Placement names instead. */
const BERTH_ONLY_TRAITS = new Set(['OWNER_BERTH', 'HW_ONE_TIME_USE', 'HW_PCI_LIVE_MIGRATABLE']);

/** The namespace of Berth's provider uuids (UUID v5). Never change it: every uuid Berth created derives from it. */
export const PROVIDER_UUID_NAMESPACE = 'dbb6af49-2cbc-4c4a-9d79-f2b44e741b88';

/** RFC 9562 UUID v5 (SHA-1) of `name` in `namespace`. */
export function uuidV5(namespace: string, name: string): string {
  const ns = Buffer.from(namespace.replace(/-/g, ''), 'hex');
  if (ns.length !== 16) throw new Error(`not a UUID: ${namespace}`);
  const h = createHash('sha1').update(ns).update(name, 'utf8').digest();
  h[6] = (h[6]! & 0x0f) | 0x50;
  h[8] = (h[8]! & 0x3f) | 0x80;
  const x = h.subarray(0, 16).toString('hex');
  return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20)}`;
}

/** The uuid Berth gives the provider named `name` (a device's, or a compute node root it creates). */
export const providerUuid = (name: string): string => uuidV5(PROVIDER_UUID_NAMESPACE, name);

/** Nova's `<hypervisor hostname>_<ADDRESS>`. */
export const providerNameFor = (nodename: string, address: string): string =>
  `${nodename}_${address.toUpperCase()}`;

/** The address whose provider counts the device: its own, or its PF's for a VF (Nova's parent/child). */
export const providerAddress = (d: Pick<DeviceRecord, 'address' | 'functionKind' | 'physfn'>): string =>
  d.functionKind === 'VF' && d.physfn ? d.physfn : d.address;

/** The PCI address a provider name of `nodename` stands for, or null when the name is not one. */
export function addressFromProviderName(nodename: string, name: string): PciAddress | null {
  const prefix = `${nodename}_`;
  if (!name.startsWith(prefix)) return null;
  const address = name.slice(prefix.length).toLowerCase();
  return isPciAddress(address) ? address : null;
}

/** os_traits / os_resource_classes normalize_name: runs of non-alphanumerics to `_`, upper case, CUSTOM_. */
export const customName = (name: string): string =>
  `CUSTOM_${name.replace(/[^0-9A-Za-z]+/g, '_').toUpperCase()}`;

/**
 * Nova's _normalize_traits against the traits this Placement knows as
 * standard: a known name is kept as it is; any other is upper-cased and kept
 * when CUSTOM_, else made CUSTOM_.
 */
export function normalizeTraitForPlacement(name: string, standard: ReadonlySet<string>): string {
  if (standard.has(name)) return name;
  const upper = name.toUpperCase();
  return upper.startsWith('CUSTOM_') ? upper : customName(upper);
}

/** The class Berth's agents give a device when its device_spec names none. */
const defaultClasses = (d: Pick<DeviceRecord, 'vendorId' | 'productId'>) => {
  const vp = `${d.vendorId}_${d.productId}`.toUpperCase();
  return { pci: `CUSTOM_PCI_${vp}`, nvme: `CUSTOM_NVME_${vp}` };
};

/**
 * The device's resource class in Placement: the device_spec's (Berth's agents
 * normalise it as Nova's _get_rc_for_dev does), else Nova's
 * CUSTOM_PCI_<VENDOR>_<PRODUCT>. A class equal to the agent's own default
 * (CUSTOM_NVME_… for NVMe) is read as "none named".
 */
export function placementResourceClass(
  d: Pick<DeviceRecord, 'vendorId' | 'productId' | 'resourceClass'>,
): string {
  const def = defaultClasses(d);
  return d.resourceClass === def.pci || d.resourceClass === def.nvme ? def.pci : d.resourceClass;
}

/** The device's traits in Placement (sorted): see the module comment. */
export function placementTraits(
  d: Pick<DeviceRecord, 'traits' | 'oneTimeUse' | 'liveMigratable'>,
  standard: ReadonlySet<string>,
): string[] {
  const out = new Set<string>([OWNER_TRAIT]);
  for (const t of d.traits) if (!BERTH_ONLY_TRAITS.has(t)) out.add(normalizeTraitForPlacement(t, standard));
  if (d.liveMigratable) out.add(normalizeTraitForPlacement(LIVE_MIGRATABLE_TRAIT, standard));
  if (d.oneTimeUse) out.add(normalizeTraitForPlacement(ONE_TIME_USE_TRAIT, standard));
  return [...out].sort();
}
