/**
 * Berth's one error taxonomy. Domain code throws BerthError with a closed code;
 * the gRPC layer (src/server/grpc/status.ts) is the only place that maps it to a
 * gRPC status with google.rpc details. Domain code never imports grpc-js.
 */

import {
  type ErrorCode,
  type ErrorReason,
  REASON_TRAILER,
  type ReasonFor,
  relayedReason,
} from './error-reasons.js';

export type { ErrorCode, ErrorReason } from './error-reasons.js';

/** A field that was wrong, with a sentence naming the value (google.rpc.BadRequest). */
export interface FieldViolation {
  field: string;
  description: string;
}

export interface BerthErrorOptions<C extends ErrorCode = ErrorCode> {
  /** Machine-readable reason (google.rpc.ErrorInfo): one of the catalogue's for this code (src/error-reasons.ts). */
  reason?: ReasonFor<C>;
  metadata?: Record<string, string>;
  fieldViolations?: FieldViolation[];
  cause?: unknown;
}

export class BerthError<C extends ErrorCode = ErrorCode> extends Error {
  readonly code: C;
  readonly reason: ErrorReason | undefined;
  readonly metadata: Record<string, string>;
  readonly fieldViolations: FieldViolation[];

  constructor(code: C, message: string, options: BerthErrorOptions<C> = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'BerthError';
    this.code = code;
    this.reason = options.reason;
    this.metadata = options.metadata ?? {};
    this.fieldViolations = options.fieldViolations ?? [];
  }

  /**
   * Any thrown value as a BerthError, its reason one the catalogue lists for
   * its code (src/error-reasons.ts), the value kept as `cause`: a BerthError
   * as it is; a gRPC status from another process (an agent's, a grpc-js
   * ServiceError or any `{code, details, metadata}`) with its code — INTERNAL
   * for a code Berth does not use — its message, and the reason it relayed
   * only where the catalogue lists it for that code; anything else INTERNAL.
   */
  static from(e: unknown): BerthError {
    if (e instanceof BerthError) return e;
    if (isForeignStatus(e)) {
      const name = STATUS_NAMES[e.code] ?? `status ${e.code}`;
      const code = BERTH_CODES.has(name) ? (name as ErrorCode) : 'INTERNAL';
      const reason = relayedReason(code, sentReason(e.metadata));
      const message = !e.details
        ? `${name} with no message`
        : code === name
          ? e.details
          : `${name}: ${e.details}`;
      return new BerthError(code, message, {
        ...(reason ? { reason } : {}),
        cause: e,
      });
    }
    const what =
      e instanceof Error ? e.message : typeof e === 'string' ? e : (JSON.stringify(e) ?? String(e));
    return new BerthError('INTERNAL', `unexpected error: ${what}`, { cause: e });
  }
}

/** A gRPC status as grpc-js (or any other process's client) hands it over: a numeric code and a message. */
export interface ForeignStatus {
  code: number;
  details: string;
  /** The status's trailers: grpc-js Metadata (`get(key)`) or a plain record. */
  metadata?: unknown;
}

/** Whether `e` is a gRPC status that is not a BerthError (another process's, decoded by grpc-js). */
export function isForeignStatus(e: unknown): e is ForeignStatus {
  if (typeof e !== 'object' || e === null || e instanceof BerthError) return false;
  const { code, details } = e as { code?: unknown; details?: unknown };
  return typeof code === 'number' && typeof details === 'string';
}

/** gRPC's status codes by number (the wire's; grpc-js is not imported here). */
const STATUS_NAMES: Readonly<Record<number, string>> = [
  'OK',
  'CANCELLED',
  'UNKNOWN',
  'INVALID_ARGUMENT',
  'DEADLINE_EXCEEDED',
  'NOT_FOUND',
  'ALREADY_EXISTS',
  'PERMISSION_DENIED',
  'RESOURCE_EXHAUSTED',
  'FAILED_PRECONDITION',
  'ABORTED',
  'OUT_OF_RANGE',
  'UNIMPLEMENTED',
  'INTERNAL',
  'UNAVAILABLE',
  'DATA_LOSS',
  'UNAUTHENTICATED',
];

/** The codes of Berth's taxonomy (ErrorCode); a foreign status with another is INTERNAL. */
const BERTH_CODES: ReadonlySet<string> = new Set<ErrorCode>([
  'INVALID_ARGUMENT',
  'NOT_FOUND',
  'ALREADY_EXISTS',
  'FAILED_PRECONDITION',
  'ABORTED',
  'RESOURCE_EXHAUSTED',
  'PERMISSION_DENIED',
  'UNAUTHENTICATED',
  'UNAVAILABLE',
  'DEADLINE_EXCEEDED',
  'CANCELLED',
  'INTERNAL',
]);

/** The reason trailer of a status's metadata (grpc-js Metadata or a plain record), if it has one. */
function sentReason(metadata: unknown): string | undefined {
  if (typeof metadata !== 'object' || metadata === null) return undefined;
  const get = (metadata as { get?: unknown }).get;
  const value =
    typeof get === 'function'
      ? (get.call(metadata, REASON_TRAILER) as unknown[] | undefined)?.[0]
      : (metadata as Record<string, unknown>)[REASON_TRAILER];
  return typeof value === 'string' ? value : undefined;
}

export const invalidArgument = (field: string, description: string, more: FieldViolation[] = []) =>
  new BerthError('INVALID_ARGUMENT', `${field}: ${description}`, {
    fieldViolations: [{ field, description }, ...more],
  });

/** The kinds of record a NOT_FOUND names, each with its reason. */
const NOT_FOUND_REASONS = {
  device: 'DEVICE_NOT_FOUND',
  host: 'HOST_NOT_FOUND',
  profile: 'PROFILE_NOT_FOUND',
  'accelerator request': 'ACCELERATOR_REQUEST_NOT_FOUND',
  instance: 'INSTANCE_NOT_FOUND',
  'cleanup job': 'CLEANUP_JOB_NOT_FOUND',
  migration: 'MIGRATION_NOT_FOUND',
  media: 'MEDIA_NOT_FOUND',
} as const satisfies Record<string, ReasonFor<'NOT_FOUND'>>;

export type RecordKind = keyof typeof NOT_FOUND_REASONS;

export const notFoundReason = (kind: RecordKind): ReasonFor<'NOT_FOUND'> => NOT_FOUND_REASONS[kind];

/** NOT_FOUND naming the id, with the kind's reason (e.g. DEVICE_NOT_FOUND). */
export const notFound = (kind: RecordKind, id: string) =>
  new BerthError('NOT_FOUND', `${kind} ${JSON.stringify(id)} not found`, {
    reason: notFoundReason(kind),
    metadata: { kind, id },
  });

export const failedPrecondition = (
  reason: ReasonFor<'FAILED_PRECONDITION'>,
  message: string,
  metadata: Record<string, string> = {},
) => new BerthError('FAILED_PRECONDITION', message, { reason, metadata });

export const permissionDenied = (
  reason: ReasonFor<'PERMISSION_DENIED'>,
  message: string,
  metadata: Record<string, string> = {},
) => new BerthError('PERMISSION_DENIED', message, { reason, metadata });

export const isBerthError = (e: unknown): e is BerthError => e instanceof BerthError;

/**
 * For `.catch` on a lookup: NOT_FOUND is an answer (null); anything else (a
 * database that does not answer) is not, and propagates.
 */
export function unlessNotFound(e: unknown): null {
  if (isBerthError(e) && e.code === 'NOT_FOUND') return null;
  throw e;
}

/**
 * A configuration error (agent config, device_spec entries, driver loading).
 * It stops the agent at start with its message, and `berth agent discover`
 * prints it and exits non-zero.
 */
export class ConfigError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ConfigError';
  }
}

/** Values are shown in messages up to this many characters. */
const MAX_SHOWN = 80;

/**
 * A value as every error message shows it (one rule, issue 41 item 9): as
 * JSON, a string quoted with its first 80 characters (then `…`), anything else
 * cut at 80 characters; never throws (BigInt, cycles).
 */
export function show(value: unknown): string {
  if (typeof value === 'string') {
    return JSON.stringify(value.length > MAX_SHOWN ? `${value.slice(0, MAX_SHOWN)}…` : value);
  }
  let text: string;
  try {
    text = value === undefined ? 'undefined' : (JSON.stringify(value) ?? String(value));
  } catch {
    try {
      text = String(value);
    } catch {
      text = Object.prototype.toString.call(value);
    }
  }
  return text.length > MAX_SHOWN ? `${text.slice(0, MAX_SHOWN - 1)}…` : text;
}
