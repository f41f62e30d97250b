/**
 * DeviceService: listing and watching devices, and the operator's actions
 * (clean, release, enable/disable). Role checks live in the auth interceptor;
 * here the requests are validated and the store's atomic operations called.
 */

import { type ServiceError, status } from '@grpc/grpc-js';
import { BerthError, failedPrecondition, invalidArgument, notFound } from '../../../errors.js';
import { Device as DevicePb } from '../../../gen/berth/scheduler/v1/device.js';
import {
  type CleanDeviceRequest,
  type DeviceFilter as DeviceFilterPb,
  type DeviceServiceServer,
  DeviceServiceService,
  type GetDeviceRequest,
  type ListDevicesRequest,
  type ReleaseDeviceRequest,
  type SetDeviceStatusRequest,
  type WatchCleanupRequest,
  type WatchCleanupResponse,
  type WatchDevicesRequest,
  WatchDevicesResponse,
} from '../../../gen/berth/scheduler/v1/device_service.js';
import { cleanupEventToProto } from '../../cleanup-event-proto.js';
import { type Encoded, encodeOnce } from '../../grpc/encoded.js';
import { serverStream, unary } from '../../grpc/handlers.js';
import type { ServiceBinding } from '../../grpc/server.js';
import { decodeServiceError } from '../../grpc/status.js';
import {
  deviceStateFromProto,
  deviceStatusFromProto,
  deviceToProto,
  deviceTypeFromProto,
} from '../convert.js';
import type { SchedulerCore } from '../core.js';
import type { DeviceRecord } from '../domain/device-state.js';
import { isUnreachable } from '../runtime/agent-link.js';
import { CLEANUP_FEATURE } from '../runtime/cleanup-dispatcher.js';
import type { FeedEvent } from '../runtime/device-feed.js';
import type { CleanupEvent, CleanupJob, DeviceFilter } from '../store/store.js';
import { pageTokenAfter } from '../usecases/devices.js';
import { deviceRef, optionalHost, optionalRequestId } from './validate.js';

const RC = /^[A-Z0-9_]{1,255}$/;

/**
 * A watch cut short by a scheduler shutdown ends UNAVAILABLE, not OK: an OK end
 * tells the client the stream is complete, so it would not resume elsewhere.
 */
const shuttingDown = () => new BerthError('UNAVAILABLE', 'the scheduler is shutting down; resume the watch');

export function filterFromProto(f: DeviceFilterPb | undefined): DeviceFilter {
  if (!f) return {};
  const out: DeviceFilter = {};
  const host = optionalHost('filter.host', f.host);
  if (host) out.host = host;
  const type = deviceTypeFromProto(f.type, 'filter.type');
  if (type) out.type = type;
  const state = deviceStateFromProto(f.state, 'filter.state');
  if (state) out.state = state;
  if (f.resourceClass !== '') {
    if (!RC.test(f.resourceClass)) {
      throw invalidArgument(
        'filter.resource_class',
        `${JSON.stringify(f.resourceClass)} is not a resource class`,
      );
    }
    out.resourceClass = f.resourceClass;
  }
  return out;
}

export function matchesFilter(d: DeviceRecord, f: DeviceFilter): boolean {
  return (
    (!f.host || d.host === f.host) &&
    (!f.type || d.type === f.type) &&
    (!f.state || d.deviceState === f.state) &&
    (!f.resourceClass || d.resourceClass === f.resourceClass)
  );
}

const TERMINAL = new Set(['succeeded', 'failed', 'interrupted']);

/** A job that ended without an agent event (e.g. AGENT_CANNOT_CLEAN) still ends its watchers' streams. */
function syntheticEnd(job: CleanupJob, lastSequence: number): CleanupEvent | null {
  if (!TERMINAL.has(job.state)) return null;
  return {
    jobId: job.jobId,
    address: job.address,
    action: job.action,
    phase: job.state as CleanupEvent['phase'],
    step: '',
    percent: 0,
    bytesDone: 0,
    bytesTotal: 0,
    message: job.message,
    time: job.finishedAt ?? new Date().toISOString(),
    sequence: lastSequence + 1,
  };
}

const PAGE_MAX = 5000;
/** Encoded devices in one ListDevices page, at most (under a client's default 4 MiB). */
export const PAGE_BYTES = 3 * 1024 * 1024;

/**
 * A ListDevices page that also ends at `maxBytes` of encoded devices, so no
 * inventory can make a listing too large for a client to receive (gRPC's
 * default 4 MiB): the rest is on the next page. At least one device per page.
 */
export function boundedPage(
  records: readonly DeviceRecord[],
  nextPageToken: string,
  maxBytes: number,
): { devices: DevicePb[]; nextPageToken: string } {
  const devices: DevicePb[] = [];
  let bytes = 0;
  for (const [i, d] of records.entries()) {
    const pb = deviceToProto(d);
    const n = DevicePb.encode(pb).finish().length;
    if (devices.length > 0 && bytes + n > maxBytes) {
      return { devices, nextPageToken: pageTokenAfter(records[i - 1]!) };
    }
    devices.push(pb);
    bytes += n;
  }
  return { devices, nextPageToken };
}

/**
 * A change as every watcher receives it, encoded once for all of them: with a
 * thousand watchers, one encode instead of a thousand. Kept as long as the feed
 * keeps the event.
 */
const updateBytes = new WeakMap<FeedEvent, Encoded<WatchDevicesResponse>>();

function encodedUpdate(e: FeedEvent): Encoded<WatchDevicesResponse> {
  let bytes = updateBytes.get(e);
  if (!bytes) {
    bytes = encodeOnce(WatchDevicesResponse, {
      revision: e.revision,
      initial: false,
      device: e.proto,
      removed: e.removed,
      synced: false,
    });
    updateBytes.set(e, bytes);
  }
  return bytes;
}

/** The device's Placement provider, as the scheduler last saw it (when it reports to Placement). */
function withPlacement(core: SchedulerCore, d: DeviceRecord, pb: DevicePb): DevicePb {
  const p = core.placement?.deviceProvider(d);
  if (!p) return pb;
  return {
    ...pb,
    placementProviderUuid: p.providerUuid,
    placementProviderName: p.providerName,
    placementSyncedAt: p.syncedAt ? new Date(p.syncedAt) : undefined,
    placementNote: p.note,
  };
}

export function deviceServiceBinding(core: SchedulerCore): ServiceBinding {
  const { store, hub, logger } = core;
  const impl: DeviceServiceServer = {
    listDevices: unary('ListDevices', logger, async (req: ListDevicesRequest) => {
      if (req.pageSize > PAGE_MAX) throw invalidArgument('page_size', `${req.pageSize}; at most ${PAGE_MAX}`);
      const page = await store.listDevices(filterFromProto(req.filter), {
        pageSize: req.pageSize || undefined,
        pageToken: req.pageToken || undefined,
      });
      return boundedPage(page.devices, page.nextPageToken, PAGE_BYTES);
    }),

    getDevice: unary('GetDevice', logger, async (req: GetDeviceRequest) => {
      const d = await store.getDevice(deviceRef('device', req.device));
      return { device: withPlacement(core, d, deviceToProto(d)) };
    }),

    cleanDevice: unary('CleanDevice', logger, async (req: CleanDeviceRequest) => {
      const ref = deviceRef('device', req.device);
      const requestId = optionalRequestId('request_id', req.requestId);
      const current = await store.getDevice(ref);
      await core.agents.refresh([current.host]);
      const link = core.agents.get(current.host);
      // An agent we have never heard of cannot be judged; the store refuses on state alone.
      const agentCanClean = link ? link.has(CLEANUP_FEATURE) : true;
      const { device, job } = await store.requestClean(ref, { requestId, agentCanClean });
      hub.notify();
      void core.dispatcher.dispatch(device, job);
      return { device: deviceToProto(device), jobId: job.jobId };
    }),

    releaseDevice: unary('ReleaseDevice', logger, async (req: ReleaseDeviceRequest) => {
      const ref = deviceRef('device', req.device);
      // A burn has two records (invariant 13): the agent's goes first, so a
      // release that stops half-way leaves the device burned, never un-burned
      // in one record only.
      await releaseAgentBurn(core, await store.getDevice(ref));
      const device = await store.releaseDevice(ref, req.generation);
      hub.notify();
      return { device: deviceToProto(device) };
    }),

    setDeviceStatus: unary('SetDeviceStatus', logger, async (req: SetDeviceStatusRequest) => {
      const device = await store.setDeviceStatus(
        deviceRef('device', req.device),
        deviceStatusFromProto(req.status, 'status'),
        req.generation,
      );
      hub.notify();
      return { device: deviceToProto(device) };
    }),

    watchDevices: serverStream('WatchDevices', logger, async function* (req: WatchDevicesRequest, ctx) {
      const filter = filterFromProto(req.filter);
      // Devices this stream has shown as matching: when one stops matching (a
      // state filter), the watcher still gets the change that took it out.
      const shown = new Set<string>();
      let revision = req.fromRevision;
      if (revision === 0) {
        const snap = await store.snapshot(filter);
        for (const d of snap.devices) {
          shown.add(d.uuid);
          yield {
            revision: snap.revision,
            initial: true,
            device: deviceToProto(d),
            removed: false,
            synced: false,
          };
        }
        revision = snap.revision;
        yield {
          revision,
          initial: true,
          device: undefined,
          removed: false,
          synced: true,
        } satisfies WatchDevicesResponse;
      } else if (revision > (await store.currentRevision())) {
        throw invalidArgument('from_revision', `${revision} is ahead of the scheduler's revision`);
      }
      while (!ctx.signal.aborted && !hub.isClosed) {
        const seen = hub.version;
        const events = await core.feed.since(revision, 1000);
        for (const e of events) {
          revision = e.revision;
          const match = matchesFilter(e.device, filter);
          if (!match && !shown.has(e.device.uuid)) continue;
          if (match) shown.add(e.device.uuid);
          else shown.delete(e.device.uuid);
          yield encodedUpdate(e);
        }
        if (events.length === 1000) continue;
        await hub.wait(ctx.signal, seen);
      }
      if (hub.isClosed) throw shuttingDown();
    }),

    watchCleanup: serverStream('WatchCleanup', logger, async function* (req: WatchCleanupRequest, ctx) {
      const device = await store.getDevice(deviceRef('device', req.device));
      const jobId = optionalRequestId('job_id', req.jobId);
      const job = jobId ? await store.getCleanupJob(jobId) : await store.latestCleanupJob(device.uuid);
      if (!job || job.deviceUuid !== device.uuid) {
        throw notFound('cleanup job', jobId ?? `of device ${device.uuid}`);
      }
      let after = req.fromSequence;
      while (!ctx.signal.aborted && !hub.isClosed) {
        const seen = hub.version;
        for (const e of await store.cleanupEvents(job.jobId, after)) {
          after = e.sequence;
          yield { event: cleanupEventToProto(e), deviceUuid: device.uuid } satisfies WatchCleanupResponse;
          if (TERMINAL.has(e.phase)) return;
        }
        const current = await store.getCleanupJob(job.jobId);
        const end = syntheticEnd(current, after);
        if (end) {
          // Events may have landed between the read above and the job read.
          const late = await store.cleanupEvents(job.jobId, after);
          for (const e of late) {
            after = e.sequence;
            yield { event: cleanupEventToProto(e), deviceUuid: device.uuid };
            if (TERMINAL.has(e.phase)) return;
          }
          yield { event: cleanupEventToProto({ ...end, sequence: after + 1 }), deviceUuid: device.uuid };
          return;
        }
        await hub.wait(ctx.signal, seen);
      }
      if (hub.isClosed) throw shuttingDown();
    }),
  };
  return { name: 'berth.scheduler.v1.DeviceService', definition: DeviceServiceService, implementation: impl };
}

/**
 * Asks the device's agent to clear its journal's record of the burn before
 * the scheduler clears its own. A device that is not burned needs nothing; an
 * agent too old to keep burns (UNIMPLEMENTED) has no record to clear; an agent
 * that cannot be reached refuses the release (UNAVAILABLE), and one that finds
 * other media at the address refuses it (FAILED_PRECONDITION).
 */
async function releaseAgentBurn(core: SchedulerCore, d: DeviceRecord): Promise<void> {
  if (!d.burned) return;
  await core.agents.refresh([d.host]);
  const agent = core.agents.get(d.host);
  if (!agent?.isConnected) {
    throw new BerthError(
      'UNAVAILABLE',
      `the agent of host ${d.host} is not connected: it keeps the second record of device ${d.address}'s burn and must clear it first; retry when it is back`,
      { reason: 'AGENT_UNAVAILABLE', metadata: { host: d.host, address: d.address } },
    );
  }
  try {
    await agent.releaseDevice(d.address, d.media?.key ?? '');
  } catch (err) {
    if ((err as ServiceError).code === status.UNIMPLEMENTED) return;
    const e = decodeServiceError(err as ServiceError);
    if (isUnreachable(err)) {
      throw new BerthError(
        'UNAVAILABLE',
        `the agent of host ${d.host} did not clear its record of device ${d.address}'s burn (${e.message}); retry`,
        { reason: 'AGENT_UNAVAILABLE', metadata: { host: d.host, address: d.address } },
      );
    }
    throw failedPrecondition(
      e.reason && e.reason !== e.codeName ? e.reason : 'AGENT_REFUSED_RELEASE',
      `the agent of host ${d.host} refused to release device ${d.address}: ${e.message}`,
      { host: d.host, address: d.address },
    );
  }
}
