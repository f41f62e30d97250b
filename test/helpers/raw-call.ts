/**
 * Calls any gRPC method by path with raw request bytes, and reports the final
 * status: what the auth matrix and the fuzzers need to treat every RPC alike.
 * A server stream that delivers a message or ends cleanly counts as OK: it got
 * past auth and validation. By default nothing else does — a stream that stays
 * silent runs into the deadline and reports DEADLINE_EXCEEDED, so a slow
 * refusal on a loaded machine is never mistaken for a pass. The fuzzers, whose
 * random requests may legitimately open a stream that waits (a watch), pass
 * `streamIdleMs` to count such a stream as OK after that long: a leniency
 * that can only hide a failure, never invent one.
 */
import { type Client, Metadata, type ServiceError, status } from '@grpc/grpc-js';
import { type DecodedStatus, decodeServiceError } from '../../src/transport/status.js';

export interface RawMethod {
  path: string;
  responseStream: boolean;
}

const identity = (b: Buffer) => b;

export function metadataWith(authorization?: string): Metadata {
  const md = new Metadata();
  if (authorization !== undefined) md.set('authorization', authorization);
  return md;
}

export function rawCall(
  client: Client,
  method: RawMethod,
  body: Buffer,
  metadata: Metadata,
  { timeoutMs = 10_000, streamIdleMs }: { timeoutMs?: number; streamIdleMs?: number } = {},
): Promise<DecodedStatus> {
  const deadline = Date.now() + timeoutMs;
  if (!method.responseStream) {
    return new Promise((resolve) => {
      client.makeUnaryRequest(method.path, identity, identity, body, metadata, { deadline }, (err) =>
        resolve(err ? decodeServiceError(err) : ok()),
      );
    });
  }
  return new Promise((resolve) => {
    const s = client.makeServerStreamRequest(method.path, identity, identity, body, metadata, { deadline });
    let done = false;
    const finish = (st: DecodedStatus) => {
      if (done) return;
      done = true;
      if (idle) clearTimeout(idle);
      s.cancel();
      resolve(st);
    };
    const idle = streamIdleMs === undefined ? undefined : setTimeout(() => finish(ok()), streamIdleMs);
    s.on('data', () => finish(ok()));
    s.on('error', (err: ServiceError) =>
      finish(err.code === status.CANCELLED ? ok() : decodeServiceError(err)),
    );
    s.on('end', () => finish(ok()));
  });
}

function ok(): DecodedStatus {
  return { code: 0, codeName: 'OK', message: '', metadata: {}, fieldViolations: [] };
}
