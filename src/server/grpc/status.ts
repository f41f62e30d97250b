/**
 * The one place where Berth's error taxonomy becomes a gRPC status. Handlers
 * throw BerthError; this turns it into a status code, a message, and
 * google.rpc.Status details in `grpc-status-details-bin` so grpcurl, buf curl
 * and generated SDKs see structured errors: an ErrorInfo on every error (as
 * AIP-193 asks; its reason is the error's own, e.g. DEVICE_ALREADY_CLEAN or
 * DEVICE_NOT_FOUND, or the code's name when there is none more specific), and
 * a BadRequest naming each field of an INVALID_ARGUMENT. The reason is also
 * sent as the `berth-error-reason` trailer, which `buf curl -v` prints (buf
 * curl shows details of types it was not compiled with as base64 only).
 * Another process's gRPC status (an agent's, relayed as grpc-js handed it
 * over) is decoded into a BerthError first (BerthError.from: its reason only
 * where the catalogue lists it for its code), so nothing reaches a client
 * without going through the catalogue. Anything else is a bug: the client gets a generic
 * INTERNAL with an id, the operator's log gets the whole error under that id.
 * The decoding side, which clients share, is src/transport/status.ts.
 */
import { randomUUID } from 'node:crypto';
import { Metadata, type ServiceError, status } from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { BerthError, type ErrorCode, isBerthError, isForeignStatus } from '../../errors.js';
import type { Any } from '../../gen/google/protobuf/any.js';
import { BadRequest, ErrorInfo } from '../../gen/google/rpc/error_details.js';
import { Status } from '../../gen/google/rpc/status.js';
import { ERROR_DOMAIN, REASON_TRAILER, typeUrl } from '../../transport/status.js';

// The scheduler's runtime and services still read the decoder from here.
export { decodeServiceError } from '../../transport/status.js';

const CODES: Record<ErrorCode, status> = {
  INVALID_ARGUMENT: status.INVALID_ARGUMENT,
  NOT_FOUND: status.NOT_FOUND,
  ALREADY_EXISTS: status.ALREADY_EXISTS,
  FAILED_PRECONDITION: status.FAILED_PRECONDITION,
  ABORTED: status.ABORTED,
  RESOURCE_EXHAUSTED: status.RESOURCE_EXHAUSTED,
  PERMISSION_DENIED: status.PERMISSION_DENIED,
  UNAUTHENTICATED: status.UNAUTHENTICATED,
  UNAVAILABLE: status.UNAVAILABLE,
  DEADLINE_EXCEEDED: status.DEADLINE_EXCEEDED,
  CANCELLED: status.CANCELLED,
  INTERNAL: status.INTERNAL,
};

/** Builds the ServiceError grpc-js sends for `err`. */
export function toServiceError(err: unknown, logger?: Logger): Partial<ServiceError> {
  if (isBerthError(err) || isForeignStatus(err)) {
    // Another process's status (an agent's) goes through the catalogue too: its
    // code, its message, and its reason only where the catalogue lists it.
    const e = BerthError.from(err);
    const reason = e.reason ?? e.code;
    const details: Any[] = [
      {
        typeUrl: typeUrl('google.rpc.ErrorInfo'),
        value: Buffer.from(ErrorInfo.encode({ reason, domain: ERROR_DOMAIN, metadata: e.metadata }).finish()),
      },
    ];
    if (e.fieldViolations.length > 0) {
      details.push({
        typeUrl: typeUrl('google.rpc.BadRequest'),
        value: Buffer.from(BadRequest.encode({ fieldViolations: e.fieldViolations }).finish()),
      });
    }
    const code = CODES[e.code];
    const metadata = new Metadata();
    metadata.set(
      'grpc-status-details-bin',
      Buffer.from(Status.encode({ code, message: e.message, details }).finish()),
    );
    metadata.set(REASON_TRAILER, reason);
    return { code, details: e.message, metadata };
  }
  const id = randomUUID();
  logger?.error({ err, errorId: id }, 'unexpected error in handler');
  return toServiceError(
    new BerthError('INTERNAL', `internal error (id ${id}); see the server log`, {
      metadata: { errorId: id },
    }),
  );
}
