/**
 * Reading devices as clients follow them: one device with its Placement
 * provider, and the two watches — every device change in revision order
 * (WatchDevices), and one cleanup's progress (WatchCleanup). Both read the
 * store, then wait on the event hub, which every committed change wakes; a
 * change committed between the read and the wait is never slept through.
 */
import { BerthError, invalidArgument, notFound } from '../../../errors.js';
import { type CleanupEvent, FINAL_PHASES, syntheticEnd } from '../domain/cleanup.js';
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
}

/** Changes read from the feed at a time. */
const FEED_PAGE = 1000;

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
   * then every change after the snapshot; from a revision, the changes after
   * it. A device that stops matching (a state filter) still yields the change
   * that took it out.
   */
  async *watch(
    filter: DeviceFilter,
    fromRevision: number,
    signal: AbortSignal,
  ): AsyncGenerator<DeviceWatchItem> {
    const { useCases, hub, feed } = this.deps;
    const shown = new Set<string>();
    let revision = fromRevision;
    if (revision === 0) {
      const snap = await useCases.snapshot(filter);
      for (const device of snap.devices) {
        shown.add(device.uuid);
        yield { kind: 'initial', revision: snap.revision, device };
      }
      revision = snap.revision;
      yield { kind: 'synced', revision };
    } else if (revision > (await useCases.currentRevision())) {
      throw invalidArgument('from_revision', `${revision} is ahead of the scheduler's revision`);
    }
    while (!signal.aborted && !hub.isClosed) {
      const seen = hub.version;
      const events = await feed.since(revision, FEED_PAGE);
      for (const event of events) {
        revision = event.revision;
        const match = matchesFilter(event.device, filter);
        if (!match && !shown.has(event.device.uuid)) continue;
        if (match) shown.add(event.device.uuid);
        else shown.delete(event.device.uuid);
        yield { kind: 'change', event };
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
        if (FINAL_PHASES.has(event.phase)) return;
      }
      const end = syntheticEnd(await useCases.getCleanupJob(job.jobId), after);
      if (end) {
        // Events may have landed between the read above and the job read.
        for (const event of await useCases.cleanupEvents(job.jobId, after)) {
          after = event.sequence;
          yield { event, deviceUuid };
          if (FINAL_PHASES.has(event.phase)) return;
        }
        yield { event: { ...end, sequence: after + 1 }, deviceUuid };
        return;
      }
      await hub.wait(signal, seen);
    }
    if (hub.isClosed) throw shuttingDown();
  }
}
