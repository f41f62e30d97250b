/** Conversions between the scheduler's domain records and berth.scheduler.v1 messages. */

import { invalidArgument } from '../../errors.js';
import type { Device as AgentDevice } from '../../gen/berth/agent/v1/device.js';
import {
  type AcceleratorRequest,
  ArqState as ArqStatePb,
  AttachHandleType,
} from '../../gen/berth/scheduler/v1/accelerator_request.js';
import {
  CleanupOutcome,
  type Device,
  DeviceState as DeviceStatePb,
  DeviceStatus as DeviceStatusPb,
  DeviceType,
  Health,
} from '../../gen/berth/scheduler/v1/device.js';
import {
  LiveMigratable as LiveMigratablePb,
  type Profile as ProfilePb,
  type RequestGroup as RequestGroupPb,
} from '../../gen/berth/scheduler/v1/profile.js';
import { parsePciAddress } from '../../identifiers.js';
import { proofToProto } from '../cleanup-event-proto.js';
import { deviceFromProto } from '../device-proto.js';
import { mediaIdentityToProto } from '../media-proto.js';
import type { Arq, ArqState } from './domain/arq.js';
import {
  type DeviceFacts,
  type DeviceRecord,
  type DeviceState,
  type DeviceStatus,
  unallocatableReason,
} from './domain/device-state.js';
import type { LiveMigratable, Profile, ProfileInput, RequestGroup } from './domain/profile.js';

const STATES: Record<DeviceState, DeviceStatePb> = {
  available: DeviceStatePb.DEVICE_STATE_AVAILABLE,
  allocated: DeviceStatePb.DEVICE_STATE_ALLOCATED,
  pending_cleaning: DeviceStatePb.DEVICE_STATE_PENDING_CLEANING,
  cleaning: DeviceStatePb.DEVICE_STATE_CLEANING,
  error: DeviceStatePb.DEVICE_STATE_ERROR,
};
const STATE_NAMES = new Map([...Object.entries(STATES)].map(([k, v]) => [v, k as DeviceState]));

export function deviceStateFromProto(v: DeviceStatePb, field: string): DeviceState | null {
  if (v === DeviceStatePb.DEVICE_STATE_UNSPECIFIED) return null;
  const s = STATE_NAMES.get(v);
  if (!s) throw invalidArgument(field, `${v} is not a device state`);
  return s;
}

export function deviceStatusFromProto(v: DeviceStatusPb, field: string): DeviceStatus {
  if (v === DeviceStatusPb.DEVICE_STATUS_ENABLED) return 'enabled';
  if (v === DeviceStatusPb.DEVICE_STATUS_MAINTAINING) return 'maintaining';
  throw invalidArgument(
    field,
    `${v} is not a device status; use DEVICE_STATUS_ENABLED or DEVICE_STATUS_MAINTAINING`,
  );
}

export function deviceTypeFromProto(v: DeviceType, field: string): 'PCI' | 'NVME' | null {
  if (v === DeviceType.DEVICE_TYPE_UNSPECIFIED) return null;
  if (v === DeviceType.DEVICE_TYPE_PCI) return 'PCI';
  if (v === DeviceType.DEVICE_TYPE_NVME) return 'NVME';
  throw invalidArgument(field, `${v} is not a device type`);
}

const OUTCOMES = {
  succeeded: CleanupOutcome.CLEANUP_OUTCOME_SUCCEEDED,
  failed: CleanupOutcome.CLEANUP_OUTCOME_FAILED,
  interrupted: CleanupOutcome.CLEANUP_OUTCOME_INTERRUPTED,
} as const;

const ts = (s: string | null | undefined): Date | undefined => (s ? new Date(s) : undefined);

/**
 * A device as the scheduler's API shows it, written out field by field, as the
 * agent's mapper is (device-proto.ts). `Device` names every field as required,
 * so a field the message gains and this literal lacks is a compile error; a
 * record field the message lacks (functionKind, present, createdAt, …) is kept
 * and not shown. Not a spread of the record with the message's own fields
 * after it: V8 copies a spread cheaply but then gives the copy a hidden class
 * of its own for each field added after it, and that made this mapper ~75 µs
 * a device, most of a whole-fleet watch's time (bench/README.md, "The
 * whole-fleet watch's throughput"); written out, ~1 µs.
 */
export function deviceToProto(d: DeviceRecord): Device {
  const reason = unallocatableReason(d);
  const last = d.lastCleanup;
  return {
    uuid: d.uuid,
    host: d.host,
    address: d.address,
    vendorId: d.vendorId,
    productId: d.productId,
    classCode: d.classCode,
    kernelDriver: d.kernelDriver ?? '',
    driver: d.driver,
    type: d.type === 'NVME' ? DeviceType.DEVICE_TYPE_NVME : DeviceType.DEVICE_TYPE_PCI,
    physfn: d.physfn ?? '',
    iommuGroup: d.iommuGroup ?? undefined,
    numaNode: d.numaNode,
    resourceClass: d.resourceClass,
    traits: d.traits,
    managed: d.managed,
    liveMigratable: d.liveMigratable,
    oneTimeUse: d.oneTimeUse,
    burned: d.burned,
    cleanupAction: d.cleanupAction ?? '',
    supportsCleaning: d.supportsCleaning,
    deviceState: STATES[d.deviceState],
    status:
      d.status === 'enabled'
        ? DeviceStatusPb.DEVICE_STATUS_ENABLED
        : DeviceStatusPb.DEVICE_STATUS_MAINTAINING,
    health: d.health === 'healthy' ? Health.HEALTH_HEALTHY : Health.HEALTH_UNHEALTHY,
    healthReason: d.healthReason,
    reserved: d.reserved,
    total: d.total,
    resourceProvider: d.resourceProvider,
    generation: d.generation,
    allocatable: reason === '',
    unallocatableReason: reason,
    arqUuid: d.arqUuid ?? '',
    instanceUuid: d.instanceUuid ?? '',
    errorReason: d.errorReason,
    lastCleanup: last
      ? {
          jobId: last.jobId,
          action: last.action,
          outcome: last.outcome ? OUTCOMES[last.outcome] : CleanupOutcome.CLEANUP_OUTCOME_UNSPECIFIED,
          message: last.message,
          startedAt: ts(last.startedAt),
          finishedAt: ts(last.finishedAt),
          proof: last.proof ? proofToProto(last.proof) : undefined,
        }
      : undefined,
    attributes: d.attributes,
    updatedAt: ts(d.updatedAt),
    media: d.media ? mediaIdentityToProto(d.media) : undefined,
    // Filled in by DeviceService when the scheduler reports to Placement (placement/).
    placementProviderUuid: '',
    placementSyncedAt: undefined,
    placementNote: '',
    placementProviderName: '',
  };
}

/**
 * An agent's device message as the facts the scheduler stores; `field` names
 * it in the update. The one wire mapper (device-proto.ts) reads it; here only
 * what the scheduler's facts hold another way: the address parsed, absent
 * media as null.
 */
export function factsFromAgent(d: AgentDevice, field: string): DeviceFacts {
  const { address, media, mediaRecord, ...same } = deviceFromProto(d);
  // The spread last (device-proto.ts onlyFieldsOf): these keys are out of it.
  return {
    address: parsePciAddress(`${field}.address`, address),
    media: media ?? null,
    agentMedia: mediaRecord ?? null,
    ...same,
  };
}

const LM_TO: Record<LiveMigratable, LiveMigratablePb> = {
  unset: LiveMigratablePb.LIVE_MIGRATABLE_UNSPECIFIED,
  yes: LiveMigratablePb.LIVE_MIGRATABLE_YES,
  no: LiveMigratablePb.LIVE_MIGRATABLE_NO,
};

function groupToProto(g: RequestGroup): RequestGroupPb {
  return {
    resourceClass: g.resourceClass,
    vendorId: g.vendorId,
    productId: g.productId,
    requiredTraits: g.requiredTraits,
    forbiddenTraits: g.forbiddenTraits,
    liveMigratable: LM_TO[g.liveMigratable],
    count: g.count,
  };
}

export function profileToProto(p: Profile): ProfilePb {
  return {
    name: p.name,
    uuid: p.uuid,
    description: p.description,
    groups: p.groups.map(groupToProto),
    createdAt: new Date(p.createdAt),
  };
}

export function profileInputFromProto(p: ProfilePb | undefined): ProfileInput {
  if (!p) throw invalidArgument('profile', 'is required');
  return {
    name: p.name,
    description: p.description,
    groups: p.groups.map((g, i) => {
      let liveMigratable: LiveMigratable;
      if (g.liveMigratable === LiveMigratablePb.LIVE_MIGRATABLE_YES) liveMigratable = 'yes';
      else if (g.liveMigratable === LiveMigratablePb.LIVE_MIGRATABLE_NO) liveMigratable = 'no';
      else if (g.liveMigratable === LiveMigratablePb.LIVE_MIGRATABLE_UNSPECIFIED) liveMigratable = 'unset';
      else
        throw invalidArgument(
          `profile.groups[${i}].live_migratable`,
          `${g.liveMigratable} is not a valid value`,
        );
      return {
        resourceClass: g.resourceClass,
        vendorId: g.vendorId,
        productId: g.productId,
        requiredTraits: g.requiredTraits,
        forbiddenTraits: g.forbiddenTraits,
        liveMigratable,
        count: g.count === 0 ? 1 : g.count,
      };
    }),
  };
}

const ARQ_STATES: Record<ArqState, ArqStatePb> = {
  initial: ArqStatePb.ARQ_STATE_INITIAL,
  bind_started: ArqStatePb.ARQ_STATE_BIND_STARTED,
  bound: ArqStatePb.ARQ_STATE_BOUND,
  bind_failed: ArqStatePb.ARQ_STATE_BIND_FAILED,
  deleting: ArqStatePb.ARQ_STATE_DELETING,
};

export function arqToProto(a: Arq): AcceleratorRequest {
  return {
    uuid: a.uuid,
    profileName: a.profileName,
    groupId: a.groupId,
    state: ARQ_STATES[a.state],
    instanceUuid: a.instanceUuid ?? '',
    host: a.host ?? '',
    deviceUuid: a.deviceUuid ?? '',
    deviceAddress: a.deviceAddress ?? '',
    attachHandleType: a.attachHandle
      ? AttachHandleType.ATTACH_HANDLE_TYPE_PCI
      : AttachHandleType.ATTACH_HANDLE_TYPE_UNSPECIFIED,
    attachHandleInfo: a.attachHandle ?? undefined,
    tag: a.tag,
    error: a.error,
    createdAt: new Date(a.createdAt),
    resourceClass: a.group.resourceClass,
  };
}
