/**
 * Error assertions shared by the tests: a call that must fail with a gRPC
 * code (and ErrorInfo reason), and the field violations of an
 * INVALID_ARGUMENT thrown in process.
 */
import { expect } from 'vitest';
import { BerthClientError } from '../../src/client/sdk.js';
import { isBerthError } from '../../src/errors.js';

/** Awaits a call that must fail with `codeName` (and `reason`, when given). */
export async function expectCode(
  p: Promise<unknown>,
  codeName: string,
  reason?: string,
): Promise<BerthClientError> {
  const err = await p.then(
    (v) => new Error(`expected ${codeName}${reason ? `/${reason}` : ''}, got ${JSON.stringify(v)}`),
    (e: unknown) => e,
  );
  if (!(err instanceof BerthClientError)) throw err;
  expect(err.codeName, err.message).toBe(codeName);
  if (reason) expect(err.reason, err.message).toBe(reason);
  return err;
}

/**
 * The field violations of the INVALID_ARGUMENT BerthError `f` throws, as
 * `field: description`; [] when `f` does not throw. Any other error is
 * rethrown.
 */
export function violations(f: () => unknown): string[] {
  try {
    f();
  } catch (e) {
    if (isBerthError(e) && e.code === 'INVALID_ARGUMENT')
      return e.fieldViolations.map((v) => `${v.field}: ${v.description}`);
    throw e;
  }
  return [];
}

/** The fields alone of violations(f). */
export const violatedFields = (f: () => unknown): string[] => violations(f).map((v) => v.split(': ')[0]!);
