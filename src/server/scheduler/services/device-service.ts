/**
 * DeviceService: listing and watching devices, and the operator's actions
 * (clean, release, enable/disable, forget a media). Role checks live in the auth interceptor;
 * here requests are decoded, one application call made (app/devices.ts,
 * app/cleaning.ts, or a use case), and the answer encoded.
 */

import type { Logger } from 'pino';
import { invalidArgument } from '../../../errors.js';
import { Device as DevicePb } from '../../../gen/berth/scheduler/v1/device.js';
import {
  type CleanDeviceRequest,
  type DeviceFilter as DeviceFilterPb,
  type DeviceServiceServer,
  DeviceServiceService,
  type ForgetMediaRequest,
  type GetDeviceRequest,
  type ListDevicesRequest,
  type ReleaseDeviceRequest,
  type SetDeviceStatusRequest,
  type WatchCleanupRequest,
  type WatchCleanupResponse,
  type WatchDevicesRequest,
  WatchDevicesResponse,
} from '../../../gen/berth/scheduler/v1/device_service.js';
import { parseResourceClass } from '../../../identifiers.js';
import { cleanupEventToProto } from '../../cleanup-event-proto.js';
import { callerOf } from '../../grpc/caller.js';
import { type Encoded, encodeOnce } from '../../grpc/encoded.js';
import { serverStream, unary } from '../../grpc/handlers.js';
import type { ServiceBinding } from '../../grpc/server.js';
import type { Cleaning } from '../app/cleaning.js';
import type { Devices } from '../app/devices.js';
import {
  deviceStateFromProto,
  deviceStatusFromProto,
  deviceToProto,
  deviceTypeFromProto,
} from '../convert.js';
import type { DeviceRecord } from '../domain/device-state.js';
import { hostClientOf, requireOwnHost } from '../domain/host.js';
import type { DeviceFilter } from '../domain/inventory.js';
import { pageTokenAfter } from '../domain/pages.js';
import type { DeviceProviderInfo } from '../placement/port.js';
import type { FeedEvent } from '../runtime/device-feed.js';
import type { UseCases } from '../usecases/use-cases.js';
import { deviceRef, optionalHost, optionalRequestId, requireMediaKey } from './validate.js';

export function filterFromProto(f: DeviceFilterPb | undefined): DeviceFilter {
  if (!f) return {};
  const out: DeviceFilter = {};
  const host = optionalHost('filter.host', f.host);
  if (host) out.host = host;
  const type = deviceTypeFromProto(f.type, 'filter.type');
  if (type) out.type = type;
  const state = deviceStateFromProto(f.state, 'filter.state');
  if (state) out.state = state;
  if (f.resourceClass !== '')
    out.resourceClass = parseResourceClass('filter.resource_class', f.resourceClass);
  return out;
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
 * A change as every watcher receives it, converted and encoded once for all of
 * them: with a thousand watchers, one encode instead of a thousand. Keyed by
 * the feed's own event object, so kept as long as the feed keeps the event.
 */
const updateBytes = new WeakMap<FeedEvent, Encoded<WatchDevicesResponse>>();

function encodedUpdate(e: FeedEvent): Encoded<WatchDevicesResponse> {
  let bytes = updateBytes.get(e);
  if (!bytes) {
    bytes = encodeOnce(WatchDevicesResponse, {
      revision: e.revision,
      initial: false,
      device: deviceToProto(e.device),
      removed: e.removed,
      synced: false,
    });
    updateBytes.set(e, bytes);
  }
  return bytes;
}

/** The device with its Placement provider, as the scheduler last saw it (when it reports to Placement). */
function withPlacement(pb: DevicePb, p: DeviceProviderInfo | null): DevicePb {
  if (!p) return pb;
  return {
    ...pb,
    placementProviderUuid: p.providerUuid,
    placementProviderName: p.providerName,
    placementSyncedAt: p.syncedAt ? new Date(p.syncedAt) : undefined,
    placementNote: p.note,
  };
}

/** The roles that read any host's device; a `host-client` without one of them only its own host's (decision 90). */
const ANY_HOST_READERS: readonly string[] = ['admin', 'service', 'reader'];

export function deviceServiceBinding(
  app: {
    useCases: UseCases;
    devices: Devices;
    cleaning: Cleaning;
    hostPrincipals: ReadonlyMap<string, string>;
  },
  logger: Logger,
): ServiceBinding {
  const { useCases, devices, cleaning, hostPrincipals } = app;
  const impl: DeviceServiceServer = {
    listDevices: unary('ListDevices', logger, async (req: ListDevicesRequest) => {
      if (req.pageSize > PAGE_MAX) throw invalidArgument('page_size', `${req.pageSize}; at most ${PAGE_MAX}`);
      const page = await useCases.listDevices(filterFromProto(req.filter), {
        pageSize: req.pageSize || undefined,
        pageToken: req.pageToken || undefined,
      });
      return boundedPage(page.devices, page.nextPageToken, PAGE_BYTES);
    }),

    getDevice: unary('GetDevice', logger, async (req: GetDeviceRequest, ctx) => {
      const ref = deviceRef('device', req.device);
      const caller = callerOf(ctx.metadata);
      const own = hostClientOf(caller, ANY_HOST_READERS, hostPrincipals);
      const { device, provider } = await devices.get(ref);
      requireOwnHost(caller.subject, own, device.host, `device ${device.uuid} is there`);
      return { device: withPlacement(deviceToProto(device), provider) };
    }),

    cleanDevice: unary('CleanDevice', logger, async (req: CleanDeviceRequest) => {
      const ref = deviceRef('device', req.device);
      const { device, job } = await cleaning.clean(ref, optionalRequestId('request_id', req.requestId));
      return { device: deviceToProto(device), jobId: job.jobId };
    }),

    releaseDevice: unary('ReleaseDevice', logger, async (req: ReleaseDeviceRequest) => ({
      device: deviceToProto(await cleaning.release(deviceRef('device', req.device), req.generation)),
    })),

    forgetMedia: unary('ForgetMedia', logger, async (req: ForgetMediaRequest, ctx) => {
      const key = requireMediaKey('media_key', req.mediaKey);
      if (req.reason.length > 1024) {
        throw invalidArgument('reason', `${req.reason.length} characters; at most 1024`);
      }
      const by = callerOf(ctx.metadata).subject;
      const note = JSON.stringify({ by, reason: req.reason, at: new Date().toISOString() });
      const f = await useCases.forgetMedia(key, note);
      logger.warn(
        {
          media: key,
          by,
          reason: req.reason,
          burned: f.media.burned,
          condition: f.media.condition,
          removedDevices: f.removed.map((d) => `${d.host} ${d.address}`),
          alreadyForgotten: f.alreadyForgotten,
        },
        f.alreadyForgotten
          ? 'media forgotten again by an operator (it was already)'
          : 'media forgotten by an operator: it will never come back; agents reporting it are refused',
      );
      return {
        mediaKey: key,
        removedDevices: f.removed.map(deviceToProto),
        burned: f.media.burned,
        dirty: f.media.condition !== 'clean',
        alreadyForgotten: f.alreadyForgotten,
      };
    }),

    setDeviceStatus: unary('SetDeviceStatus', logger, async (req: SetDeviceStatusRequest) => {
      const device = await useCases.setDeviceStatus(
        deviceRef('device', req.device),
        deviceStatusFromProto(req.status, 'status'),
        req.generation,
      );
      return { device: deviceToProto(device) };
    }),

    watchDevices: serverStream('WatchDevices', logger, async function* (req: WatchDevicesRequest, ctx) {
      for await (const item of devices.watch(filterFromProto(req.filter), req.fromRevision, ctx.signal)) {
        if (item.kind === 'change') {
          yield encodedUpdate(item.event);
        } else {
          // Encoded here, into the one shared writer: a whole-fleet watch sends a message per device.
          yield encodeOnce(WatchDevicesResponse, {
            revision: item.revision,
            initial: true,
            device: item.kind === 'initial' ? deviceToProto(item.device) : undefined,
            removed: false,
            synced: item.kind === 'synced',
          });
        }
      }
    }),

    watchCleanup: serverStream('WatchCleanup', logger, async function* (req: WatchCleanupRequest, ctx) {
      const ref = deviceRef('device', req.device);
      const jobId = optionalRequestId('job_id', req.jobId);
      for await (const { event, deviceUuid } of devices.watchCleanup(
        ref,
        jobId,
        req.fromSequence,
        ctx.signal,
      )) {
        yield { event: cleanupEventToProto(event), deviceUuid } satisfies WatchCleanupResponse;
      }
    }),
  };
  return { name: 'berth.scheduler.v1.DeviceService', definition: DeviceServiceService, implementation: impl };
}
