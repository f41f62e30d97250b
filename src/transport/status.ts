/**
 * The wire form of a Berth error, as both sides read it: the ErrorInfo
 * domain, the trailer that repeats the reason, and the client-side decoding
 * of a grpc-js error back into code, reason, metadata and field violations.
 * The server side that writes it (toServiceError) is src/server/grpc/status.ts;
 * the SDK decodes with this module, so it needs no server module
 * (.dependency-cruiser.cjs).
 */
import type { ServiceError } from '@grpc/grpc-js';
import { status } from '@grpc/grpc-js';
import type { ErrorCode } from '../errors.js';
import { BadRequest, ErrorInfo } from '../gen/google/rpc/error_details.js';
import { Status } from '../gen/google/rpc/status.js';

/** The ErrorInfo domain of every Berth error. */
export const ERROR_DOMAIN = 'berth.dev';

/** The trailer that repeats the ErrorInfo reason in plain text (named in the catalogue, which errors.ts reads it by). */
export { REASON_TRAILER } from '../error-reasons.js';

/** The type URL of a google.protobuf.Any holding message `name`. */
export const typeUrl = (name: string) => `type.googleapis.com/${name}`;

/** Every gRPC status code's name (UNIMPLEMENTED, DATA_LOSS, … included: a client may receive any). */
export type StatusName = ErrorCode | 'OK' | 'UNKNOWN' | 'UNIMPLEMENTED' | 'OUT_OF_RANGE' | 'DATA_LOSS';
const STATUS_NAMES = new Map<number, StatusName>(
  Object.entries(status)
    .filter((e): e is [string, number] => typeof e[1] === 'number')
    .map(([k, v]) => [v, k as StatusName]),
);

export interface DecodedStatus {
  code: number;
  codeName: StatusName;
  message: string;
  reason?: string;
  metadata: Record<string, string>;
  fieldViolations: { field: string; description: string }[];
}

/** Client side: decode a grpc-js error back into code, reason and field violations. */
export function decodeServiceError(err: ServiceError): DecodedStatus {
  const out: DecodedStatus = {
    code: err.code,
    codeName: STATUS_NAMES.get(err.code) ?? 'UNKNOWN',
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
