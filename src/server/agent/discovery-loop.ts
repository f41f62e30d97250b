/**
 * The discovery loop (decision 56): discovery passes run one at a time, in
 * order. The kernel's uevents name the functions that came, went or changed,
 * and only those (with what depends on them) are re-read; a full rescan runs
 * every hotplug.rescan_interval as a safety net, and every discovery_interval
 * while no event source is followed. Each pass goes into the journal's record
 * of media and into the inventory.
 */
import type { Logger } from 'pino';
import { isPciAddress } from '../../identifiers.js';
import { readNvmeSubsystemFunctions } from '../../plugins/nvme/sysfs-nvme.js';
import { readIommuGroupMembers, readPciFunctionSync } from '../../plugins/pci/sysfs-reader.js';
import type { DiscoveredDevice } from '../../plugins/types.js';
import type { Lifecycle } from '../lifecycle.js';
import type { CleanupJournal } from './cleanup-journal.js';
import type { AgentConfig } from './config.js';
import { HostUseWatch } from './host-use-watch.js';
import { Coalescer, type SourceStatus, UdevadmSource } from './hotplug.js';
import type { Inventory, InventoryDiff } from './inventory.js';
import { logObserved, seenMedia, withRecords } from './media.js';
import type { HostDiscovery, PluginHost } from './plugin-host.js';
import { type Uevent, ueventTarget } from './uevent.js';

/** Counters of how discovery ran (GetAgentInfo's hotplug status, /metrics). */
interface DiscoveryCounts {
  events: number;
  partialPasses: number;
  fullPasses: number;
  functionsReread: number;
}

export interface DiscoveryLoopOptions {
  config: AgentConfig;
  logger: Logger;
  host: PluginHost;
  inventory: Inventory;
  journal: CleanupJournal;
  /** The agent's: a failing driver degrades it; nothing new starts once it ends. */
  lifecycle: Lifecycle<'drivers_failing'>;
  /** Sets the health of the hotplug service (SERVING while kernel events are followed). */
  health: (status: 'SERVING' | 'NOT_SERVING') => void;
}

export class DiscoveryLoop {
  private readonly config: AgentConfig;
  private readonly logger: Logger;
  private readonly host: PluginHost;
  private readonly inventory: Inventory;
  private readonly journal: CleanupJournal;
  private readonly lifecycle: Lifecycle<'drivers_failing'>;
  /** The next full rediscovery (rescan_interval while following events, else discovery_interval). */
  private timer: NodeJS.Timeout | null = null;
  /** Discovery passes run one at a time, in order: full ones and hotplug ones alike. */
  private lane: Promise<unknown> = Promise.resolve();
  /** A full pass asked for and not started yet: later callers share it. */
  private queuedFull: Promise<InventoryDiff> | null = null;
  /** The kernel's uevents (null with hotplug.source none). */
  private source: UdevadmSource | null = null;
  private readonly coalescer: Coalescer;
  private status: SourceStatus;
  private readonly hostUse: HostUseWatch;
  readonly counts: DiscoveryCounts = { events: 0, partialPasses: 0, fullPasses: 0, functionsReread: 0 };

  constructor(private readonly o: DiscoveryLoopOptions) {
    const { config } = o;
    this.config = config;
    this.logger = o.logger;
    this.host = o.host;
    this.inventory = o.inventory;
    this.journal = o.journal;
    this.lifecycle = o.lifecycle;
    const settle = config.hotplug.settleMs;
    this.coalescer = new Coalescer({
      settleMs: settle,
      // A busy source's first batch goes two settles after its first event (the Coalescer's default).
      run: (batch) =>
        this.refresh(batch).then(
          () => {},
          (err) => this.logger.error({ err }, 'hotplug rediscovery failed'),
        ),
    });
    this.status = {
      state: config.hotplug.source === 'none' ? 'off' : 'starting',
      message: '',
      since: new Date(),
      restarts: 0,
    };
    this.hostUse = new HostUseWatch({
      config,
      logger: o.logger,
      active: () => !this.lifecycle.ending && this.status.state === 'following',
      reread: (addresses) => this.coalescer.add(addresses),
    });
  }

  /** The kernel's event source: off, starting, following or failed. */
  get sourceStatus(): SourceStatus {
    return this.status;
  }

  /** Starts following the kernel's uevents (when configured) and the full rescans. */
  start(): void {
    this.startHotplug();
    this.scheduleRescan();
  }

  /**
   * Runs a full discovery after any pass running now; callers that come
   * before it starts share it.
   */
  rediscover(): Promise<InventoryDiff> {
    if (this.queuedFull) return this.queuedFull;
    const pass = this.lane.then(() => {
      this.queuedFull = null;
      return this.fullPass();
    });
    this.queuedFull = pass;
    this.lane = pass.catch(() => {});
    return pass;
  }

  /** One full discovery, applied; run in the lane only. */
  private async fullPass(): Promise<InventoryDiff> {
    const result = await this.host.discover({ strict: false });
    this.counts.fullPasses++;
    const diff = this.applyDiscovery(result.devices, result.failedDrivers, false);
    this.judgeDrivers(result.failedDrivers, true);
    this.logChanges(diff, 'full');
    return diff;
  }

  /**
   * Hotplug: re-reads the functions kernel events named, with those whose
   * records depend on them (the closure below), and applies what changed
   * there only. A batch naming over half the inventory is a full pass.
   */
  refresh(addresses: ReadonlySet<string>): Promise<InventoryDiff> {
    const pass = this.lane.then(async () => {
      const scope = this.closure(addresses);
      // Many functions changed at once (a bus rescan): one full pass reads them more cheaply.
      if (scope.size > Math.max(64, this.inventory.size / 2)) return this.fullPass();
      const t0 = performance.now();
      const result = await this.host.discoverAt([...scope], (a) => !scope.has(a) && this.inventory.has(a));
      const t1 = performance.now();
      this.counts.partialPasses++;
      this.counts.functionsReread += scope.size;
      const diff = this.applySome(scope, result);
      this.judgeDrivers(result.failedDrivers, false);
      this.logger.debug(
        {
          events: [...addresses],
          reread: scope.size,
          discoverMs: Math.round(t1 - t0),
          applyMs: Math.round(performance.now() - t1),
        },
        'hotplug: functions re-read',
      );
      this.logChanges(diff, 'uevent');
      return diff;
    });
    this.lane = pass.catch(() => {});
    return pass;
  }

  /**
   * The functions to re-read for events about `addresses`: each of them, its
   * PF (a VF's media and matching go through it; a PF whose VFs come or go
   * changes), the members of its IOMMU group before and now (a group's
   * foreign members make its devices unallocatable), the devices that named
   * it as a peer, and the devices reaching the same media (one NVM subsystem
   * through several controllers).
   */
  private closure(addresses: ReadonlySet<string>): Set<string> {
    const scope = new Set<string>();
    const root = this.config.sysfsRoot;
    for (const a of addresses) {
      if (!isPciAddress(a)) continue;
      scope.add(a);
      const prev = this.inventory.get(a);
      if (prev?.physfn) scope.add(prev.physfn);
      for (const p of prev?.iommuGroupPeers ?? []) scope.add(p);
      const now = readPciFunctionSync(root, a);
      if (now?.physfn) scope.add(now.physfn);
      if (now?.iommuGroup != null) for (const p of readIommuGroupMembers(root, now.iommuGroup)) scope.add(p);
    }
    const keys = new Set<string>();
    for (const a of scope) {
      const key = this.inventory.get(a)?.media?.key;
      if (key) keys.add(key);
    }
    for (const d of this.inventory.list()) {
      if (d.iommuGroupPeers.some((p) => addresses.has(p))) scope.add(d.address);
      if (d.media && keys.has(d.media.key)) scope.add(d.address);
    }
    return scope;
  }

  /** A partial discovery into the journal's record of media and the inventory (applyDiscovery for `scope`). */
  private applySome(scope: ReadonlySet<string>, result: HostDiscovery): InventoryDiff {
    // The ledger judges a media by all the devices that reach it: those found now, and the
    // inventory's others with the same key.
    const keys = new Set<string>();
    for (const d of result.devices) if (d.media) keys.add(d.media.key);
    for (const a of scope) {
      const key = this.inventory.get(a)?.media?.key;
      if (key) keys.add(key);
    }
    const seen = [
      ...result.devices,
      ...this.inventory.list().filter((d) => !scope.has(d.address) && d.media && keys.has(d.media.key)),
    ];
    // The media this pass's functions reached: one it no longer sees anywhere here left custody.
    const except = new Set<string>();
    for (const d of this.inventory.list()) {
      if (d.media && scope.has(d.address) && result.failedDrivers.includes(d.driver)) except.add(d.media.key);
    }
    try {
      logObserved(
        this.logger,
        this.journal.media.observe(seenMedia(seen, this.config.host), this.journal.legacyHolds(), undefined, {
          keys,
          except,
        }),
        seen,
      );
    } catch (err) {
      this.logger.error({ err }, 'cannot record what this discovery saw of media in the journal');
    }
    // A full pass does not log its exclusions again either; a PF with VFs is excluded at every VF's event.
    for (const ex of result.excluded) this.logger.debug(ex, 'device excluded');
    return this.inventory.applySome(
      scope,
      withRecords(result.devices, this.journal.media),
      result.failedDrivers,
    );
  }

  /**
   * A driver whose discovery failed degrades the agent; only a full pass in
   * which every driver answered says they recovered (a partial one asked
   * each driver about a few functions only).
   */
  private judgeDrivers(failed: readonly string[], full: boolean): void {
    if (failed.length > 0) this.lifecycle.degrade('drivers_failing', failed.join(', '));
    else if (full) this.lifecycle.recovered('drivers_failing');
  }

  private logChanges(diff: InventoryDiff, trigger: 'full' | 'uevent'): void {
    const n = diff.added.length + diff.changed.length + diff.removed.length;
    if (n === 0) return;
    this.logger.info(
      {
        trigger,
        added: diff.added.map((d) => `${d.address} ${d.media?.key ?? ''}`.trim()),
        changed: diff.changed.map((d) => d.address),
        removed: diff.removed,
      },
      'inventory changed',
    );
  }

  /** Starts following the kernel's uevents, when configured. */
  private startHotplug(): void {
    if (this.config.hotplug.source !== 'udevadm' || this.lifecycle.ending) return;
    this.o.health('NOT_SERVING');
    this.source = new UdevadmSource({
      command: this.config.hotplug.udevadm,
      logger: this.logger.child({ component: 'hotplug' }),
      onEvent: (e) => this.onUevent(e),
      onStatus: (s) => this.onSourceStatus(s),
    });
    this.source.start();
  }

  /** The running event source's pid (tests kill it); null when none runs. */
  get hotplugSourcePid(): number | null {
    return this.source?.pid ?? null;
  }

  private onUevent(e: Uevent): void {
    this.counts.events++;
    this.logger.debug({ action: e.action, devpath: e.devpath, subsystem: e.subsystem, at: e.at }, 'uevent');
    const target = ueventTarget(e);
    if (!target) return;
    if (target.kind === 'function') {
      this.coalescer.add([target.address]);
      return;
    }
    // A multipath namespace head: every controller of its subsystem (those the inventory knows too,
    // for a subsystem already gone).
    const members = readNvmeSubsystemFunctions(this.config.sysfsRoot, target.name);
    this.coalescer.add(members);
  }

  private onSourceStatus(s: SourceStatus): void {
    const was = this.status.state;
    this.status = s;
    this.o.health(s.state === 'following' ? 'SERVING' : 'NOT_SERVING');
    if (s.state === 'following' && was !== 'following') {
      // Whatever changed before the source listened (since the first discovery, or while it was
      // down) had no event: one full pass covers it. What the host uses is looked at first, so a
      // change after this look is one the next look sees.
      this.hostUse.forget();
      this.lane = this.lane.then(() => this.hostUse.watchHostUse()).catch(() => {});
      void this.rediscover().catch((err) => this.logger.error({ err }, 'rediscovery failed'));
    }
    if ((s.state === 'following') !== (was === 'following')) this.scheduleRescan();
  }

  /** Seconds until the next full rediscovery: the safety net while following events, the poll otherwise. */
  get fullRescanInterval(): number {
    return this.status.state === 'following'
      ? this.config.hotplug.rescanInterval
      : this.config.discoveryInterval;
  }

  private scheduleRescan(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (this.lifecycle.ending) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.rediscover()
        .catch((err) => this.logger.error({ err }, 'rediscovery failed'))
        .finally(() => {
          if (this.timer === null) this.scheduleRescan();
        });
    }, this.fullRescanInterval * 1000);
    this.timer.unref();
  }

  /** Resolves once the events received so far are applied (tests). */
  async hotplugSettled(): Promise<void> {
    await this.coalescer.idle();
    await this.lane;
  }

  /**
   * A discovery's devices into the journal's record of media (first sight,
   * new addresses, holds recorded by address) and into the inventory, each
   * with what the journal says of its media. At start (`strict`) a journal
   * that cannot be written stops the agent; later the pass goes on with what
   * the journal holds (a device whose media has no record shows dirty).
   */
  applyDiscovery(
    devices: DiscoveredDevice[],
    failedDrivers: readonly string[],
    strict: boolean,
  ): InventoryDiff {
    // Media of a driver that failed is not looked for: its devices keep their last state.
    const except = new Set<string>();
    for (const d of this.inventory.list())
      if (d.media && failedDrivers.includes(d.driver)) except.add(d.media.key);
    try {
      logObserved(
        this.logger,
        this.journal.media.observe(
          seenMedia(devices, this.config.host),
          this.journal.legacyHolds(),
          undefined,
          {
            keys: 'all',
            except,
          },
        ),
        devices,
      );
    } catch (err) {
      if (strict) throw err;
      this.logger.error({ err }, 'cannot record what this discovery saw of media in the journal');
    }
    return this.inventory.apply(withRecords(devices, this.journal.media), failedDrivers);
  }

  /** Stops the rescans, the host-use watch and the event source; passes queued before are let finish. */
  async stop(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.hostUse.stop();
    await this.source?.stop();
    if (this.source) this.o.health('NOT_SERVING');
    await this.coalescer.close();
  }
}
