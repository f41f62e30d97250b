/**
 * What the reporter (reporter.ts) keeps of Placement, bounded by hosts, never
 * by the fleet (decision 85): the providers of the last CACHED_HOSTS hosts it
 * wrote (what the executor read or wrote of them, and their compute node),
 * and the reads that find providers by host in Placement.
 */
import type { PlacementApi } from './api.js';
import type { DriftTree } from './drift.js';
import type { PlanExecutor } from './executor.js';
import { OWNER_TRAIT } from './names.js';

/** Hosts whose providers' Placement state stays cached after their pass (the drift check looks at these). */
export const CACHED_HOSTS = 500;

export class HostCache {
  /** The hosts whose providers are in the executor's cache, oldest first: their compute node and provider names. */
  private readonly hosts = new Map<string, { nodename: string; names: Set<string> }>();

  constructor(
    private readonly executor: Pick<PlanExecutor, 'actual' | 'roots'>,
    private readonly limit = CACHED_HOSTS,
  ) {}

  get size(): number {
    return this.hosts.size;
  }

  namesOf(host: string): Iterable<string> {
    return this.hosts.get(host)?.names ?? [];
  }

  /** Keeps the host's providers cached (most recent last), and forgets the oldest hosts past the limit. */
  remember(host: string, nodename: string, names: Iterable<string>): void {
    this.hosts.delete(host);
    this.hosts.set(host, { nodename, names: new Set([...names].filter((n) => this.executor.actual.has(n))) });
    for (const old of this.hosts.keys()) {
      if (this.hosts.size <= this.limit) break;
      this.forget(old);
    }
  }

  /** Drops what the executor holds of the host's providers and compute node (they are read again). */
  forget(host: string): void {
    const c = this.hosts.get(host);
    if (!c) return;
    this.hosts.delete(host);
    for (const n of c.names) this.executor.actual.delete(n);
    this.executor.roots.delete(c.nodename);
  }

  /** The cached hosts' trees for the drift check (drift.ts), and the host of each provider in them. */
  driftTrees(skip: (host: string) => boolean): { trees: DriftTree[]; hostOf: Map<string, string> } {
    const trees = new Map<string, DriftTree & { known: Map<string, number | null> }>();
    const hostOf = new Map<string, string>();
    for (const [host, c] of this.hosts) {
      const root = this.executor.roots.get(c.nodename);
      if (!root || !('uuid' in root) || skip(host)) continue;
      const tree = trees.get(root.uuid) ?? { root: root.uuid, known: new Map<string, number | null>() };
      trees.set(root.uuid, tree);
      for (const name of c.names) {
        const a = this.executor.actual.get(name);
        // Not read yet: nothing to compare.
        if (a === undefined) continue;
        tree.known.set(name, a?.generation ?? null);
        hostOf.set(name, host);
      }
    }
    return { trees: [...trees.values()], hostOf };
  }
}

/** Berth's providers Placement has under a compute node (none when it has no root provider of that name). */
export async function providersUnder(api: PlacementApi, nodename: string): Promise<string[]> {
  const root = await api.providerByName(nodename);
  if (!root || root.parent_provider_uuid !== null) return [];
  const tree = await api.providers({ in_tree: root.uuid, required: OWNER_TRAIT });
  return tree.filter((p) => p.parent_provider_uuid !== null).map((p) => p.name);
}

/**
 * Berth's providers under compute nodes that are not a known host's: the
 * roots Berth made, and the children (a provider's name is
 * `<compute node>_<PCI address>`, names.ts). Placement's GET
 * /resource_providers has no paging (no limit or marker; its filters are
 * name, uuid, member_of, resources, in_tree, required), so this listing of
 * every provider of Berth's is the one read of a resync that grows with the
 * fleet; it is reduced to the unknown hosts' providers as soon as it is read.
 */
export async function providersOfUnknownHosts(
  api: PlacementApi,
  known: ReadonlySet<string>,
): Promise<{ roots: Array<{ uuid: string; name: string }>; children: string[] }> {
  const roots: Array<{ uuid: string; name: string }> = [];
  const children: string[] = [];
  for (const p of await api.providers({ required: OWNER_TRAIT })) {
    if (p.parent_provider_uuid === null) {
      if (!known.has(p.name)) roots.push({ uuid: p.uuid, name: p.name });
    } else if (!known.has(p.name.slice(0, p.name.lastIndexOf('_')))) children.push(p.name);
  }
  return { roots, children };
}
