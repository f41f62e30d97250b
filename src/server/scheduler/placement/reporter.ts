/**
 * Report mode: Placement shows Berth's devices (desired.ts says what), and
 * follows every change of their state.
 *
 * How it stays in step, in bounded memory (decision 85). The reporter holds
 * no copy of the fleet: it follows the device change feed in revision order,
 * and every change marks its device's *host* as pending (with the provider
 * names the change touched, its revision and when it was first seen); a host
 * whose agent connects or goes away is marked too. A pass takes the pending
 * hosts in revision order and, for each, reads that host's devices from the
 * store (one short unit, tens of devices), computes the host's desired
 * providers (desired.ts), and writes each provider the host has or had: those
 * to hold back (reserved going up, providers to delete) first. A full resync
 * walks the hosts by pages (ListHosts' paging) a page per pass, reading each
 * host's provider tree in Placement afresh (`in_tree`), so a provider Berth
 * no longer wants under a host it knows is found there; Berth's providers
 * under hosts it no longer knows are found at the walk's end (see
 * sweepUnknownHosts). What Placement holds is cached for the last
 * CACHED_HOSTS hosts written (host-cache.ts) (the drift check compares those), never for the
 * fleet. Writes are level-based (the latest state, not a replay), so a
 * catch-up after an outage writes each provider once.
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
 * reach: nothing is lost (the pending hosts stay, the lag shows), the pass is
 * retried with backoff, and the catch-up runs in order when it answers. */
import type { Logger } from 'pino';
import type { HostName, PciAddress, Uuid } from '../../../identifiers.js';
import type { DeviceRecord } from '../domain/device-state.js';
import { type PlacementApi, PlacementRefused, PlacementUnreachable } from './api.js';
import type { PlacementConnection } from './connection.js';
import { RetryDelay } from './connection.js';
import { type DesiredProvider, desiredProviders, notReportedBecause, providerNameOf } from './desired.js';
import { DriftCheck } from './drift.js';
import { PlanExecutor, ProviderProblem } from './executor.js';
import { HostCache, providersOfUnknownHosts, providersUnder } from './host-cache.js';
import { providerUuid } from './names.js';
import { holdsBack } from './plan.js';
import type { DeviceProviderInfo, PlacementChange, PlacementProblem, SchedulerSide } from './port.js';

/** Hosts a resync walk reads per pass (a page of ListHosts' paging). */
const WALK_PAGE = 100;
/** The key of providers of hosts Berth no longer knows. */
const NO_HOST = '';

export interface ReporterOptions {
  conn: PlacementConnection;
  side: SchedulerSide;
  logger: Logger;
  nodename: (host: string) => string;
  /** The host of a compute node name (the inverse of `nodename`). */
  hostOf: (nodename: string) => string;
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

interface PendingHost {
  revision: number;
  /** When the change was first seen (ms): the lag. */
  since: number;
  /** Providers the changes named (besides the host's desired ones): a device that went, or changed provider. */
  names: Set<string>;
}

/** A resync walk over the hosts: where it is, and whether it is the catch-up after a (re)start. */
interface Walk {
  after: string;
  revision: number;
  since: number;
  catchUp: boolean;
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

  /** Whether each host's agent is connected (by host: the fleet's hosts, never its devices). */
  private connected = new Map<string, boolean>();
  private loaded = false;
  private revision = 0; // the device change feed's, read up to
  private readonly pending = new Map<string, PendingHost>();
  private walk: Walk | null = null;
  private hostsReadAt = 0;
  private writing: PendingHost | null = null; // the pending host a pass is writing now
  /** Reads, plans and writes one provider; holds what Placement has as Berth last read or wrote it. */
  private readonly executor: PlanExecutor;
  private readonly problems = new Map<string, PlacementProblem & { retryAt: number }>();
  private readonly held = new Map<
    string,
    { uuid: string; host: string; consumers: string[]; retryAt: number }
  >();
  /** The executor's: what Placement holds per provider (cached hosts only). */
  private readonly actual: PlanExecutor['actual'];
  /** What Placement holds of the providers of the last hosts written (bounded by hosts). */
  private readonly cached: HostCache;
  private readonly synced = new Map<string, number>(); // when each host was last written in full (ms)
  /** Providers Placement had before Berth, under a uuid not derived from their name: name → uuid, uuid → name. */
  private readonly adopted = new Map<string, string>();
  private readonly adoptedName = new Map<string, string>();
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
    this.cached = new HostCache(this.executor);
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

  /** Providers a change waits for (a host marked without one counts one), and a catch-up walk under way. */
  get pendingCount(): number {
    let n = 0;
    for (const p of this.waiting()) n += Math.max(1, 'names' in p ? p.names.size : 0);
    return n;
  }

  private *waiting(): Iterable<PendingHost | Walk> {
    yield* this.pending.values();
    if (this.writing) yield this.writing;
    if (this.walk?.catchUp) yield this.walk;
  }

  get lagSeconds(): number {
    let oldest = Number.POSITIVE_INFINITY;
    for (const p of this.waiting()) oldest = Math.min(oldest, p.since);
    return Number.isFinite(oldest) ? Math.max(0, (Date.now() - oldest) / 1000) : 0;
  }

  get appliedRevision(): number {
    let min = Number.POSITIVE_INFINITY;
    for (const p of this.waiting()) min = Math.min(min, p.revision);
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
    const p = this.pending.get(d.host);
    if (p && (p.names.size === 0 || p.names.has(name)))
      notes.push(`a change waits to be written (${this.conn.reachable ? 'now' : this.conn.lastError})`);
    const at = why ? undefined : this.synced.get(d.host);
    return {
      providerUuid: this.adopted.get(name) ?? this.actual.get(name)?.uuid ?? providerUuid(name),
      providerName: name,
      syncedAt: at === undefined ? '' : new Date(at).toISOString(),
      note: notes.join('; '),
    };
  }

  /**
   * The devices a provider stands for, from the store: the host `near` names
   * first (no call to Placement), else the host Placement says the provider
   * is under (its name and its parent's, the compute node).
   */
  async devicesOfProvider(
    uuid: string,
    near?: string,
  ): Promise<Array<{ deviceUuid: Uuid; host: HostName; address: PciAddress }>> {
    const of = (p: DesiredProvider | undefined) =>
      p?.devices.map((d) => ({ deviceUuid: d.uuid, host: d.host, address: d.address })) ?? [];
    if (near) {
      const desired = await this.desiredOf(this.o.hostOf(near));
      const name = this.adoptedName.get(uuid);
      const p = [...desired.values()].find((x) => x.uuid === uuid || x.name === name);
      if (p) return of(p);
    }
    const p = await this.api.provider(uuid);
    if (!p?.parent_provider_uuid) return [];
    const root = await this.api.provider(p.parent_provider_uuid);
    if (!root) return [];
    return of((await this.desiredOf(this.o.hostOf(root.name))).get(p.name));
  }

  /** A host's desired providers, from its devices in the store (desired.ts). */
  private async desiredOf(host: string): Promise<Map<string, DesiredProvider>> {
    const devices = host === NO_HOST ? [] : await this.side.hostDevices(host as HostName);
    const view = new Map([
      [host as HostName, { name: host as HostName, connected: !!this.connected.get(host) }],
    ]);
    return desiredProviders(devices, view, {
      nodename: this.o.nodename,
      standardTraits: this.conn.standardTraits,
      ownsHost: (h) => this.side.ownsHost(h),
    });
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
        for (const [name, p] of this.problems) if (p.retryAt <= now) this.mark(p.host, this.revision, name);
        for (const [name, h] of this.held) if (h.retryAt <= now) this.mark(h.host, this.revision, name);
        if (now >= this.retryAt) {
          try {
            if (now >= this.resyncAt && !this.walk) this.startWalk(false);
            const drift = !this.walk && this.loaded && now >= this.driftAt;
            await this.withLock(async () => {
              if (drift) await this.checkDrift();
              return this.pass(1);
            });
            if (drift) this.driftAt = Date.now() + this.driftMs;
            this.retry.reset();
          } catch (err) {
            if (!(err instanceof PlacementUnreachable)) throw err;
            this.conn.down(
              err,
              () =>
                `${this.pendingCount} provider(s) wait, the oldest change ${Math.round(this.lagSeconds)} s ago`,
            );
            this.retryAt = Date.now() + this.retry.next();
          }
        }
        const due = [this.resyncAt, this.driftAt, ...[...this.problems.values()].map((p) => p.retryAt)];
        due.push(...[...this.held.values()].map((h) => h.retryAt));
        if (!this.conn.reachable) due.push(this.retryAt);
        else if (this.walk) due.push(0);
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

  private withLock<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.lock.then(fn, fn);
    this.lock = run.catch(() => {});
    return run;
  }

  /** A change to `host` (naming the provider `name`, when it is known) waits to be written. */
  private mark(host: string, revision: number, name?: string): void {
    let p = this.pending.get(host);
    if (!p) {
      p = { revision, since: Date.now(), names: new Set() };
      this.pending.set(host, p);
    }
    if (name !== undefined) p.names.add(name);
  }

  /** This scheduler's link to `host` connected or went: the host waits to be written now, not at the next hosts read. */
  hostConnection(host: string, connected: boolean): void {
    if (!this.loaded || this.connected.get(host) === connected) return;
    this.connected.set(host, connected);
    this.mark(host, this.revision);
  }

  private startWalk(catchUp: boolean): void {
    this.walk = { after: '', revision: this.revision, since: Date.now(), catchUp };
  }

  /** Berth's side → the pending hosts (never touches Placement, never reads the fleet's devices). */
  private async pull(): Promise<void> {
    const nodename = this.o.nodename;
    if (!this.loaded) {
      // Everything is compared again by a walk over the hosts, from the feed's revision now on.
      this.revision = await this.side.revision();
      this.connected = new Map((await this.side.hosts()).map((h) => [h.name, h.connected]));
      this.loaded = true;
      this.startWalk(true);
      return;
    }
    for (;;) {
      const events = await this.side.changesSince(this.revision, 1000);
      if (events === 'compacted') {
        this.log.warn(
          { revision: this.revision },
          'Placement reporting: the change feed was compacted; comparing every host again',
        );
        this.loaded = false;
        return this.pull();
      }
      for (const e of events) {
        this.mark(e.device.host, e.revision, providerNameOf(e.device, nodename));
        this.revision = e.revision;
      }
      if (events.length < 1000) break;
    }
    // Every host again (by pages), but during a walk once a poll, not at each of its pages.
    if (this.walk && Date.now() - this.hostsReadAt < this.pollMs) return;
    this.hostsReadAt = Date.now();
    const hosts = new Map((await this.side.hosts()).map((h) => [h.name as string, h.connected]));
    for (const [name, c] of hosts) if (this.connected.get(name) !== c) this.mark(name, this.revision);
    for (const name of this.connected.keys()) if (!hosts.has(name)) this.mark(name, this.revision);
    this.connected = hosts;
  }

  /**
   * Writes the pending hosts (in revision order), then up to `walkPages`
   * pages of a resync walk (Infinity: to its end, with the sweep of hosts
   * Berth no longer knows).
   */
  private async pass(walkPages: number): Promise<PlacementChange[]> {
    await this.conn.ready();
    const changes: PlacementChange[] = [];
    const order = [...this.pending.entries()].sort((a, b) => a[1].revision - b[1].revision);
    for (const [host, p] of order) {
      // A change that comes in meanwhile marks the host again, for the next pass; until
      // written, this one still counts as waiting.
      this.pending.delete(host);
      this.writing = p;
      try {
        await this.passHost(host, p.names, false, changes);
      } catch (err) {
        // Not written: it waits on, as old as it was.
        const again = this.pending.get(host);
        this.pending.set(host, p);
        for (const n of again?.names ?? []) p.names.add(n);
        throw err;
      } finally {
        this.writing = null;
      }
    }
    for (let i = 0; i < walkPages && this.walk; i++) {
      const page = await this.side.hostsPage(this.walk.after, WALK_PAGE);
      for (const h of page) await this.passHost(h.name, [], true, changes);
      if (page.length === WALK_PAGE) {
        this.walk.after = page[page.length - 1]!.name;
        continue;
      }
      await this.sweepUnknownHosts(false, changes);
      this.walk = null;
      this.lastFullSyncAt = new Date();
      this.resyncAt = Date.now() + this.resyncMs;
      this.driftAt = Date.now() + this.driftMs;
    }
    // Nothing to write for a while: still ask whether Placement answers, so an
    // outage shows in the status before the next change has to wait for it.
    if (order.length === 0 && walkPages === 1 && !this.walk) {
      const last = this.conn.lastContactAt?.getTime() ?? 0;
      if (Date.now() - last >= this.pollMs) await this.api.versions();
    }
    this.conn.ok();
    if (changes.length > 0) this.o.onChanges?.(changes);
    for (const c of changes) {
      const line = `Placement: ${c.action} ${c.provider}${c.details.length ? `: ${c.details.join('; ')}` : ''}`;
      if (c.action === 'update') this.log.debug({ provider: c.provider, host: c.host }, line);
      else if (c.action !== 'blocked') this.log.info({ provider: c.provider, host: c.host }, line);
    }
    return changes;
  }

  /**
   * One host: its devices read from the store, its desired providers, and
   * each provider it has or had written (holds first). `fresh` (a resync, a
   * dry run) forgets what Berth knew of the host's providers and lists its
   * tree in Placement, so providers Berth no longer wants there are found.
   */
  private async passHost(
    host: string,
    names: Iterable<string>,
    fresh: boolean,
    changes: PlacementChange[],
    dryRun = false,
  ): Promise<void> {
    if (!this.side.ownsHost(host === NO_HOST ? null : host)) return;
    const desired = await this.desiredOf(host);
    const all = new Set([...desired.keys(), ...names]);
    if (host !== NO_HOST) {
      const nodename = this.o.nodename(host);
      if (fresh && !dryRun) this.cached.forget(host);
      for (const n of this.cached.namesOf(host)) all.add(n);
      if (fresh) for (const n of await providersUnder(this.api, nodename)) all.add(n);
    }
    const order = [...all]
      .map((name) => ({ name, hold: holdsBack(desired.get(name), this.actual.get(name)) }))
      .sort((a, b) => (a.hold === b.hold ? a.name.localeCompare(b.name) : a.hold ? -1 : 1));
    let failed = false;
    for (const { name } of order) {
      const want = desired.get(name) ?? null;
      try {
        const made = await this.reconcile(name, want, host, dryRun);
        if (dryRun) {
          changes.push(...made.map((c) => (c.host ? c : { ...c, host })));
          continue;
        }
        if (this.drifted.delete(name) && made.length > 0) this.driftRepaired(name, made);
        this.problems.delete(name);
        changes.push(...made);
      } catch (err) {
        if (err instanceof PlacementUnreachable) throw err;
        failed = true;
        const note =
          err instanceof ProviderProblem || err instanceof PlacementRefused ? err.message : String(err);
        // What was written before the problem (a hold on a provider Berth cannot otherwise make right).
        changes.push(...((err as { changes?: PlacementChange[] }).changes ?? []));
        changes.push({
          provider: name,
          providerUuid: want?.uuid ?? '',
          host,
          action: 'blocked',
          details: [note],
          deviceAddresses: want?.devices.map((d) => d.address) ?? [],
        });
        if (dryRun) continue;
        this.drifted.delete(name);
        if (!(err instanceof ProviderProblem) && !(err instanceof PlacementRefused)) {
          this.log.error({ err, provider: name }, 'Placement reporting: unexpected failure');
        }
        if (this.problems.get(name)?.note !== note)
          this.log.warn({ provider: name, host }, `Placement: ${note}`);
        this.problems.set(name, { provider: name, host, note, retryAt: Date.now() + this.pollMs });
        this.actual.delete(name);
      }
    }
    if (dryRun || host === NO_HOST) return;
    this.cached.remember(host, this.o.nodename(host), all);
    if (!failed) this.synced.set(host, Date.now());
  }

  /** Berth's providers under hosts Berth no longer knows (deleted while away, their events compacted): they go. */
  private async sweepUnknownHosts(dryRun: boolean, changes: PlacementChange[]): Promise<void> {
    const known = new Set([...this.connected.keys()].map((h) => this.o.nodename(h)));
    const { roots, children } = await providersOfUnknownHosts(this.api, known);
    if (!this.side.ownsHost(null)) return;
    if (children.length > 0) await this.passHost(NO_HOST, children, true, changes, dryRun);
    for (const r of roots) {
      const gone =
        dryRun ||
        (await this.api.deleteProvider(r.uuid, r.name).catch((err) => {
          if (err instanceof PlacementRefused) return false; // children left, or in use: the next resync
          throw err;
        }));
      const why = `root provider of a host Berth no longer has${dryRun ? ' (once its children are gone)' : ''}`;
      if (gone) {
        changes.push({
          provider: r.name,
          providerUuid: r.uuid,
          host: '',
          action: 'delete',
          details: [why],
          deviceAddresses: [],
        });
      }
    }
  }

  /** Providers whose generation moved since Berth read or wrote them (drift.ts): forgotten, read again, written. */
  private async checkDrift(): Promise<void> {
    await this.conn.ready();
    const { trees, hostOf } = this.cached.driftTrees((host) => this.pending.has(host));
    for (const m of await this.drift.check(trees)) {
      this.log.debug(
        { provider: m.name, was: m.was, now: m.now },
        `Placement: the generation of ${m.name} moved (${m.was ?? 'absent'} → ${m.now ?? 'absent'}); reading it again`,
      );
      this.actual.delete(m.name);
      this.drifted.add(m.name);
      this.mark(hostOf.get(m.name) ?? NO_HOST, this.revision, m.name);
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

  /** Plans and (unless a dry run) writes one provider (plan.ts, executor.ts); a provider Berth cannot make right throws. */
  private async reconcile(
    name: string,
    desired: DesiredProvider | null,
    host: string,
    dryRun: boolean,
  ): Promise<PlacementChange[]> {
    const p = await this.executor.reconcile(
      { name, provider: desired, host: this.held.get(name)?.host ?? host },
      dryRun,
    );
    if (!dryRun) {
      const uuid = this.actual.get(name)?.uuid;
      this.adopt(name, uuid && uuid !== providerUuid(name) ? uuid : null);
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
      }
    }
    if (p.problem) throw Object.assign(new ProviderProblem(p.problem), { changes: p.changes });
    return p.changes;
  }

  /** Remembers (or forgets, null) that the provider's uuid in Placement is not the one derived from its name. */
  private adopt(name: string, uuid: string | null): void {
    const before = this.adopted.get(name);
    if (before === uuid || (before === undefined && uuid === null)) return;
    if (before !== undefined) this.adoptedName.delete(before);
    if (uuid === null) {
      this.adopted.delete(name);
      return;
    }
    this.adopted.set(name, uuid);
    this.adoptedName.set(uuid, name);
  }

  // --- an operator's `placement sync` -------------------------------------

  /** A full pass now. With dryRun, every provider is read fresh and nothing is written. */
  async sync(dryRun: boolean): Promise<PlacementChange[]> {
    return this.withLock(async () => {
      await this.pull();
      if (!dryRun) {
        if (this.walk?.after !== '') this.startWalk(this.walk?.catchUp ?? false);
        return this.pass(Number.POSITIVE_INFINITY);
      }
      await this.conn.ready();
      const out: PlacementChange[] = [];
      let after = '';
      for (;;) {
        const page = await this.side.hostsPage(after, WALK_PAGE);
        for (const h of page)
          await this.passHost(h.name, this.pending.get(h.name)?.names ?? [], true, out, true);
        if (page.length < WALK_PAGE) break;
        after = page[page.length - 1]!.name;
      }
      await this.sweepUnknownHosts(true, out);
      return out;
    });
  }
}
