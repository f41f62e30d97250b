import { Metadata, status } from '@grpc/grpc-js';
import { describe, expect, it } from 'vitest';
import { REASON_TRAILER } from './error-reasons.js';
import { BerthError, isForeignStatus, notFound, unlessNotFound } from './errors.js';

/** A status as grpc-js hands a client another process's error: an Error with code, details and trailers. */
function foreignStatus(code: number, details: string, reason?: string): Error {
  const metadata = new Metadata();
  if (reason) metadata.set(REASON_TRAILER, reason);
  return Object.assign(new Error(`${code} ${details}`), { code, details, metadata });
}

describe('BerthError.from', () => {
  it('a raw UNAVAILABLE from an agent: UNAVAILABLE with its message, no reason of its own, the status kept as cause', () => {
    const raw = foreignStatus(
      status.UNAVAILABLE,
      'No connection established. Last error: connect ECONNREFUSED',
    );
    const e = BerthError.from(raw);
    expect(e).toBeInstanceOf(BerthError);
    expect([e.code, e.reason, e.message]).toEqual([
      'UNAVAILABLE',
      undefined,
      'No connection established. Last error: connect ECONNREFUSED',
    ]);
    expect(e.cause).toBe(raw);
  });

  it('a code outside the taxonomy of Berth is INTERNAL, its name kept in the message (a reason listed for another code dropped)', () => {
    const e = BerthError.from(foreignStatus(status.UNIMPLEMENTED, 'no such method', 'AGENT_CANNOT_CLEAN'));
    expect([e.code, e.reason, e.message]).toEqual(['INTERNAL', undefined, 'UNIMPLEMENTED: no such method']);
    const unnumbered = BerthError.from({ code: 99, details: '' });
    expect([unnumbered.code, unnumbered.message]).toEqual(['INTERNAL', 'status 99 with no message']);
    expect(BerthError.from({ code: status.OK, details: 'ok?' }).code).toBe('INTERNAL');
  });

  it('keeps a relayed reason only where the catalogue lists it for the code', () => {
    const kept = BerthError.from(foreignStatus(status.FAILED_PRECONDITION, 'media moved', 'MEDIA_CHANGED'));
    expect([kept.code, kept.reason]).toEqual(['FAILED_PRECONDITION', 'MEDIA_CHANGED']);
    // Listed, but for RESOURCE_EXHAUSTED only.
    expect(BerthError.from(foreignStatus(status.FAILED_PRECONDITION, 'x', 'STORE_DISK_FULL')).reason).toBe(
      undefined,
    );
    // Not in the catalogue at all (a newer agent's, or no Berth process's).
    expect(BerthError.from(foreignStatus(status.UNAVAILABLE, 'x', 'SOMETHING_NEWER')).reason).toBe(undefined);
    // Trailers as a plain record.
    const plain = BerthError.from({
      code: status.UNAVAILABLE,
      details: 'disk',
      metadata: { [REASON_TRAILER]: 'STORE_IO_ERROR' },
    });
    expect([plain.code, plain.reason]).toEqual(['UNAVAILABLE', 'STORE_IO_ERROR']);
  });

  it('a BerthError is itself; any other value is INTERNAL naming it, kept as cause', () => {
    const own = notFound('device', 'd1');
    expect(BerthError.from(own)).toBe(own);
    const bug = new TypeError('x is undefined');
    expect(BerthError.from(bug)).toMatchObject({
      code: 'INTERNAL',
      message: 'unexpected error: x is undefined',
    });
    expect(BerthError.from(bug).cause).toBe(bug);
    expect(BerthError.from('boom').message).toBe('unexpected error: boom');
    expect(BerthError.from({ code: 'SQLITE_BUSY' }).message).toBe('unexpected error: {"code":"SQLITE_BUSY"}');
    expect(BerthError.from(undefined)).toMatchObject({
      code: 'INTERNAL',
      message: 'unexpected error: undefined',
    });
    expect(isForeignStatus({ code: 'SQLITE_BUSY', details: 'x' })).toBe(false);
    expect(isForeignStatus(own)).toBe(false);
  });
});

describe('unlessNotFound', () => {
  it('answers null for NOT_FOUND and throws anything else on', () => {
    expect(unlessNotFound(notFound('host', 'h1'))).toBe(null);
    const outage = new BerthError('UNAVAILABLE', 'database down', { reason: 'STORE_UNAVAILABLE' });
    expect(() => unlessNotFound(outage)).toThrow(outage);
  });
});
