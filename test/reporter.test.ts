/**
 * The closing summary line of test/reporter.ts, checked against vitest itself:
 * vitest runs fixture files that fail in every way a run can fail (a failed
 * test, a beforeAll that throws — vitest then reports the tests as skipped —,
 * a failing afterAll, a file that cannot be collected, an unhandled error) and
 * the line must agree with vitest's own "Tests" and "Test Files" counts and
 * with its exit code.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const CONFIG = join(process.cwd(), 'test/fixtures/reporter/vitest.config.ts');
const VITEST = join(process.cwd(), 'node_modules/.bin/vitest');

interface Outcome {
  code: number;
  ours: { passed: number; failed: number; skipped: number; filesPassed: number; filesFailed: number };
  vitest: { tests: Record<string, number>; files: Record<string, number> };
}

/** `1 failed | 3 passed | 4 skipped (8)` → {failed: 1, passed: 3, skipped: 4}. */
function counts(line: string | undefined): Record<string, number> {
  const out: Record<string, number> = { passed: 0, failed: 0, skipped: 0 };
  for (const m of (line ?? '').matchAll(/(\d+) (passed|failed|skipped)/g)) out[m[2]!] = Number(m[1]);
  return out;
}

async function vitestOn(...files: string[]): Promise<Outcome> {
  const res = await run(VITEST, ['run', '--config', CONFIG, ...files], {
    env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0', VITEST: undefined, VITEST_WORKER_ID: undefined },
    timeout: 120_000,
  }).then(
    (r) => ({ code: 0, out: r.stdout + r.stderr }),
    (e: { code?: number; stdout?: string; stderr?: string }) => ({
      code: typeof e.code === 'number' ? e.code : -1,
      out: `${e.stdout ?? ''}${e.stderr ?? ''}`,
    }),
  );
  const line = /^vitest: (\d+) passed, (\d+) failed, (\d+) skipped .*files: (\d+) passed, (\d+) failed/m.exec(
    res.out,
  );
  expect(line, res.out).not.toBeNull();
  return {
    code: res.code,
    ours: {
      passed: Number(line![1]),
      failed: Number(line![2]),
      skipped: Number(line![3]),
      filesPassed: Number(line![4]),
      filesFailed: Number(line![5]),
    },
    vitest: {
      tests: counts(/^\s*Tests\s+(.*)$/m.exec(res.out)?.[1]),
      files: counts(/^\s*Test Files\s+(.*)$/m.exec(res.out)?.[1]),
    },
  };
}

function expectAgreement(o: Outcome): void {
  expect(o.ours.passed).toBe(o.vitest.tests.passed);
  expect(o.ours.skipped).toBe(o.vitest.tests.skipped);
  expect(o.ours.filesPassed).toBe(o.vitest.files.passed);
  expect(o.ours.filesFailed).toBe(o.vitest.files.failed);
  // Red exactly when vitest is red.
  expect(o.ours.failed > 0).toBe(o.code !== 0);
}

describe('the summary line (test/reporter.ts)', () => {
  it('counts a beforeAll that throws as a failure, though vitest calls its tests skipped', async () => {
    const o = await vitestOn('suite-setup-fails.fixture.ts');
    expect(o.code).toBe(1);
    expect(o.vitest.tests).toEqual({ passed: 0, failed: 0, skipped: 2 });
    expect(o.ours).toMatchObject({ passed: 0, failed: 1, skipped: 2 });
    expectAgreement(o);
  }, 150_000);

  it('counts failed tests, failing hooks, uncollectable files and unhandled errors', async () => {
    const o = await vitestOn();
    expect(o.code).toBe(1);
    // mixed: 1 failed test; suite-setup, file-setup, file-teardown and
    // import-fails: 4 errors outside tests; unhandled: 1 unhandled error.
    expect(o.ours.failed).toBe(6);
    expect(o.vitest.tests.failed).toBe(1);
    expectAgreement(o);
  }, 150_000);

  it('says 0 failed when vitest is green', async () => {
    const o = await vitestOn('passes.fixture.ts', 'skipped.fixture.ts');
    expect(o.code).toBe(0);
    expect(o.ours).toMatchObject({ passed: 1, failed: 0, skipped: 1 });
    expectAgreement(o);
  }, 150_000);
});
