/**
 * Prints one plain closing line that CI tooling reads whatever the runner:
 *
 *   vitest: 814 passed, 1 failed, 1 skipped (failed: 0 tests, 1 error outside tests; files: 60 passed, 1 failed, 0 skipped)
 *
 * `passed` and `skipped` are vitest's own test counts. `failed` counts every
 * way a run can fail: failed tests, plus each error raised outside a test — a
 * failing beforeAll/afterAll hook (vitest then reports the suite's tests as
 * skipped), a file that fails while it is collected, an unhandled error — plus
 * any failed file none of those explains. So the line says "0 failed" exactly
 * when vitest exits 0 because of the tests.
 */
import type { SerializedError } from 'vitest';
import type { Reporter, TestModule } from 'vitest/node';

export interface RunCounts {
  passed: number;
  skipped: number;
  failedTests: number;
  /** Errors raised outside any test: hooks, collection, unhandled. */
  errorsOutsideTests: number;
  filesPassed: number;
  filesFailed: number;
  filesSkipped: number;
  /** Everything that made the run fail. */
  failed: number;
}

export function countRun(
  modules: ReadonlyArray<TestModule>,
  unhandledErrors: ReadonlyArray<SerializedError> = [],
): RunCounts {
  let passed = 0;
  let skipped = 0;
  let failedTests = 0;
  let errorsOutsideTests = unhandledErrors.length;
  let filesPassed = 0;
  let filesFailed = 0;
  let filesSkipped = 0;
  let unexplained = 0;
  for (const m of modules) {
    let moduleFailures = 0;
    for (const t of m.children.allTests()) {
      const state = t.result().state;
      if (state === 'passed') passed++;
      else if (state === 'failed') {
        failedTests++;
        moduleFailures++;
      } else skipped++;
    }
    let own = m.errors().length;
    for (const s of m.children.allSuites()) own += s.errors().length;
    errorsOutsideTests += own;
    moduleFailures += own;
    if (m.state() === 'failed') {
      filesFailed++;
      if (moduleFailures === 0) unexplained++;
    } else if (m.state() === 'passed') {
      filesPassed++;
    } else {
      filesSkipped++;
    }
  }
  return {
    passed,
    skipped,
    failedTests,
    errorsOutsideTests,
    filesPassed,
    filesFailed,
    filesSkipped,
    failed: failedTests + errorsOutsideTests + unexplained,
  };
}

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;

export function summaryLine(c: RunCounts): string {
  return (
    `vitest: ${c.passed} passed, ${c.failed} failed, ${c.skipped} skipped ` +
    `(failed: ${plural(c.failedTests, 'test')}, ${plural(c.errorsOutsideTests, 'error')} outside tests; ` +
    `files: ${c.filesPassed} passed, ${c.filesFailed} failed, ${c.filesSkipped} skipped)`
  );
}

export default class SummaryLineReporter implements Reporter {
  onTestRunEnd(modules: ReadonlyArray<TestModule>, unhandledErrors: ReadonlyArray<SerializedError>): void {
    process.stdout.write(`\n${summaryLine(countRun(modules, unhandledErrors))}\n`);
  }
}
