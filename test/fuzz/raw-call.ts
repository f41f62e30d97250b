/**
 * Calls any gRPC method by path with raw request bytes, and reports the final
 * status: what the auth matrix and the fuzzers need to treat every RPC alike.
 * A server stream that delivers a message (or stays open for `streamIdleMs`
 * without failing) counts as OK: it got past auth and validation.
 */
import { type Client, Metadata, type ServiceError, status } from '@grpc/grpc-js';
import { type DecodedStatus, decodeServiceError } from '../../src/server/grpc/status.js';

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
  { timeoutMs = 10_000, streamIdleMs = 300 } = {},
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
      clearTimeout(idle);
      s.cancel();
      resolve(st);
    };
    const idle = setTimeout(() => finish(ok()), streamIdleMs);
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
