/** Conversions between the agent's domain types and berth.agent.v1 messages. */
import type { CleanupEvent } from '../../gen/berth/agent/v1/agent.js';
import { type Device, DeviceType, FunctionKind, Health } from '../../gen/berth/agent/v1/device.js';
import type { DiscoveredDevice } from '../../plugins/types.js';
import { cleanupEventToProto } from '../cleanup-event-proto.js';
import { mediaIdentityToProto, mediaRecordToProto } from '../media-proto.js';
import type { JobEvent } from './cleanup-job.js';

const TYPES: Record<string, DeviceType> = {
  PCI: DeviceType.DEVICE_TYPE_PCI,
  NVME: DeviceType.DEVICE_TYPE_NVME,
};
const KINDS: Record<string, FunctionKind> = {
  PCI: FunctionKind.FUNCTION_KIND_PCI,
  PF: FunctionKind.FUNCTION_KIND_PF,
  VF: FunctionKind.FUNCTION_KIND_VF,
};

export function deviceToProto(d: DiscoveredDevice): Device {
  return {
    address: d.address,
    vendorId: d.vendorId,
    productId: d.productId,
    classCode: d.classCode,
    kernelDriver: d.kernelDriver ?? '',
    driver: d.driver,
    type: TYPES[d.type] ?? DeviceType.DEVICE_TYPE_UNSPECIFIED,
    functionKind: KINDS[d.functionKind] ?? FunctionKind.FUNCTION_KIND_UNSPECIFIED,
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
    health: d.health === 'healthy' ? Health.HEALTH_HEALTHY : Health.HEALTH_UNHEALTHY,
    healthReason: d.healthReason,
    unallocatableReason: d.unallocatableReason,
    attributes: d.attributes,
    media: d.media ? mediaIdentityToProto(d.media) : undefined,
    mediaRecord: d.mediaRecord ? mediaRecordToProto(d.mediaRecord) : undefined,
  };
}

/** A job event on the wire. */
export const jobEventToProto = (e: JobEvent): CleanupEvent => cleanupEventToProto(e);
