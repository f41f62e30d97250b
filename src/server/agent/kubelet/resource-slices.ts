/**
 * This host's devices as `ResourceSlice` objects (`resource.k8s.io/v1`,
 * issue 39, decision 76): what a DRA driver publishes so that kube-scheduler
 * can allocate its devices from structured parameters.
 *
 * - One pool per host (`pool.name` = the Berth host), node-local
 *   (`spec.nodeName`), one driver name (`berth.dev` by default).
 * - A device is published only while it is clean and allocatable as Berth
 *   knows it (./offer.ts, and no `unallocatableReason`). A device that is held,
 *   dirty, being cleaned, in error or unhealthy is ABSENT from the pool: not
 *   tainted, because device taints are a feature-gated field an API server
 *   without the gate drops, which would publish a dirty device as allocatable.
 * - Attributes: the standard `resource.kubernetes.io/pciBusID`, and in the
 *   driver's domain `vendor`, `product`, `numaNode`, `iommuGroup`,
 *   `resourceClass`, `mediaKey` (when it fits in 64 characters) and
 *   `mediaKeySha256` (always, for any media key).
 * - Kubernetes' limits (k8s.io/api/resource/v1): at most 128 devices per
 *   slice (so a pool of more is split into several slices of one generation),
 *   at most 32 attributes, names `<domain ≤ 63>/<C identifier ≤ 32>`, string
 *   values ≤ 64 characters, device names DNS labels, object names DNS
 *   subdomains. An attribute that would break a limit is left out, never cut.
 *
 * Pure: the publisher (./slice-publisher.ts) sends these objects.
 */
import { createHash } from 'node:crypto';
import type { DiscoveredDevice } from '../../../plugins/types.js';
import { notOffered } from './offer.js';
import { isDnsSubdomain, type SliceTarget } from './slices-config.js';

/** Limits of resource.k8s.io/v1 (k8s.io/api/resource/v1 types.go), checked by the builder. */
export const SLICE_LIMITS = {
  /** ResourceSliceMaxDevices (64 when a device has taints or consumes counters: Berth sets neither). */
  devicesPerSlice: 128,
  /** ResourceSliceMaxAttributesAndCapacitiesPerDevice. */
  attributesPerDevice: 32,
  /** DeviceMaxIDLength: the identifier of an attribute name. */
  attributeIdLength: 32,
  /** DeviceMaxDomainLength: the domain of an attribute name, and a driver name. */
  domainLength: 63,
  /** DeviceAttributeMaxValueLength: a string or version value, in bytes (Go's len). */
  valueLength: 64,
} as const;

/** One attribute value: exactly one field set. */
export type DeviceAttribute = { string: string } | { int: number } | { bool: boolean } | { version: string };

export interface SliceDevice {
  name: string;
  attributes: Record<string, DeviceAttribute>;
}

export interface ResourceSlice {
  apiVersion: 'resource.k8s.io/v1';
  kind: 'ResourceSlice';
  metadata: { name: string };
  spec: {
    driver: string;
    nodeName: string;
    pool: { name: string; generation: number; resourceSliceCount: number };
    devices: SliceDevice[];
  };
}

/** The standard attribute of a PCI device's address (KubeVirt reads it). */
export const PCI_BUS_ID = 'resource.kubernetes.io/pciBusID';

/** A DNS label: a device name. */
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const C_IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Why `name` is not an attribute name Kubernetes accepts, or null. */
export function attributeNameProblem(name: string): string | null {
  const slash = name.lastIndexOf('/');
  const domain = slash < 0 ? null : name.slice(0, slash);
  const id = name.slice(slash + 1);
  if (!C_IDENTIFIER.test(id) || id.length > SLICE_LIMITS.attributeIdLength) {
    return `the identifier of ${JSON.stringify(name)} is not a C identifier of at most ${SLICE_LIMITS.attributeIdLength} characters`;
  }
  if (domain !== null && (!isDnsSubdomain(domain) || domain.length > SLICE_LIMITS.domainLength)) {
    return `the domain of ${JSON.stringify(name)} is not a DNS subdomain of at most ${SLICE_LIMITS.domainLength} characters`;
  }
  return null;
}

/** The device name of a PCI function: `pci-0000-3b-00-1`, a DNS label unique in the host's pool. */
export function deviceName(address: string): string {
  const name = `pci-${address.toLowerCase().replace(/[^a-z0-9]/g, '-')}`;
  if (!DNS_LABEL.test(name)) throw new Error(`PCI address ${JSON.stringify(address)} gives no DNS label`);
  return name;
}

/** Why Berth does not publish `d` now, or null when it is clean and allocatable. */
export function withheld(d: DiscoveredDevice, cleaning: boolean): string | null {
  return notOffered(d, cleaning) ?? (d.unallocatableReason || null);
}

/** The attributes of a published device, each within Kubernetes' limits (one that is not is left out). */
export function attributesOf(d: DiscoveredDevice): Record<string, DeviceAttribute> {
  const all: [string, DeviceAttribute | null][] = [
    [PCI_BUS_ID, { string: d.address }],
    ['vendor', { string: d.vendorId }],
    ['product', { string: d.productId }],
    ['numaNode', d.numaNode >= 0 ? { int: d.numaNode } : null],
    ['iommuGroup', d.iommuGroup !== null ? { int: d.iommuGroup } : null],
    ['resourceClass', { string: d.resourceClass }],
  ];
  const key = d.media?.key;
  if (key) {
    all.push(['mediaKey', { string: key }]);
    all.push(['mediaKeySha256', { string: createHash('sha256').update(key).digest('hex') }]);
  }
  const out: Record<string, DeviceAttribute> = {};
  for (const [name, value] of all) {
    if (value === null || attributeNameProblem(name) !== null) continue;
    if (
      'string' in value &&
      (value.string === '' || Buffer.byteLength(value.string) > SLICE_LIMITS.valueLength)
    )
      continue;
    if (Object.keys(out).length >= SLICE_LIMITS.attributesPerDevice) break;
    out[name] = value;
  }
  return out;
}

/** What this host publishes now: its clean, allocatable devices in address order, and why each other one is not. */
export function publishedDevices(
  devices: readonly DiscoveredDevice[],
  isCleaning: (mediaKey: string) => boolean,
): { devices: SliceDevice[]; withheld: { address: string; reason: string }[] } {
  const out: SliceDevice[] = [];
  const held: { address: string; reason: string }[] = [];
  for (const d of [...devices].sort((a, b) => (a.address < b.address ? -1 : a.address > b.address ? 1 : 0))) {
    const reason = withheld(d, d.media?.key ? isCleaning(d.media.key) : false);
    if (reason) held.push({ address: d.address, reason });
    else out.push({ name: deviceName(d.address), attributes: attributesOf(d) });
  }
  return { devices: out, withheld: held };
}

/** The name of the `index`th slice of a pool: `<node>-<driver>-<index>`, or a digest when that is too long. */
export function sliceName(target: SliceTarget, index: number): string {
  const plain = `${target.nodeName}-${target.driver}-${index}`;
  if (isDnsSubdomain(plain)) return plain;
  const digest = createHash('sha256')
    .update(`${target.driver}/${target.pool}/${target.nodeName}`)
    .digest('hex');
  return `berth-${digest.slice(0, 32)}-${index}`;
}

/**
 * The pool's slices at `generation`: the devices in order, at most
 * `perSlice` (≤ 128) to a slice, every slice saying how many the pool has.
 * A pool without devices is one slice without devices (the pool stays known,
 * at its new generation, so consumers drop the devices it had).
 */
export function buildSlices(
  target: SliceTarget,
  devices: readonly SliceDevice[],
  generation: number,
  perSlice: number = SLICE_LIMITS.devicesPerSlice,
): ResourceSlice[] {
  if (!Number.isInteger(perSlice) || perSlice < 1 || perSlice > SLICE_LIMITS.devicesPerSlice) {
    throw new Error(`devices per slice must be in [1, ${SLICE_LIMITS.devicesPerSlice}], got ${perSlice}`);
  }
  if (!isDnsSubdomain(target.driver) || target.driver.length > SLICE_LIMITS.domainLength) {
    throw new Error(
      `driver ${JSON.stringify(target.driver)} is not a DNS subdomain of at most 63 characters`,
    );
  }
  const chunks: SliceDevice[][] = [];
  for (let i = 0; i < devices.length; i += perSlice) chunks.push(devices.slice(i, i + perSlice));
  if (chunks.length === 0) chunks.push([]);
  return chunks.map((chunk, i) => ({
    apiVersion: 'resource.k8s.io/v1',
    kind: 'ResourceSlice',
    metadata: { name: sliceName(target, i) },
    spec: {
      driver: target.driver,
      nodeName: target.nodeName,
      pool: { name: target.pool, generation, resourceSliceCount: chunks.length },
      devices: chunk,
    },
  }));
}
