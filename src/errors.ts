/**
 * Berth's one error taxonomy. Domain code throws BerthError with a closed code;
 * the gRPC layer (src/server/grpc/status.ts) is the only place that maps it to a
 * gRPC status with google.rpc details. Domain code never imports grpc-js.
 */

export type ErrorCode =
  | 'INVALID_ARGUMENT'
  | 'NOT_FOUND'
  | 'ALREADY_EXISTS'
  | 'FAILED_PRECONDITION'
  | 'ABORTED'
  | 'RESOURCE_EXHAUSTED'
  | 'PERMISSION_DENIED'
  | 'UNAUTHENTICATED'
  | 'UNAVAILABLE'
  | 'DEADLINE_EXCEEDED'
  | 'CANCELLED'
  | 'INTERNAL';

/** A field that was wrong, with a sentence naming the value (google.rpc.BadRequest). */
export interface FieldViolation {
  field: string;
  description: string;
}

export interface BerthErrorOptions {
  /** Machine-readable reason for FAILED_PRECONDITION and friends (google.rpc.ErrorInfo). */
  reason?: string;
  metadata?: Record<string, string>;
  fieldViolations?: FieldViolation[];
  cause?: unknown;
}

export class BerthError extends Error {
  readonly code: ErrorCode;
  readonly reason: string | undefined;
  readonly metadata: Record<string, string>;
  readonly fieldViolations: FieldViolation[];

  constructor(code: ErrorCode, message: string, options: BerthErrorOptions = {}) {
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

/** NOT_FOUND naming the id, with the reason `<KIND>_NOT_FOUND` (e.g. DEVICE_NOT_FOUND). */
export const notFound = (kind: string, id: string) =>
  new BerthError('NOT_FOUND', `${kind} ${JSON.stringify(id)} not found`, {
    reason: `${kind.toUpperCase().replace(/[^A-Z0-9]+/g, '_')}_NOT_FOUND`,
    metadata: { kind, id },
  });

export const failedPrecondition = (reason: string, message: string, metadata: Record<string, string> = {}) =>
  new BerthError('FAILED_PRECONDITION', message, { reason, metadata });

export const permissionDenied = (reason: string, message: string, metadata: Record<string, string> = {}) =>
  new BerthError('PERMISSION_DENIED', message, { reason, metadata });

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
