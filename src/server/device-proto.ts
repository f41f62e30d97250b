/**
 * A device between its wire form (berth.agent.v1.Device: agents send it, the
 * scheduler decodes it) and its one record, ReportedDevice
 * (src/plugins/types.ts): one mapper each way, for the agent and the
 * scheduler alike. Only the fields whose wire form differs from the record's
 * (an enum, '' for null, a nested message) are named here; every other field
 * is copied by the spread, so a new one needs no line here. `onlyFieldsOf`
 * makes a field that one side has and the other lacks a compile error that
 * names it, and device-proto.test.ts round-trips a device with every field
 * set, so a mapper that drops one fails (docs/decisions.md 67).
 */
import {
  type Device,
  DeviceType as DeviceTypePb,
  FunctionKind as FunctionKindPb,
  Health as HealthPb,
} from '../gen/berth/agent/v1/device.js';
import type { DeviceType, DiscoveredDevice, FunctionKind, ReportedDevice } from '../plugins/types.js';
import {
  mediaIdentityFromProto,
  mediaIdentityToProto,
  mediaRecordFromProto,
  mediaRecordToProto,
} from './media-proto.js';

/**
 * `rest` unchanged, typed so that a key `Target` lacks is a compile error
 * naming it: what a mapper spreads is then only fields both sides hold.
 * Spread it LAST in the mapper's literal, after the fields the mapper sets,
 * and only with keys destructured out of it: V8 (Node 20) copies an object
 * spread first cheaply, but then gives the copy a new hidden class for every
 * field added after it — ~150 µs for 20 fields on a 22-field record, against
 * under 1 µs the other way round (bench/README.md, "The whole-fleet watch's
 * throughput").
 */
export const onlyFieldsOf =
  <Target>() =>
  <T extends { [K in keyof T]: K extends keyof Target ? T[K] : never }>(rest: T): T =>
    rest;

// Keyed by string: a driver written in JavaScript may report a type the union does not name.
const TYPES: Record<string, DeviceTypePb> = {
  PCI: DeviceTypePb.DEVICE_TYPE_PCI,
  NVME: DeviceTypePb.DEVICE_TYPE_NVME,
} satisfies Record<DeviceType, DeviceTypePb>;
const KINDS: Record<string, FunctionKindPb> = {
  PCI: FunctionKindPb.FUNCTION_KIND_PCI,
  PF: FunctionKindPb.FUNCTION_KIND_PF,
  VF: FunctionKindPb.FUNCTION_KIND_VF,
} satisfies Record<FunctionKind, FunctionKindPb>;

/**
 * A discovered device on the wire; what only the agent reads (assume_clean, the
 * write counters) stays on the host. Written out field by field, not spread: the
 * inventory's records grew a field after their literal (the drivers set `media`,
 * the agent `mediaRecord`), and V8 gives every spread copy of such an object a
 * hidden class of its own — 4,352 of them in one WatchInventory snapshot, ~10 MiB
 * of the agent's peak (bench/README.md, "Regressions, stop 45"). `Device` names
 * every field as required, so a field the message gains and this literal lacks
 * is a compile error, and device-proto.test.ts round-trips every field.
 */
export function deviceToProto(d: DiscoveredDevice): Device {
  return {
    address: d.address,
    vendorId: d.vendorId,
    productId: d.productId,
    classCode: d.classCode,
    kernelDriver: d.kernelDriver ?? '',
    driver: d.driver,
    type: TYPES[d.type] ?? DeviceTypePb.DEVICE_TYPE_UNSPECIFIED,
    functionKind: KINDS[d.functionKind] ?? FunctionKindPb.FUNCTION_KIND_UNSPECIFIED,
    physfn: d.physfn ?? '',
    iommuGroup: d.iommuGroup ?? undefined,
    iommuGroupPeers: d.iommuGroupPeers,
    numaNode: d.numaNode,
    resourceClass: d.resourceClass,
    traits: d.traits,
    managed: d.managed,
    liveMigratable: d.liveMigratable,
    oneTimeUse: d.oneTimeUse,
    supportsCleaning: d.supportsCleaning,
    cleanupAction: d.cleanupAction ?? '',
    health: d.health === 'healthy' ? HealthPb.HEALTH_HEALTHY : HealthPb.HEALTH_UNHEALTHY,
    healthReason: d.healthReason,
    unallocatableReason: d.unallocatableReason,
    attributes: d.attributes,
    media: d.media ? mediaIdentityToProto(d.media) : undefined,
    mediaRecord: d.mediaRecord ? mediaRecordToProto(d.mediaRecord) : undefined,
  };
}

/**
 * A device from the wire, as it was sent: the scheduler validates what it
 * keeps (its address, its bounds) where it decodes an agent's inventory. A type
 * or function kind this build does not know reads as plain PCI; media the
 * media mappers cannot read is left out.
 */
export function deviceFromProto(d: Device): ReportedDevice {
  const {
    kernelDriver,
    type,
    functionKind,
    physfn,
    iommuGroup,
    cleanupAction,
    health,
    media,
    mediaRecord,
    ...same
  } = d;
  const identity = mediaIdentityFromProto(media);
  const record = mediaRecordFromProto(mediaRecord);
  // The fields mapped first, the spread last (see onlyFieldsOf), and media
  // set after: no key of `same` is one of these, destructured out above.
  const out: ReportedDevice = {
    kernelDriver: kernelDriver === '' ? null : kernelDriver,
    type: type === DeviceTypePb.DEVICE_TYPE_NVME ? 'NVME' : 'PCI',
    functionKind:
      functionKind === FunctionKindPb.FUNCTION_KIND_VF
        ? 'VF'
        : functionKind === FunctionKindPb.FUNCTION_KIND_PF
          ? 'PF'
          : 'PCI',
    physfn: physfn === '' ? null : physfn,
    iommuGroup: iommuGroup ?? null,
    cleanupAction: cleanupAction === '' ? null : cleanupAction,
    health: health === HealthPb.HEALTH_UNHEALTHY ? 'unhealthy' : 'healthy',
    ...onlyFieldsOf<ReportedDevice>()(same),
  };
  if (identity) out.media = identity;
  if (record) out.mediaRecord = record;
  return out;
}
