/**
 * The device state machine, in one pure module (DESIGN.md "Device state machine").
 *
 * Every event that can change a device's lifecycle is a function here that takes
 * the current record and returns the next one, or throws a BerthError with a
 * machine-readable reason. Nothing else in the scheduler writes `deviceState`,
 * `burned`, `status` or `reserved`: the use cases (../usecases) apply these
 * functions inside their units of work, so the invariants live in exactly one place.
 *
 * `reserved` is never set by a transition directly: `settle()` recomputes it from
 * `allocatable()` after every event, so "reserved = total exactly when the device
 * is not allocatable" (invariant 1) cannot drift.
 */

import type { ReasonFor } from '../../../error-reasons.js';
import { type BerthError, failedPrecondition } from '../../../errors.js';
import type { HostName, PciAddress, Uuid } from '../../../identifiers.js';
import type { CleanupProof } from '../../../plugins/cleanup-evidence.js';
import type { Health, MediaIdentity, MediaRecord, ReportedDevice } from '../../../plugins/types.js';

export const DEVICE_STATES = ['available', 'allocated', 'pending_cleaning', 'cleaning', 'error'] as const;
export type DeviceState = (typeof DEVICE_STATES)[number];
export const DEVICE_STATUSES = ['enabled', 'maintaining'] as const;
export type DeviceStatus = (typeof DEVICE_STATUSES)[number];
export type CleanupOutcome = 'succeeded' | 'failed' | 'interrupted';

/** How the last (or current) cleanup of a device went; proto CleanupRecord. */
export interface CleanupRecord {
  jobId: string;
  action: string;
  /** null while the job has not ended. */
  outcome: CleanupOutcome | null;
  message: string;
  startedAt: string | null;
  finishedAt: string | null;
  /** On success: how it was proven (absent on records written before proofs existed). */
  proof?: CleanupProof | null;
}

/**
 * What a host agent reports about a device: everything discovery owns. It is
 * the agent's ReportedDevice (src/plugins/types.ts, the one record of a
 * device's facts; a new fact is written there and in the proto), with the
 * address parsed, and the media and the journal's record null when the agent
 * sent none (convert.ts factsFromAgent).
 */
export interface DeviceFacts extends Omit<ReportedDevice, 'address' | 'media' | 'mediaRecord'> {
  address: PciAddress;
  /** The media the device gives access to (docs/media-identity.md); null from an agent that reports none. */
  media: MediaIdentity | null;
  /** What the device's agent's journal says of that media; null when it says nothing. */
  agentMedia: MediaRecord | null;
}

/**
 * A device as the scheduler holds it: the facts plus the lifecycle it owns.
 * The agent's journal record of its media is not kept here: it goes into the
 * scheduler's record of the media (domain/media.ts), so the agent's own
 * bookkeeping never changes a device's generation.
 */
export interface DeviceRecord extends Omit<DeviceFacts, 'unallocatableReason' | 'agentMedia'> {
  uuid: Uuid;
  host: HostName;
  /** The agent's reason the device must not be allocated ('' when none). */
  hostUnallocatableReason: string;
  /** Whether the last discovery on the host still saw the device. */
  present: boolean;
  /**
   * Why the device's media keeps it out of the pool ('' when it does not):
   * another device of the same media holds it or is being cleaned of it, or
   * the media may hold tenant data (domain/media.ts). Records written before
   * media were followed lack it.
   */
  mediaReason: string;
  deviceState: DeviceState;
  status: DeviceStatus;
  /** A one-time-use device that has been bound; only an operator un-burns it. */
  burned: boolean;
  /** Placement-style inventory of the device's resource provider (total is 1). */
  total: number;
  reserved: number;
  /** `<host>_<address>`. */
  resourceProvider: string;
  /** Bumped by the store on every write; stale writes fail with ABORTED. */
  generation: number;
  /** The ARQ and instance holding the device while it is allocated. */
  arqUuid: string | null;
  instanceUuid: string | null;
  /** The migration whose destination claim holds the device (allocated, no ARQ yet). */
  migrationUuid: string | null;
  /** The cleanup job that owns the device while pending_cleaning/cleaning. */
  cleanupJobId: string | null;
  errorReason: string;
  lastCleanup: CleanupRecord | null;
  createdAt: string;
  updatedAt: string;
}

/**
 * Why a device cannot be picked by a bind right now; empty when it can.
 * Invariant 1 (extended by DESIGN "Discovery, health"): allocatable iff
 * available, enabled, not burned, healthy, present and the agent gave no reason.
 */
export function unallocatableReasons(d: DeviceRecord): string[] {
  const reasons: string[] = [];
  if (d.deviceState !== 'available') reasons.push(`device_state is ${d.deviceState}`);
  if (d.status !== 'enabled') reasons.push(`status is ${d.status}`);
  if (d.burned) reasons.push('one-time-use device is burned');
  if (d.health !== 'healthy') reasons.push(`unhealthy${d.healthReason ? `: ${d.healthReason}` : ''}`);
  if (!d.present) reasons.push('not seen by the last discovery');
  if (d.hostUnallocatableReason) reasons.push(d.hostUnallocatableReason);
  if (d.mediaReason) reasons.push(d.mediaReason);
  return reasons;
}

export const allocatable = (d: DeviceRecord): boolean => unallocatableReasons(d).length === 0;

/** The API's unallocatable_reason: '' when allocatable. */
export const unallocatableReason = (d: DeviceRecord): string => unallocatableReasons(d).join('; ');

/** Invariant 1: reserved = total exactly when the device is not allocatable. */
export const expectedReserved = (d: DeviceRecord): number => (allocatable(d) ? 0 : d.total);

/** Every transition ends here, so reserved always follows the single rule. */
function settle(d: DeviceRecord, patch: Partial<DeviceRecord>): DeviceRecord {
  const next: DeviceRecord = { ...d, ...patch };
  next.reserved = expectedReserved(next);
  return next;
}

const describe = (d: DeviceRecord) => `device ${d.uuid} (${d.host} ${d.address})`;

function refuse(reason: ReasonFor<'FAILED_PRECONDITION'>, d: DeviceRecord, message: string): BerthError {
  return failedPrecondition(reason, `${describe(d)}: ${message}`, {
    device_uuid: d.uuid,
    device_state: d.deviceState,
  });
}

/**
 * The reason a device with media the unit has not settled yet is kept out of
 * the pool: a device is written first and its media settled before the unit
 * ends (usecases/media.ts), and no event — no watcher, no Placement — may see
 * it allocatable in between.
 */
export const MEDIA_UNSETTLED = 'its media is being looked up';

/** A device the host reported for the first time. */
export function newDevice(host: HostName, facts: DeviceFacts, uuid: Uuid, now: string): DeviceRecord {
  // The facts' own fields spread last, after the fields set here (none of them
  // a fact, and the copied lists destructured out): V8 adds a field after a
  // spread slowly, a new hidden class per object (device-proto.ts onlyFieldsOf).
  // A fact that took the name of a field set here would overwrite the
  // scheduler's value with the agent's: tsc refuses that literal (TS2783).
  const {
    unallocatableReason: hostReason,
    agentMedia: _journal,
    traits,
    iommuGroupPeers,
    attributes,
    ...rest
  } = facts;
  return settle(
    {
      traits: [...traits],
      iommuGroupPeers: [...iommuGroupPeers],
      attributes: { ...attributes },
      uuid,
      host,
      hostUnallocatableReason: hostReason,
      present: true,
      mediaReason: facts.media?.key ? MEDIA_UNSETTLED : '',
      deviceState: 'available',
      status: 'enabled',
      burned: false,
      total: 1,
      reserved: 1,
      resourceProvider: `${host}_${facts.address}`,
      generation: 0,
      arqUuid: null,
      instanceUuid: null,
      migrationUuid: null,
      cleanupJobId: null,
      errorReason: '',
      lastCleanup: null,
      createdAt: now,
      updatedAt: now,
      ...rest,
    },
    {},
  );
}

function assertAllocatable(d: DeviceRecord): void {
  const reasons = unallocatableReasons(d);
  if (reasons.length > 0) {
    throw refuse('DEVICE_NOT_ALLOCATABLE', d, `cannot be bound: ${reasons.join('; ')}`);
  }
}

/**
 * Bind the device to an ARQ of an instance (invariant 5: only when allocatable).
 * A one-time-use device is burned here, at bind (invariant 8).
 */
export function bind(d: DeviceRecord, holder: { arqUuid: string; instanceUuid: string }): DeviceRecord {
  assertAllocatable(d);
  return settle(d, {
    deviceState: 'allocated',
    arqUuid: holder.arqUuid,
    instanceUuid: holder.instanceUuid,
    migrationUuid: null,
    burned: d.burned || d.oneTimeUse,
  });
}

/** Claim the device on a live migration's destination; burns one-time-use devices (invariant 8). */
export function claimForMigration(
  d: DeviceRecord,
  holder: { migrationUuid: string; instanceUuid: string },
): DeviceRecord {
  assertAllocatable(d);
  return settle(d, {
    deviceState: 'allocated',
    arqUuid: null,
    instanceUuid: holder.instanceUuid,
    migrationUuid: holder.migrationUuid,
    burned: d.burned || d.oneTimeUse,
  });
}

/** A committed migration hands the destination claim to the instance's ARQ. */
export function adoptClaim(d: DeviceRecord, migrationUuid: string, arqUuid: string): DeviceRecord {
  if (d.deviceState !== 'allocated' || d.migrationUuid !== migrationUuid) {
    throw refuse('DEVICE_NOT_CLAIMED', d, `is not claimed by migration ${migrationUuid}`);
  }
  return settle(d, { arqUuid, migrationUuid: null });
}

/**
 * The holder let go of the device (ARQ deleted, migration source committed, or a
 * destination claim aborted). A device that supports cleaning must be cleaned
 * before it is offered again, so it goes pending_cleaning under `cleanupJobId`;
 * the others go back to available, where a burned one stays reserved.
 */
export function release(
  d: DeviceRecord,
  holder: { arqUuid: string } | { migrationUuid: string },
  cleanupJobId: string,
): DeviceRecord {
  const holds =
    'arqUuid' in holder
      ? d.arqUuid === holder.arqUuid && d.arqUuid !== null
      : d.migrationUuid === holder.migrationUuid && d.migrationUuid !== null;
  if (d.deviceState !== 'allocated' || !holds) {
    const who = 'arqUuid' in holder ? `ARQ ${holder.arqUuid}` : `migration ${holder.migrationUuid}`;
    throw refuse('DEVICE_NOT_HELD', d, `is not allocated to ${who}`);
  }
  const cleared = { arqUuid: null, instanceUuid: null, migrationUuid: null };
  if (d.supportsCleaning) {
    return settle(d, { ...cleared, deviceState: 'pending_cleaning', cleanupJobId, errorReason: '' });
  }
  return settle(d, { ...cleared, deviceState: 'available' });
}

function assertJob(d: DeviceRecord, jobId: string, states: readonly DeviceState[]): void {
  if (!states.includes(d.deviceState)) {
    throw refuse('CLEANUP_NOT_EXPECTED', d, `cleanup job ${jobId} reported while ${d.deviceState}`);
  }
  if (d.cleanupJobId !== jobId) {
    throw refuse(
      'STALE_CLEANUP_JOB',
      d,
      `cleanup job ${jobId} is not the device's current job ${d.cleanupJobId ?? '(none)'}`,
    );
  }
}

/** The scheduler sent the job to the agent. A guard: the device stays pending_cleaning. */
export function cleanupDispatched(d: DeviceRecord, jobId: string): DeviceRecord {
  assertJob(d, jobId, ['pending_cleaning', 'cleaning']);
  return d;
}

/** The agent started the locked-in action. Idempotent for a repeated start. */
export function cleanupStarted(d: DeviceRecord, jobId: string, now: string): DeviceRecord {
  assertJob(d, jobId, ['pending_cleaning', 'cleaning']);
  if (d.deviceState === 'cleaning') return d;
  return settle(d, {
    deviceState: 'cleaning',
    lastCleanup: {
      jobId,
      action: d.cleanupAction ?? '',
      outcome: null,
      message: '',
      startedAt: now,
      finishedAt: null,
    },
  });
}

function finish(
  d: DeviceRecord,
  jobId: string,
  outcome: CleanupOutcome,
  message: string,
  now: string,
  proof: CleanupProof | null = null,
): CleanupRecord {
  return {
    jobId,
    action: d.cleanupAction ?? '',
    outcome,
    message,
    startedAt: d.lastCleanup?.jobId === jobId ? d.lastCleanup.startedAt : null,
    finishedAt: now,
    proof,
  };
}

/**
 * The agent reports that the job succeeded. Invariant 2: only the current job,
 * and only when it ran the locked-in action; a success claimed for another action
 * is not proof, so the device goes to error instead; so does a success without
 * the agent's proof of erasure. The proof (what was done, how much was read back,
 * full or sample) becomes the device's last cleanup.
 */
export function cleanupSucceeded(
  d: DeviceRecord,
  jobId: string,
  action: string,
  now: string,
  proof: CleanupProof | null,
): DeviceRecord {
  assertJob(d, jobId, ['pending_cleaning', 'cleaning']);
  if (!d.cleanupAction || action !== d.cleanupAction) {
    const reason = `cleanup job ${jobId} reported success for action "${action}" but the locked-in action is "${d.cleanupAction ?? ''}"`;
    return settle(d, {
      deviceState: 'error',
      errorReason: reason,
      cleanupJobId: null,
      lastCleanup: finish(d, jobId, 'failed', reason, now),
    });
  }
  if (!proof?.method) {
    // A success is believed only with the agent's proof of erasure: an agent that
    // predates proofs (or one that lies by omission) cannot make a device available.
    const reason = `cleanup job ${jobId} reported success without a proof of erasure (is the agent older than the scheduler?); clean the device again with an up-to-date agent`;
    return settle(d, {
      deviceState: 'error',
      errorReason: reason,
      cleanupJobId: null,
      lastCleanup: finish(d, jobId, 'failed', reason, now),
    });
  }
  return settle(d, {
    deviceState: 'available',
    errorReason: '',
    cleanupJobId: null,
    lastCleanup: finish(d, jobId, 'succeeded', proof.findings.join('; '), now, proof),
  });
}

function toError(d: DeviceRecord, jobId: string, outcome: CleanupOutcome, reason: string, now: string) {
  return settle(d, {
    deviceState: 'error',
    errorReason: reason,
    cleanupJobId: null,
    lastCleanup: finish(d, jobId, outcome, reason, now),
  });
}

/** The action failed or timed out: error, reserved, until an operator cleans it again. */
export function cleanupFailed(d: DeviceRecord, jobId: string, message: string, now: string): DeviceRecord {
  assertJob(d, jobId, ['pending_cleaning', 'cleaning']);
  return toError(d, jobId, 'failed', `cleanup job ${jobId} failed: ${message}`, now);
}

/**
 * A success whose erasure certificate is missing or refused
 * (domain/certificate.ts): held back, in error with the reason.
 */
export function cleanupUncertified(
  d: DeviceRecord,
  jobId: string,
  reason: string,
  now: string,
): DeviceRecord {
  assertJob(d, jobId, ['pending_cleaning', 'cleaning']);
  return toError(d, jobId, 'failed', reason, now);
}

/** The job stopped without an outcome (agent stopped, stream lost for good): never a success. */
export function cleanupInterrupted(
  d: DeviceRecord,
  jobId: string,
  message: string,
  now: string,
): DeviceRecord {
  assertJob(d, jobId, ['pending_cleaning', 'cleaning']);
  return toError(d, jobId, 'interrupted', `cleanup job ${jobId} was interrupted: ${message}`, now);
}

/**
 * The job cannot run at all (the agent lacks the cleanup feature, or the device
 * has no cleanup action): the spec's "NVMe on an agent that cannot clean → error".
 */
export function cleanupImpossible(d: DeviceRecord, jobId: string, reason: string, now: string): DeviceRecord {
  assertJob(d, jobId, ['pending_cleaning']);
  return toError(d, jobId, 'failed', reason, now);
}

/**
 * The device's agent started again (invariant 3): a job that was running is
 * lost, so `cleaning` becomes `error`; a job dispatched but never started stays
 * `pending_cleaning` to be dispatched again under the same job id.
 */
export function agentRestarted(d: DeviceRecord, now: string): DeviceRecord {
  if (d.deviceState !== 'cleaning' || d.cleanupJobId === null) return d;
  return toError(
    d,
    d.cleanupJobId,
    'interrupted',
    `agent restarted while cleanup job ${d.cleanupJobId} ran`,
    now,
  );
}

/**
 * Its agent reports the device holds tenant data (handed to a guest and not
 * cleaned since, in the agent's own journal) while this record says it is
 * available: the database lost the binding (restored, rolled back, a lost WAL).
 * Invariant 9: it is cleaned before it is offered again. A device in any other
 * state is already out of the pool and unchanged.
 */
export function reportedHeldByAgent(d: DeviceRecord, jobId: string): DeviceRecord {
  if (d.deviceState !== 'available') return d;
  if (!d.supportsCleaning || !d.cleanupAction) {
    return settle(d, {
      deviceState: 'error',
      errorReason: 'its agent reports it holds tenant data, and it has no cleanup action',
    });
  }
  return settle(d, { deviceState: 'pending_cleaning', cleanupJobId: jobId, errorReason: '' });
}

/**
 * Its media may hold a tenant's data and nobody is cleaning it (domain/media.ts:
 * seen dirty or held under another address or host, reported so by an agent,
 * or never cleaned by Berth). Invariant 11: it is cleaned before it is
 * offered. Only an available device moves; the others already are out of the
 * pool.
 */
export function mediaNeedsCleaning(d: DeviceRecord, jobId: string): DeviceRecord {
  if (d.deviceState !== 'available' || !d.supportsCleaning || !d.cleanupAction) return d;
  return settle(d, {
    deviceState: 'pending_cleaning',
    cleanupJobId: jobId,
    errorReason: '',
    mediaReason: '',
  });
}

/** Settling its media decided why the media keeps the device out ('' for nothing) and whether it is burned. */
export function mediaSettled(d: DeviceRecord, mediaReason: string, burned: boolean): DeviceRecord {
  if (d.mediaReason === mediaReason && d.burned === burned) return d;
  return settle(d, { mediaReason, burned });
}

/**
 * The device was used outside Berth, by a consumer that owns it (Nova's
 * one-time-use devices, docs/operator-guide.md "Running with Nova and
 * Placement"), and holds that tenant's data: an available device that Berth
 * cleans goes to pending_cleaning under `jobId`; one Berth cannot clean goes
 * to error with `why`. Any other state is returned unchanged: held by Berth
 * itself, already being cleaned, or in error (an operator's CleanDevice then).
 */
export function usedOutsideBerth(d: DeviceRecord, jobId: string, why: string): DeviceRecord {
  if (d.deviceState !== 'available') return d;
  if (!d.supportsCleaning || !d.cleanupAction) {
    return settle(d, {
      deviceState: 'error',
      errorReason: `${why}, and driver ${d.driver} cannot clean it: clean it by hand, then return it`,
    });
  }
  return settle(d, { deviceState: 'pending_cleaning', cleanupJobId: jobId, errorReason: '' });
}

/**
 * The operator asks for a cleanup (CleanDevice), following the spec's table:
 * only a device in error is cleaned again, with the same locked-in action.
 */
export function operatorClean(d: DeviceRecord, jobId: string, agentCanClean: boolean): DeviceRecord {
  if (!d.supportsCleaning || !d.cleanupAction) {
    throw refuse('CLEANING_NOT_SUPPORTED', d, `driver ${d.driver} does not clean ${d.type} devices`);
  }
  if (!agentCanClean) {
    throw refuse('AGENT_CANNOT_CLEAN', d, `the agent on host ${d.host} does not support cleanup`);
  }
  switch (d.deviceState) {
    case 'available':
      throw refuse('DEVICE_ALREADY_CLEAN', d, 'is available (already clean)');
    case 'allocated':
      throw refuse(
        'DEVICE_ALLOCATED',
        d,
        `is allocated to instance ${d.instanceUuid ?? '(migration claim)'}`,
      );
    case 'pending_cleaning':
    case 'cleaning':
      throw refuse('CLEANUP_IN_PROGRESS', d, `cleanup job ${d.cleanupJobId ?? ''} is ${d.deviceState}`);
    case 'error':
      return settle(d, { deviceState: 'pending_cleaning', cleanupJobId: jobId, errorReason: '' });
  }
}

/**
 * The operator releases a burned one-time-use device (ReleaseDevice): the only
 * way to un-burn (invariant 8). Refused while the device is held or being
 * cleaned; a device that is not burned is returned unchanged (retry-safe).
 */
export function operatorRelease(d: DeviceRecord): DeviceRecord {
  if (d.deviceState === 'allocated') {
    throw refuse('DEVICE_ALLOCATED', d, `is allocated to instance ${d.instanceUuid ?? '(migration claim)'}`);
  }
  if (d.deviceState === 'pending_cleaning' || d.deviceState === 'cleaning') {
    throw refuse('CLEANUP_IN_PROGRESS', d, `cleanup job ${d.cleanupJobId ?? ''} is ${d.deviceState}`);
  }
  if (!d.burned) return d;
  return settle(d, { burned: false });
}

/** The operator's scheduling switch; orthogonal to device_state. */
export function setStatus(d: DeviceRecord, status: DeviceStatus): DeviceRecord {
  return d.status === status ? d : settle(d, { status });
}

export function healthChanged(d: DeviceRecord, health: Health, reason: string): DeviceRecord {
  return settle(d, { health, healthReason: health === 'healthy' ? '' : reason });
}

/** The device is missing from the host's latest snapshot: unhealthy, never deleted. */
export function vanished(d: DeviceRecord, reason: string): DeviceRecord {
  return settle(d, { present: false, health: 'unhealthy', healthReason: reason });
}

/**
 * Rediscovery reports the device again. The cleanup action (and whether the
 * device is cleaned at all) is locked outside available/error (invariant 6), so
 * a device that is held or being cleaned keeps what it was bound with. A device
 * newly marked one-time-use while allocated is burned now (the spec's healing).
 */
export function rediscovered(d: DeviceRecord, facts: DeviceFacts): DeviceRecord {
  // The facts spread last, as in newDevice; every field of the patch is one the record has.
  const {
    unallocatableReason: hostReason,
    agentMedia: _journal,
    traits,
    iommuGroupPeers,
    attributes,
    cleanupAction,
    supportsCleaning,
    ...rest
  } = facts;
  const unlocked = d.deviceState === 'available' || d.deviceState === 'error';
  const patch: Partial<DeviceRecord> = {
    traits: [...traits],
    iommuGroupPeers: [...iommuGroupPeers],
    attributes: { ...attributes },
    hostUnallocatableReason: hostReason,
    present: true,
    cleanupAction: unlocked ? cleanupAction : d.cleanupAction,
    supportsCleaning: unlocked ? supportsCleaning : d.supportsCleaning,
    burned: d.burned || (facts.oneTimeUse && d.deviceState === 'allocated'),
    ...rest,
  };
  // Other media at this address: out of the pool until its record is settled.
  if ((facts.media?.key ?? null) !== (d.media?.key ?? null) && facts.media?.key) {
    patch.mediaReason = MEDIA_UNSETTLED;
  }
  return settle(d, patch);
}

/**
 * Whether the device's agent must record its binding before a bind is
 * acknowledged (invariants 9 and 13): it is cleaned (the agent's journal is
 * the second record of its dirt), or it is one-time-use (the second record of
 * its burn).
 */
export const recordedByAgent = (d: Pick<DeviceRecord, 'supportsCleaning' | 'oneTimeUse'>): boolean =>
  d.supportsCleaning || d.oneTimeUse;

/** Whether the device holds (or may hold) a guest's data or use: its IOMMU group is busy. */
export const inUse = (d: DeviceRecord): boolean =>
  d.deviceState === 'allocated' || d.deviceState === 'pending_cleaning' || d.deviceState === 'cleaning';
