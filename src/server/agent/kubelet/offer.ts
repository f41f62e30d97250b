/**
 * What the device plugin offers the kubelet, decided from Berth's own state
 * (decision 74): a device is `Healthy` only while it is clean and allocatable
 * as this agent knows it — its driver sees it healthy, Berth cleans it, its
 * media's journal record is clean (not held by any bind, OpenStack's, gRPC's
 * or a pod's; not dirty; not burned) and no cleanup of it runs.
 */
import type { Logger } from 'pino';
import type { DiscoveredDevice } from '../../../plugins/types.js';
import type { Inventory } from '../inventory.js';
import type { DevicePluginConfig } from './config.js';

/** What a kubelet plugin (device plugin, DRA) needs of the agent. */
export interface PluginAgent {
  host: string;
  devRoot: string;
  inventory: Inventory;
  isCleaning(mediaKey: string): boolean;
  logger: Logger;
}

/** Why `d` is not offered to the kubelet now, or null when it is clean and allocatable. */
export function notOffered(d: DiscoveredDevice | undefined, cleaning: boolean): string | null {
  if (!d) return 'it is not on this host';
  if (d.health !== 'healthy')
    return `its driver reports it unhealthy (${d.healthReason || 'no reason given'})`;
  if (!d.supportsCleaning) return 'Berth does not clean it, so it cannot be scrubbed between pods';
  if (cleaning) return 'it is being cleaned';
  const r = d.mediaRecord;
  if (!r) return 'its media has no identity yet';
  if (r.burned) return `its media ${r.key} is burned (one-time-use)`;
  if (r.condition === 'held') return `it is held for instance ${r.instanceUuid} (ARQ ${r.arqUuid})`;
  if (r.condition !== 'clean' && r.condition !== 'declared_clean') {
    return `its media ${r.key} is ${r.condition.replace('_', ' ')}, not clean`;
  }
  return null;
}

/** notOffered, with whether the agent cleans the device's media now. */
export function whyNotOffered(agent: PluginAgent, d: DiscoveredDevice | undefined): string | null {
  const key = d?.media?.key;
  return notOffered(d, key ? agent.isCleaning(key) : false);
}

/** The extended resource name of resource class `cls`. */
export function resourceNameOf(
  cls: string,
  config: Pick<DevicePluginConfig, 'resourceNames' | 'resourcePrefix'>,
): string {
  return config.resourceNames[cls] ?? `${config.resourcePrefix}${cls.toLowerCase().replace(/_/g, '-')}`;
}

/**
 * A device's name in DRA (its ResourceSlice entry and a claim's allocation
 * results): a DNS label made of its PCI address, `0000:01:00.0` →
 * `pci-0000-01-00-0`. Stable across restarts; one pool per host.
 */
export function draDeviceName(address: string): string {
  return `pci-${address.toLowerCase().replace(/[:.]/g, '-')}`;
}

/** KubeVirt's variable for a resource: `PCI_RESOURCE_` + the name upper case, `/` and `.` as `_`. */
export function kubevirtVariable(resourceName: string): string {
  return `PCI_RESOURCE_${resourceName.toUpperCase().replace(/[/.]/g, '_')}`;
}

/**
 * GetPreferredAllocation: `size` devices of `available`, those of
 * `mustInclude` first, then the others sharing their NUMA node and IOMMU
 * group, then those of the NUMA node with the most candidates; in address
 * order within each rank.
 */
export function preferred(
  available: readonly DiscoveredDevice[],
  mustInclude: readonly string[],
  size: number,
): string[] {
  const chosen = [...new Set(mustInclude)];
  const byAddress = new Map(available.map((d) => [d.address, d]));
  const first = chosen.map((a) => byAddress.get(a)).filter((d): d is DiscoveredDevice => d !== undefined);
  const perNuma = new Map<number, number>();
  for (const d of available) perNuma.set(d.numaNode, (perNuma.get(d.numaNode) ?? 0) + 1);
  const numas = new Set(first.map((d) => d.numaNode));
  const groups = new Set(first.map((d) => d.iommuGroup).filter((g) => g !== null));
  const rank = (d: DiscoveredDevice): number[] => [
    d.iommuGroup !== null && groups.has(d.iommuGroup) ? 0 : 1,
    numas.has(d.numaNode) ? 0 : 1,
    -(perNuma.get(d.numaNode) ?? 0),
    d.numaNode,
    d.iommuGroup ?? Number.MAX_SAFE_INTEGER,
  ];
  const rest = available
    .filter((d) => !chosen.includes(d.address))
    .sort((a, b) => {
      const ra = rank(a);
      const rb = rank(b);
      for (let i = 0; i < ra.length; i++) if (ra[i] !== rb[i]) return ra[i]! - rb[i]!;
      return a.address < b.address ? -1 : 1;
    });
  for (const d of rest) {
    if (chosen.length >= size) break;
    chosen.push(d.address);
  }
  return chosen.slice(0, Math.max(size, mustInclude.length));
}
