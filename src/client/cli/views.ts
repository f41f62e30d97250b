/**
 * The JSON/YAML views of the API's messages: the proto's field names in
 * snake_case (as in the .proto files and `berth agent discover -o json`), every
 * field present even when it is empty, enums as short lower-case names
 * (`available`, `nvme`, `bound`) and timestamps as ISO 8601 strings — stable
 * for scripts and jq.
 */
import { type CleanupEvent, cleanupPhaseToJSON } from '../../gen/berth/agent/v1/agent.js';
import {
  type CensusNamespace,
  type CleanupProof,
  namespaceManagementToJSON,
  readBackToJSON,
} from '../../gen/berth/agent/v1/cleanup_proof.js';
import { type MediaIdentity, mediaIdentityKindToJSON } from '../../gen/berth/agent/v1/device.js';
import {
  type AcceleratorRequest,
  arqStateToJSON,
  attachHandleTypeToJSON,
} from '../../gen/berth/scheduler/v1/accelerator_request.js';
import {
  type CleanupRecord,
  cleanupOutcomeToJSON,
  type Device,
  deviceStateToJSON,
  deviceStatusToJSON,
  deviceTypeToJSON,
  healthToJSON,
} from '../../gen/berth/scheduler/v1/device.js';
import type { Host } from '../../gen/berth/scheduler/v1/host.js';
import type { Hostdev, PciAddress } from '../../gen/berth/scheduler/v1/instance.js';
import { type Migration, migrationStateToJSON } from '../../gen/berth/scheduler/v1/migration.js';
import { liveMigratableToJSON, type Profile } from '../../gen/berth/scheduler/v1/profile.js';
import { shortEnum } from './format.js';

const iso = (d: Date | undefined) => (d ? d.toISOString() : null);

export const deviceName = (d: { host: string; address: string }) => `${d.host}/${d.address}`;

export function cleanupRecordView(r: CleanupRecord | undefined) {
  if (!r) return null;
  return {
    job_id: r.jobId,
    action: r.action,
    outcome: shortEnum(cleanupOutcomeToJSON(r.outcome), 'CLEANUP_OUTCOME_'),
    message: r.message,
    started_at: iso(r.startedAt),
    finished_at: iso(r.finishedAt),
    proof: cleanupProofView(r.proof),
  };
}

/**
 * How a cleanup was proven: method, full or sample read-back, bytes written /
 * read / covered, findings, and (NVMe) the agent's census of the media it covered.
 */
export function cleanupProofView(p: CleanupProof | undefined) {
  if (!p) return null;
  const ns = (n: CensusNamespace) => ({
    nsid: n.nsid,
    size_bytes: n.sizeBytes,
    block_size: n.blockSize,
    attached: n.attached,
    name: n.name,
    ...(n.coveredBy ? { covered_by: n.coveredBy } : {}),
  });
  const c = p.census;
  return {
    method: p.method,
    read_back: shortEnum(readBackToJSON(p.readBack), 'READ_BACK_'),
    bytes_written: p.bytesWritten,
    bytes_read: p.bytesRead,
    bytes_total: p.bytesTotal,
    findings: p.findings,
    census: c
      ? {
          controller: c.controller,
          total_capacity_bytes: c.totalCapacityBytes ?? null,
          unallocated_capacity_bytes: c.unallocatedCapacityBytes ?? null,
          namespace_management: shortEnum(
            namespaceManagementToJSON(c.namespaceManagement),
            'NAMESPACE_MANAGEMENT_',
          ),
          unallocated: c.unallocated,
          namespaces: c.namespaces.map(ns),
          namespaces_before: c.namespacesBefore.map(ns),
        }
      : null,
  };
}

export function deviceView(d: Device) {
  return {
    uuid: d.uuid,
    host: d.host,
    address: d.address,
    vendor_id: d.vendorId,
    product_id: d.productId,
    class_code: d.classCode,
    kernel_driver: d.kernelDriver,
    driver: d.driver,
    type: shortEnum(deviceTypeToJSON(d.type), 'DEVICE_TYPE_'),
    physfn: d.physfn,
    iommu_group: d.iommuGroup ?? null,
    numa_node: d.numaNode,
    resource_class: d.resourceClass,
    traits: d.traits,
    managed: d.managed,
    live_migratable: d.liveMigratable,
    one_time_use: d.oneTimeUse,
    burned: d.burned,
    cleanup_action: d.cleanupAction,
    supports_cleaning: d.supportsCleaning,
    device_state: shortEnum(deviceStateToJSON(d.deviceState), 'DEVICE_STATE_'),
    status: shortEnum(deviceStatusToJSON(d.status), 'DEVICE_STATUS_'),
    health: shortEnum(healthToJSON(d.health), 'HEALTH_'),
    health_reason: d.healthReason,
    reserved: d.reserved,
    total: d.total,
    resource_provider: d.resourceProvider,
    generation: d.generation,
    allocatable: d.allocatable,
    unallocatable_reason: d.unallocatableReason,
    arq_uuid: d.arqUuid,
    instance_uuid: d.instanceUuid,
    error_reason: d.errorReason,
    last_cleanup: cleanupRecordView(d.lastCleanup),
    attributes: d.attributes,
    // The media the device gives access to (docs/media-identity.md).
    media: d.media ? mediaView(d.media) : null,
    updated_at: iso(d.updatedAt),
    // Only on a scheduler that reports to Placement.
    ...(d.placementProviderName
      ? {
          placement_provider: d.placementProviderName,
          placement_provider_uuid: d.placementProviderUuid,
          placement_synced_at: iso(d.placementSyncedAt) || 'never',
          placement_note: d.placementNote,
        }
      : {}),
  };
}
export type DeviceView = ReturnType<typeof deviceView>;

/** A media identity as the CLI shows it: the key, what it is read from, and the identifiers it has. */
function mediaView(m: MediaIdentity) {
  return {
    key: m.key,
    kind: shortEnum(mediaIdentityKindToJSON(m.kind), 'MEDIA_IDENTITY_KIND_'),
    ...(m.subsystemNqn ? { subsystem_nqn: m.subsystemNqn } : {}),
    ...(m.serial ? { serial: m.serial } : {}),
    ...(m.model ? { model: m.model } : {}),
    ...(m.deviceSerialNumber ? { device_serial_number: m.deviceSerialNumber } : {}),
    ...(m.namespaces.length > 0
      ? {
          namespaces: m.namespaces.map((n) => ({
            nsid: n.nsid,
            ...(n.nguid ? { nguid: n.nguid } : {}),
            ...(n.eui64 ? { eui64: n.eui64 } : {}),
            ...(n.uuid ? { uuid: n.uuid } : {}),
          })),
        }
      : {}),
  };
}

export function hostView(h: Host) {
  return {
    name: h.name,
    endpoint: h.endpoint,
    boot_id: h.bootId,
    agent_version: h.agentVersion,
    features: h.features,
    drivers: h.drivers,
    connected: h.connected,
    registered_at: iso(h.registeredAt),
    last_seen: iso(h.lastSeen),
    device_count: h.deviceCount,
    followed_by: h.followedBy,
  };
}
export type HostView = ReturnType<typeof hostView>;

export function profileView(p: Profile) {
  return {
    name: p.name,
    uuid: p.uuid,
    description: p.description,
    groups: p.groups.map((g) => ({
      resource_class: g.resourceClass,
      vendor_id: g.vendorId,
      product_id: g.productId,
      required_traits: g.requiredTraits,
      forbidden_traits: g.forbiddenTraits,
      live_migratable: shortEnum(liveMigratableToJSON(g.liveMigratable), 'LIVE_MIGRATABLE_') || 'unset',
      count: g.count,
    })),
    created_at: iso(p.createdAt),
  };
}
export type ProfileView = ReturnType<typeof profileView>;

export function arqView(a: AcceleratorRequest) {
  return {
    uuid: a.uuid,
    profile_name: a.profileName,
    group_id: a.groupId,
    state: shortEnum(arqStateToJSON(a.state), 'ARQ_STATE_'),
    instance_uuid: a.instanceUuid,
    host: a.host,
    device_uuid: a.deviceUuid,
    device_address: a.deviceAddress,
    attach_handle_type: shortEnum(attachHandleTypeToJSON(a.attachHandleType), 'ATTACH_HANDLE_TYPE_'),
    attach_handle_info: a.attachHandleInfo
      ? {
          domain: a.attachHandleInfo.domain,
          bus: a.attachHandleInfo.bus,
          device: a.attachHandleInfo.device,
          function: a.attachHandleInfo.function,
          managed: a.attachHandleInfo.managed,
        }
      : null,
    tag: a.tag,
    error: a.error,
    created_at: iso(a.createdAt),
    resource_class: a.resourceClass,
  };
}
export type ArqView = ReturnType<typeof arqView>;

const pciView = (p: PciAddress | undefined) =>
  p ? { domain: p.domain, bus: p.bus, slot: p.slot, function: p.function } : null;
export function hostdevView(h: Hostdev) {
  return {
    arq_uuid: h.arqUuid,
    device_uuid: h.deviceUuid,
    source: pciView(h.source),
    guest: pciView(h.guest),
    managed: h.managed,
    alias: h.alias,
    tag: h.tag,
  };
}

export function migrationView(m: Migration) {
  return {
    uuid: m.uuid,
    instance_uuid: m.instanceUuid,
    source_host: m.sourceHost,
    destination_host: m.destinationHost,
    state: shortEnum(migrationStateToJSON(m.state), 'MIGRATION_STATE_'),
    pci_dev_map_src_dst: m.pciDevMapSrcDst,
    destination_xml: m.destinationXml,
    readiness: m.readiness.map((r) => ({ address: r.address, ready: r.ready, reason: r.reason })),
    created_at: iso(m.createdAt),
  };
}

export function cleanupEventView(e: CleanupEvent, deviceUuid = '') {
  return {
    device_uuid: deviceUuid,
    job_id: e.jobId,
    address: e.address,
    action: e.action,
    phase: shortEnum(cleanupPhaseToJSON(e.phase), 'CLEANUP_PHASE_'),
    step: e.step,
    percent: e.percent,
    bytes_done: e.bytesDone,
    bytes_total: e.bytesTotal,
    message: e.message,
    time: iso(e.time),
    sequence: e.sequence,
  };
}
