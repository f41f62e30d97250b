import type { ServiceError } from '@grpc/grpc-js';
import { describe, expect, it } from 'vitest';
import { BerthError, failedPrecondition, invalidArgument, notFound } from '../../errors.js';
import { decodeServiceError, REASON_TRAILER } from '../../transport/status.js';
import { toServiceError } from './status.js';

const roundTrip = (err: unknown) => decodeServiceError(toServiceError(err) as ServiceError);

describe('gRPC status details', () => {
  it('puts an ErrorInfo on every error (AIP-193), NOT_FOUND included, with the reason in a trailer too', () => {
    const nf = roundTrip(notFound('accelerator request', 'abc'));
    expect(nf).toMatchObject({
      codeName: 'NOT_FOUND',
      reason: 'ACCELERATOR_REQUEST_NOT_FOUND',
      metadata: { kind: 'accelerator request', id: 'abc' },
    });
    expect(roundTrip(failedPrecondition('DEVICE_ALLOCATED', 'bound')).reason).toBe('DEVICE_ALLOCATED');
    const bad = roundTrip(invalidArgument('device.uuid', '"x" is not a uuid'));
    expect(bad.reason).toBe('INVALID_ARGUMENT');
    expect(bad.fieldViolations).toEqual([{ field: 'device.uuid', description: '"x" is not a uuid' }]);
    expect(roundTrip(new BerthError('ABORTED', 'stale generation')).reason).toBe('ABORTED');
    const st = toServiceError(notFound('device', 'd'));
    expect(st.metadata!.get(REASON_TRAILER)).toEqual(['DEVICE_NOT_FOUND']);
  });

  it('gives an unexpected error a generic INTERNAL whose ErrorInfo carries the id of the log line', () => {
    const d = roundTrip(new TypeError('x is undefined'));
    expect(d.codeName).toBe('INTERNAL');
    expect(d.message).not.toContain('x is undefined');
    expect(d.reason).toBe('INTERNAL');
    expect(d.message).toContain(d.metadata.errorId!);
  });

  it('names every gRPC status a client may receive, UNIMPLEMENTED included', () => {
    const d = decodeServiceError({
      code: 12,
      details: 'not here',
      metadata: undefined,
    } as unknown as ServiceError);
    expect(d.codeName).toBe('UNIMPLEMENTED');
  });
});

describe('a foreign status (an agent’s, relayed raw) goes through the catalogue', () => {
  /** What grpc-js hands the scheduler when an agent answered with `err`. */
  const fromAgent = (err: BerthError, trailer?: string) => {
    const sent = toServiceError(err) as ServiceError;
    if (trailer) sent.metadata.set(REASON_TRAILER, trailer);
    return Object.assign(new Error(sent.details), sent);
  };

  it('keeps its code and message; a reason the catalogue does not list for the code becomes the code’s name', () => {
    const raw = fromAgent(new BerthError('UNAVAILABLE', 'journal gone'), 'AGENT_JOURNAL_PRIVATE');
    const d = roundTrip(raw);
    expect([d.codeName, d.message, d.reason]).toEqual(['UNAVAILABLE', 'journal gone', 'UNAVAILABLE']);
    expect(toServiceError(raw).metadata!.get(REASON_TRAILER)).toEqual(['UNAVAILABLE']);
    // The agent's own ErrorInfo metadata does not reach the client either.
    const listedElsewhere = roundTrip(
      fromAgent(new BerthError('UNAVAILABLE', 'x', { reason: 'STORE_IO_ERROR', metadata: { path: '/j' } })),
    );
    expect([listedElsewhere.reason, listedElsewhere.metadata]).toEqual(['STORE_IO_ERROR', {}]);
  });

  it('a code Berth does not use is INTERNAL; a reason listed for the code is relayed', () => {
    const d = roundTrip(
      Object.assign(new Error('x'), { code: 12, details: 'no such method', metadata: undefined }),
    );
    expect([d.codeName, d.reason, d.message]).toEqual([
      'INTERNAL',
      'INTERNAL',
      'UNIMPLEMENTED: no such method',
    ]);
    const kept = roundTrip(fromAgent(failedPrecondition('MEDIA_NOT_CLEAN', 'holds data')));
    expect([kept.codeName, kept.reason]).toEqual(['FAILED_PRECONDITION', 'MEDIA_NOT_CLEAN']);
  });
});
