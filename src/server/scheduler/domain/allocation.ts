/**
 * Choosing a device for one request group on one host.
 *
 * As in NVIDIA's k8s-device-plugin: a table of filters and a table of
 * preference comparators over one selection loop. The caller (a use case, inside
 * its bind unit of work) hands in only the candidates of one host and one
 * resource class or vendor/product — this module never sees the fleet.
 */

import { allocatable, type DeviceRecord, unallocatableReasons } from './device-state.js';
import type { RequestGroup } from './profile.js';

/** What the store must tell the picker beyond the candidates themselves. */
export interface AllocationContext {
  /** IOMMU groups on the host with a device allocated, pending_cleaning or cleaning. */
  busyIommuGroups: ReadonlySet<number>;
}

/** Device query the store runs for a group: one host plus a class, or ids. */
export type CandidateQuery =
  | { host: string; resourceClass: string }
  | { host: string; vendorId: string; productId: string };

export function candidateQuery(host: string, group: RequestGroup): CandidateQuery {
  return group.resourceClass
    ? { host, resourceClass: group.resourceClass }
    : { host, vendorId: group.vendorId, productId: group.productId };
}

export interface Filter {
  name: string;
  /** A short reason when the device is rejected, null when it passes. */
  reject(d: DeviceRecord, group: RequestGroup, ctx: AllocationContext): string | null;
}

/** Filters in order; the first that rejects a device names why. */
export const FILTERS: readonly Filter[] = [
  {
    name: 'kind',
    reject: (d, g) =>
      g.resourceClass
        ? d.resourceClass === g.resourceClass
          ? null
          : 'other resource class'
        : d.vendorId === g.vendorId && d.productId === g.productId
          ? null
          : 'other vendor/product',
  },
  {
    name: 'allocatable',
    reject: (d) => (allocatable(d) ? null : (unallocatableReasons(d)[0] ?? 'not allocatable')),
  },
  {
    name: 'required_traits',
    reject: (d, g) => {
      const missing = g.requiredTraits.filter((t) => !d.traits.includes(t));
      return missing.length === 0 ? null : 'missing required traits';
    },
  },
  {
    name: 'forbidden_traits',
    reject: (d, g) => (g.forbiddenTraits.some((t) => d.traits.includes(t)) ? 'has a forbidden trait' : null),
  },
  {
    name: 'live_migratable',
    reject: (d, g) =>
      g.liveMigratable === 'yes' && !d.liveMigratable
        ? 'not live-migratable'
        : g.liveMigratable === 'no' && d.liveMigratable
          ? 'live-migratable (profile asks for non-migratable)'
          : null,
  },
  {
    name: 'iommu_group',
    reject: (d, _g, ctx) =>
      d.iommuGroup !== null && ctx.busyIommuGroups.has(d.iommuGroup)
        ? `IOMMU group ${d.iommuGroup} shared with a device in use`
        : null,
  },
];

export type Comparator = (a: DeviceRecord, b: DeviceRecord) => number;

/** NUMA node ascending, devices without one (-1) last. */
const byNuma: Comparator = (a, b) => {
  const na = a.numaNode < 0 ? Number.MAX_SAFE_INTEGER : a.numaNode;
  const nb = b.numaNode < 0 ? Number.MAX_SAFE_INTEGER : b.numaNode;
  return na - nb;
};

/** Fewer traits first: keep the richer devices for requests that need them. */
const byTraitCount: Comparator = (a, b) => a.traits.length - b.traits.length;

const byAddress: Comparator = (a, b) => (a.address < b.address ? -1 : a.address > b.address ? 1 : 0);

/** Preference order, most significant first; the address makes the choice total. */
export const PREFERENCES: readonly Comparator[] = [byNuma, byTraitCount, byAddress];

export type PickResult =
  | { device: DeviceRecord; rejected: Record<string, number> }
  | { device: null; rejected: Record<string, number> };

export type PickFn = (
  group: RequestGroup,
  candidates: readonly DeviceRecord[],
  ctx: AllocationContext,
) => PickResult;

/**
 * The one selection loop: filter, then keep the best by the comparator table.
 * `rejected` counts the reasons, so "no device" can say why.
 */
export const pickDevice: PickFn = (group, candidates, ctx) => {
  const rejected: Record<string, number> = {};
  let best: DeviceRecord | null = null;
  for (const d of candidates) {
    let reason: string | null = null;
    for (const f of FILTERS) {
      reason = f.reject(d, group, ctx);
      if (reason !== null) break;
    }
    if (reason !== null) {
      rejected[reason] = (rejected[reason] ?? 0) + 1;
      continue;
    }
    if (best === null || prefer(d, best) < 0) best = d;
  }
  return { device: best, rejected };
};

function prefer(a: DeviceRecord, b: DeviceRecord): number {
  for (const c of PREFERENCES) {
    const r = c(a, b);
    if (r !== 0) return r;
  }
  return 0;
}

/** "3 device_state is allocated, 1 status is maintaining" — for error messages. */
export const describeRejections = (rejected: Record<string, number>): string =>
  Object.entries(rejected)
    .map(([reason, n]) => `${n} ${reason}`)
    .join(', ') || 'no candidates';
