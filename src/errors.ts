/**
 * Berth's one error taxonomy. Domain code throws BerthError with a closed code;
 * the gRPC layer (src/server/grpc/status.ts) is the only place that maps it to a
 * gRPC status with google.rpc details. Domain code never imports grpc-js.
 */

import type { ErrorCode, ErrorReason, ReasonFor } from './error-reasons.js';

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
