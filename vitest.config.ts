import { configDefaults, defineConfig } from 'vitest/config';

/**
 * Three projects:
 *
 * - `unit` (`npm run test:unit`): the tests beside the code (`src/**\/*.test.ts`)
 *   that run inside the test process alone — no child process, no external
 *   tool (lspci, nvme-cli, python3), no database server, no simulated host
 *   built at scale — each file in about two seconds or less on two busy cores.
 *   In-process loopback gRPC servers and small temporary files are fine.
 * - `integration`: everything else — test/ (real servers, the CLI, the
 *   simulator's processes, PostgreSQL, Placement) and the colocated tests in
 *   SLOW_COLOCATED below.
 * - `real-kernel`: the VM suite (QEMU, TCG: CPU-bound), run alone after
 *   everything else: beside the other files on two cores its guest took
 *   minutes instead of under one.
 *
 * `npm test` runs all three. A new colocated test that needs a process, a
 * tool or a database goes into SLOW_COLOCATED.
 */
const VM_SUITE = 'test/vm/real-nvme.test.ts';

const SLOW_COLOCATED = [
  // The nvme-cli simulator (a process per command) or the real nvme-cli.
  'src/plugins/nvme/nvme-driver.test.ts',
  'src/plugins/nvme/census.test.ts',
  'src/plugins/nvme/multipath.test.ts',
  'src/plugins/nvme/erasure.property.test.ts',
  'src/plugins/nvme/media-identity.test.ts',
  'src/plugins/nvme-vendor-example/vendor-example-driver.test.ts',
  'src/sim/nvme-cli/nvme-sim.test.ts',
  'src/sim/nvme-cli/args.test.ts',
  // lspci as the oracle, or simulated hosts built at scale.
  'src/plugins/pci/sysfs-reader.test.ts',
  'src/plugins/pci/device-serial-number.test.ts',
  'src/plugins/pci/media-identity.test.ts',
  'src/sim/sysfs/builder.test.ts',
  'src/sim/sysfs/lspci-oracle.test.ts',
  'src/sim/host.test.ts',
  // Child processes or external tools.
  'src/plugins/block/direct-io.test.ts',
  'src/plugins/exec-runner.test.ts',
  'src/plugins/device-spec/os-names.test.ts',
  'src/server/agent/heap-tuning.test.ts',
  'src/server/grpc/lazy-reflection.test.ts',
  // The store's contracts on its real backends (SQLite with synchronous FULL, PostgreSQL).
  'src/server/scheduler/store/sqlite-store.test.ts',
  'src/server/scheduler/store/pg-store.test.ts',
];

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
          name: 'unit',
          include: ['src/**/*.test.ts'],
          exclude: [...configDefaults.exclude, ...SLOW_COLOCATED],
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: {
          name: 'integration',
          include: ['test/**/*.test.ts', ...SLOW_COLOCATED],
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
