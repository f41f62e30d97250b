import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { MAX_REPORTED_MEDIA } from '../../agent/media.js';
import {
  hostRecordsBoundBroken,
  judgeMediaReport,
  MEDIA_RECORD_LIMITS,
  registrationRecordsBoundBroken,
} from './media-reports.js';

const none = { stored: null, forgotten: false, devices: [] };

describe('which host may report a media', () => {
  it('a host reports media it presents now, even when another host presents it too (a dual-ported subsystem)', () => {
    expect(judgeMediaReport('a', { ...none, devices: [{ host: 'a', present: true }] })).toBeNull();
    expect(
      judgeMediaReport('a', {
        stored: { host: 'b' },
        forgotten: true,
        devices: [
          { host: 'b', present: true },
          { host: 'a', present: true },
        ],
      }),
    ).toBeNull();
  });

  it('a host reports media its own journal holds: last seen on it, or unknown to the scheduler and nowhere presented', () => {
    expect(judgeMediaReport('a', none)).toBeNull();
    expect(judgeMediaReport('a', { ...none, stored: { host: 'a' } })).toBeNull();
    // Pulled from host a: a's device of it is no longer seen, nobody else's is.
    expect(
      judgeMediaReport('a', {
        stored: { host: 'a' },
        forgotten: false,
        devices: [
          { host: 'a', present: false },
          { host: 'b', present: false },
        ],
      }),
    ).toBeNull();
  });

  it("a record of media another host presents now is refused, naming that host, whatever the scheduler's record says", () => {
    expect(
      judgeMediaReport('a', {
        stored: { host: 'a' },
        forgotten: false,
        devices: [
          { host: 'a', present: false },
          { host: 'b', present: true },
        ],
      }),
    ).toEqual({ refusal: 'other_host_presents', holder: 'b' });
    expect(judgeMediaReport('a', { ...none, devices: [{ host: 'b', present: true }] })).toEqual({
      refusal: 'other_host_presents',
      holder: 'b',
    });
  });

  it('a record of media last seen on another host, presented by none, is refused', () => {
    expect(
      judgeMediaReport('a', {
        stored: { host: 'b' },
        forgotten: false,
        devices: [{ host: 'b', present: false }],
      }),
    ).toEqual({ refusal: 'other_host_last_saw', holder: 'b' });
  });

  it('a forgotten media is nobody’s until a device of it comes back', () => {
    expect(judgeMediaReport('b', { stored: { host: 'b' }, forgotten: true, devices: [] })).toEqual({
      refusal: 'forgotten',
      holder: '',
    });
  });
});

describe('the bounds on media records', () => {
  it('refuses a registration past its bound, naming the count and the limit', () => {
    const limit = MEDIA_RECORD_LIMITS.perRegistration;
    expect(registrationRecordsBoundBroken('h', limit)).toBeNull();
    const e = registrationRecordsBoundBroken('h', limit + 1)!;
    expect([e.code, e.reason]).toEqual(['RESOURCE_EXHAUSTED', 'MEDIA_RECORDS_OVER_LIMIT']);
    expect(e.message).toContain(`${limit + 1} records, more than the limit of ${limit}`);
    expect(e.metadata).toEqual({
      host: 'h',
      count: String(limit + 1),
      limit: String(limit),
      bound: 'per_registration',
    });
  });

  it("refuses what would keep more of a host's reported media than its bound; adding nothing is never refused", () => {
    const limit = MEDIA_RECORD_LIMITS.perHost;
    expect(hostRecordsBoundBroken('h', limit - 10, 10)).toBeNull();
    expect(hostRecordsBoundBroken('h', limit + 5, 0)).toBeNull();
    const e = hostRecordsBoundBroken('h', limit - 10, 11)!;
    expect([e.code, e.reason]).toEqual(['RESOURCE_EXHAUSTED', 'MEDIA_RECORDS_OVER_LIMIT']);
    expect(e.message).toContain(`${limit + 1} media records kept that only it reported`);
    expect(e.message).toContain(`the limit of ${limit}`);
    expect(e.metadata['bound']).toBe('per_host');
  });

  it('is one number in the agent, the scheduler and the docs', () => {
    expect(MAX_REPORTED_MEDIA).toBe(MEDIA_RECORD_LIMITS.perRegistration);
    const doc = readFileSync(new URL('../../../../docs/media-identity.md', import.meta.url), 'utf8');
    const n = (v: number) => v.toLocaleString('en-US');
    expect(doc.replace(/\s+/g, ' ')).toContain(
      `A registration carries at most ${n(MEDIA_RECORD_LIMITS.perRegistration)} media records`,
    );
    expect(doc.replace(/\s+/g, ' ')).toContain(
      `at most ${n(MEDIA_RECORD_LIMITS.perHost)} media records that only one host reported`,
    );
  });
});
