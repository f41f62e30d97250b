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
 * One provider at a time, what to write is planned by plan.ts (pure: the
 * desired provider and what Placement holds in, the ordered writes out) and
 * carried out by executor.ts; an operator's dry run prints the plan.
 *
 * Every write carries the provider generation Berth read; a 409
 * (placement.concurrent_update) re-reads the provider and tries again (5
 * times, then the provider is a problem, retried later). Placement out of
 * reach: nothing is lost (the pending set grows, the lag shows), the pass is
 * retried with backoff, and the catch-up runs in order when it answers.
 */
import type { Logger } from 'pino';
import type { HostName, PciAddress, Uuid } from '../../../identifiers.js';
import type { DeviceRecord } from '../domain/device-state.js';
import { type PlacementApi, PlacementRefused, PlacementUnreachable } from './api.js';
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
import { PlanExecutor, ProviderProblem } from './executor.js';
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

interface Pending {
  revision: number;
  /** When the change was first seen (ms): the lag. */
  since: number;
  host: string | null;
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
  /** Reads, plans and writes one provider; holds what Placement has as Berth last read or wrote it. */
  private readonly executor: PlanExecutor;
  private readonly problems = new Map<string, PlacementProblem & { retryAt: number }>();
  private readonly held = new Map<
    string,
    { uuid: string; host: string; consumers: string[]; retryAt: number }
  >();
  /** The executor's: what Placement holds per provider, and the compute node providers. */
  private readonly actual: PlanExecutor['actual'];
  private readonly roots: PlanExecutor['roots'];
  private readonly synced = new Map<string, { at: string; uuid: string }>();
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
    this.executor = new PlanExecutor({
      api: this.api,
      log: this.log,
      createRoots: o.createRoots,
      pollMs: this.pollMs,
    });
    this.actual = this.executor.actual;
    this.roots = this.executor.roots;
  }

  /** 409s on a provider generation, re-read and retried (since start). */
  get generationConflicts(): number {
    return this.executor.generationConflicts;
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

  /** Plans and (unless a dry run) writes one provider (plan.ts, executor.ts); a provider Berth cannot make right throws. */
  private async reconcile(
    name: string,
    desired: DesiredProvider | null,
    dryRun: boolean,
  ): Promise<PlacementChange[]> {
    const host = this.held.get(name)?.host ?? this.pending.get(name)?.host ?? '';
    const p = await this.executor.reconcile({ name, provider: desired, host }, dryRun);
    if (!dryRun) {
      if (p.kept) {
        if (!this.held.has(name)) {
          this.log.warn(
            { provider: name, uuid: p.kept.uuid, consumers: p.kept.consumers },
            `Placement: the device of ${name} went away, but Placement holds allocations of ${p.kept.consumers.join(', ')} against its provider: kept, reserved, until they go`,
          );
        }
        this.held.set(name, {
          uuid: p.kept.uuid,
          host,
          consumers: p.kept.consumers,
          retryAt: Date.now() + this.pollMs,
        });
      } else {
        this.held.delete(name);
        if (p.steps.some((s) => s.kind === 'delete')) this.synced.delete(name);
      }
    }
    if (p.problem) throw Object.assign(new ProviderProblem(p.problem), { changes: p.changes });
    return p.changes;
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
