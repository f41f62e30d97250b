/**
 * memory: resident memory of the scheduler with 100,000 devices loaded
 * (12,500 hosts × 8, served over gRPC) and of the agent with the large
 * simulated host (4,352 offered functions: 4,096 VFs + 256 NVMe, 16 PFs
 * excluded) discovered and served. Each runs in its own child process with
 * --expose-gc: RSS after a full GC, and the peak from VmHWM. The baseline is
 * the limit (300 MiB scheduler, 100 MiB agent), so ratio = value / limit and
 * the goal is ratio ≤ 1; an idle Node process is measured too, for scale. One JSON line per process (memory-scheduler,
 * memory-agent).
 */
import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { AgentClient } from '../src/client/sdk.js';
import { buildSysfs, largeHostSpec } from '../src/sim/sysfs/index.js';
import { emit, parseArgs, round, tempDir } from './lib.js';

const run = promisify(execFile);
const CHILD = fileURLToPath(new URL('./memory-child.ts', import.meta.url));

interface Measure {
  rss: number;
  peak: number;
  [k: string]: unknown;
}

/**
 * The child runs with plain node on the build, as the installed package does:
 * Berth's modules come from dist/ (built here first), one file each; only the
 * child's own glue (a .ts file) is bundled with esbuild, a development
 * dependency. Not through the tsx loader, whose hook worker alone is ~110 MiB
 * of RSS.
 */
async function bundledChild(): Promise<string> {
  await run(join(process.cwd(), 'scripts/build.sh'), ['--if-stale'], { timeout: 300_000 });
  const dir = join(process.cwd(), 'node_modules/.cache/berth/bench');
  await run(
    join(process.cwd(), 'node_modules/.bin/esbuild'),
    [
      CHILD,
      '--bundle',
      '--splitting',
      '--platform=node',
      '--format=esm',
      '--target=node20',
      '--packages=external',
      `--outdir=${dir}`,
      '--out-extension:.js=.mjs',
      '--log-level=error',
    ],
    { timeout: 120_000 },
  );
  return join(dir, 'memory-child.mjs');
}

/** The agent child: start it, call ListDevices from here, then let it measure. */
async function agentChild(sysfsRoot: string, dir: string): Promise<Measure> {
  bundle ??= bundledChild();
  const proc = spawn(process.execPath, ['--expose-gc', await bundle, 'agent', sysfsRoot, dir], {
    stdio: ['pipe', 'pipe', 'inherit'],
    env: { ...process.env, BERTH_DIST },
  });
  const lines = createInterface({ input: proc.stdout! });
  const it = lines[Symbol.asyncIterator]();
  const first = JSON.parse((await it.next()).value as string) as { address: string };
  const client = new AgentClient({ endpoint: first.address, timeoutMs: 120_000 });
  try {
    await client.agent.listDevices({});
  } finally {
    client.close();
  }
  proc.stdin!.write('measure\n');
  const result = JSON.parse((await it.next()).value as string) as Measure;
  proc.stdin!.end();
  await new Promise((r) => proc.once('exit', r));
  return result;
}

let bundle: Promise<string> | null = null;
const BERTH_DIST = join(process.cwd(), 'dist');

async function child(...args: string[]): Promise<Measure> {
  bundle ??= bundledChild();
  const { stdout } = await run(process.execPath, ['--expose-gc', await bundle, ...args], {
    env: { ...process.env, BERTH_DIST },
    timeout: 600_000,
    maxBuffer: 16 << 20,
  });
  const line = stdout.trim().split('\n').pop() ?? '';
  return JSON.parse(line) as Measure;
}

async function main() {
  const { quick } = parseArgs();
  const shm = existsSync('/dev/shm') ? '/dev/shm' : '/tmp';
  const bare = await child('bare');

  const hosts = quick ? 100 : 12_500;
  const sdir = await tempDir(shm, 'berth-bench-mem-sched-');
  try {
    const m = await child('scheduler', sdir.path, String(hosts));
    const limit = 300;
    emit({
      name: 'memory-scheduler',
      value: m.rss,
      baseline: limit,
      ratio: m.rss / limit,
      goal: `scheduler RSS after GC with ${hosts * 8} devices <= ${limit} MiB (peak reported)`,
      pass: m.rss <= limit,
      unit: 'MiB',
      peak_mib: round(m.peak, 1),
      peak_pass: m.peak <= limit,
      bare_node_rss_mib: round(bare.rss, 1),
      devices: m.devices,
      hosts: m.hosts,
      listed: m.listed,
      quick,
    });
  } finally {
    await sdir.cleanup();
  }

  const adir = await tempDir(shm, 'berth-bench-mem-agent-');
  try {
    const spec = quick ? largeHostSpec({ pfs: 4, vfsPerPf: 32, nvme: 16 }) : largeHostSpec();
    const sysfsRoot = join(adir.path, 'sys');
    await buildSysfs(sysfsRoot, spec);
    const m = await agentChild(sysfsRoot, adir.path);
    const limit = 100;
    emit({
      name: 'memory-agent',
      value: m.rss,
      baseline: limit,
      ratio: m.rss / limit,
      goal: `agent RSS after GC with the large host discovered and served <= ${limit} MiB (peak reported)`,
      pass: m.rss <= limit,
      unit: 'MiB',
      peak_mib: round(m.peak, 1),
      peak_pass: m.peak <= limit,
      bare_node_rss_mib: round(bare.rss, 1),
      devices: m.devices,
      note: 'pci driver only (NVMe functions offered as PCI functions, no nvme-cli); process runs with plain node on dist/, as the installed package does',
      quick,
    });
  } finally {
    await adir.cleanup();
  }
}

await main();
