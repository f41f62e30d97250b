import { configDefaults, defineConfig } from 'vitest/config';

/**
 * The real-kernel suite (QEMU, TCG: CPU-bound) runs alone after everything
 * else: beside the other files on two cores its guest took minutes instead of
 * under one.
 */
const VM_SUITE = 'test/vm/real-nvme.test.ts';

export default defineConfig({
  test: {
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Integration tests start real servers and child processes; two cores.
    pool: 'forks',
    maxWorkers: 2,
    reporters: ['default', './test/reporter.ts'],
    projects: [
      {
        extends: true,
        test: {
          name: 'berth',
          include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
          exclude: [...configDefaults.exclude, VM_SUITE],
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: { name: 'real-kernel', include: [VM_SUITE], sequence: { groupOrder: 1 } },
      },
    ],
  },
});
