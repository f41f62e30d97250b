/**
 * Every Berth RPC's request message, by method path, so the SDK can take
 * plain objects: `client.devices.listDevices({})` is completed with the
 * message's defaults (`ListDevicesRequest.fromPartial({})`) before it is
 * encoded. Without it the generated encoder reads the absent fields as
 * `undefined` and fails (`invalid uint32: undefined`, seen as INTERNAL).
 *
 * The request of `rpc Method` is `MethodRequest` in the file that declares
 * the service (buf's STANDARD lint, RPC_REQUEST_STANDARD_NAME, holds every
 * Berth RPC to it); a test checks that every RPC in the descriptor set has one.
 */
import * as agent from '../gen/berth/agent/v1/agent.js';
import * as arqs from '../gen/berth/scheduler/v1/accelerator_request.js';
import * as certificates from '../gen/berth/scheduler/v1/certificate.js';
import type { DeepPartial } from '../gen/berth/scheduler/v1/device.js';
import * as devices from '../gen/berth/scheduler/v1/device_service.js';
import * as hosts from '../gen/berth/scheduler/v1/host.js';
import * as instances from '../gen/berth/scheduler/v1/instance.js';
import * as migrations from '../gen/berth/scheduler/v1/migration.js';
import * as placement from '../gen/berth/scheduler/v1/placement.js';
import * as profiles from '../gen/berth/scheduler/v1/profile.js';
import * as registration from '../gen/berth/scheduler/v1/registration.js';

export type { DeepPartial };

interface RequestFns {
  fromPartial(object: unknown): unknown;
}

const MODULES: readonly Record<string, unknown>[] = [
  agent,
  arqs,
  certificates,
  devices,
  hosts,
  instances,
  migrations,
  placement,
  profiles,
  registration,
];

let byPath: ReadonlyMap<string, RequestFns> | null = null;

/** Method path (`/berth.scheduler.v1.DeviceService/ListDevices`) → its request message's functions. */
export function requestMessages(): ReadonlyMap<string, RequestFns> {
  if (byPath) return byPath;
  const out = new Map<string, RequestFns>();
  for (const mod of MODULES) {
    for (const [name, value] of Object.entries(mod)) {
      if (!name.endsWith('Service') || typeof value !== 'object' || value === null) continue;
      for (const method of Object.values(value as Record<string, { path?: unknown }>)) {
        if (typeof method?.path !== 'string') continue;
        const rpc = method.path.slice(method.path.lastIndexOf('/') + 1);
        const fns = mod[`${rpc}Request`] as Partial<RequestFns> | undefined;
        if (typeof fns?.fromPartial === 'function') out.set(method.path, fns as RequestFns);
      }
    }
  }
  byPath = out;
  return out;
}

/**
 * The request completed with its defaults (a plain object, or a message
 * already complete). Bytes pass as they are: a client whose serializer takes
 * encoded messages (bench/bind-harness.ts's empty method) sent them already.
 */
export function completeRequest<T>(path: string, req: unknown): T {
  if (req instanceof Uint8Array) return req as T;
  const fns = requestMessages().get(path);
  return (fns ? fns.fromPartial(req ?? {}) : req) as T;
}
