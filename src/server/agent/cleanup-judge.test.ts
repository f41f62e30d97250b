/**
 * The judge's rules, one by one, on evidence a driver could return: honest
 * evidence passes, and every way a driver (or a controller) can fall short of
 * proof fails with a message that says what was missing.
 */
import { describe, expect, it } from 'vitest';
import type {
  CensusNamespace,
  CensusPair,
  CleanupEvidence,
  CleanupPolicy,
  MediaCensus,
  ReadBackEvidence,
  SanitizeEvidence,
  SanitizeLogSnapshot,
} from '../../plugins/cleanup-evidence.js';
import { judgeEvidence } from './cleanup-judge.js';

const MIB = 1024 * 1024;
const FULL: CleanupPolicy = { verify: 'full' };
const SAMPLE: CleanupPolicy = { verify: 'sample' };

const target = (name: string, sizeBytes = 8 * MIB) => ({ name, sizeBytes, blockSize: 512 });
const fullRead = (name: string, sizeBytes = 8 * MIB): ReadBackEvidence => ({
  target: name,
  mode: 'full',
  ranges: [[0, sizeBytes]],
  bytesRead: sizeBytes,
  strata: 0,
  direct: true,
  nonZeroAt: null,
});

function zeroing(over: Partial<CleanupEvidence> = {}): CleanupEvidence {
  return {
    action: 'write-zeroes',
    targets: [target('nvme0n1'), target('nvme0n2')],
    writes: [
      { target: 'nvme0n1', method: 'nvme-write-zeroes', ranges: [[0, 8 * MIB]], bytes: 8 * MIB },
      { target: 'nvme0n2', method: 'nvme-write-zeroes', ranges: [[0, 8 * MIB]], bytes: 8 * MIB },
    ],
    readBack: [fullRead('nvme0n1'), fullRead('nvme0n2')],
    notes: [],
    ...over,
  };
}

const log = (status: number, globalErased: boolean, scdw10: number | null = 4): SanitizeLogSnapshot => ({
  status,
  globalErased,
  sprog: 0xffff,
  scdw10,
  at: 0,
});

function sanitize(over: Partial<SanitizeEvidence> = {}): CleanupEvidence {
  return {
    action: 'sanitize-crypto',
    targets: [target('nvme0n1')],
    sanitize: {
      controller: 'nvme0',
      sanact: 4,
      before: log(1, false),
      armed: log(1, false),
      commandSent: true,
      after: [log(2, false), log(1, true)],
      polls: 5,
      canaries: [{ target: 'nvme0n1', offset: 4096, length: 512, unchangedAfter: false }],
      ...over,
    },
    writes: [],
    readBack: [],
    notes: [],
  };
}

const reason = (v: ReturnType<typeof judgeEvidence>) =>
  v.ok ? `accepted: ${JSON.stringify(v.proof)}` : v.reason;

describe('judging zeroing evidence', () => {
  it('accepts a full read-back of every target and sums what was done', () => {
    expect(judgeEvidence(zeroing(), 'write-zeroes', FULL, null)).toEqual({
      ok: true,
      proof: {
        method: 'read-back',
        readBack: 'full',
        bytesWritten: 16 * MIB,
        bytesRead: 16 * MIB,
        bytesTotal: 16 * MIB,
        findings: [
          'nvme0n1: all 8388608 bytes read back as zero (direct I/O)',
          'nvme0n2: all 8388608 bytes read back as zero (direct I/O)',
        ],
      },
    });
  });

  it.each([
    [
      'nothing (a driver written for API 1)',
      undefined,
      /^no proof of erasure: the driver's cleanup returned nothing instead of evidence$/,
    ],
    ['a string', 'ok', /returned "ok" instead of evidence/],
    ['no targets list', { ...zeroing(), targets: undefined }, /the evidence has no targets list/],
    [
      'a malformed target',
      zeroing({ targets: [{ name: 'x', sizeBytes: -1, blockSize: 512 }] }),
      /a target is malformed/,
    ],
    [
      'another action',
      zeroing({ action: 'shred' }),
      /evidence is for action "shred", not the locked-in "write-zeroes"/,
    ],
    ['no target at all', zeroing({ targets: [], readBack: [] }), /names no storage the tenant could address/],
  ])('refuses %s', (_name, evidence, message) => {
    expect(reason(judgeEvidence(evidence, 'write-zeroes', FULL, null))).toMatch(message);
  });

  it('refuses a target that was written but never read back', () => {
    expect(
      reason(judgeEvidence(zeroing({ readBack: [fullRead('nvme0n1')] }), 'write-zeroes', FULL, null)),
    ).toBe('no proof of erasure for nvme0n2: neither read back nor covered by a proven sanitize');
  });

  it('refuses a read-back that found data, naming the byte', () => {
    const dirty = { ...fullRead('nvme0n2'), ranges: [], bytesRead: 4096, nonZeroAt: 5 * MIB + 7 };
    expect(
      reason(judgeEvidence(zeroing({ readBack: [fullRead('nvme0n1'), dirty] }), 'write-zeroes', FULL, null)),
    ).toBe('read-back not accepted: the read-back of nvme0n2 found data at byte 5242887');
  });

  it('refuses a "full" read-back that skipped part of its target', () => {
    const partial: ReadBackEvidence = {
      ...fullRead('nvme0n2'),
      ranges: [
        [0, 4 * MIB],
        [4 * MIB + 512, 8 * MIB],
      ],
      bytesRead: 8 * MIB - 512,
    };
    expect(
      reason(
        judgeEvidence(zeroing({ readBack: [fullRead('nvme0n1'), partial] }), 'write-zeroes', FULL, null),
      ),
    ).toBe('read-back not accepted: the full read-back of nvme0n2 read 8388096 of its 8388608 bytes');
  });

  it('refuses bytes read that the ranges do not hold, and ranges outside the target', () => {
    const lying = { ...fullRead('nvme0n2'), bytesRead: 9 * MIB };
    expect(
      reason(judgeEvidence(zeroing({ readBack: [fullRead('nvme0n1'), lying] }), 'write-zeroes', FULL, null)),
    ).toMatch(/says it read 9437184 bytes but its ranges hold 8388608/);
    const outside = {
      ...fullRead('nvme0n2'),
      ranges: [[0, 9 * MIB]] as [number, number][],
      bytesRead: 9 * MIB,
    };
    expect(
      reason(
        judgeEvidence(zeroing({ readBack: [fullRead('nvme0n1'), outside] }), 'write-zeroes', FULL, null),
      ),
    ).toMatch(/names ranges outside its 8388608 bytes/);
  });

  it('refuses a read-back of an unknown target', () => {
    expect(
      reason(
        judgeEvidence(
          zeroing({ readBack: [fullRead('nvme0n1'), fullRead('nvme9n9')] }),
          'write-zeroes',
          FULL,
          null,
        ),
      ),
    ).toMatch(/a read-back names unknown target nvme9n9/);
  });

  describe('samples', () => {
    const size = 1024 * MIB;
    const sampleRead = (over: Partial<ReadBackEvidence> = {}): ReadBackEvidence => {
      const ranges: [number, number][] = [[0, 512]];
      for (let i = 0; i < 64; i++) {
        const start = (i * size) / 64 + MIB;
        ranges.push([start, start + 2 * MIB]);
      }
      ranges.push([size - 512, size]);
      return {
        target: 'big',
        mode: 'sample',
        ranges,
        bytesRead: 64 * 2 * MIB + 1024,
        strata: 64,
        direct: true,
        nonZeroAt: null,
        ...over,
      };
    };
    const sampled = (r: ReadBackEvidence) =>
      zeroing({ action: 'shred', targets: [target('big', size)], writes: [], readBack: [r] });

    it('accepts a representative sample only when the operator chose verify: sample', () => {
      expect(judgeEvidence(sampled(sampleRead()), 'shred', SAMPLE, null)).toMatchObject({
        ok: true,
        proof: { readBack: 'sample', bytesRead: 64 * 2 * MIB + 1024, bytesTotal: size },
      });
      expect(reason(judgeEvidence(sampled(sampleRead()), 'shred', FULL, null))).toMatch(
        /big was only sampled \(134218752 of 1073741824 bytes\) but the policy is verify: full/,
      );
    });

    it('refuses a sample without the first and last blocks, too small, or with too few regions', () => {
      const r = sampleRead();
      expect(
        reason(
          judgeEvidence(
            sampled({ ...r, ranges: r.ranges.slice(1), bytesRead: r.bytesRead - 512 }),
            'shred',
            SAMPLE,
            null,
          ),
        ),
      ).toMatch(/does not include its first and last blocks/);
      const tiny: ReadBackEvidence = { ...r, ranges: [r.ranges[0]!, r.ranges.at(-1)!], bytesRead: 1024 };
      expect(reason(judgeEvidence(sampled(tiny), 'shred', SAMPLE, null))).toMatch(
        /read 1024 bytes, less than 1% of/,
      );
      expect(reason(judgeEvidence(sampled({ ...r, strata: 8 }), 'shred', SAMPLE, null))).toMatch(
        /stratified into 8 regions, fewer than 64/,
      );
    });
  });
});

describe('judging sanitize evidence', () => {
  it('accepts a sanitize seen in progress after the command, and covers every target without a read-back', () => {
    expect(judgeEvidence(sanitize(), 'sanitize-crypto', FULL, null)).toMatchObject({
      ok: true,
      proof: { method: 'sanitize', readBack: 'none', bytesRead: 0, bytesTotal: 8 * MIB },
    });
  });

  it('accepts a sanitize too fast to be seen running when Global Data Erased went from 0 to 1', () => {
    const v = judgeEvidence(sanitize({ after: [log(1, true)] }), 'sanitize-crypto', FULL, null);
    expect(v).toMatchObject({ ok: true });
    expect(v.ok && v.proof.findings[0]).toMatch(/setting Global Data Erased/);
  });

  it('accepts following a sanitize that was already running (no command sent)', () => {
    expect(
      judgeEvidence(
        sanitize({
          before: log(2, false),
          armed: null,
          commandSent: false,
          after: [log(2, false), log(1, true)],
          canaries: [],
        }),
        'sanitize-crypto',
        FULL,
        null,
      ).ok,
    ).toBe(true);
  });

  it('refuses a "completed" that was already there before the command (the stale log)', () => {
    expect(reason(judgeEvidence(sanitize({ after: [log(1, false)] }), 'sanitize-crypto', FULL, null))).toBe(
      'sanitize not proven: the sanitize log shows no sign that this sanitize ran: before the command it said (1) completed, Global Data Erased 0, ' +
        'after it (1) completed, Global Data Erased 0 in 5 read(s), never in progress, and Global Data Erased did not go from 0 to 1',
    );
    // GDE already 1 before (no canary could clear it) and 1 after: nothing shows this operation.
    expect(
      reason(
        judgeEvidence(
          sanitize({ before: log(1, true), armed: null, after: [log(1, true)], canaries: [] }),
          'sanitize-crypto',
          FULL,
          null,
        ),
      ),
    ).toMatch(/no sign that this sanitize ran/);
  });

  it('refuses a sanitize that did not end completed, or ended with another SANACT', () => {
    expect(
      reason(judgeEvidence(sanitize({ after: [log(2, false)] }), 'sanitize-crypto', FULL, null)),
    ).toMatch(/ended \(2\) in progress, Global Data Erased 0, not completed/);
    expect(reason(judgeEvidence(sanitize({ after: [] }), 'sanitize-crypto', FULL, null))).toMatch(
      /no sanitize log was read after the command/,
    );
    expect(
      reason(
        judgeEvidence(sanitize({ after: [log(2, false), log(1, true, 2)] }), 'sanitize-crypto', FULL, null),
      ),
    ).toBe('sanitize not proven: the completed sanitize had SANACT 2, not the 4 that was sent');
  });

  it('refuses a sanitize whose canary block survived, whatever the log says', () => {
    const canaries = [{ target: 'nvme0n1', offset: 40960, length: 512, unchangedAfter: true }];
    expect(reason(judgeEvidence(sanitize({ canaries }), 'sanitize-crypto', FULL, null))).toBe(
      'sanitize not proven: nvme0n1 still holds the block written at byte 40960 before the sanitize: the media was not erased',
    );
  });
});

describe("judging coverage against the agent's census (NVMe)", () => {
  const ns = (nsid: number, sizeBytes = 8 * MIB, attached = true): CensusNamespace => ({
    nsid,
    sizeBytes,
    blockSize: 512,
    attached,
    name: attached ? `nvme0n${nsid}` : '',
  });
  const census = (over: Partial<MediaCensus> = {}): MediaCensus => ({
    controller: 'nvme0',
    totalCapacity: 16 * MIB,
    unallocatedCapacity: 0,
    namespaces: [ns(1), ns(2)],
    namespaceManagement: 'not-asked',
    ...over,
  });
  const withNsids = (e: CleanupEvidence): CleanupEvidence => ({
    ...e,
    targets: e.targets.map((t, i) => ({ ...t, nsid: i + 1 })),
  });
  const pair = (after: MediaCensus, before: MediaCensus | null = after): CensusPair => ({ before, after });

  it('accepts evidence that covers every allocated namespace, and records the census in the proof', () => {
    const v = judgeEvidence(withNsids(zeroing()), 'write-zeroes', FULL, pair(census()));
    expect(v).toMatchObject({
      ok: true,
      proof: {
        census: {
          controller: 'nvme0',
          totalCapacity: 16 * MIB,
          unallocatedCapacity: 0,
          namespaces: [
            { nsid: 1, coveredBy: 'read-back' },
            { nsid: 2, coveredBy: 'read-back' },
          ],
          unallocated: 'no unallocated capacity (UNVMCAP 0 of TNVMCAP 16777216 bytes)',
        },
      },
    });
    expect(v.ok && v.proof.findings).toContain(
      "the agent's census through nvme0 found 2 allocated namespace(s) [1 (8 MiB), 2 (8 MiB)], every one covered; no unallocated capacity (UNVMCAP 0 of TNVMCAP 16777216 bytes)",
    );
  });

  it('matches a target without an nsid by the block device name sysfs gives the namespace', () => {
    expect(judgeEvidence(zeroing(), 'write-zeroes', FULL, pair(census())).ok).toBe(true);
  });

  it('refuses a proof that leaves out a detached namespace, naming it', () => {
    const after = census({ totalCapacity: 528 * MIB, namespaces: [ns(1), ns(2), ns(3, 512 * MIB, false)] });
    expect(reason(judgeEvidence(withNsids(zeroing()), 'write-zeroes', FULL, pair(after)))).toBe(
      'the proof covers less than the media: namespace 3 (detached, 512 MiB) was not covered',
    );
  });

  it('refuses a target whose size is not the namespace size', () => {
    const after = census({ namespaces: [ns(1), ns(2, 16 * MIB)] });
    expect(reason(judgeEvidence(withNsids(zeroing()), 'write-zeroes', FULL, pair(after)))).toBe(
      'the proof covers less than the media: namespace 2 (nvme0n2, 16 MiB) was covered as nvme0n2 of 8 MiB, not its 16777216 bytes',
    );
  });

  it('refuses unallocated capacity that namespace management could have reached, unless sanitized', () => {
    const after = census({
      totalCapacity: 32 * MIB,
      unallocatedCapacity: 16 * MIB,
      namespaceManagement: 'works',
    });
    expect(reason(judgeEvidence(withNsids(zeroing()), 'write-zeroes', FULL, pair(after)))).toMatch(
      /^the proof covers less than the media: 16 MiB of unallocated capacity \(UNVMCAP of TNVMCAP 33554432 bytes\) was not covered/,
    );
    const s = sanitize();
    const sanitized = { ...s, targets: [{ ...s.targets[0]!, nsid: 1 }] };
    const one = census({ totalCapacity: 32 * MIB, unallocatedCapacity: 24 * MIB, namespaces: [ns(1)] });
    const v = judgeEvidence(sanitized, 'sanitize-crypto', FULL, pair(one));
    expect(v).toMatchObject({
      ok: true,
      proof: {
        census: {
          namespaces: [{ nsid: 1, coveredBy: 'sanitize' }],
          unallocated: 'the proven sanitize erased the unallocated capacity with the namespaces',
        },
      },
    });
  });

  it('accepts unallocated capacity no tenant could reach: namespace management unsupported or refused', () => {
    for (const mgmt of ['unsupported', 'refused'] as const) {
      const after = census({
        totalCapacity: 32 * MIB,
        unallocatedCapacity: 16 * MIB,
        namespaceManagement: mgmt,
      });
      expect(judgeEvidence(withNsids(zeroing()), 'write-zeroes', FULL, pair(after)).ok).toBe(true);
    }
  });

  it('capacity unknown: accepted only when namespace management is refused or absent (decision 17)', () => {
    const unknown = (namespaceManagement: MediaCensus['namespaceManagement']) =>
      census({ totalCapacity: null, unallocatedCapacity: null, namespaceManagement });
    expect(judgeEvidence(withNsids(zeroing()), 'write-zeroes', FULL, pair(unknown('refused'))).ok).toBe(true);
    for (const mgmt of ['works', 'not-asked'] as const) {
      expect(reason(judgeEvidence(withNsids(zeroing()), 'write-zeroes', FULL, pair(unknown(mgmt))))).toBe(
        'the proof covers less than the media: the controller reports its capacity as 0 (unknown) while namespace management works: capacity outside the namespaces cannot be accounted for',
      );
    }
  });

  it('capacity unknown: refuses when a namespace found before the cleanup is gone after it', () => {
    const after = census({ totalCapacity: null, unallocatedCapacity: null, namespaceManagement: 'refused' });
    const before = { ...after, namespaces: [ns(1), ns(2), ns(3, 4 * MIB, false)] };
    expect(reason(judgeEvidence(withNsids(zeroing()), 'write-zeroes', FULL, pair(after, before)))).toBe(
      'the proof covers less than the media: namespace 3 (detached, 4 MiB), found before the cleanup, is gone or changed after it while the capacity is unknown: its blocks cannot be accounted for',
    );
  });

  it('a read-back of a target is no proof for a namespace that is missing from the targets', () => {
    // The driver read back nvme0n1 twice under two names; namespace 2 is nowhere.
    const e = zeroing({
      targets: [
        { ...target('nvme0n1'), nsid: 1 },
        { ...target('copy'), nsid: 1 },
      ],
      readBack: [fullRead('nvme0n1'), fullRead('copy')],
    });
    expect(reason(judgeEvidence(e, 'write-zeroes', FULL, pair(census())))).toBe(
      'the proof covers less than the media: namespace 2 (nvme0n2, 8 MiB) was not covered',
    );
  });
});
