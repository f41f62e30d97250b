/** Error assertions shared by the tests: a call that must fail with a gRPC code (and ErrorInfo reason). */
import { expect } from 'vitest';
import { BerthClientError } from '../../src/client/sdk.js';

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
