/**
 * Cleanup phases and events between their one wire form (berth.agent.v1
 * CleanupEvent, which the scheduler's WatchCleanup re-serves) and the agent's
 * and the scheduler's records of them, which share the same phase names.
 */
import { type CleanupEvent, CleanupPhase } from '../gen/berth/agent/v1/agent.js';

export type CleanupPhaseName =
  | 'queued'
  | 'preparing'
  | 'sanitizing'
  | 'namespace_reset'
  | 'zeroing'
  | 'verifying'
  | 'succeeded'
  | 'failed'
  | 'interrupted';

const TO_PROTO: Record<CleanupPhaseName, CleanupPhase> = {
  queued: CleanupPhase.CLEANUP_PHASE_QUEUED,
  preparing: CleanupPhase.CLEANUP_PHASE_PREPARING,
  sanitizing: CleanupPhase.CLEANUP_PHASE_SANITIZING,
  namespace_reset: CleanupPhase.CLEANUP_PHASE_NAMESPACE_RESET,
  zeroing: CleanupPhase.CLEANUP_PHASE_ZEROING,
  verifying: CleanupPhase.CLEANUP_PHASE_VERIFYING,
  succeeded: CleanupPhase.CLEANUP_PHASE_SUCCEEDED,
  failed: CleanupPhase.CLEANUP_PHASE_FAILED,
  interrupted: CleanupPhase.CLEANUP_PHASE_INTERRUPTED,
};

const FROM_PROTO = new Map<CleanupPhase, CleanupPhaseName>(
  Object.entries(TO_PROTO).map(([name, value]) => [value, name as CleanupPhaseName]),
);

/** The phase name of a wire phase; null for UNSPECIFIED or a value this build does not know. */
export function cleanupPhaseFromProto(phase: CleanupPhase): CleanupPhaseName | null {
  return FROM_PROTO.get(phase) ?? null;
}

/** A cleanup event record (the agent's: time in epoch ms; the scheduler's: ISO time) on the wire. */
export function cleanupEventToProto(e: {
  jobId: string;
  address: string;
  action: string;
  phase: CleanupPhaseName;
  step: string;
  percent: number;
  bytesDone: number;
  bytesTotal: number;
  message: string;
  time: number | string;
  sequence: number;
}): CleanupEvent {
  return {
    jobId: e.jobId,
    address: e.address,
    action: e.action,
    phase: TO_PROTO[e.phase],
    step: e.step,
    percent: e.percent,
    bytesDone: e.bytesDone,
    bytesTotal: e.bytesTotal,
    message: e.message,
    time: new Date(e.time),
    sequence: e.sequence,
  };
}
