/**
 * Cleanup jobs and their progress events, as the scheduler records them (the
 * device side of a cleanup is device-state.ts).
 */

import type { HostName, PciAddress, Uuid } from '../../../identifiers.js';
import type { CleanupProof } from '../../../plugins/cleanup-evidence.js';
import { type CleanupEnd, type CleanupJobPhase, endsCleanup } from '../../../plugins/types.js';
import type { DeviceRecord } from './device-state.js';

export type CleanupJobState = 'queued' | 'dispatched' | 'running' | CleanupEnd;

export interface CleanupEvent {
  jobId: string;
  address: string;
  action: string;
  phase: CleanupJobPhase;
  step: string;
  percent: number;
  bytesDone: number;
  bytesTotal: number;
  message: string;
  time: string;
  /** Increases by one per event of a job; a repeated sequence is ignored. */
  sequence: number;
  /** On `succeeded`: the agent's proof of erasure. */
  proof?: CleanupProof | null;
  /** On `succeeded`: the erasure certificate the agent signed (compact JWS). */
  certificate?: string;
  /**
   * The job id the agent ran the cleanup under, when it differs from `jobId`:
   * the agent re-attached this job to a cleanup it was already running (one a
   * lost or restored database no longer knows), and signed under that id.
   */
  agentJobId?: string;
}

export interface CleanupJob {
  jobId: string;
  deviceUuid: Uuid;
  host: HostName;
  address: PciAddress;
  /** The device's locked-in action when the job was created. */
  action: string;
  state: CleanupJobState;
  /**
   * What asked for it: release (of an ARQ/migration), operator (CleanDevice),
   * agent (its agent reports it holds tenant data), media (its media may hold
   * tenant data nobody is cleaning: seen dirty elsewhere, or never cleaned by
   * Berth; docs/media-identity.md), or placement (used outside Berth: Nova's
   * one-time-use devices).
   */
  origin: 'release' | 'operator' | 'agent' | 'media' | 'placement';
  message: string;
  lastSequence: number;
  createdAt: string;
  dispatchedAt: string | null;
  finishedAt: string | null;
}

/** A cleanup to dispatch or re-attach. */
export interface CleanupBacklogEntry {
  device: DeviceRecord;
  job: CleanupJob;
  /** Why it must not start yet (another device holds its media), or null. */
  waitsFor: string | null;
}

/**
 * The event that ends the stream of a job which ended without an agent event
 * of its own (AGENT_CANNOT_CLEAN, a refused job), numbered after `lastSequence`;
 * null while the job runs.
 */
export function syntheticEnd(job: CleanupJob, lastSequence: number): CleanupEvent | null {
  if (!endsCleanup(job.state)) return null;
  return {
    jobId: job.jobId,
    address: job.address,
    action: job.action,
    phase: job.state,
    step: '',
    percent: 0,
    bytesDone: 0,
    bytesTotal: 0,
    message: job.message,
    time: job.finishedAt ?? new Date().toISOString(),
    sequence: lastSequence + 1,
  };
}
