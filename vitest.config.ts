import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Integration tests start real servers and child processes; two cores.
    pool: 'forks',
    maxWorkers: 2,
    reporters: ['default', './test/reporter.ts'],
  },
});
