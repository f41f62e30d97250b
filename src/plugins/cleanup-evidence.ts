/**
 * What a driver's `cleanup()` returns: the evidence that the scrub ran and what
 * it covered. The driver reports what it observed and did; the agent — never
 * the driver — decides from this evidence and the operator's policy whether the
 * device is clean (src/server/agent/cleanup-judge.ts). Missing or insufficient
 * evidence is a failed cleanup.
 *
 * Part of the driver contract: self-contained (no imports), so it can be
 * published with `driver.ts` as the `berth/driver` entry.
 */

/** How much of a scrubbed target a zeroing reads back. */
export type VerifyMode = 'full' | 'sample';
export const VERIFY_MODES: readonly VerifyMode[] = ['full', 'sample'];

/** The operator's rules the agent judges evidence by; a driver receives them in `ctx.policy`. */
export interface CleanupPolicy {
  /**
   * `full` (default): every byte of every target a zeroing scrubbed is read
   * back. `sample`: a representative sample is enough (see SAMPLE_* below).
   */
  verify: VerifyMode;
}

export const DEFAULT_CLEANUP_POLICY: CleanupPolicy = { verify: 'full' };

/**
 * The sample a `sample` read-back must take, per target: the first and the last
 * block, and one randomly placed chunk in each of at least SAMPLE_MIN_STRATA
 * equal regions, for at least SAMPLE_FRACTION of the target's bytes. The
 * numbers are Berth's; the method is NIST SP 800-88's "representative
 * sampling" (pseudo-random locations spread over the whole addressable space).
 */
export const SAMPLE_FRACTION = 0.01;
export const SAMPLE_MIN_STRATA = 64;

/** A half-open byte range [start, end) within a target. */
export type ByteRange = readonly [start: number, end: number];

/** Storage a tenant could address (an NVMe namespace, a block device). */
export interface StorageTarget {
  /** Kernel name, e.g. nvme0n1. */
  name: string;
  sizeBytes: number;
  /** Logical block size. */
  blockSize: number;
  /** NVMe namespace id, when the target is a namespace. */
  nsid?: number;
}

/** What a zeroing wrote to one target. */
export interface WriteEvidence {
  target: string;
  /** e.g. nvme-write-zeroes, direct-write, format-ses1. */
  method: string;
  /** Merged ranges the command(s) covered. */
  ranges: ByteRange[];
  bytes: number;
}

/** What a read-back of one target found. */
export interface ReadBackEvidence {
  target: string;
  mode: VerifyMode;
  /** Merged ranges read. `full` covers [0, sizeBytes). */
  ranges: ByteRange[];
  bytesRead: number;
  /** Regions a `sample` was stratified into (0 for `full`). */
  strata: number;
  /** Read with O_DIRECT (from the media, not the page cache). */
  direct: boolean;
  /** Offset of the first non-zero byte, null when all read bytes were zero. */
  nonZeroAt: number | null;
}

/** One read of the NVMe Sanitize Status log (LID 81h). */
export interface SanitizeLogSnapshot {
  /** SSTAT bits 2:0: 0 never, 1 completed, 2 in progress, 3 failed, 4 completed with deallocation. */
  status: number;
  /** SSTAT bit 8, Global Data Erased. */
  globalErased: boolean;
  /** SPROG, numerator over 65536. */
  sprog: number;
  /** SCDW10 (CDW10 of the sanitize that set the log), null when the tool does not print it. */
  scdw10: number | null;
  /** Epoch milliseconds. */
  at: number;
}

/** A block the driver wrote before the sanitize, to see afterwards whether the media changed. */
export interface SanitizeCanary {
  target: string;
  offset: number;
  length: number;
  /** True when the block still read exactly as written after the sanitize. */
  unchangedAfter: boolean;
}

/** What was observed around an NVMe sanitize. */
export interface SanitizeEvidence {
  controller: string;
  /** SANACT of the command: 2 block erase, 4 crypto erase. */
  sanact: number;
  /** The log before anything was done. */
  before: SanitizeLogSnapshot;
  /** The log after the canaries were written, right before the command; null when none was written. */
  armed: SanitizeLogSnapshot | null;
  /** False when the driver followed a sanitize that was already running instead of starting one. */
  commandSent: boolean;
  /** Every change of the log after the command (or since following), in order; the last is the final state. */
  after: SanitizeLogSnapshot[];
  /** How many times the log was read after the command. */
  polls: number;
  canaries: SanitizeCanary[];
}

export interface CleanupEvidence {
  /** The action that ran: must be the device's locked-in action. */
  action: string;
  /** Every target the tenant could address on the device, as found at cleanup time. */
  targets: StorageTarget[];
  sanitize?: SanitizeEvidence;
  writes: WriteEvidence[];
  readBack: ReadBackEvidence[];
  /** Facts that bear on coverage, in words (e.g. "namespace management refused: zeroed in place"). */
  notes: string[];
}

/**
 * One allocated namespace of an NVM subsystem, as the agent's census found it
 * (`nvme list-ns --all`, `nvme id-ns`): attached to the controller the census
 * was taken through, or not.
 */
export interface CensusNamespace {
  nsid: number;
  /** nsze × the data size of its LBA format. */
  sizeBytes: number;
  blockSize: number;
  /** Attached to (active on) the controller the census was taken through. */
  attached: boolean;
  /** Its block device as sysfs names it for that controller ('' when none: detached, or not yet rescanned). */
  name: string;
}

/**
 * Whether a tenant could create and delete namespaces: `unsupported` (OACS bit
 * 3 clear), `refused` (advertised, but a harmless `delete-ns` of an nsid above
 * NN answered Invalid Command Opcode, as QEMU does), `works`, or `not-asked`.
 */
export type NamespaceManagement = 'unsupported' | 'refused' | 'works' | 'not-asked';

/**
 * What the agent itself found on an NVMe device's media, independently of
 * the driver: every allocated namespace of the subsystem and its capacity.
 * The judge checks the evidence against it.
 */
export interface MediaCensus {
  /** The controller it was taken through (nvmeX). */
  controller: string;
  /** id-ctrl TNVMCAP in bytes; null when the controller reports 0 (unknown). */
  totalCapacity: number | null;
  /** id-ctrl UNVMCAP in bytes; null when unknown (reported as 0 with TNVMCAP 0). */
  unallocatedCapacity: number | null;
  /** Every allocated namespace, attached or not, in nsid order. */
  namespaces: CensusNamespace[];
  namespaceManagement: NamespaceManagement;
}

/** The census before the driver ran (null when the device has none to take then) and after it. */
export interface CensusPair {
  before: MediaCensus | null;
  after: MediaCensus;
}

/** The census as the proof records it: what was found, and how each part was covered. */
export interface CensusRecord {
  controller: string;
  totalCapacity: number | null;
  unallocatedCapacity: number | null;
  /** After the cleanup; every one covered (`sanitize` or `read-back`). */
  namespaces: (CensusNamespace & { coveredBy: 'sanitize' | 'read-back' })[];
  /** Before the cleanup (what the tenant left). */
  namespacesBefore: CensusNamespace[];
  namespaceManagement: NamespaceManagement;
  /** How the unallocated capacity is accounted for, in words. */
  unallocated: string;
}

/** What the agent concluded from accepted evidence: shown on the stream and as the device's last cleanup. */
export interface CleanupProof {
  /** `sanitize`, `read-back`, or `sanitize+read-back`. */
  method: string;
  /** How the zeroing was read back: `full`, `sample`, or `none` (a proven sanitize needs none). */
  readBack: 'full' | 'sample' | 'none';
  bytesWritten: number;
  bytesRead: number;
  /** Bytes of every target together. */
  bytesTotal: number;
  /** What was proven, one sentence each. */
  findings: string[];
  /** NVMe: the agent's census of the media, which the proof covered (absent for other devices). */
  census?: CensusRecord;
}

/** Merges ranges into sorted, non-overlapping, non-adjacent ones. */
export function mergeRanges(ranges: readonly ByteRange[]): ByteRange[] {
  const sorted = [...ranges].filter(([s, e]) => e > s).sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  const out: [number, number][] = [];
  for (const [s, e] of sorted) {
    const last = out.at(-1);
    if (last && s <= last[1]) last[1] = Math.max(last[1], e);
    else out.push([s, e]);
  }
  return out;
}

/** Total bytes of merged ranges. */
export function rangeBytes(ranges: readonly ByteRange[]): number {
  return mergeRanges(ranges).reduce((sum, [s, e]) => sum + (e - s), 0);
}
