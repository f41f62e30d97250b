/**
 * The agent's judge of cleanup evidence. A driver reports what it observed and
 * did (src/plugins/cleanup-evidence.ts); this module alone decides whether that
 * proves every byte the tenant could address is gone, against the operator's
 * policy. Pure, so every rule is tested without a host.
 *
 * The rules:
 *
 * - The evidence must exist, name the device's locked-in action, and name at
 *   least one target (storage the tenant could address).
 * - A sanitize counts only if *this* operation was observed: the log showed it
 *   in progress after the command (or the driver followed one it saw running),
 *   or Global Data Erased (SSTAT bit 8) went from 0 before the command to 1
 *   after it. The NVMe base specification defines GDE = 1 as "not written
 *   since the most recent successful sanitize", and any write clears it, so a
 *   0→1 transition can only come from a sanitize that completed after our
 *   command. A "completed" status already there before the command proves
 *   nothing. It must end completed (status 1 or 4), its SCDW10 must name the
 *   action that was sent, and no canary block may read back unchanged.
 * - A read-back must have found only zeros, cover its target — all of it under
 *   `verify: full`, at least the documented representative sample under an
 *   explicit `verify: sample` — and read what it says it read.
 * - Every target must be covered by a proven sanitize (which erases the whole
 *   NVM subsystem) or by an accepted read-back. Anything less fails, with a
 *   message that says what was missing.
 * - Coverage is the agent's, not the driver's (NVMe): the agent takes its own
 *   census of the media before and after the driver ran (every allocated
 *   namespace, attached or not, and the capacity). Every namespace present
 *   after the cleanup must be a target of the same size whose erasure is
 *   proven; the unallocated capacity must be accounted for: none left
 *   (UNVMCAP 0 of a known TNVMCAP), a proven sanitize (subsystem-wide), or no
 *   tenant could have reached it (namespace management unsupported, or
 *   refused by the agent's probe — decision 17). With the capacity unknown, a
 *   namespace found before and gone after fails: its blocks cannot be
 *   accounted for.
 */
import {
  type ByteRange,
  type CensusNamespace,
  type CensusPair,
  type CensusRecord,
  type CleanupEvidence,
  type CleanupPolicy,
  type CleanupProof,
  type MediaCensus,
  mergeRanges,
  type ReadBackEvidence,
  rangeBytes,
  SAMPLE_FRACTION,
  SAMPLE_MIN_STRATA,
  type SanitizeEvidence,
  type SanitizeLogSnapshot,
  type StorageTarget,
} from '../../plugins/cleanup-evidence.js';

export type Verdict = { ok: true; proof: CleanupProof } | { ok: false; reason: string };

const COMPLETED = new Set([1, 4]);
const IN_PROGRESS = 2;

const STATUS_WORDS: Record<number, string> = {
  0: 'never sanitized',
  1: 'completed',
  2: 'in progress',
  3: 'failed',
  4: 'completed (with deallocation)',
};

function describe(s: SanitizeLogSnapshot): string {
  return `(${s.status}) ${STATUS_WORDS[s.status] ?? 'unknown'}, Global Data Erased ${s.globalErased ? 1 : 0}`;
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** Checks the evidence's shape, so a driver's bug reads as a clear failure, never as a crash or a pass. */
function shapeError(e: unknown): string | null {
  if (!isObject(e)) {
    return `the driver's cleanup returned ${e === undefined ? 'nothing' : JSON.stringify(e)} instead of evidence`;
  }
  if (typeof e.action !== 'string') return 'the evidence names no action';
  for (const key of ['targets', 'writes', 'readBack', 'notes'] as const) {
    if (!Array.isArray(e[key])) return `the evidence has no ${key} list`;
  }
  for (const t of e.targets as unknown[]) {
    if (
      !isObject(t) ||
      typeof t.name !== 'string' ||
      !Number.isSafeInteger(t.sizeBytes) ||
      (t.sizeBytes as number) <= 0 ||
      !Number.isSafeInteger(t.blockSize) ||
      (t.blockSize as number) <= 0
    ) {
      return `a target is malformed: ${JSON.stringify(t)}`;
    }
  }
  return null;
}

/** Why a sanitize does not prove itself, or null when it does. */
export function sanitizeProblem(s: SanitizeEvidence): string | null {
  const final = s.after.at(-1);
  if (!final) return `no sanitize log was read after the ${s.commandSent ? 'command' : 'sanitize'}`;
  if (!COMPLETED.has(final.status)) {
    return `the sanitize log ended ${describe(final)}, not completed`;
  }
  const seenRunning = s.after.some((x) => x.status === IN_PROGRESS);
  const reference = s.armed ?? s.before;
  const gdeWentUp = !reference.globalErased && final.globalErased;
  const fresh = s.commandSent ? seenRunning || gdeWentUp : s.before.status === IN_PROGRESS || seenRunning;
  if (!fresh) {
    return (
      `the sanitize log shows no sign that this sanitize ran: before the command it said ${describe(reference)}, ` +
      `after it ${describe(final)} in ${s.polls} read(s), never in progress, and Global Data Erased did not go from 0 to 1`
    );
  }
  if (s.commandSent && final.scdw10 !== null && (final.scdw10 & 0x7) !== s.sanact) {
    return `the completed sanitize had SANACT ${final.scdw10 & 0x7}, not the ${s.sanact} that was sent`;
  }
  const stale = s.canaries.find((c) => c.unchangedAfter);
  if (stale) {
    return `${stale.target} still holds the block written at byte ${stale.offset} before the sanitize: the media was not erased`;
  }
  return null;
}

/** Why a read-back does not prove its target clean under the policy, or null when it does. */
export function readBackProblem(
  r: ReadBackEvidence,
  target: StorageTarget,
  policy: CleanupPolicy,
): string | null {
  if (r.nonZeroAt !== null) {
    return `the read-back of ${target.name} found data at byte ${r.nonZeroAt}`;
  }
  const ranges = mergeRanges(r.ranges);
  if (ranges.some(([s, e]) => s < 0 || e > target.sizeBytes)) {
    return `the read-back of ${target.name} names ranges outside its ${target.sizeBytes} bytes`;
  }
  const covered = rangeBytes(ranges);
  if (covered !== r.bytesRead) {
    return `the read-back of ${target.name} says it read ${r.bytesRead} bytes but its ranges hold ${covered}`;
  }
  if (r.mode === 'full') {
    const whole = ranges.length === 1 && ranges[0]![0] === 0 && ranges[0]![1] === target.sizeBytes;
    return whole
      ? null
      : `the full read-back of ${target.name} read ${covered} of its ${target.sizeBytes} bytes`;
  }
  if (policy.verify !== 'sample') {
    return `${target.name} was only sampled (${covered} of ${target.sizeBytes} bytes) but the policy is verify: full`;
  }
  return sampleProblem(ranges, r.strata, target);
}

function sampleProblem(ranges: ByteRange[], strata: number, target: StorageTarget): string | null {
  const { name, sizeBytes, blockSize } = target;
  const covered = rangeBytes(ranges);
  if (ranges[0]?.[0] !== 0 || ranges.at(-1)?.[1] !== sizeBytes) {
    return `the sample of ${name} does not include its first and last blocks`;
  }
  if (covered >= sizeBytes) return null;
  const wanted = Math.min(sizeBytes, Math.ceil(sizeBytes * SAMPLE_FRACTION));
  if (covered < wanted - blockSize) {
    return `the sample of ${name} read ${covered} bytes, less than ${SAMPLE_FRACTION * 100}% of ${sizeBytes}`;
  }
  const regions = Math.min(SAMPLE_MIN_STRATA, Math.floor(sizeBytes / blockSize));
  if (strata < regions) {
    return `the sample of ${name} was stratified into ${strata} regions, fewer than ${regions}`;
  }
  return null;
}

const MIB = 1024 * 1024;
const GIB = 1024 * MIB;

/** A byte count in words: "512 MiB", "2 GiB", or "1536 bytes". */
export function sizeText(bytes: number): string {
  if (bytes > 0 && bytes % GIB === 0) return `${bytes / GIB} GiB`;
  if (bytes > 0 && bytes % MIB === 0) return `${bytes / MIB} MiB`;
  return `${bytes} bytes`;
}

const describeNs = (n: CensusNamespace) =>
  `namespace ${n.nsid} (${n.attached ? n.name || 'attached' : 'detached'}, ${sizeText(n.sizeBytes)})`;

/** The census's namespaces that no target names, or names with another size: [problem, ...]. */
function uncovered(
  e: CleanupEvidence,
  census: MediaCensus,
  proven: (targetName: string) => boolean,
): { problems: string[]; covered: CensusRecord['namespaces'] } {
  const problems: string[] = [];
  const covered: CensusRecord['namespaces'] = [];
  for (const ns of census.namespaces) {
    const target =
      e.targets.find((t) => t.nsid === ns.nsid) ??
      (ns.name === '' ? undefined : e.targets.find((t) => t.nsid === undefined && t.name === ns.name));
    if (!target) {
      problems.push(`${describeNs(ns)} was not covered`);
    } else if (target.sizeBytes !== ns.sizeBytes) {
      problems.push(
        `${describeNs(ns)} was covered as ${target.name} of ${sizeText(target.sizeBytes)}, not its ${ns.sizeBytes} bytes`,
      );
    } else if (!proven(target.name)) {
      problems.push(`${describeNs(ns)} was named (${target.name}) but its erasure is not proven`);
    } else {
      covered.push({ ...ns, coveredBy: e.sanitize ? 'sanitize' : 'read-back' });
    }
  }
  return { problems, covered };
}

/** How the unallocated capacity is accounted for (in words), or a problem. */
function unallocatedAccount(census: MediaCensus, sanitized: boolean): { ok: string } | { problem: string } {
  if (sanitized) return { ok: 'the proven sanitize erased the unallocated capacity with the namespaces' };
  const { totalCapacity: total, unallocatedCapacity: free, namespaceManagement: mgmt } = census;
  const unreachable =
    mgmt === 'unsupported'
      ? 'namespace management is not supported (OACS bit 3 clear)'
      : mgmt === 'refused'
        ? "namespace management was refused by the agent's probe (Invalid Command Opcode)"
        : null;
  if (total !== null && free === 0) {
    return { ok: `no unallocated capacity (UNVMCAP 0 of TNVMCAP ${total} bytes)` };
  }
  if (unreachable) {
    return {
      ok:
        total === null
          ? `capacity unknown (TNVMCAP 0), and ${unreachable}: no tenant could create or delete a namespace, so the namespaces are all it could address`
          : `${free ?? 'an unknown number of'} bytes unallocated, which no tenant could address: ${unreachable}`,
    };
  }
  if (total === null) {
    return {
      problem:
        'the controller reports its capacity as 0 (unknown) while namespace management works: capacity outside the namespaces cannot be accounted for',
    };
  }
  return {
    problem: `${sizeText(free ?? 0)} of unallocated capacity (UNVMCAP of TNVMCAP ${total} bytes) was not covered: it holds what deleted namespaces held, and neither a namespace covering it was erased nor a sanitize proven`,
  };
}

/**
 * Checks the evidence against the agent's own census. Returns the census as
 * the proof records it, or why the evidence covers less than the media.
 */
export function coverageProblem(
  e: CleanupEvidence,
  census: CensusPair,
  sanitized: boolean,
  readOk: ReadonlySet<string>,
): { record: CensusRecord } | { problem: string } {
  const { before, after } = census;
  const { problems, covered } = uncovered(e, after, (name) => sanitized || readOk.has(name));
  const unallocated = unallocatedAccount(after, sanitized);
  if ('problem' in unallocated) problems.push(unallocated.problem);
  if (before && !sanitized && after.totalCapacity === null) {
    for (const ns of before.namespaces) {
      if (!after.namespaces.some((n) => n.nsid === ns.nsid && n.sizeBytes === ns.sizeBytes)) {
        problems.push(
          `${describeNs(ns)}, found before the cleanup, is gone or changed after it while the capacity is unknown: its blocks cannot be accounted for`,
        );
      }
    }
  }
  if (problems.length > 0) return { problem: problems.join('; ') };
  return {
    record: {
      controller: after.controller,
      totalCapacity: after.totalCapacity,
      unallocatedCapacity: after.unallocatedCapacity,
      namespaces: covered,
      namespacesBefore: before?.namespaces ?? [],
      namespaceManagement: after.namespaceManagement,
      unallocated: (unallocated as { ok: string }).ok,
    },
  };
}

function censusFinding(r: CensusRecord): string {
  const list = r.namespaces.map(
    (n) => `${n.nsid} (${sizeText(n.sizeBytes)}${n.attached ? '' : ', detached'})`,
  );
  return (
    `the agent's census through ${r.controller} found ${r.namespaces.length} allocated namespace(s)` +
    `${list.length > 0 ? ` [${list.join(', ')}]` : ''}, every one covered; ${r.unallocated}`
  );
}

/**
 * Decides whether the evidence proves the device clean for `action` under
 * `policy`. `census` is the agent's own census of the media (NVMe); null for a
 * device whose media has none (a plain PCI function), whose coverage is the
 * targets the driver names.
 */
export function judgeEvidence(
  evidence: unknown,
  action: string,
  policy: CleanupPolicy,
  census: CensusPair | null,
): Verdict {
  const shape = shapeError(evidence);
  if (shape) return { ok: false, reason: `no proof of erasure: ${shape}` };
  const e = evidence as CleanupEvidence;
  if (e.action !== action) {
    return {
      ok: false,
      reason: `no proof of erasure: the evidence is for action "${e.action}", not the locked-in "${action}"`,
    };
  }
  if (e.targets.length === 0) {
    return {
      ok: false,
      reason: 'no proof of erasure: the evidence names no storage the tenant could address',
    };
  }
  const findings: string[] = [];
  let sanitized = false;
  if (e.sanitize) {
    const problem = sanitizeProblem(e.sanitize);
    if (problem) return { ok: false, reason: `sanitize not proven: ${problem}` };
    sanitized = true;
    const final = e.sanitize.after.at(-1)!;
    findings.push(
      `sanitize (SANACT ${e.sanitize.sanact}) on ${e.sanitize.controller} observed ${
        e.sanitize.after.some((x) => x.status === IN_PROGRESS) || e.sanitize.before.status === IN_PROGRESS
          ? 'in progress'
          : 'setting Global Data Erased'
      } and ending ${describe(final)}` +
        (e.sanitize.canaries.length > 0
          ? `; ${e.sanitize.canaries.length} canary block(s) written before it no longer read back`
          : ''),
    );
  }
  const byName = new Map(e.targets.map((t) => [t.name, t]));
  const readOk = new Set<string>();
  let sampled = false;
  for (const r of e.readBack) {
    const target = byName.get(r.target);
    if (!target)
      return { ok: false, reason: `no proof of erasure: a read-back names unknown target ${r.target}` };
    const problem = readBackProblem(r, target, policy);
    if (problem) return { ok: false, reason: `read-back not accepted: ${problem}` };
    readOk.add(r.target);
    if (r.mode === 'sample' && r.bytesRead < target.sizeBytes) sampled = true;
    findings.push(
      r.mode === 'full' || r.bytesRead >= target.sizeBytes
        ? `${target.name}: all ${target.sizeBytes} bytes read back as zero${r.direct ? ' (direct I/O)' : ''}`
        : `${target.name}: a ${r.strata}-region sample of ${r.bytesRead} of ${target.sizeBytes} bytes read back as zero${r.direct ? ' (direct I/O)' : ''}`,
    );
  }
  if (!sanitized) {
    const missing = e.targets.filter((t) => !readOk.has(t.name)).map((t) => t.name);
    if (missing.length > 0) {
      return {
        ok: false,
        reason: `no proof of erasure for ${missing.join(', ')}: neither read back nor covered by a proven sanitize`,
      };
    }
  }
  let record: CensusRecord | undefined;
  if (census) {
    const coverage = coverageProblem(e, census, sanitized, readOk);
    if ('problem' in coverage) {
      return { ok: false, reason: `the proof covers less than the media: ${coverage.problem}` };
    }
    record = coverage.record;
    findings.push(censusFinding(record));
  }
  findings.push(...e.notes);
  const bytesRead = e.readBack.reduce((s, r) => s + r.bytesRead, 0);
  return {
    ok: true,
    proof: {
      ...(record ? { census: record } : {}),
      method: sanitized ? (e.readBack.length > 0 ? 'sanitize+read-back' : 'sanitize') : 'read-back',
      readBack: e.readBack.length === 0 ? 'none' : sampled ? 'sample' : 'full',
      bytesWritten: e.writes.reduce((s, w) => s + w.bytes, 0),
      bytesRead,
      bytesTotal: e.targets.reduce((s, t) => s + t.sizeBytes, 0),
      findings,
    },
  };
}
