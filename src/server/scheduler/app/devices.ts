/**
 * Reading devices as clients follow them: one device with its Placement
 * provider, and the two watches — every device change in revision order
 * (WatchDevices), and one cleanup's progress (WatchCleanup). Both read the
 * store, then wait on the event hub, which every committed change wakes; a
 * change committed between the read and the wait is never slept through.
 */
import { BerthError, invalidArgument, notFound } from '../../../errors.js';
import { endsCleanup } from '../../../plugins/types.js';
import { type CleanupEvent, syntheticEnd } from '../domain/cleanup.js';
import type { DeviceRecord } from '../domain/device-state.js';
import { type DeviceFilter, type DeviceRef, matchesFilter } from '../domain/inventory.js';
import type { DeviceProviderInfo, PlacementPort } from '../placement/port.js';
import type { DeviceFeed, FeedEvent } from '../runtime/device-feed.js';
import type { EventHub } from '../runtime/event-hub.js';
import type { UseCases } from '../usecases/use-cases.js';

/** What a device watch yields: the snapshot's devices, the end of the snapshot, then changes. */
export type DeviceWatchItem =
  | { kind: 'initial'; revision: number; device: DeviceRecord }
  | { kind: 'synced'; revision: number }
  | { kind: 'change'; event: FeedEvent };

export interface DevicesDeps {
  useCases: UseCases;
  hub: EventHub;
  /** Recent device events, read once for all device watches. */
  feed: DeviceFeed;
  /** Placement reporting, when configured. */
  placement: PlacementPort | null;
  /** Devices of a watch's initial state read at a time (one unit each); default 1,000. */
  snapshotPage?: number;
}

/** Changes read from the feed at a time. */
const FEED_PAGE = 1000;
/** Devices of the initial state read at a time (one unit each), unless the deps say. */
const SNAPSHOT_PAGE = 1000;

/**
 * The pages of a watch's initial state, in uuid order: after which uuid each
 * starts and the revision it was read at. A change at a revision no newer than
 * the page its device's uuid falls in is already in what that page showed.
 * One entry a page: a million devices are a thousand entries.
 */
class SnapshotPages {
  private readonly starts: string[] = [];
  private readonly revisions: number[] = [];

  add(after: string, revision: number): void {
    this.starts.push(after);
    this.revisions.push(revision);
  }

  get first(): number {
    return this.revisions[0] ?? 0;
  }

  get last(): number {
    return this.revisions[this.revisions.length - 1] ?? 0;
  }

  /** Whether the initial state already showed this change (its device's page was read at or after it). */
  shows(event: { revision: number; device: { uuid: string } }): boolean {
    // The last page that starts before the device's uuid (the first starts after '').
    let lo = 0;
    let hi = this.starts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (this.starts[mid]! < event.device.uuid) lo = mid;
      else hi = mid - 1;
    }
    return event.revision <= (this.revisions[lo] ?? -1);
  }
}

/**
 * A watch cut short by a scheduler shutdown ends UNAVAILABLE, not OK: an OK end
 * tells the client the stream is complete, so it would not resume elsewhere.
 */
const shuttingDown = () => new BerthError('UNAVAILABLE', 'the scheduler is shutting down; resume the watch');

export class Devices {
  constructor(private readonly deps: DevicesDeps) {}

  /** GetDevice: the device and, when the scheduler reports to Placement, its provider as last seen. */
  async get(ref: DeviceRef): Promise<{ device: DeviceRecord; provider: DeviceProviderInfo | null }> {
    const device = await this.deps.useCases.getDevice(ref);
    return { device, provider: this.deps.placement?.deviceProvider(device) ?? null };
  }

  /**
   * WatchDevices: from revision 0, every matching device and a `synced` mark,
   * then every change after it; from a revision, the changes after it. A
   * device that stops matching (a state filter) still yields the change that
   * took it out.
   *
   * The initial state is read a page at a time (decision 71), so a watch of a
   * fleet of a million devices holds one page, not the fleet: each page is
   * consistent with its own revision, and before `synced` the changes since
   * the first page are replayed, each only where its device's page was read
   * before it (a change a page already shows is not told twice). `synced`
   * then marks one consistent revision: the state the client holds equals the
   * store's at that revision. A device removed before its page was read is
   * never shown; one removed after is told as a `removed` change before
   * `synced`, as every change is, in revision order.
   */
  async *watch(
    filter: DeviceFilter,
    fromRevision: number,
    signal: AbortSignal,
  ): AsyncGenerator<DeviceWatchItem> {
    const { useCases, hub, feed } = this.deps;
    const pageSize = this.deps.snapshotPage ?? SNAPSHOT_PAGE;
    // Only a state filter can make a device stop matching; without one, nothing is tracked per device.
    const shown = filter.state ? new Set<string>() : null;
    let revision = fromRevision;
    let pages: SnapshotPages | null = null;
    if (revision === 0) {
      pages = new SnapshotPages();
      let after = '';
      for (;;) {
        if (signal.aborted || hub.isClosed) break;
        const page = await useCases.snapshotPage(filter, after, pageSize);
        pages.add(after, page.revision);
        for (const device of page.devices) {
          shown?.add(device.uuid);
          yield { kind: 'initial', revision: page.revision, device };
        }
        const last = page.devices[page.devices.length - 1];
        if (!last || page.devices.length < pageSize) break;
        after = last.uuid;
      }
      revision = pages.first;
    } else if (revision > (await useCases.currentRevision())) {
      throw invalidArgument('from_revision', `${revision} is ahead of the scheduler's revision`);
    }
    // Before `synced`, the changes up to the newest page's revision (or later).
    let syncAt = pages ? pages.last : -1;
    while (!signal.aborted && !hub.isClosed) {
      const seen = hub.version;
      const events = await feed.since(revision, FEED_PAGE);
      for (const event of events) {
        revision = event.revision;
        if (pages?.shows(event)) continue;
        const match = matchesFilter(event.device, filter);
        if (shown) {
          if (!match && !shown.has(event.device.uuid)) continue;
          if (match) shown.add(event.device.uuid);
          else shown.delete(event.device.uuid);
        } else if (!match) continue;
        yield { kind: 'change', event };
      }
      if (syncAt >= 0 && revision >= syncAt) {
        yield { kind: 'synced', revision };
        syncAt = -1;
        pages = null;
      }
      if (events.length === FEED_PAGE) continue;
      await hub.wait(signal, seen);
    }
    if (hub.isClosed) throw shuttingDown();
  }

  /**
   * WatchCleanup: the progress events of the device's job (its latest, or the
   * one named) after `fromSequence`, ending with the job's final event — one
   * made up from the job when it ended without an agent event of its own.
   */
  async *watchCleanup(
    ref: DeviceRef,
    jobId: string | undefined,
    fromSequence: number,
    signal: AbortSignal,
  ): AsyncGenerator<{ event: CleanupEvent; deviceUuid: string }> {
    const { useCases, hub } = this.deps;
    const device = await useCases.getDevice(ref);
    const job = jobId ? await useCases.getCleanupJob(jobId) : await useCases.latestCleanupJob(device.uuid);
    if (!job || job.deviceUuid !== device.uuid) {
      throw notFound('cleanup job', jobId ?? `of device ${device.uuid}`);
    }
    const deviceUuid = device.uuid;
    let after = fromSequence;
    while (!signal.aborted && !hub.isClosed) {
      const seen = hub.version;
      for (const event of await useCases.cleanupEvents(job.jobId, after)) {
        after = event.sequence;
        yield { event, deviceUuid };
        if (endsCleanup(event.phase)) return;
      }
      const end = syntheticEnd(await useCases.getCleanupJob(job.jobId), after);
      if (end) {
        // Events may have landed between the read above and the job read.
        for (const event of await useCases.cleanupEvents(job.jobId, after)) {
          after = event.sequence;
          yield { event, deviceUuid };
          if (endsCleanup(event.phase)) return;
        }
        yield { event: { ...end, sequence: after + 1 }, deviceUuid };
        return;
      }
      await hub.wait(signal, seen);
    }
    if (hub.isClosed) throw shuttingDown();
  }
}
