/**
 * The one place where Berth's error taxonomy becomes a gRPC status. Handlers
 * throw BerthError; this turns it into a status code, a message, and
 * google.rpc.Status details (ErrorInfo, BadRequest) in `grpc-status-details-bin`
 * so grpcurl, buf curl and generated SDKs see structured errors. Anything that
 * is not a BerthError is a bug: the client gets a generic INTERNAL with an id,
 * the operator's log gets the whole error under that id.
 */
import { randomUUID } from 'node:crypto';
import { Metadata, type ServiceError, status } from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { BerthError, type ErrorCode } from '../../errors.js';
import type { Any } from '../../gen/google/protobuf/any.js';
import { BadRequest, ErrorInfo } from '../../gen/google/rpc/error_details.js';
import { Status } from '../../gen/google/rpc/status.js';

export const ERROR_DOMAIN = 'berth.dev';

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

const CODE_NAMES = new Map<number, ErrorCode>(Object.entries(CODES).map(([k, v]) => [v, k as ErrorCode]));

const typeUrl = (name: string) => `type.googleapis.com/${name}`;

/** Builds the ServiceError grpc-js sends for `err`. */
export function toServiceError(err: unknown, logger?: Logger): Partial<ServiceError> {
  if (err instanceof BerthError) {
    const details: Any[] = [];
    if (err.reason) {
      details.push({
        typeUrl: typeUrl('google.rpc.ErrorInfo'),
        value: Buffer.from(
          ErrorInfo.encode({ reason: err.reason, domain: ERROR_DOMAIN, metadata: err.metadata }).finish(),
        ),
      });
    }
    if (err.fieldViolations.length > 0) {
      details.push({
        typeUrl: typeUrl('google.rpc.BadRequest'),
        value: Buffer.from(BadRequest.encode({ fieldViolations: err.fieldViolations }).finish()),
      });
    }
    const code = CODES[err.code];
    const metadata = new Metadata();
    if (details.length > 0) {
      metadata.set(
        'grpc-status-details-bin',
        Buffer.from(Status.encode({ code, message: err.message, details }).finish()),
      );
    }
    if (err.reason) metadata.set('berth-error-reason', err.reason);
    return { code, details: err.message, metadata };
  }
  if (isServiceErrorLike(err)) return err;
  const id = randomUUID();
  logger?.error({ err, errorId: id }, 'unexpected error in handler');
  return {
    code: status.INTERNAL,
    details: `internal error (id ${id}); see the server log`,
    metadata: new Metadata(),
  };
}

function isServiceErrorLike(err: unknown): err is Partial<ServiceError> {
  return (
    typeof err === 'object' &&
    err !== null &&
    'code' in err &&
    typeof (err as { code: unknown }).code === 'number' &&
    'details' in err
  );
}

export interface DecodedStatus {
  code: number;
  codeName: ErrorCode | 'UNKNOWN' | 'OK';
  message: string;
  reason?: string;
  metadata: Record<string, string>;
  fieldViolations: { field: string; description: string }[];
}

/** Client side: decode a grpc-js error back into code, reason and field violations. */
export function decodeServiceError(err: ServiceError): DecodedStatus {
  const out: DecodedStatus = {
    code: err.code,
    codeName: err.code === 0 ? 'OK' : (CODE_NAMES.get(err.code) ?? 'UNKNOWN'),
    message: err.details,
    metadata: {},
    fieldViolations: [],
  };
  const raw = err.metadata?.get('grpc-status-details-bin')[0];
  if (raw instanceof Buffer) {
    try {
      const st = Status.decode(raw);
      for (const d of st.details) {
        if (d.typeUrl === typeUrl('google.rpc.ErrorInfo')) {
          const info = ErrorInfo.decode(d.value);
          out.reason = info.reason;
          out.metadata = info.metadata;
        } else if (d.typeUrl === typeUrl('google.rpc.BadRequest')) {
          out.fieldViolations = BadRequest.decode(d.value).fieldViolations;
        }
      }
    } catch {
      // Undecodable details: keep code and message.
    }
  }
  return out;
}

/** Turns a client-side grpc error back into a BerthError (for servers that call other servers). */
export function berthErrorFromServiceError(err: ServiceError): BerthError {
  const d = decodeServiceError(err);
  const code: ErrorCode = d.codeName === 'OK' || d.codeName === 'UNKNOWN' ? 'INTERNAL' : d.codeName;
  return new BerthError(code, d.message, {
    reason: d.reason,
    metadata: d.metadata,
    fieldViolations: d.fieldViolations,
    cause: err,
  });
}
