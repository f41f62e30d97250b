/**
 * Test support: a simulated host for the NVMe driver — a sysfs tree, an nvme-cli
 * 2.3 simulator state with file-backed namespaces, and a logging wrapper around
 * the simulator so tests can count invocations and find child pids.
 *
 * The kernel's part of namespace management is mimicked in `runner`: after a
 * successful `ns-rescan` the sysfs tree is updated from the simulator's state,
 * as the kernel would add/remove the nvmeXnY block devices.
 */
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import type { CensusPair, CleanupEvidence } from '../../src/plugins/cleanup-evidence.js';
import { type CleanupPolicy, DEFAULT_CLEANUP_POLICY } from '../../src/plugins/cleanup-evidence.js';
import type { CommandRunner } from '../../src/plugins/command-runner.js';
import {
  type CleanupContext,
  type Driver,
  type HostContext,
  instantiateDriver,
} from '../../src/plugins/driver.js';
import type { GenericDriver } from '../../src/plugins/driver-v2.js';
import { ExecRunner } from '../../src/plugins/exec-runner.js';
import { takeNvmeCensus } from '../../src/plugins/nvme/census.js';
import { type NvmeKitDriver, nvmeDriver } from '../../src/plugins/nvme/nvme-driver.js';
import type { CleanupProgress, DiscoveredDevice } from '../../src/plugins/types.js';
import { judgeEvidence, type Verdict } from '../../src/server/agent/cleanup-judge.js';
import { syncNvmeNamespaces } from '../../src/sim/kernel.js';
import {
  createNvmeSimState,
  runCli,
  type SimControllerSpec,
  writeNvmeWrapper,
} from '../../src/sim/nvme-cli/index.js';
import { buildSysfs, type SysfsBuilder } from '../../src/sim/sysfs/index.js';

export const ADDRESS = '0000:01:00.0';

export interface TestHost {
  root: string;
  sysfsRoot: string;
  devRoot: string;
  statePath: string;
  /** The logging wrapper: use as nvme_cli. */
  nvmeCli: string;
  builder: SysfsBuilder;
  runner: CommandRunner;
  ctx: HostContext;
  /** argv of every nvme invocation so far, with the pid that ran it. */
  invocations(): Promise<{ pid: number; argv: string[] }[]>;
  cleanupCtx(signal?: AbortSignal, policy?: CleanupPolicy): CleanupContext & { events: CleanupProgress[] };
  dispose(): Promise<void>;
}

export interface TestHostOptions {
  controller?: Partial<SimControllerSpec>;
  namespaces?: {
    nsid: number;
    sizeBytes: number;
    lbaSize?: 512 | 4096;
    attached?: boolean;
    /** With `peers`: the cntlids (nvme0 is 1, nvme1 is 2, ...) it is attached to; default all. */
    attachedTo?: number[];
  }[];
  /**
   * With `subsystem`: further controllers of the same NVM subsystem, each its
   * own PCI function (nvme1 at 0000:02:00.0, ...), reaching the same namespaces.
   */
  peers?: number;
  vendorId?: string;
  productId?: string;
  /** Put the controller in nvme-subsys<N>: the multipath layout (heads nvme<N>nY). */
  subsystem?: number;
  /** False: ns-rescan leaves sysfs as it was (a kernel that has not caught up). Default true. */
  kernelRescan?: boolean;
  /**
   * Run the simulator's nvme-cli in this process (runCli) instead of as a child
   * process: the same code and output, without a node start-up per command, for
   * tests that run hundreds of cleanups. Hang faults do not apply.
   */
  inProcess?: boolean;
}

export async function makeTestHost(opts: TestHostOptions = {}): Promise<TestHost> {
  const root = await mkdtemp(join(tmpdir(), 'berth-nvme-'));
  const sysfsRoot = join(root, 'sys');
  const devRoot = join(root, 'dev');
  const statePath = join(root, 'nvme-sim.json');
  const namespaces = opts.namespaces ?? [{ nsid: 1, sizeBytes: 1 << 20 }];
  const peers = opts.peers ?? 0;
  if (peers > 0 && opts.subsystem === undefined) throw new Error('peers need a subsystem');
  const ctrls = Array.from({ length: 1 + peers }, (_, i) => ({
    name: `nvme${i}`,
    address: i === 0 ? ADDRESS : `0000:${(i + 1).toString(16).padStart(2, '0')}:00.0`,
    cntlid: i + 1,
  }));
  const attachedTo = (n: (typeof namespaces)[number], cntlid: number) =>
    n.attachedTo ? n.attachedTo.includes(cntlid) : n.attached !== false;
  const builder = await buildSysfs(sysfsRoot, {
    nvme: ctrls.map((c) => ({
      address: c.address,
      vendorId: opts.vendorId ?? '144d',
      productId: opts.productId ?? 'a808',
      controller: c.name,
      cntlid: c.cntlid,
      namespaces: namespaces
        .filter((n) => attachedTo(n, c.cntlid))
        .map(({ attached: _a, attachedTo: _t, ...n }) => n),
      ...(opts.subsystem === undefined ? {} : { subsystem: opts.subsystem }),
    })),
  });
  await createNvmeSimState(statePath, {
    controllers: [
      {
        name: 'nvme0',
        devPath: join(devRoot, 'nvme0'),
        pciAddress: ADDRESS,
        cntlid: 1,
        namespaces,
        ...(opts.subsystem === undefined ? {} : { nsNamePrefix: `nvme${opts.subsystem}n` }),
        ...opts.controller,
      },
      ...ctrls.slice(1).map((c) => ({
        name: c.name,
        devPath: join(devRoot, c.name),
        pciAddress: c.address,
        cntlid: c.cntlid,
        shares: 'nvme0',
      })),
    ],
  });
  const sim = await writeNvmeWrapper(join(root, 'bin'), statePath);
  const log = join(root, 'nvme-argv.log');
  const nvmeCli = join(root, 'bin', 'nvme-logged');
  await writeFile(nvmeCli, `#!/bin/sh\nprintf '%s\\t%s\\n' "$$" "$*" >> '${log}'\nexec '${sim}' "$@"\n`);
  await chmod(nvmeCli, 0o755);

  const exec = new ExecRunner({ killGraceMs: 500 });
  const simEnv = { statePath, fast: true, now: Date.now, env: { ...process.env, LC_ALL: 'C' } };
  const runner: CommandRunner = {
    async run(file, args, options) {
      const r =
        opts.inProcess && file === nvmeCli
          ? { ...(await runCli([...args], simEnv)), signal: null, timedOut: false, aborted: false }
          : await exec.run(file, args, options);
      if (file === nvmeCli && args[0] === 'ns-rescan' && r.code === 0 && opts.kernelRescan !== false) {
        await syncNvmeNamespaces(builder, statePath);
      }
      return r;
    },
  };
  const logger = pino({ level: 'silent' });
  const ctx: HostContext = { sysfsRoot, devRoot, stateDir: root, hostname: 'test-host', runner, logger };
  return {
    root,
    sysfsRoot,
    devRoot,
    statePath,
    nvmeCli,
    builder,
    runner,
    ctx,
    async invocations() {
      const text = await readFile(log, 'utf8').catch(() => '');
      return text
        .split('\n')
        .filter(Boolean)
        .map((l) => {
          const [pid, rest] = l.split('\t');
          return { pid: Number(pid), argv: (rest ?? '').split(' ') };
        });
    },
    cleanupCtx(signal = new AbortController().signal, policy = DEFAULT_CLEANUP_POLICY) {
      const events: CleanupProgress[] = [];
      return {
        ...ctx,
        jobId: 'job-1',
        signal,
        policy,
        progress: (p: CleanupProgress) => {
          events.push(p);
        },
        events,
      };
    },
    dispose: () => rm(root, { recursive: true, force: true }),
  };
}

/** The generic NVMe driver with this config section (`nvme:`), as the agent builds it. */
export const newNvmeDriver = (o: { config: Record<string, unknown> }): NvmeKitDriver =>
  instantiateDriver(nvmeDriver, o.config);

/** The nvme-cli a driver runs: a kit driver's section's, a version-2 NvmeDriver's, else `nvme`. */
function nvmeCliOf(driver: Driver | GenericDriver): string {
  if ('kit' in driver) return (driver as NvmeKitDriver).kit.config.nvmeCli;
  return (driver as { nvmeCli?: string }).nvmeCli ?? 'nvme';
}

/**
 * Runs a driver's cleanup and judges its evidence the way the agent does:
 * against the agent's own census of the media, taken before and after with the
 * nvme-cli the driver is configured with.
 */
export async function cleanAndJudge(
  driver: Driver | GenericDriver,
  device: DiscoveredDevice,
  ctx: CleanupContext,
  /** The nvme-cli the driver's section names (as the agent's census runs it); a kit driver's own by default. */
  nvmeCli: string = nvmeCliOf(driver),
): Promise<{ evidence: CleanupEvidence; verdict: Verdict; census: CensusPair; cleanupEndedAt: number }> {
  const census = (probe: boolean) =>
    takeNvmeCensus(device.address, {
      sysfsRoot: ctx.sysfsRoot,
      devRoot: ctx.devRoot,
      runner: ctx.runner,
      nvmeCli,
      probe,
    });
  const before = await census(false);
  if (!driver.cleanup) throw new Error(`driver ${driver.name} has no cleanup capability`);
  const evidence = await driver.cleanup(device, ctx);
  // performance.now() when the driver's cleanup returned, before the census after it (bench/zeroing.ts).
  const cleanupEndedAt = performance.now();
  const after = await census(true);
  return {
    evidence,
    cleanupEndedAt,
    verdict: judgeEvidence(evidence, device.cleanupAction ?? '', ctx.policy, { before, after }),
    census: { before, after },
  };
}

/** Writes a recognisable tenant pattern at several places of a namespace backing file. */
export async function writeTenantData(path: string, sizeBytes: number): Promise<void> {
  const { open } = await import('node:fs/promises');
  const fh = await open(path, 'r+');
  try {
    const block = Buffer.alloc(4096, 0);
    block.write('TENANT-SECRET-'.repeat(200));
    for (const off of [0, Math.floor(sizeBytes / 3), Math.floor(sizeBytes / 2), sizeBytes - 4096]) {
      await fh.write(block, 0, block.length, off - (off % 512));
    }
  } finally {
    await fh.close();
  }
}

/** True when the file holds the tenant marker anywhere. */
export async function holdsTenantData(path: string): Promise<boolean> {
  const data = await readFile(path);
  return data.includes('TENANT-SECRET-');
}

export async function isAllZero(path: string): Promise<boolean> {
  const data = await readFile(path);
  return data.every((b) => b === 0);
}
