/**
 * Report mode: Placement shows Berth's devices (desired.ts says what), and
 * follows every change of their state.
 *
 * How it stays in step. Berth's own state is read as an informer does: a
 * snapshot, then the device change feed in revision order, into a mirror;
 * every change marks the provider(s) it touches as pending, with its revision
 * and when it was first seen; a host whose agent connects or goes away marks
 * all of its providers. A pass writes the pending providers: those to hold
 * back (reserved going up, providers to delete) first, then the rest, each
 * group in revision order. Writes are level-based (the latest state, not a
 * replay), so a catch-up after an outage writes each provider once.
 *
 * Safety (decision 43). Berth commits its own state first and writes
 * Placement after, so the order of the two matters only one way: a device
 * goes reserved in Placement when it leaves `available` (a bind, a claim),
 * long before its tenant lets go, and stays reserved through
 * pending_cleaning and cleaning; it is un-reserved only from a state change
 * to `available`, which for a cleaned device follows the accepted proof.
 *
 * Every write carries the provider generation Berth read; a 409
 * (placement.concurrent_update) re-reads the provider and tries again (5
 * times, then the provider is a problem, retried later). Placement out of
 * reach: nothing is lost (the pending set grows, the lag shows), the pass is
 * retried with backoff, and the catch-up runs in order when it answers.
 */
import type { Logger } from 'pino';
import { type HostName, isResourceClass, isTrait, type PciAddress, type Uuid } from '../../../identifiers.js';
import type { DeviceRecord } from '../domain/device-state.js';
import { type Inventories, type PlacementApi, PlacementRefused, PlacementUnreachable } from './api.js';
import type { PlacementConnection } from './connection.js';
import { RetryDelay } from './connection.js';
import {
  type DesiredProvider,
  desiredProviders,
  type HostView,
  notReportedBecause,
  providerNameOf,
} from './desired.js';
import { DriftCheck, type DriftTree } from './drift.js';
import { OWNER_TRAIT, providerUuid } from './names.js';
import type { DeviceProviderInfo, PlacementChange, PlacementProblem, SchedulerSide } from './port.js';

export interface ReporterOptions {
  conn: PlacementConnection;
  side: SchedulerSide;
  logger: Logger;
  nodename: (host: string) => string;
  /** No Nova: Berth creates a root provider per host (else it waits for nova-compute's). */
  createRoots: boolean;
  /** How often held providers, problems and missing compute nodes are looked at again (default 10 s). */
  pollMs?: number;
  /** How often everything is compared with Placement again, orphans included (default 300 s). */
  resyncMs?: number;
  /** How often the generations of Berth's providers are compared with Placement's (drift.ts; default 5 s). */
  driftMs?: number;
  /** Backoff cap while Placement does not answer (default 30 s). */
  retryMaxMs?: number;
  onChanges?: (changes: PlacementChange[]) => void;
  /** A provider another writer changed was written back (its changes). */
  onDriftRepaired?: (changes: PlacementChange[]) => void;
}

/** What Placement holds for one provider, as Berth last read or wrote it. */
interface ActualProvider {
  uuid: string;
  name: string;
  generation: number;
  parent: string | null;
  traits: string[];
  inventories: Inventories;
}

/** A provider Berth cannot make right now: reported in the status, looked at again later. */
class ProviderProblem extends Error {}

interface Pending {
  revision: number;
  /** When the change was first seen (ms): the lag. */
  since: number;
  host: string | null;
}

const sameSet = (a: readonly string[], b: readonly string[]) =>
  a.length === b.length && [...a].sort().join() === [...b].sort().join();

function describeInventory(inv: Inventories): string {
  return (
    Object.entries(inv)
      .map(([rc, r]) => `${rc} total ${r.total} reserved ${r.reserved}`)
      .join(', ') || 'none'
  );
}

/** `CUSTOM_X: reserved 0 → 1` for what changes in a class kept; the whole inventories otherwise. */
function inventoryChange(cur: Inventories, want: Inventories): string {
  const rcs = Object.keys(want);
  if (rcs.length !== Object.keys(cur).length || !rcs.every((rc) => cur[rc])) {
    return `inventory ${describeInventory(cur)} → ${describeInventory(want)}`;
  }
  return rcs
    .map((rc) => {
      const a = cur[rc]!;
      const w = want[rc]!;
      const fields = (Object.keys(w) as Array<keyof typeof w>).filter((k) => a[k] !== w[k]);
      return fields.length ? `${rc}: ${fields.map((k) => `${k} ${a[k]} → ${w[k]}`).join(', ')}` : '';
    })
    .filter(Boolean)
    .join('; ');
}

export class Reporter {
  private readonly conn: PlacementConnection;
  private readonly api: PlacementApi;
  private readonly side: SchedulerSide;
  private readonly log: Logger;
  private readonly pollMs: number;
  private readonly resyncMs: number;
  private readonly driftMs: number;
  private readonly drift: DriftCheck;
  /** Providers a drift check found moved, until they are written (or found in step). */
  private readonly drifted = new Set<string>();
  private readonly retry: RetryDelay;

  private mirror = new Map<string, DeviceRecord>();
  private hosts = new Map<HostName, HostView>();
  private loaded = false;
  private revision = 0;
  private desired = new Map<string, DesiredProvider>();
  private readonly pending = new Map<string, Pending>();
  private readonly actual = new Map<string, ActualProvider | null>();
  private readonly roots = new Map<string, { uuid: string } | { missingUntil: number }>();
  private readonly problems = new Map<string, PlacementProblem & { retryAt: number }>();
  private readonly held = new Map<
    string,
    { uuid: string; host: string; consumers: string[]; retryAt: number }
  >();
  private readonly synced = new Map<string, { at: string; uuid: string }>();
  private readonly knownRcs = new Set<string>();
  private readonly knownTraits = new Set<string>([OWNER_TRAIT]);
  /** 409s on a provider generation, re-read and retried (since start). */
  generationConflicts = 0;
  /** Providers another writer changed that Berth wrote back between resyncs (since start). */
  driftRepairs = 0;
  private resyncAt = 0;
  private driftAt = 0;
  private retryAt = 0;
  lastFullSyncAt: Date | null = null;

  private readonly abort = new AbortController();
  private running: Promise<void> | null = null;
  /** One pass at a time (the loop's and an operator's `placement sync`). */
  private lock: Promise<unknown> = Promise.resolve();

  constructor(private readonly o: ReporterOptions) {
    this.conn = o.conn;
    this.api = o.conn.api;
    this.side = o.side;
    this.log = o.logger;
    this.pollMs = o.pollMs ?? 10_000;
    this.resyncMs = o.resyncMs ?? 300_000;
    this.driftMs = o.driftMs ?? 5_000;
    this.drift = new DriftCheck(this.api);
    this.retry = new RetryDelay(o.retryMaxMs ?? 30_000);
  }

  start(): void {
    this.running ??= this.loop();
  }

  async stop(): Promise<void> {
    this.abort.abort();
    await this.running;
  }

  // --- what the port shows ---------------------------------------------

  get pendingCount(): number {
    return this.pending.size;
  }

  get lagSeconds(): number {
    let oldest = Number.POSITIVE_INFINITY;
    for (const p of this.pending.values()) oldest = Math.min(oldest, p.since);
    return Number.isFinite(oldest) ? Math.max(0, (Date.now() - oldest) / 1000) : 0;
  }

  get appliedRevision(): number {
    let min = Number.POSITIVE_INFINITY;
    for (const p of this.pending.values()) min = Math.min(min, p.revision);
    return Number.isFinite(min) ? Math.max(0, min - 1) : this.revision;
  }

  get storeRevision(): number {
    return this.revision;
  }

  problemList(): PlacementProblem[] {
    return [...this.problems.values()].map(({ provider, host, note }) => ({ provider, host, note }));
  }

  heldList(): Array<{ provider: string; host: string; consumers: string[] }> {
    return [...this.held.entries()].map(([provider, h]) => ({
      provider,
      host: h.host,
      consumers: h.consumers,
    }));
  }

  deviceProvider(d: DeviceRecord): DeviceProviderInfo {
    const name = providerNameOf(d, this.o.nodename);
    const cached = this.actual.get(name);
    const synced = this.synced.get(name);
    const notes: string[] = [];
    const why = notReportedBecause(d);
    if (why) notes.push(`not reported: ${why}`);
    const held = this.held.get(name);
    if (held) {
      notes.push(
        `provider kept: Placement holds allocations of ${held.consumers.join(', ')} against it (reserved until they go)`,
      );
    }
    const problem = this.problems.get(name);
    if (problem) notes.push(problem.note);
    if (this.pending.has(name))
      notes.push(`a change waits to be written (${this.conn.reachable ? 'now' : this.conn.lastError})`);
    return {
      providerUuid: cached?.uuid ?? synced?.uuid ?? providerUuid(name),
      providerName: name,
      syncedAt: synced?.at ?? '',
      note: notes.join('; '),
    };
  }

  devicesOfProvider(uuid: string): Array<{ deviceUuid: Uuid; host: HostName; address: PciAddress }> {
    // Berth's uuids are derived from the name; one Placement had before (adopted) is in the cache.
    let p = this.desired.get(this.nameByUuid.get(uuid) ?? '');
    if (!p) {
      for (const [name, a] of this.actual) if (a?.uuid === uuid) p = this.desired.get(name);
    }
    return p?.devices.map((d) => ({ deviceUuid: d.uuid, host: d.host, address: d.address })) ?? [];
  }

  // --- the loop ----------------------------------------------------------

  private async loop(): Promise<void> {
    const signal = this.abort.signal;
    while (!signal.aborted) {
      const seen = this.side.changeVersion;
      let waitMs = this.pollMs;
      try {
        await this.pull();
        const now = Date.now();
        for (const [name, p] of this.problems) if (p.retryAt <= now) this.mark(name, this.revision, p.host);
        for (const [name, h] of this.held) if (h.retryAt <= now) this.mark(name, this.revision, h.host);
        if (now >= this.retryAt) {
          try {
            const full = now >= this.resyncAt;
            const drift = !full && this.loaded && now >= this.driftAt;
            await this.withLock(async () => {
              if (drift) await this.checkDrift();
              return this.pass(full);
            });
            if (full || drift) this.driftAt = Date.now() + this.driftMs;
            this.retry.reset();
          } catch (err) {
            if (!(err instanceof PlacementUnreachable)) throw err;
            this.conn.down(err, () => this.behind());
            this.retryAt = Date.now() + this.retry.next();
          }
        }
        const due = [this.resyncAt, this.driftAt, ...[...this.problems.values()].map((p) => p.retryAt)];
        due.push(...[...this.held.values()].map((h) => h.retryAt));
        if (!this.conn.reachable) due.push(this.retryAt);
        waitMs = Math.max(10, Math.min(this.pollMs, ...due.map((t) => t - Date.now())));
      } catch (err) {
        if (signal.aborted) break;
        if ((err as Error).name === 'PlacementIncompatible') {
          this.conn.lastError = (err as Error).message;
          this.log.error({ err: (err as Error).message }, 'Placement reporting stops');
          return;
        }
        this.log.error({ err }, 'Placement reporting: a pass failed; trying again');
        waitMs = 5_000;
      }
      await this.side.waitForChange(seen, signal, waitMs);
      // A burst of changes (cleanup progress, a fleet's inventory) is one pass, not one each.
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  private behind(): string {
    return `${this.pending.size} provider(s) wait, the oldest change ${Math.round(this.lagSeconds)} s ago`;
  }

  private withLock<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.lock.then(fn, fn);
    this.lock = run.catch(() => {});
    return run;
  }

  private mark(name: string, revision: number, host: string | null): void {
    if (!this.pending.has(name)) this.pending.set(name, { revision, since: Date.now(), host });
  }

  /** Berth's side → the mirror and the pending set (never touches Placement). */
  private async pull(): Promise<void> {
    const nodename = this.o.nodename;
    if (!this.loaded) {
      const snap = await this.side.snapshot();
      this.mirror = new Map(snap.devices.map((d) => [d.uuid, d]));
      this.revision = snap.revision;
      this.hosts = new Map((await this.side.hosts()).map((h) => [h.name, h]));
      this.loaded = true;
      this.mirrorVersion++;
      for (const d of this.mirror.values()) this.mark(providerNameOf(d, nodename), this.revision, d.host);
      // What Placement has that the snapshot no longer says (devices of a deleted host) is swept by the resync.
      this.resyncAt = 0;
    } else {
      for (;;) {
        const events = await this.side.changesSince(this.revision, 1000);
        if (events === 'compacted') {
          this.log.warn(
            { revision: this.revision },
            'Placement reporting: the change feed was compacted; reading everything again',
          );
          this.loaded = false;
          return this.pull();
        }
        for (const e of events) {
          const before = this.mirror.get(e.device.uuid);
          if (e.removed) this.mirror.delete(e.device.uuid);
          else this.mirror.set(e.device.uuid, e.device);
          if (before) this.mark(providerNameOf(before, nodename), e.revision, before.host);
          this.mark(providerNameOf(e.device, nodename), e.revision, e.device.host);
          this.revision = e.revision;
        }
        if (events.length > 0) this.mirrorVersion++;
        if (events.length < 1000) break;
      }
      const hosts = new Map((await this.side.hosts()).map((h) => [h.name, h]));
      const changed = new Set<string>();
      for (const [name, h] of hosts) if (this.hosts.get(name)?.connected !== h.connected) changed.add(name);
      for (const name of this.hosts.keys()) if (!hosts.has(name)) changed.add(name);
      this.hosts = hosts;
      if (changed.size > 0) {
        this.mirrorVersion++;
        for (const d of this.mirror.values()) {
          if (changed.has(d.host)) this.mark(providerNameOf(d, nodename), this.revision, d.host);
        }
      }
    }
    this.refreshDesired();
  }

  private desiredFrom: { traits: ReadonlySet<string>; version: number; owned: string } | null = null;
  private nameByUuid = new Map<string, string>();
  private mirrorVersion = 0;

  /**
   * desired.ts over the mirror, again only when the mirror, the hosts, the
   * known traits or the hosts this scheduler speaks for changed (a replica that
   * adopts a host, or follows it again after a restart, knows its providers).
   */
  private refreshDesired(): void {
    const traits = this.conn.standardTraits;
    const owned = [...this.hosts.keys()].filter((h) => this.side.ownsHost(h)).join('\n');
    if (
      this.desiredFrom?.traits === traits &&
      this.desiredFrom.version === this.mirrorVersion &&
      this.desiredFrom.owned === owned
    )
      return;
    this.desired = desiredProviders(this.mirror.values(), this.hosts, {
      nodename: this.o.nodename,
      standardTraits: traits,
      ownsHost: (h) => this.side.ownsHost(h),
    });
    this.desiredFrom = { traits, version: this.mirrorVersion, owned };
    this.nameByUuid = new Map([...this.desired.values()].map((p) => [p.uuid, p.name]));
  }

  /** Writes the pending providers (holds first); with `full`, compares everything and sweeps orphans. */
  private async pass(full: boolean): Promise<PlacementChange[]> {
    await this.conn.ready();
    // The traits the server knows are known after ready().
    this.refreshDesired();
    const changes: PlacementChange[] = [];
    let orphanRoots: Array<{ uuid: string; name: string }> = [];
    if (full) {
      this.actual.clear();
      this.roots.clear();
      for (const [name, p] of this.desired) this.mark(name, this.revision, p.host);
      ({ orphanRoots } = await this.findOrphans());
    }
    const order = [...this.pending.entries()]
      .map(([name, p]) => ({ name, p, hold: this.isHold(name) }))
      .sort((a, b) => (a.hold === b.hold ? a.p.revision - b.p.revision : a.hold ? -1 : 1));
    for (const { name, p } of order) {
      if (!this.side.ownsHost(p.host)) {
        this.pending.delete(name);
        continue;
      }
      const desired = this.desired.get(name) ?? null;
      try {
        const made = await this.reconcile(name, desired, false);
        if (this.drifted.delete(name) && made.length > 0) this.driftRepaired(name, made);
        this.pending.delete(name);
        this.problems.delete(name);
        const uuid = this.actual.get(name)?.uuid ?? desired?.uuid;
        if (uuid) this.synced.set(name, { at: new Date().toISOString(), uuid });
        changes.push(...made);
      } catch (err) {
        if (err instanceof PlacementUnreachable) throw err;
        this.drifted.delete(name);
        const note =
          err instanceof ProviderProblem || err instanceof PlacementRefused ? err.message : String(err);
        if (!(err instanceof ProviderProblem) && !(err instanceof PlacementRefused)) {
          this.log.error({ err, provider: name }, 'Placement reporting: unexpected failure');
        }
        const before = this.problems.get(name);
        if (before?.note !== note) this.log.warn({ provider: name, host: p.host }, `Placement: ${note}`);
        this.problems.set(name, {
          provider: name,
          host: p.host ?? '',
          note,
          retryAt: Date.now() + this.pollMs,
        });
        this.pending.delete(name);
        this.actual.delete(name);
        // What was written before the problem (a hold on a provider Berth cannot otherwise make right).
        changes.push(...((err as { changes?: PlacementChange[] }).changes ?? []));
        changes.push({
          provider: name,
          providerUuid: desired?.uuid ?? '',
          host: p.host ?? '',
          action: 'blocked',
          details: [note],
          deviceAddresses: desired?.devices.map((d) => d.address) ?? [],
        });
      }
    }
    // Nothing to write for a while: still ask whether Placement answers, so an
    // outage shows in the status before the next change has to wait for it.
    if (order.length === 0 && orphanRoots.length === 0 && !full) {
      const last = this.conn.lastContactAt?.getTime() ?? 0;
      if (Date.now() - last >= this.pollMs) await this.api.versions();
    }
    for (const r of orphanRoots) {
      const gone = await this.api.deleteProvider(r.uuid, r.name).catch((err) => {
        if (err instanceof PlacementRefused) return false; // children left, or in use: the next resync
        throw err;
      });
      if (gone)
        changes.push({
          provider: r.name,
          providerUuid: r.uuid,
          host: '',
          action: 'delete',
          details: ['root provider of a host Berth no longer has'],
          deviceAddresses: [],
        });
    }
    this.conn.ok();
    if (full) {
      this.lastFullSyncAt = new Date();
      this.resyncAt = Date.now() + this.resyncMs;
    }
    if (changes.length > 0) this.o.onChanges?.(changes);
    for (const c of changes) {
      const line = `Placement: ${c.action} ${c.provider}${c.details.length ? `: ${c.details.join('; ')}` : ''}`;
      if (c.action === 'update') this.log.debug({ provider: c.provider, host: c.host }, line);
      else if (c.action !== 'blocked') this.log.info({ provider: c.provider, host: c.host }, line);
    }
    return changes;
  }

  /** Providers whose generation moved since Berth read or wrote them (drift.ts): forgotten, read again, written. */
  private async checkDrift(): Promise<void> {
    await this.conn.ready();
    const trees = new Map<string, DriftTree & { known: Map<string, number | null> }>();
    for (const [name, d] of this.desired) {
      const root = this.roots.get(d.nodename);
      const a = this.actual.get(name);
      // Not read yet, or waiting to be written anyway: nothing to compare.
      if (!root || !('uuid' in root) || a === undefined || this.pending.has(name)) continue;
      const tree = trees.get(root.uuid) ?? { root: root.uuid, known: new Map<string, number | null>() };
      trees.set(root.uuid, tree);
      tree.known.set(name, a?.generation ?? null);
    }
    for (const m of await this.drift.check([...trees.values()])) {
      this.log.debug(
        { provider: m.name, was: m.was, now: m.now },
        `Placement: the generation of ${m.name} moved (${m.was ?? 'absent'} → ${m.now ?? 'absent'}); reading it again`,
      );
      this.actual.delete(m.name);
      this.drifted.add(m.name);
      this.mark(m.name, this.revision, this.desired.get(m.name)?.host ?? null);
    }
  }

  private driftRepaired(name: string, made: PlacementChange[]): void {
    this.driftRepairs++;
    this.log.warn(
      { provider: name, changes: made.map((c) => `${c.action}: ${c.details.join('; ')}`) },
      `Placement: ${name} was changed by another writer; Berth wrote it back (${made.map((c) => c.details.join('; ')).join('; ')})`,
    );
    this.o.onDriftRepaired?.(made);
  }

  /** Berth's providers Placement has that Berth no longer wants: marked pending (they go, or are kept while allocated). */
  private async findOrphans(): Promise<{ orphanRoots: Array<{ uuid: string; name: string }> }> {
    const owned = await this.api.providers({ required: OWNER_TRAIT });
    const byNodename = new Map<string, string>();
    for (const h of this.hosts.keys()) byNodename.set(this.o.nodename(h), h);
    const orphanRoots: Array<{ uuid: string; name: string }> = [];
    for (const p of owned) {
      if (this.desired.has(p.name)) continue;
      if (p.parent_provider_uuid === null) {
        if (!byNodename.has(p.name) && this.side.ownsHost(null))
          orphanRoots.push({ uuid: p.uuid, name: p.name });
        continue;
      }
      const host = [...byNodename].find(([n]) => p.name.startsWith(`${n}_`))?.[1] ?? null;
      this.mark(p.name, this.revision, host);
    }
    return { orphanRoots };
  }

  /** Whether writing this provider holds a device back (those go first). */
  private isHold(name: string): boolean {
    const d = this.desired.get(name);
    const a = this.actual.get(name);
    if (!d || a === undefined || a === null) return true;
    const inv = a.inventories[d.resourceClass];
    return !inv || d.reserved > inv.reserved;
  }

  // --- one provider ------------------------------------------------------

  private async readActual(name: string): Promise<ActualProvider | null> {
    const p = await this.api.providerByName(name);
    if (!p) return null;
    try {
      for (let i = 0; ; i++) {
        const t = await this.api.traits(p.uuid);
        const inv = await this.api.inventories(p.uuid);
        if (t.generation === inv.generation || i >= 3) {
          return {
            uuid: p.uuid,
            name,
            generation: inv.generation,
            parent: p.parent_provider_uuid,
            traits: t.traits,
            inventories: inv.inventories,
          };
        }
      }
    } catch (err) {
      // Deleted between the reads (by its owner, or by Berth's own earlier pass): absent.
      if (err instanceof PlacementRefused && err.status === 404) return null;
      throw err;
    }
  }

  /** Reads (or trusts the cache), compares, writes; a generation conflict re-reads and tries again. */
  private async reconcile(
    name: string,
    desired: DesiredProvider | null,
    dryRun: boolean,
  ): Promise<PlacementChange[]> {
    let fresh = dryRun;
    for (let attempt = 0; attempt < 5; attempt++) {
      let actual = fresh ? undefined : this.actual.get(name);
      if (actual === undefined) {
        actual = await this.readActual(name);
        if (!dryRun) this.actual.set(name, actual);
      }
      try {
        return await this.apply(name, desired, actual, dryRun);
      } catch (err) {
        const conflict =
          err instanceof PlacementRefused &&
          (err.isGenerationConflict ||
            (err.status === 409 &&
              (err.code === 'placement.duplicate_name' || err.code === 'placement.resource_provider.inuse')));
        if (!conflict) throw err;
        this.generationConflicts++;
        this.log.info(
          { provider: name, attempt: attempt + 1 },
          `Placement: ${err.message}; reading the provider again`,
        );
        this.actual.delete(name);
        fresh = true;
      }
    }
    throw new ProviderProblem(
      `${name}: the provider kept changing under Berth (5 generation conflicts in a row)`,
    );
  }

  private async root(nodename: string, dryRun: boolean): Promise<{ uuid: string; created: boolean } | null> {
    const c = this.roots.get(nodename);
    if (c && 'uuid' in c) return { uuid: c.uuid, created: false };
    if (c && c.missingUntil > Date.now() && !dryRun) return null;
    const p = await this.api.providerByName(nodename);
    if (p) {
      if (p.parent_provider_uuid !== null) {
        throw new ProviderProblem(
          `provider "${nodename}" (${p.uuid}) is not a root provider: a compute node's provider has no parent`,
        );
      }
      this.roots.set(nodename, { uuid: p.uuid });
      return { uuid: p.uuid, created: false };
    }
    if (!this.o.createRoots) {
      this.roots.set(nodename, { missingUntil: Date.now() + this.pollMs });
      return null;
    }
    const uuid = providerUuid(nodename);
    if (dryRun) return { uuid, created: true };
    const made = await this.api.createProvider({ name: nodename, uuid });
    await this.api.putTraits(made.uuid, made.generation, [OWNER_TRAIT], nodename);
    this.roots.set(nodename, { uuid: made.uuid });
    this.log.info(
      { provider: nodename, uuid: made.uuid },
      'Placement: created a root provider (no compute node provider: running without Nova)',
    );
    return { uuid: made.uuid, created: true };
  }

  private change(
    action: PlacementChange['action'],
    name: string,
    uuid: string,
    desired: DesiredProvider | null,
    details: string[],
    host = desired?.host ?? '',
  ): PlacementChange {
    return {
      provider: name,
      providerUuid: uuid,
      host,
      action,
      details,
      deviceAddresses: desired?.devices.map((d) => d.address) ?? [],
    };
  }

  private async apply(
    name: string,
    desired: DesiredProvider | null,
    actual: ActualProvider | null,
    dryRun: boolean,
  ): Promise<PlacementChange[]> {
    const api = this.api;
    if (!desired) {
      if (!actual?.traits.includes(OWNER_TRAIT)) {
        this.held.delete(name);
        return [];
      }
      const allocs = await api.allocations(actual.uuid);
      const consumers = Object.keys(allocs.consumers).sort();
      if (consumers.length > 0) {
        // Berth would delete it, but a consumer holds it: it stays, unschedulable, and Berth says so.
        const holdAll: Inventories = {};
        let raise = false;
        for (const [rc, r] of Object.entries(actual.inventories)) {
          holdAll[rc] = { ...r, reserved: r.total };
          raise ||= r.reserved < r.total;
        }
        const host = this.held.get(name)?.host ?? this.pending.get(name)?.host ?? '';
        if (!dryRun) {
          if (raise)
            actual.generation = await api.putInventories(actual.uuid, actual.generation, holdAll, name);
          if (!this.held.has(name)) {
            this.log.warn(
              { provider: name, uuid: actual.uuid, consumers },
              `Placement: the device of ${name} went away, but Placement holds allocations of ${consumers.join(', ')} against its provider: kept, reserved, until they go`,
            );
          }
          this.held.set(name, { uuid: actual.uuid, host, consumers, retryAt: Date.now() + this.pollMs });
        }
        return [
          this.change(
            'keep',
            name,
            actual.uuid,
            null,
            [`allocations of ${consumers.join(', ')} hold it${raise ? '; reserved → total' : ''}`],
            host,
          ),
        ];
      }
      if (!dryRun) {
        await api.deleteProvider(actual.uuid, name);
        this.actual.set(name, null);
        this.held.delete(name);
        this.synced.delete(name);
      }
      return [
        this.change(
          'delete',
          name,
          actual.uuid,
          null,
          ['its device is gone'],
          this.pending.get(name)?.host ?? '',
        ),
      ];
    }

    this.held.delete(name);
    const changes: PlacementChange[] = [];
    const root = await this.root(desired.nodename, dryRun);
    if (!root) {
      throw new ProviderProblem(
        `waiting for the compute node provider "${desired.nodename}" (nova-compute creates it; without Nova, start the scheduler with --placement-create-roots)`,
      );
    }
    if (root.created)
      changes.push(this.change('create', desired.nodename, root.uuid, null, ['root provider'], desired.host));
    if (!actual) {
      if (desired.problem) throw new ProviderProblem(`${name}: ${desired.problem}`);
      if (dryRun) {
        actual = { uuid: desired.uuid, name, generation: 0, parent: root.uuid, traits: [], inventories: {} };
      } else {
        const made = await api.createProvider({ name, uuid: desired.uuid, parent: root.uuid });
        actual = {
          uuid: made.uuid,
          name,
          generation: made.generation,
          parent: root.uuid,
          traits: [],
          inventories: {},
        };
        this.actual.set(name, actual);
      }
      changes.push(this.change('create', name, actual.uuid, desired, [`under ${desired.nodename}`]));
    } else if (!actual.traits.includes(OWNER_TRAIT)) {
      // Ours only if it carries Berth's mark, or it is the bare provider Berth created before a crash.
      const bare = actual.traits.length === 0 && Object.keys(actual.inventories).length === 0;
      if (!bare || actual.uuid !== desired.uuid) {
        throw new ProviderProblem(
          `a provider named ${name} (${actual.uuid}) exists and is not Berth's (traits: ${actual.traits.join(', ') || 'none'}): ` +
            'Berth leaves it alone (is Nova reporting this device too? [pci] report_in_placement must be off for devices Berth reports)',
        );
      }
    }
    if (actual.parent !== root.uuid) {
      throw new ProviderProblem(
        `${name} (${actual.uuid}) is under ${actual.parent ?? 'no parent'}, not under compute node ${desired.nodename} (${root.uuid})`,
      );
    }
    const wantTraits = desired.problem
      ? [...new Set([...actual.traits, OWNER_TRAIT])].sort()
      : desired.traits;
    const wantInv: Inventories = {};
    if (desired.problem) {
      for (const [rc, r] of Object.entries(actual.inventories)) wantInv[rc] = { ...r, reserved: r.total };
    } else {
      wantInv[desired.resourceClass] = {
        total: desired.total,
        reserved: desired.reserved,
        min_unit: 1,
        max_unit: desired.total,
        step_size: 1,
        allocation_ratio: 1,
      };
    }
    const invSame =
      Object.keys(actual.inventories).length === Object.keys(wantInv).length &&
      Object.entries(wantInv).every(([rc, w]) => {
        const a = actual!.inventories[rc];
        return (
          a !== undefined &&
          a.total === w.total &&
          a.reserved === w.reserved &&
          a.min_unit === w.min_unit &&
          a.max_unit === w.max_unit &&
          a.step_size === w.step_size &&
          a.allocation_ratio === w.allocation_ratio
        );
      });
    const cur = actual;
    const writeTraits = async () => {
      if (sameSet(cur.traits, wantTraits)) return null;
      const added = wantTraits.filter((t) => !cur.traits.includes(t));
      const removed = cur.traits.filter((t) => !wantTraits.includes(t));
      if (!dryRun) {
        for (const t of added) {
          if (isTrait(t) && t.startsWith('CUSTOM_') && !this.knownTraits.has(t)) {
            await api.ensureTrait(t);
            this.knownTraits.add(t);
          }
        }
        cur.generation = await api.putTraits(cur.uuid, cur.generation, wantTraits, name);
        cur.traits = [...wantTraits];
      }
      return [...added.map((t) => `traits + ${t}`), ...removed.map((t) => `traits - ${t}`)].join(', ');
    };
    const writeInventory = async () => {
      if (invSame) return null;
      const what = inventoryChange(cur.inventories, wantInv);
      if (!dryRun) {
        for (const rc of Object.keys(wantInv)) {
          if (isResourceClass(rc) && rc.startsWith('CUSTOM_') && !this.knownRcs.has(rc)) {
            await api.ensureResourceClass(rc);
            this.knownRcs.add(rc);
          }
        }
        cur.generation = await api.putInventories(cur.uuid, cur.generation, wantInv, name);
        cur.inventories = structuredClone(wantInv);
      }
      return what;
    };
    const prev = actual.inventories[desired.resourceClass];
    const holding = desired.problem !== '' || !prev || desired.reserved > prev.reserved;
    // A new provider gets its traits before it can be scheduled; a hold is written before anything else.
    const steps =
      holding && Object.keys(actual.inventories).length > 0
        ? [writeInventory, writeTraits]
        : [writeTraits, writeInventory];
    const details: string[] = [];
    for (const step of steps) {
      const d = await step();
      if (d) details.push(d);
    }
    if (desired.problem) details.push(desired.problem);
    if (details.length > 0) {
      const created = changes.find((c) => c.provider === name && c.action === 'create');
      if (created) created.details.push(...details);
      else changes.push(this.change('update', name, actual.uuid, desired, details));
    }
    if (desired.problem) throw Object.assign(new ProviderProblem(`${name}: ${desired.problem}`), { changes });
    return changes;
  }

  // --- an operator's `placement sync` -------------------------------------

  /** A full pass now. With dryRun, every provider is read fresh and nothing is written. */
  async sync(dryRun: boolean): Promise<PlacementChange[]> {
    if (!dryRun) {
      return this.withLock(async () => {
        await this.pull();
        return this.pass(true);
      });
    }
    return this.withLock(async () => {
      await this.pull();
      await this.conn.ready();
      this.refreshDesired();
      const names = new Map<string, string | null>();
      for (const [n, p] of this.desired) names.set(n, p.host);
      const owned = await this.api.providers({ required: OWNER_TRAIT });
      const byNodename = new Map([...this.hosts.keys()].map((h) => [this.o.nodename(h), h]));
      for (const p of owned) {
        if (names.has(p.name) || p.parent_provider_uuid === null) continue;
        names.set(p.name, [...byNodename].find(([n]) => p.name.startsWith(`${n}_`))?.[1] ?? null);
      }
      const out: PlacementChange[] = [];
      for (const [name, host] of names) {
        if (!this.side.ownsHost(host)) continue;
        const desired = this.desired.get(name) ?? null;
        try {
          const made = await this.reconcile(name, desired, true);
          out.push(...made.map((c) => (c.host ? c : { ...c, host: host ?? '' })));
        } catch (err) {
          if (err instanceof PlacementUnreachable) throw err;
          const made = (err as { changes?: PlacementChange[] }).changes ?? [];
          out.push(...made);
          out.push({
            provider: name,
            providerUuid: desired?.uuid ?? '',
            host: host ?? '',
            action: 'blocked',
            details: [(err as Error).message],
            deviceAddresses: desired?.devices.map((d) => d.address) ?? [],
          });
        }
      }
      for (const p of owned) {
        if (p.parent_provider_uuid === null && !byNodename.has(p.name) && this.side.ownsHost(null)) {
          out.push({
            provider: p.name,
            providerUuid: p.uuid,
            host: '',
            action: 'delete',
            details: ['root provider of a host Berth no longer has (once its children are gone)'],
            deviceAddresses: [],
          });
        }
      }
      return out;
    });
  }
}
