/**
 * Media identities and journal records between their wire form
 * (berth.agent.v1.MediaIdentity / MediaRecord, which the scheduler's API
 * re-serves) and the transport-neutral records of src/plugins/types.ts.
 */
import {
  MediaCondition as MediaConditionProto,
  MediaIdentityKind as MediaIdentityKindProto,
  type MediaIdentity as MediaIdentityMessage,
  type MediaRecord as MediaRecordMessage,
  type WriteCounters as WriteCountersMessage,
} from '../gen/berth/agent/v1/device.js';
import type {
  MediaCondition,
  MediaIdentity,
  MediaIdentityKind,
  MediaRecord,
  WriteCounters,
} from '../plugins/types.js';

const KIND_TO_PROTO: Record<MediaIdentityKind, MediaIdentityKindProto> = {
  NVME_SUBSYSTEM: MediaIdentityKindProto.MEDIA_IDENTITY_KIND_NVME_SUBSYSTEM,
  PCI_DSN: MediaIdentityKindProto.MEDIA_IDENTITY_KIND_PCI_DSN,
  PCI_SLOT: MediaIdentityKindProto.MEDIA_IDENTITY_KIND_PCI_SLOT,
};
const KIND_FROM_PROTO = new Map(Object.entries(KIND_TO_PROTO).map(([k, v]) => [v, k as MediaIdentityKind]));

const CONDITION_TO_PROTO: Record<MediaCondition, MediaConditionProto> = {
  clean: MediaConditionProto.MEDIA_CONDITION_CLEAN,
  held: MediaConditionProto.MEDIA_CONDITION_HELD,
  dirty: MediaConditionProto.MEDIA_CONDITION_DIRTY,
  declared_clean: MediaConditionProto.MEDIA_CONDITION_DECLARED_CLEAN,
  not_cleanable: MediaConditionProto.MEDIA_CONDITION_NOT_CLEANABLE,
};
const CONDITION_FROM_PROTO = new Map(
  Object.entries(CONDITION_TO_PROTO).map(([k, v]) => [v, k as MediaCondition]),
);

export function mediaIdentityToProto(m: MediaIdentity): MediaIdentityMessage {
  return {
    key: m.key,
    kind: KIND_TO_PROTO[m.kind],
    subsystemNqn: m.subsystemNqn,
    serial: m.serial,
    model: m.model,
    namespaces: m.namespaces.map((n) => ({ ...n })),
    deviceSerialNumber: m.deviceSerialNumber,
  };
}

/** null for an absent identity, an empty key or a kind this build does not know. */
export function mediaIdentityFromProto(m: MediaIdentityMessage | undefined): MediaIdentity | null {
  if (!m?.key) return null;
  const kind = KIND_FROM_PROTO.get(m.kind);
  if (!kind) return null;
  return {
    key: m.key,
    kind,
    subsystemNqn: m.subsystemNqn,
    serial: m.serial,
    model: m.model,
    namespaces: m.namespaces.map((n) => ({ nsid: n.nsid, nguid: n.nguid, eui64: n.eui64, uuid: n.uuid })),
    deviceSerialNumber: m.deviceSerialNumber,
  };
}

export function mediaRecordToProto(r: MediaRecord): MediaRecordMessage {
  return {
    key: r.key,
    condition: CONDITION_TO_PROTO[r.condition],
    burned: r.burned,
    since: new Date(r.since),
    lastAddress: r.lastAddress,
    arqUuid: r.arqUuid,
    instanceUuid: r.instanceUuid,
    reason: r.reason,
    writeCounters: r.writeCounters ? writeCountersToProto(r.writeCounters) : undefined,
  };
}

function writeCountersToProto(c: WriteCounters): WriteCountersMessage {
  return {
    controller: c.controller,
    cntlid: c.cntlid,
    dataUnitsWritten: c.dataUnitsWritten,
    hostWriteCommands: c.hostWriteCommands,
    powerCycles: c.powerCycles,
    powerOnHours: c.powerOnHours,
    readAt: new Date(c.at),
  };
}

/** null for counters that are not decimal digits: a record never carries counters it cannot compare. */
function writeCountersFromProto(c: WriteCountersMessage): WriteCounters | null {
  const counters = [c.dataUnitsWritten, c.hostWriteCommands, c.powerCycles, c.powerOnHours];
  if (!counters.every((v) => /^\d{1,39}$/.test(v))) return null;
  return {
    controller: c.controller,
    cntlid: c.cntlid,
    dataUnitsWritten: c.dataUnitsWritten,
    hostWriteCommands: c.hostWriteCommands,
    powerCycles: c.powerCycles,
    powerOnHours: c.powerOnHours,
    at: c.readAt ? c.readAt.getTime() : 0,
  };
}

/**
 * null for an absent record or an empty key. A condition this build does not
 * know reads as `dirty`: an agent newer than the scheduler never makes media
 * look cleaner than it says.
 */
export function mediaRecordFromProto(r: MediaRecordMessage | undefined): MediaRecord | null {
  if (!r?.key) return null;
  const record: MediaRecord = {
    key: r.key,
    condition: CONDITION_FROM_PROTO.get(r.condition) ?? 'dirty',
    burned: r.burned,
    since: r.since ? r.since.getTime() : 0,
    lastAddress: r.lastAddress,
    arqUuid: r.arqUuid,
    instanceUuid: r.instanceUuid,
    // At most what a reason in a device's answer may say.
    reason: r.reason.slice(0, 1024),
  };
  const counters = r.writeCounters ? writeCountersFromProto(r.writeCounters) : null;
  return counters ? { ...record, writeCounters: counters } : record;
}
