/**
 * The agent's inventory: the devices of the last discovery, an epoch (new at
 * every agent start) and a revision that increases with every change. Each
 * rediscovery is diffed against the last; only changes become events, kept in
 * a bounded log so a watcher that reconnects resumes without a new snapshot.
 */
import { randomUUID } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import type { DiscoveredDevice } from '../../plugins/types.js';

export type InventoryEvent =
  | { revision: number; kind: 'added'; device: DiscoveredDevice }
  | { revision: number; kind: 'changed'; device: DiscoveredDevice }
  | { revision: number; kind: 'removed'; address: string };

export interface InventoryDiff {
  revision: number;
  added: DiscoveredDevice[];
  changed: DiscoveredDevice[];
  removed: string[];
}

export class Inventory {
  readonly epoch = randomUUID();
  private rev = 0;
  private readonly devices = new Map<string, DiscoveredDevice>();
  private readonly log: InventoryEvent[] = [];
  private readonly listeners = new Set<(e: InventoryEvent) => void>();

  constructor(private readonly maxEvents = 10_000) {}

  get revision(): number {
    return this.rev;
  }

  get size(): number {
    return this.devices.size;
  }

  has(address: string): boolean {
    return this.devices.has(address);
  }

  list(): DiscoveredDevice[] {
    return [...this.devices.values()];
  }

  get(address: string): DiscoveredDevice | undefined {
    return this.devices.get(address);
  }

  /**
   * Replaces the inventory with a discovery result. Devices of drivers listed in
   * `keepDrivers` (whose discovery failed) keep their previous records.
   */
  apply(devices: DiscoveredDevice[], keepDrivers: readonly string[] = []): InventoryDiff {
    const next = new Map(devices.map((d) => [d.address, d]));
    for (const [addr, d] of this.devices) {
      if (keepDrivers.includes(d.driver) && !next.has(addr)) next.set(addr, d);
    }
    const diff: InventoryDiff = { revision: this.rev, added: [], changed: [], removed: [] };
    for (const [addr, d] of next) {
      const prev = this.devices.get(addr);
      if (!prev) diff.added.push(d);
      else if (!isDeepStrictEqual(prev, d)) diff.changed.push(d);
    }
    for (const addr of this.devices.keys()) if (!next.has(addr)) diff.removed.push(addr);
    for (const d of diff.added) this.emit({ revision: ++this.rev, kind: 'added', device: d });
    for (const d of diff.changed) this.emit({ revision: ++this.rev, kind: 'changed', device: d });
    for (const a of diff.removed) this.emit({ revision: ++this.rev, kind: 'removed', address: a });
    this.devices.clear();
    for (const [k, v] of next) this.devices.set(k, v);
    diff.revision = this.rev;
    return diff;
  }

  /**
   * A discovery of some functions only (hotplug): within `scope`, the same
   * as `apply` (a device reported is added or changed, a device not reported
   * is removed unless its driver's discovery failed); outside it, nothing
   * changes. The inventory stays in address order, as a full pass leaves it.
   */
  applySome(
    scope: ReadonlySet<string>,
    devices: DiscoveredDevice[],
    keepDrivers: readonly string[] = [],
  ): InventoryDiff {
    const diff: InventoryDiff = { revision: this.rev, added: [], changed: [], removed: [] };
    const found = new Map<string, DiscoveredDevice>();
    for (const d of devices) if (scope.has(d.address)) found.set(d.address, d);
    for (const [addr, d] of found) {
      const prev = this.devices.get(addr);
      if (!prev) diff.added.push(d);
      else if (!isDeepStrictEqual(prev, d)) diff.changed.push(d);
    }
    for (const addr of scope) {
      const prev = this.devices.get(addr);
      if (prev && !found.has(addr) && !keepDrivers.includes(prev.driver)) diff.removed.push(addr);
    }
    diff.added.sort(byAddress);
    diff.changed.sort(byAddress);
    diff.removed.sort();
    for (const d of diff.added) this.emit({ revision: ++this.rev, kind: 'added', device: d });
    for (const d of diff.changed) this.emit({ revision: ++this.rev, kind: 'changed', device: d });
    for (const a of diff.removed) this.emit({ revision: ++this.rev, kind: 'removed', address: a });
    for (const d of diff.changed) this.devices.set(d.address, d);
    for (const a of diff.removed) this.devices.delete(a);
    if (diff.added.length > 0) {
      const all = [...this.devices.values(), ...diff.added].sort(byAddress);
      this.devices.clear();
      for (const d of all) this.devices.set(d.address, d);
    }
    diff.revision = this.rev;
    return diff;
  }

  /**
   * Replaces, between discoveries, the devices `update` returns a new record
   * for (the journal changed what it says of their media); each that differs
   * is a `changed` event.
   */
  update(update: (d: DiscoveredDevice) => DiscoveredDevice | null): DiscoveredDevice[] {
    const changed: DiscoveredDevice[] = [];
    for (const [addr, d] of this.devices) {
      const next = update(d);
      if (next && !isDeepStrictEqual(next, d)) {
        this.devices.set(addr, next);
        changed.push(next);
      }
    }
    for (const d of changed) this.emit({ revision: ++this.rev, kind: 'changed', device: d });
    return changed;
  }

  private emit(e: InventoryEvent): void {
    this.log.push(e);
    if (this.log.length > this.maxEvents) this.log.splice(0, this.log.length - this.maxEvents);
    for (const l of this.listeners) l(e);
  }

  /**
   * Events after `revision`, or null when they are no longer all held (the
   * watcher then needs a snapshot).
   */
  eventsSince(revision: number): InventoryEvent[] | null {
    if (revision > this.rev) return null;
    if (revision === this.rev) return [];
    const first = this.log[0];
    if (!first || first.revision > revision + 1) return null;
    return this.log.filter((e) => e.revision > revision);
  }

  subscribe(listener: (e: InventoryEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}

function byAddress(a: { address: string }, b: { address: string }): number {
  return a.address < b.address ? -1 : a.address > b.address ? 1 : 0;
}
