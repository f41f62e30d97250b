/**
 * Soak runs only: `*.soak.ts` under test/soak, which the normal config never
 * includes (they run for many minutes). `SOAK_CLEANUPS=200 vitest run --config vitest.soak.config.ts`.
 */
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/soak/**/*.soak.ts'],
    testTimeout: 30 * 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    maxWorkers: 1,
    reporters: ['default'],
  },
});
