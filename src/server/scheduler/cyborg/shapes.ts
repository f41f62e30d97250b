/**
 * Cyborg's v2 shapes (openstack/cyborg cyborg/api/controllers/v2) over
 * Berth's records, and what a request to them must look like. Pure: the
 * HTTP adapter (./server.ts) decodes with these, calls the use cases and the
 * binding workflow, and encodes with these (docs/cyborg.md).
 */
import type { BerthError } from '../../../errors.js';
import { isHostName, parseUuid, type Uuid } from '../../../identifiers.js';
import type { Arq, ArqState } from '../domain/arq.js';
import type { Profile, ProfileInput, RequestGroup } from '../domain/profile.js';

/** Microversions Cyborg 2.0–2.3 (rest_api_version_history.rst): 2.1 project_id, 2.2 profile by name, 2.3 device status. */
export const MIN_VERSION = { major: 2, minor: 0 } as const;
export const MAX_VERSION = { major: 2, minor: 3 } as const;
export const VERSION_HEADER = 'OpenStack-API-Version';
export const SERVICE_TYPE = 'accelerator';
export const versionString = (v: { major: number; minor: number }) => `${v.major}.${v.minor}`;

/** A Cyborg-API failure: the HTTP status and the message Cyborg's error body carries. */
export class CyborgHttpError extends Error {
  constructor(
    readonly status: 400 | 401 | 403 | 404 | 405 | 406 | 409 | 413 | 415 | 500 | 503,
    message: string,
  ) {
    super(message);
    this.name = 'CyborgHttpError';
  }
}

export const badRequest = (field: string, why: string) => new CyborgHttpError(400, `${field}: ${why}`);

/**
 * The requested microversion from `OpenStack-API-Version` (as
 * microversion_parse reads it: `accelerator 2.1` among other services', or,
 * as Cyborg still accepts, a bare `2.1`); absent = 2.0; `latest` = 2.3.
 * A malformed or unsupported version is 406, as Cyborg answers.
 */
export function requestedVersion(header: string | undefined): { major: number; minor: number } {
  if (header === undefined || header.trim() === '') return { ...MIN_VERSION };
  let text: string | undefined;
  for (const part of header.split(',')) {
    const m = /^\s*(\S+)\s+(\S+)\s*$/.exec(part);
    if (m && m[1]!.toLowerCase() === SERVICE_TYPE) text = m[2];
  }
  if (text === undefined) {
    // Another service's version only: none for us (microversion_parse). A bare version: accepted.
    if (/^\s*\S+\s+\S+/.test(header)) return { ...MIN_VERSION };
    text = header.trim();
  }
  if (text.toLowerCase() === 'latest') return { ...MAX_VERSION };
  const m = /^(\d{1,4})\.(\d{1,4})$/.exec(text);
  if (!m)
    throw new CyborgHttpError(406, `Invalid value for ${VERSION_HEADER} header: ${JSON.stringify(text)}`);
  const v = { major: Number(m[1]), minor: Number(m[2]) };
  const range = `[${versionString(MIN_VERSION)}, ${versionString(MAX_VERSION)}]`;
  if (v.major !== MAX_VERSION.major) {
    throw new CyborgHttpError(
      406,
      `Mutually exclusive versions requested. Version ${versionString(v)} requested but not supported by this service. The supported version range is: ${range}.`,
    );
  }
  if (v.minor < MIN_VERSION.minor || v.minor > MAX_VERSION.minor) {
    throw new CyborgHttpError(
      406,
      `Version ${versionString(v)} was requested but the minor version is not supported by this service. The supported version range is: ${range}.`,
    );
  }
  return v;
}

/** Cyborg's error body: its ParsableErrorMiddleware wraps wsme's fault document as a string. */
export const errorBody = (status: number, message: string): string =>
  JSON.stringify({
    error_message: JSON.stringify({
      faultcode: status >= 500 ? 'Server' : 'Client',
      faultstring: message,
      debuginfo: null,
    }),
  });

/** Berth's failure as Cyborg's status (a user's mistake is never a 500). */
export function httpStatusOf(err: BerthError): CyborgHttpError['status'] {
  switch (err.code) {
    case 'INVALID_ARGUMENT':
    case 'RESOURCE_EXHAUSTED':
      return 400;
    case 'UNAUTHENTICATED':
      return 401;
    case 'PERMISSION_DENIED':
      return 403;
    case 'NOT_FOUND':
      return 404;
    case 'ALREADY_EXISTS':
    case 'FAILED_PRECONDITION':
    case 'ABORTED':
      return 409;
    case 'UNAVAILABLE':
    case 'DEADLINE_EXCEEDED':
    case 'CANCELLED':
      return 503;
    default:
      return 500;
  }
}

// --- ARQs --------------------------------------------------------------------

/** Cyborg's state strings (cyborg/common/constants.py). */
export const ARQ_STATE_NAMES: Record<ArqState, string> = {
  initial: 'Initial',
  bind_started: 'BindStarted',
  bound: 'Bound',
  bind_failed: 'BindFailed',
  deleting: 'Deleting',
};

export interface ArqView {
  uuid: string;
  state: string;
  device_profile_name: string;
  device_profile_group_id: number;
  hostname: string | null;
  device_rp_uuid: string | null;
  instance_uuid: string | null;
  project_id: string | null;
  attach_handle_type: string | null;
  attach_handle_uuid: string | null;
  attach_handle_info: Record<string, string> | null;
  links: Array<{ href: string; rel: string }>;
  created_at: string;
  updated_at: string | null;
}

/**
 * An ARQ as Cyborg shows it. `deviceRpUuid` is the bound device's Placement
 * provider; `physicalNetwork` the device's device_spec physical_network
 * (Nova reads it for an ARQ of a port). attach_handle_info is all strings.
 */
export function arqView(
  a: Arq,
  extra: { baseUrl: string; deviceRpUuid: string | null; physicalNetwork: string | null },
): ArqView {
  const h = a.attachHandle;
  const bound = a.state === 'bound' && h !== null;
  return {
    uuid: a.uuid,
    state: ARQ_STATE_NAMES[a.state],
    device_profile_name: a.profileName,
    device_profile_group_id: a.groupId,
    hostname: a.host,
    device_rp_uuid: bound ? extra.deviceRpUuid : null,
    instance_uuid: a.instanceUuid,
    project_id: a.project ?? null,
    attach_handle_type: bound ? 'PCI' : null,
    attach_handle_uuid: bound ? a.deviceUuid : null,
    attach_handle_info: bound
      ? {
          domain: h.domain,
          bus: h.bus,
          device: h.device,
          function: h.function,
          ...(extra.physicalNetwork !== null ? { physical_network: extra.physicalNetwork } : {}),
        }
      : null,
    links: [{ href: `${extra.baseUrl}/v2/accelerator_requests/${a.uuid}`, rel: 'self' }],
    created_at: a.createdAt,
    updated_at: null,
  };
}

/** A UUID as oslo's is_uuid_like reads it: either case, dashes optional. */
const UUID_LIKE = /^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$/i;

/**
 * A uuid in the forms Cyborg accepts, normalised to the dashed lower-case form
 * Berth's identifiers take (src/identifiers.ts); else 400 naming the field.
 */
export function requireUuid(field: string, v: unknown): Uuid {
  if (typeof v !== 'string' || !UUID_LIKE.test(v)) {
    throw badRequest(field, `${JSON.stringify(v)?.slice(0, 80) ?? 'nothing'} is not a UUID`);
  }
  const x = v.replace(/-/g, '');
  return parseUuid(
    field,
    `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20)}`,
  );
}

export const isUuidLike = (v: string) => UUID_LIKE.test(v);

/** One ARQ's bind (`add` of hostname, device_rp_uuid, instance_uuid) or unbind (`remove`). */
export type ArqPatch =
  | {
      op: 'add';
      arqUuid: Uuid;
      hostname: string;
      deviceRpUuid: Uuid;
      instanceUuid: Uuid;
      /** Only an admin may give it, at 2.1 and later. */
      projectId: string | null;
    }
  | { op: 'remove'; arqUuid: Uuid };

const BIND_PATHS = ['hostname', 'device_rp_uuid', 'instance_uuid'] as const;

/**
 * `PATCH /v2/accelerator_requests`: `{arq_uuid: [RFC 6902 ops]}`, validated
 * whole before anything is done (Cyborg's _validate_arq_patch): every op of
 * one ARQ `add` or every one `remove`, paths among hostname, device_rp_uuid,
 * instance_uuid (and project_id from 2.1), a bind giving all three. One
 * request binds or unbinds, not both.
 *
 * `only`: the patch came to one ARQ's own URL (`PATCH /accelerator_requests/{uuid}`,
 * as openstacksdk's `update_accelerator_request` and `openstack accelerator arq
 * bind|unbind` send it): the body is `{uuid: [ops]}`, keyed by that ARQ alone.
 */
export function parsePatchList(body: unknown, version: { minor: number }, only?: Uuid): ArqPatch[] {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw badRequest('body', 'expected {"<ARQ uuid>": [JSON patch operations], ...}');
  }
  const entries = Object.entries(body as Record<string, unknown>);
  if (entries.length === 0) throw badRequest('body', 'no ARQ to patch');
  if (only !== undefined) {
    const keys = entries.map(([k]) => JSON.stringify(k.slice(0, 80)));
    if (entries.length > 1) {
      throw badRequest(
        'body',
        `a PATCH of ARQ ${only} patches that ARQ only; the body has ${entries.length} keys (${keys.join(', ')}): PATCH /accelerator_requests to patch several`,
      );
    }
    const key = entries[0]![0];
    if (!isUuidLike(key) || requireUuid('ARQ', key) !== only) {
      throw badRequest(
        'body',
        `a PATCH of ARQ ${only} is keyed by that uuid ({"${only}": [operations]}), not by ${keys[0]}`,
      );
    }
  }
  if (entries.length > 64) throw badRequest('body', `${entries.length} ARQs in one patch is more than 64`);
  const out: ArqPatch[] = entries.map(([key, ops]) => {
    const arqUuid = requireUuid(`ARQ ${JSON.stringify(key.slice(0, 80))}`, key);
    if (!Array.isArray(ops) || ops.length === 0) {
      throw badRequest(arqUuid, 'expected a non-empty list of JSON patch operations');
    }
    const fields: Record<string, string> = {};
    const kinds = new Set<string>();
    ops.forEach((p, i) => {
      const at = `${arqUuid}[${i}]`;
      if (typeof p !== 'object' || p === null || Array.isArray(p)) throw badRequest(at, 'not an operation');
      const { op, path, value } = p as Record<string, unknown>;
      if (op !== 'add' && op !== 'remove') {
        throw badRequest(`${at}.op`, `${JSON.stringify(op)}: every op must be add or remove`);
      }
      kinds.add(op);
      if (typeof path !== 'string') throw badRequest(`${at}.path`, 'is required');
      const name = path.replace(/^\/+/, '');
      if (name === 'project_id') {
        if (version.minor < 1) {
          throw new CyborgHttpError(
            406,
            'Request not acceptable. The minimal required API version should be 2.1',
          );
        }
      } else if (!(BIND_PATHS as readonly string[]).includes(name)) {
        throw badRequest(`${at}.path`, `Invalid path in patch ${JSON.stringify(path.slice(0, 80))}`);
      }
      if (op === 'add') {
        if (typeof value !== 'string' || value === '') {
          throw badRequest(`${at}.value`, `${path} needs a string value`);
        }
        fields[name] = value;
      }
    });
    if (kinds.size > 1) throw badRequest(arqUuid, 'Every op must be add or remove');
    if (kinds.has('remove')) return { op: 'remove', arqUuid };
    const absent = BIND_PATHS.filter((f) => fields[f] === undefined);
    if (absent.length > 0) throw badRequest(arqUuid, `Fields absent in patch ${absent.join(',')}`);
    if (!isHostName(fields.hostname)) {
      throw badRequest(
        `${arqUuid}/hostname`,
        `${JSON.stringify(fields.hostname!.slice(0, 80))} is not a host name`,
      );
    }
    return {
      op: 'add',
      arqUuid,
      hostname: fields.hostname!,
      deviceRpUuid: requireUuid(`${arqUuid}/device_rp_uuid`, fields.device_rp_uuid),
      instanceUuid: requireUuid(`${arqUuid}/instance_uuid`, fields.instance_uuid),
      projectId: fields.project_id ?? null,
    };
  });
  if (new Set(out.map((p) => p.op)).size > 1) throw badRequest('body', 'a patch binds or unbinds, not both');
  const instances = new Set(out.flatMap((p) => (p.op === 'add' ? [p.instanceUuid] : [])));
  if (instances.size > 1) throw badRequest('body', 'one patch binds the ARQs of one instance');
  return out;
}

// --- device profiles -------------------------------------------------------------

export interface ProfileView {
  uuid: string;
  name: string;
  description: string;
  groups: Array<Record<string, string>>;
  created_at: string;
  updated_at: string | null;
  links: Array<{ href: string; rel: string }>;
}

/** The trait Berth's `live_migratable` stands for in a group. */
const LIVE_MIGRATABLE_TRAIT = 'HW_PCI_LIVE_MIGRATABLE';

/** A Berth group as Cyborg's `{"resources:RC": "n", "trait:T": "required|forbidden"}`. */
export function groupView(g: RequestGroup): Record<string, string> {
  const rc = g.resourceClass || `CUSTOM_PCI_${g.vendorId.toUpperCase()}_${g.productId.toUpperCase()}`;
  const out: Record<string, string> = { [`resources:${rc}`]: String(g.count) };
  for (const t of g.requiredTraits) out[`trait:${t}`] = 'required';
  for (const t of g.forbiddenTraits) out[`trait:${t}`] = 'forbidden';
  if (g.liveMigratable === 'yes') out[`trait:${LIVE_MIGRATABLE_TRAIT}`] = 'required';
  if (g.liveMigratable === 'no') out[`trait:${LIVE_MIGRATABLE_TRAIT}`] = 'forbidden';
  return out;
}

export function profileView(p: Profile, baseUrl: string): ProfileView {
  return {
    uuid: p.uuid,
    name: p.name,
    description: p.description,
    groups: p.groups.map(groupView),
    created_at: p.createdAt,
    updated_at: null,
    links: [{ href: `${baseUrl}/v2/device_profiles/${p.uuid}`, rel: 'self' }],
  };
}

const CYBORG_PROFILE_NAME = /^[a-zA-Z0-9-_]+$/;

/**
 * `POST /v2/device_profiles`: a list of one profile (as Cyborg takes it) →
 * Berth's profile input. A group asks for one resource class (Berth's
 * allocation unit); `accel:` keys (bitstreams, functions) have no meaning
 * for passthrough devices and are refused rather than ignored.
 */
export function profileInputFromCyborg(body: unknown): ProfileInput {
  if (!Array.isArray(body) || body.length !== 1) {
    throw badRequest('body', 'Only one device profile allowed per POST request for now.');
  }
  const p = body[0] as Record<string, unknown>;
  if (typeof p !== 'object' || p === null) throw badRequest('body[0]', 'expected a device profile');
  const { name, groups, description, uuid } = p;
  if (typeof name !== 'string' || name === '') throw badRequest('name', 'Device profile name needed.');
  if (!CYBORG_PROFILE_NAME.test(name) || name.length > 255) {
    throw badRequest(
      'name',
      `${JSON.stringify(name.slice(0, 80))}: Device profile name must be of the form ^[a-zA-Z0-9-_]+$`,
    );
  }
  if (uuid !== undefined && uuid !== null)
    throw badRequest('uuid', 'Berth chooses the uuid of a device profile');
  if (description !== undefined && description !== null && typeof description !== 'string') {
    throw badRequest('description', 'expected a string');
  }
  if (!Array.isArray(groups) || groups.length === 0)
    throw badRequest('groups', 'Device profile needs groups field.');
  return {
    name,
    ...(typeof description === 'string' ? { description } : {}),
    groups: groups.map((g, i) => groupFromCyborg(g, `groups[${i}]`)),
  };
}

function groupFromCyborg(g: unknown, at: string): Partial<RequestGroup> {
  if (typeof g !== 'object' || g === null || Array.isArray(g)) throw badRequest(at, 'expected an object');
  let resourceClass = '';
  let count = 0;
  const requiredTraits: string[] = [];
  const forbiddenTraits: string[] = [];
  let liveMigratable: RequestGroup['liveMigratable'] = 'unset';
  for (const [rawKey, value] of Object.entries(g as Record<string, unknown>)) {
    const field = `${at}[${JSON.stringify(rawKey.slice(0, 80))}]`;
    const m = /^(resources|trait|accel):(.*)$/.exec(rawKey);
    if (!m)
      throw badRequest(field, 'Device profile group keys must be of the form ^(resources:|trait:|accel:)');
    const [, kind, rest] = m;
    const name = rest!.trim();
    if (typeof value !== 'string') throw badRequest(field, `${JSON.stringify(value)} is not a string`);
    if (kind === 'accel') {
      throw badRequest(
        field,
        'accel: keys (bitstreams, functions) have no meaning for passthrough devices in Berth',
      );
    }
    if (kind === 'resources') {
      if (resourceClass !== '') {
        throw badRequest(
          field,
          `a group asks for one resource class in Berth; ${resourceClass} is already asked for`,
        );
      }
      if (!/^\d{1,3}$/.test(value.trim()) || Number(value) < 1) {
        throw badRequest(field, `Resources number ${JSON.stringify(value)} is invalid`);
      }
      resourceClass = name;
      count = Number(value);
    } else if (value === 'required' || value === 'forbidden') {
      if (name === LIVE_MIGRATABLE_TRAIT) liveMigratable = value === 'required' ? 'yes' : 'no';
      else (value === 'required' ? requiredTraits : forbiddenTraits).push(name);
    } else {
      throw badRequest(
        field,
        `Unsupported trait value ${JSON.stringify(value)}, the value must be one among required, forbidden`,
      );
    }
  }
  if (resourceClass === '') throw badRequest(at, 'a group needs one resources:<RESOURCE_CLASS> key');
  // Nova's default class (no resource_class in the device_spec) is the vendor and product: Berth's
  // vendor/product group, which matches PCI and NVMe functions alike (an NVMe device's class in
  // Berth's own profiles is CUSTOM_NVME_…, in Placement CUSTOM_PCI_…, as Nova names it).
  const ids = /^CUSTOM_PCI_([0-9A-F]{4})_([0-9A-F]{4})$/.exec(resourceClass);
  if (ids) {
    const [, vendorId, productId] = ids;
    return {
      vendorId: vendorId!.toLowerCase(),
      productId: productId!.toLowerCase(),
      count,
      requiredTraits,
      forbiddenTraits,
      liveMigratable,
    };
  }
  return { resourceClass, count, requiredTraits, forbiddenTraits, liveMigratable };
}

/** Berth's violation (`profile.groups[0].count`) said in the request's terms. */
export function profileError(err: BerthError): CyborgHttpError {
  const v = err.fieldViolations[0];
  return new CyborgHttpError(400, v ? `${v.field.replace(/^profile\./, '')}: ${v.description}` : err.message);
}
