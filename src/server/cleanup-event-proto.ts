/**
 * Cleanup phases, proofs and events between their one wire form (berth.agent.v1
 * CleanupEvent, which the scheduler's WatchCleanup re-serves) and the one
 * record the agent and the scheduler share (CleanupJobPhase in
 * plugins/types.ts, CleanupProof in plugins/cleanup-evidence.ts).
 */
import { type CleanupEvent, CleanupPhase } from '../gen/berth/agent/v1/agent.js';
import {
  type CleanupProof as CleanupProofMessage,
  type MediaCensus as MediaCensusMessage,
  NamespaceManagement,
  ReadBack,
} from '../gen/berth/agent/v1/cleanup_proof.js';
import type { CensusRecord, CleanupProof } from '../plugins/cleanup-evidence.js';
import type { CleanupJobPhase } from '../plugins/types.js';

const TO_PROTO: Record<CleanupJobPhase, CleanupPhase> = {
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

const FROM_PROTO = new Map<CleanupPhase, CleanupJobPhase>(
  Object.entries(TO_PROTO).map(([name, value]) => [value, name as CleanupJobPhase]),
);

/** The phase name of a wire phase; null for UNSPECIFIED or a value this build does not know. */
export function cleanupPhaseFromProto(phase: CleanupPhase): CleanupJobPhase | null {
  return FROM_PROTO.get(phase) ?? null;
}

const READ_BACK_TO_PROTO: Record<CleanupProof['readBack'], ReadBack> = {
  full: ReadBack.READ_BACK_FULL,
  sample: ReadBack.READ_BACK_SAMPLE,
  none: ReadBack.READ_BACK_NONE,
};

const NS_MGMT_TO_PROTO: Record<CensusRecord['namespaceManagement'], NamespaceManagement> = {
  unsupported: NamespaceManagement.NAMESPACE_MANAGEMENT_UNSUPPORTED,
  refused: NamespaceManagement.NAMESPACE_MANAGEMENT_REFUSED,
  works: NamespaceManagement.NAMESPACE_MANAGEMENT_WORKS,
  'not-asked': NamespaceManagement.NAMESPACE_MANAGEMENT_NOT_ASKED,
};

function censusToProto(c: CensusRecord): MediaCensusMessage {
  return {
    controller: c.controller,
    ...(c.totalCapacity === null ? {} : { totalCapacityBytes: c.totalCapacity }),
    ...(c.unallocatedCapacity === null ? {} : { unallocatedCapacityBytes: c.unallocatedCapacity }),
    namespaces: c.namespaces.map((n) => ({ ...n })),
    namespacesBefore: c.namespacesBefore.map((n) => ({ ...n, coveredBy: '' })),
    namespaceManagement: NS_MGMT_TO_PROTO[c.namespaceManagement],
    unallocated: c.unallocated,
  };
}

/** A census from the wire; undefined when it names a namespace-management answer this build does not know. */
function censusFromProto(c: MediaCensusMessage): CensusRecord | undefined {
  const mgmt = (Object.keys(NS_MGMT_TO_PROTO) as CensusRecord['namespaceManagement'][]).find(
    (k) => NS_MGMT_TO_PROTO[k] === c.namespaceManagement,
  );
  if (!mgmt) return undefined;
  const covered = (v: string): 'sanitize' | 'read-back' => (v === 'sanitize' ? 'sanitize' : 'read-back');
  const plain = ({ coveredBy: _c, ...n }: MediaCensusMessage['namespaces'][number]) => n;
  return {
    controller: c.controller,
    totalCapacity: c.totalCapacityBytes ?? null,
    unallocatedCapacity: c.unallocatedCapacityBytes ?? null,
    namespaces: c.namespaces.map((n) => ({ ...plain(n), coveredBy: covered(n.coveredBy) })),
    namespacesBefore: c.namespacesBefore.map(plain),
    namespaceManagement: mgmt,
    unallocated: c.unallocated,
  };
}

export function proofToProto(p: CleanupProof): CleanupProofMessage {
  return {
    method: p.method,
    readBack: READ_BACK_TO_PROTO[p.readBack],
    bytesWritten: p.bytesWritten,
    bytesRead: p.bytesRead,
    bytesTotal: p.bytesTotal,
    findings: p.findings,
    census: p.census ? censusToProto(p.census) : undefined,
  };
}

/** A proof from the wire; null when absent or when its read-back kind is unknown (never guessed). */
export function proofFromProto(p: CleanupProofMessage | undefined): CleanupProof | null {
  if (!p) return null;
  const readBack = (Object.keys(READ_BACK_TO_PROTO) as CleanupProof['readBack'][]).find(
    (k) => READ_BACK_TO_PROTO[k] === p.readBack,
  );
  if (!readBack) return null;
  return {
    method: p.method,
    readBack,
    bytesWritten: p.bytesWritten,
    bytesRead: p.bytesRead,
    bytesTotal: p.bytesTotal,
    findings: [...p.findings],
    ...(p.census && censusFromProto(p.census) ? { census: censusFromProto(p.census)! } : {}),
  };
}

/** A cleanup event record (the agent's: time in epoch ms; the scheduler's: ISO time) on the wire. */
export function cleanupEventToProto(e: {
  jobId: string;
  address: string;
  action: string;
  phase: CleanupJobPhase;
  step: string;
  percent: number;
  bytesDone: number;
  bytesTotal: number;
  message: string;
  time: number | string;
  sequence: number;
  proof?: CleanupProof | null;
  certificate?: string;
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
    proof: e.proof ? proofToProto(e.proof) : undefined,
    certificate: e.certificate ?? '',
  };
}
