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
