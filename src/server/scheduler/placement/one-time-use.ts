/**
 * Nova's one-time-use devices, scrubbed and returned (mode clean-one-time-use).
 *
 * Nova owns these devices: its PCI translator reports them (a provider per
 * device with HW_PCI_ONE_TIME_USE), and when an instance is given one it sets
 * `reserved = total` on the provider and never un-reserves it; its
 * documentation leaves the cleaning and the un-reserving to the operator.
 * Berth is that operator. For each host it follows, it looks (every poll, and
 * whenever Berth's own state changes) at the one-time-use providers under the
 * host's compute node provider. One that is reserved and has no allocation is
 * a device a tenant has left: Berth scrubs the device at that address through
 * its normal cleanup path (a job, the agent's CleanupDevice, proof judged by
 * the agent) and, once the device is `available` with that proof, sets
 * `reserved = 0` with the generation it read when it decided to scrub.
 *
 * Never un-reserved: a provider with an allocation (the tenant is there, or a
 * new one came), one whose scrub failed (the device goes to `error`, the
 * reason in `berth device show`; a later proven cleanup by the operator
 * counts), or one whose generation moved since Berth decided (something
 * changed it: Berth scrubs again). What a round is waiting for lives in memory
 * only: after a restart a reserved, unallocated provider is simply scrubbed
 * again, which costs time and never safety.
 */
import type { Logger } from 'pino';
import type { HostName, PciAddress, Uuid } from '../../../identifiers.js';
import type { DeviceRecord } from '../domain/device-state.js';
import {
  type Inventories,
  type PlacementApi,
  PlacementRefused,
  PlacementUnreachable,
  type Provider,
} from './api.js';
import { type PlacementConnection, PlacementIncompatible, RetryDelay } from './connection.js';
import { addressFromProviderName, ONE_TIME_USE_TRAIT } from './names.js';
import type { DeviceProviderInfo, PlacementChange, PlacementProblem, SchedulerSide } from './port.js';

export interface CleanerOptions {
  conn: PlacementConnection;
  side: SchedulerSide;
  logger: Logger;
  nodename: (host: string) => string;
  pollMs?: number;
  retryMaxMs?: number;
  onChanges?: (changes: PlacementChange[]) => void;
}

/** One reservation Berth is cleaning for. */
interface Round {
  uuid: string;
  name: string;
  host: string;
  address: string;
  /** The provider generation when Berth decided to scrub: the un-reserve is written with it. */
  generation: number;
  since: string;
  jobId: string | null;
  note: string;
  failed: boolean;
}

/** A one-time-use provider as Berth last saw it. */
interface Seen {
  uuid: string;
  name: string;
  host: HostName;
  address: PciAddress;
  deviceUuid: Uuid | null;
  reserved: number;
  total: number;
  consumers: string[];
  at: string;
}

export class OneTimeUseCleaner {
  private readonly api: PlacementApi;
  private readonly pollMs: number;
  private readonly retry: RetryDelay;
  private readonly rounds = new Map<string, Round>();
  private readonly seen = new Map<string, Seen>();
  private readonly problems = new Map<string, PlacementProblem>();
  private readonly abort = new AbortController();
  private running: Promise<void> | null = null;
  private lock: Promise<unknown> = Promise.resolve();
  private retryAt = 0;
  lastFullSyncAt: Date | null = null;
  /** Un-reserves refused for a stale generation (the provider changed while Berth scrubbed). */
  generationConflicts = 0;

  constructor(private readonly o: CleanerOptions) {
    this.api = o.conn.api;
    this.pollMs = o.pollMs ?? 10_000;
    this.retry = new RetryDelay(o.retryMaxMs ?? 30_000);
  }

  start(): void {
    this.running ??= this.loop();
  }

  async stop(): Promise<void> {
    this.abort.abort();
    await this.running;
  }

  get roundsInProgress(): number {
    return [...this.rounds.values()].filter((r) => !r.failed).length;
  }

  problemList(): PlacementProblem[] {
    const out = [...this.problems.values()];
    for (const r of this.rounds.values())
      if (r.failed || r.note) out.push({ provider: r.name, host: r.host, note: r.note });
    return out;
  }

  deviceProvider(d: DeviceRecord): DeviceProviderInfo | null {
    for (const s of this.seen.values()) {
      if (s.host !== d.host || s.address !== d.address) continue;
      const r = this.rounds.get(s.uuid);
      const state = s.consumers.length
        ? `in use in Nova (allocations of ${s.consumers.join(', ')})`
        : s.reserved >= s.total
          ? 'reserved by Nova after use'
          : 'available in Nova';
      return {
        providerUuid: s.uuid,
        providerName: s.name,
        syncedAt: s.at,
        note: [`Nova's one-time-use provider: ${state}`, r?.note ?? ''].filter(Boolean).join('; '),
      };
    }
    return null;
  }

  devicesOfProvider(uuid: string): Array<{ deviceUuid: Uuid; host: HostName; address: PciAddress }> {
    const s = this.seen.get(uuid);
    return s?.deviceUuid ? [{ deviceUuid: s.deviceUuid, host: s.host, address: s.address }] : [];
  }

  private async loop(): Promise<void> {
    const signal = this.abort.signal;
    while (!signal.aborted) {
      const seen = this.o.side.changeVersion;
      let waitMs = this.pollMs;
      if (Date.now() >= this.retryAt) {
        try {
          await this.withLock(() => this.pass(false));
          this.retry.reset();
        } catch (err) {
          if (signal.aborted) break;
          if (err instanceof PlacementUnreachable) {
            this.o.conn.down(err, () => `${this.roundsInProgress} scrub(s) in progress`);
            this.retryAt = Date.now() + this.retry.next();
            waitMs = this.retryAt - Date.now();
          } else if (err instanceof PlacementIncompatible) {
            this.o.conn.lastError = err.message;
            this.o.logger.error({ err: err.message }, 'Placement one-time-use cleaning stops');
            return;
          } else {
            this.o.logger.error({ err }, 'Placement one-time-use cleaning: a pass failed; trying again');
            waitMs = 5_000;
          }
        }
      } else {
        waitMs = this.retryAt - Date.now();
      }
      await this.o.side.waitForChange(seen, signal, Math.max(10, waitMs));
      // Berth's changes wake it, but a pass asks Placement about every one-time-use
      // provider: at most one pass per poll interval (or per second), whatever the burst.
      await new Promise((r) => setTimeout(r, Math.min(this.pollMs, 1_000)));
    }
  }

  private withLock<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.lock.then(fn, fn);
    this.lock = run.catch(() => {});
    return run;
  }

  /** A pass now; with dryRun, what it would do (nothing started, nothing written). */
  sync(dryRun: boolean): Promise<PlacementChange[]> {
    return this.withLock(() => this.pass(dryRun));
  }

  private async pass(dryRun: boolean): Promise<PlacementChange[]> {
    const conn = this.o.conn;
    await conn.ready();
    if (!conn.standardTraits.has(ONE_TIME_USE_TRAIT)) {
      throw new PlacementIncompatible(
        `Placement at ${this.api.url} does not know the trait ${ONE_TIME_USE_TRAIT} (its os-traits predate Nova's ` +
          'one-time-use devices, Nova 2025.1): no Nova provider can carry it, so there is nothing to clean',
      );
    }
    const changes: PlacementChange[] = [];
    const listed = new Set<string>();
    const hosts = (await this.o.side.hosts()).filter((h) => this.o.side.ownsHost(h.name));
    // No host to look at: still ask whether Placement answers (the status says so).
    if (hosts.length === 0) await this.api.versions();
    for (const host of hosts) {
      const nodename = this.o.nodename(host.name);
      const root = await this.api.providerByName(nodename);
      if (!root) {
        this.problems.set(`host:${host.name}`, {
          provider: nodename,
          host: host.name,
          note: `no compute node provider "${nodename}" in Placement (is nova-compute running there?)`,
        });
        continue;
      }
      this.problems.delete(`host:${host.name}`);
      const rps = await this.api.providers({ in_tree: root.uuid, required: ONE_TIME_USE_TRAIT });
      for (const rp of rps) {
        listed.add(rp.uuid);
        const c = await this.consider(host.name, nodename, rp, dryRun);
        if (c) changes.push(c);
      }
    }
    if (!dryRun) {
      for (const uuid of [...this.rounds.keys()]) if (!listed.has(uuid)) this.rounds.delete(uuid);
      for (const uuid of [...this.seen.keys()]) if (!listed.has(uuid)) this.seen.delete(uuid);
      this.lastFullSyncAt = new Date();
      if (changes.length > 0) this.o.onChanges?.(changes);
    }
    conn.ok();
    return changes;
  }

  private async consider(
    host: HostName,
    nodename: string,
    rp: Provider,
    dryRun: boolean,
  ): Promise<PlacementChange | null> {
    const log = this.o.logger.child({ provider: rp.name, uuid: rp.uuid, host });
    const address = addressFromProviderName(nodename, rp.name);
    if (!address) {
      this.problems.set(rp.uuid, {
        provider: rp.name,
        host,
        note: `not named <${nodename}>_<PCI address>: not a PCI device provider Berth knows`,
      });
      return null;
    }
    let inv: Awaited<ReturnType<PlacementApi['inventories']>>;
    let allocs: Awaited<ReturnType<PlacementApi['allocations']>>;
    try {
      inv = await this.api.inventories(rp.uuid);
      allocs = await this.api.allocations(rp.uuid);
    } catch (err) {
      if (err instanceof PlacementRefused && err.status === 404) return null; // deleted since it was listed
      throw err;
    }
    if (inv.generation !== allocs.generation) return null; // it changed between the reads: the next pass
    const entries = Object.entries(inv.inventories);
    const device = await this.o.side.device(host, address);
    const consumers = Object.keys(allocs.consumers).sort();
    const [rc, record] = entries[0] ?? ['', { total: 0, reserved: 0 }];
    if (!dryRun) {
      this.seen.set(rp.uuid, {
        uuid: rp.uuid,
        name: rp.name,
        host,
        address,
        deviceUuid: device?.uuid ?? null,
        reserved: record.reserved,
        total: record.total,
        consumers,
        at: new Date().toISOString(),
      });
    }
    if (entries.length !== 1) {
      this.problems.set(rp.uuid, {
        provider: rp.name,
        host,
        note: `${entries.length} resource classes in its inventory; a PCI device provider has one`,
      });
      return null;
    }
    this.problems.delete(rp.uuid);
    const change = (action: PlacementChange['action'], details: string[]): PlacementChange => ({
      provider: rp.name,
      providerUuid: rp.uuid,
      host,
      action,
      details,
      deviceAddresses: [address],
    });
    if (consumers.length > 0 || record.total === 0 || record.reserved < record.total) {
      // In use (never touched), or not reserved (nothing to do).
      if (!dryRun) this.rounds.delete(rp.uuid);
      return null;
    }
    if (!device) {
      this.problems.set(rp.uuid, {
        provider: rp.name,
        host,
        note: `reserved after use, but Berth has no device ${address} on ${host}`,
      });
      return null;
    }
    let round = this.rounds.get(rp.uuid);
    if (round && round.generation !== inv.generation) {
      log.warn(
        { was: round.generation, now: inv.generation },
        'the provider changed since Berth decided to scrub it: scrubbing again before it is returned',
      );
      round = undefined;
    }
    if (!round) {
      if (dryRun)
        return change('scrub', [
          `reserved ${record.reserved}/${record.total}, no allocation: scrub ${address}, then reserved → 0`,
        ]);
      round = {
        uuid: rp.uuid,
        name: rp.name,
        host,
        address,
        generation: inv.generation,
        since: new Date().toISOString(),
        jobId: null,
        note: '',
        failed: false,
      };
      this.rounds.set(rp.uuid, round);
      log.info('reserved after use with no allocation: scrubbing the device before it is returned');
    }
    if (device.deviceState === 'available' && (await this.provenSince(round, device))) {
      if (dryRun)
        return change('unreserve', [`proven scrub (job ${device.lastCleanup?.jobId}): reserved → 0`]);
      return this.unreserve(round, rc, record as Inventories[string], log, change);
    }
    if (device.deviceState === 'error') {
      const note = `scrub failed: ${device.errorReason}; the provider stays reserved (clean the device with \`berth device clean\`; Berth returns it after a proven cleanup)`;
      if (!round.failed)
        log.error({ reason: device.errorReason }, 'the scrub failed: the provider stays reserved');
      round.failed = true;
      round.note = note;
      return dryRun ? change('blocked', [note]) : null;
    }
    if (device.deviceState === 'available' && round.jobId === null) {
      if (dryRun) return change('scrub', [`scrub ${address}, then reserved → 0`]);
      return this.startScrub(round, device, log, change);
    }
    if (device.deviceState === 'allocated') {
      round.note = `Berth itself holds the device (instance ${device.instanceUuid ?? '?'}): Nova and Berth both hand it out; give it to one of them`;
      return dryRun ? change('blocked', [round.note]) : null;
    }
    if (round.jobId === null) {
      round.note = `waiting for the device's running cleanup (${device.deviceState}) to end before scrubbing it for this reservation`;
    }
    return null;
  }

  /** The device's last cleanup succeeded with proof, and started for this round (or after it began). */
  private async provenSince(round: Round, d: DeviceRecord): Promise<boolean> {
    const lc = d.lastCleanup;
    if (lc?.outcome !== 'succeeded' || !lc.proof?.method) return false;
    if (round.jobId !== null && lc.jobId === round.jobId) return true;
    const job = await this.o.side.latestCleanupJob(d.uuid);
    return job !== null && job.jobId === lc.jobId && job.createdAt >= round.since;
  }

  private async startScrub(
    round: Round,
    device: DeviceRecord,
    log: Logger,
    change: (a: PlacementChange['action'], d: string[]) => PlacementChange,
  ): Promise<PlacementChange | null> {
    const why = `Nova's one-time-use provider ${round.name} (${round.uuid}) is reserved after use with no allocation`;
    const r = await this.o.side.scrubUsedOutsideBerth({ host: device.host, address: device.address }, why);
    if (r.jobId) {
      round.jobId = r.jobId;
      round.note = `scrub job ${r.jobId} running; returned to Nova once proven`;
      log.info({ jobId: r.jobId }, 'scrub started');
      return change('scrub', [`cleanup job ${r.jobId}`]);
    }
    if (r.device.deviceState === 'error') {
      round.failed = true;
      round.note = `cannot scrub: ${r.device.errorReason}; the provider stays reserved`;
      log.error({ reason: r.device.errorReason }, 'cannot scrub the device: the provider stays reserved');
    }
    return null;
  }

  private async unreserve(
    round: Round,
    rc: string,
    record: Inventories[string],
    log: Logger,
    change: (a: PlacementChange['action'], d: string[]) => PlacementChange,
  ): Promise<PlacementChange | null> {
    try {
      await this.api.putInventories(
        round.uuid,
        round.generation,
        { [rc]: { ...record, reserved: 0 } },
        round.name,
      );
    } catch (err) {
      if (err instanceof PlacementRefused && err.isGenerationConflict) {
        this.generationConflicts++;
        log.warn(
          'the provider changed while Berth scrubbed it: looking again (and scrubbing again) before returning it',
        );
        this.rounds.delete(round.uuid);
        return null;
      }
      throw err;
    }
    this.rounds.delete(round.uuid);
    const s = this.seen.get(round.uuid);
    if (s) s.reserved = 0;
    log.info({ generation: round.generation }, 'scrubbed with proof: reserved → 0, returned to Nova');
    return change('unreserve', [`reserved ${record.reserved} → 0 after a proven scrub`]);
  }
}
