/**
 * discovery: Berth's full PCI discovery + device_spec match on a large
 * simulated host against two baselines read from the same tree in the same run.
 *
 * Host: largeHostSpec({pfs:16, vfsPerPf:256, nvme:256}) built under /dev/shm
 * (4,368 functions). Berth: PciDriver.discover through PluginHost (the path the
 * agent runs: read every function, match 20 device_spec entries, IOMMU group
 * checks, sort), in a process of its own (bench/discovery-child.ts), as lspci
 * runs in its own: the pass is timed there, so nothing this harness allocates
 * is collected on Berth's time. Only the pci driver is enabled, so no `nvme
 * id-ctrl` runs — the NVMe functions are read and matched as plain PCI functions.
 *
 * Baselines:
 * - the floor (bench/sysfs-floor.ts): one process doing exactly the sysfs
 *   operations Berth's discovery does, in the same order — the list recorded
 *   from Berth's own reader at run time, replayed by a C program built here
 *   (or `cat` without a compiler). Reported: issue 33 retired its goal
 *   (berth / floor <= 1.5), since Node's own per-call cost is most of the gap.
 * - `lspci -D -n -A linux-sysfs -O sysfs.path=<root>/bus/pci`, which also reads
 *   every function's config space. Goal: berth / lspci <= 1.0.
 * The three sides run interleaved, the order rotating each round; medians.
 */
import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { pino } from 'pino';
import { ExecRunner } from '../src/plugins/exec-runner.js';
import { parseAgentConfig } from '../src/server/agent/config.js';
import { PluginHost } from '../src/server/agent/plugin-host.js';
import { buildSysfs, largeHostSpec } from '../src/sim/sysfs/index.js';
import { DEVICE_SPEC } from './discovery-spec.js';
import { emit, loadNow, median, nowMs, parseArgs, tempDir, timed } from './lib.js';
import { buildFloor, recordSysfsOps, replayInNode } from './sysfs-floor.js';

const run = promisify(execFile);

/** Discoveries after the recorded one before timing starts. */
const WARM_UPS = 3;

/** Berth's discovery in its own process (bench/discovery-child.ts), one pass per request. */
async function discoveryChild(configFile: string) {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', fileURLToPath(new URL('./discovery-child.ts', import.meta.url)), configFile],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
  const next = async () => {
    const r = await lines.next();
    if (r.done) throw new Error('the discovery child exited');
    return JSON.parse(r.value as string) as Record<string, number>;
  };
  await next();
  return {
    async discover() {
      const t0 = nowMs();
      child.stdin!.write('discover\n');
      const r = await next();
      return { ms: r.ms!, devices: r.devices!, excluded: r.excluded!, roundTripMs: nowMs() - t0 };
    },
    async close() {
      child.stdin!.end();
      await new Promise((resolve) => child.once('exit', resolve));
    },
  };
}

async function main() {
  const { quick } = parseArgs();
  const spec = quick ? largeHostSpec({ pfs: 4, vfsPerPf: 32, nvme: 16 }) : largeHostSpec();
  const runs = quick ? 3 : 9;
  const base = existsSync('/dev/shm') ? '/dev/shm' : '/tmp';
  const dir = await tempDir(base, 'berth-bench-discovery-');
  try {
    const sysfsRoot = join(dir.path, 'sys');
    const build = await timed(() => buildSysfs(sysfsRoot, spec));
    const doc = {
      host: 'bench-host',
      listen: '127.0.0.1:0',
      sysfs_root: sysfsRoot,
      dev_root: join(dir.path, 'dev'),
      state_dir: join(dir.path, 'state'),
      enabled_drivers: ['pci'],
      pci: { device_spec: DEVICE_SPEC },
    };
    const config = parseAgentConfig(doc, {}, dir.path);
    const configFile = join(dir.path, 'agent.json');
    await writeFile(configFile, JSON.stringify(doc));
    const host = await PluginHost.load(config, {
      sysfsRoot,
      devRoot: config.devRoot,
      stateDir: config.stateDir,
      hostname: config.host,
      runner: new ExecRunner(),
      logger: pino({ level: 'silent' }),
    });
    const lspciArgs = ['-D', '-n', '-A', 'linux-sysfs', '-O', `sysfs.path=${sysfsRoot}/bus/pci`];
    let lspciAvailable = true;
    try {
      await run('lspci', ['--version']);
    } catch {
      lspciAvailable = false;
    }
    // One warm-up of each side (JIT, dentry cache), not counted; Berth's warm-up
    // is recorded: the floor replays exactly its sysfs operations.
    const recorded = await recordSysfsOps(sysfsRoot, () => timed(() => host.discover({ strict: true })));
    const first = recorded.value;
    const floor = await buildFloor(dir.path, recorded.ops);
    const floorDid = (await floor.run()).did;
    let lspciLines = 0;
    if (lspciAvailable) {
      const out = await run('lspci', lspciArgs, { maxBuffer: 64 << 20 });
      lspciLines = out.stdout.split('\n').filter(Boolean).length;
    }
    // Berth's own process: its first pass is cold (reported as
    // first_discovery_ms), then WARM_UPS more, untimed: its first passes still
    // compile and size the young generation (20-30 ms slower), which an agent
    // that rediscovers every interval has long done.
    const child = await discoveryChild(configFile);
    const cold = await child.discover();
    for (let i = 0; i < WARM_UPS; i++) await child.discover();
    const roundTripMs: number[] = [];
    const berthMs: number[] = [];
    const floorMs: number[] = [];
    const floorProcessMs: number[] = [];
    const nodeReplayMs: number[] = [];
    const lspciMs: number[] = [];
    let devices = first.value.devices.length;
    let excluded = first.value.excluded.length;
    const sides = ['berth', 'floor', 'lspci'] as const;
    const loadStart = loadNow();
    const deadline = nowMs() + (quick ? 15_000 : 180_000);
    for (let i = 0; i < runs && nowMs() < deadline; i++) {
      // Rotate which side goes first so drift in machine load hits all three.
      for (let k = 0; k < sides.length; k++) {
        const side = sides[(i + k) % sides.length];
        if (side === 'berth') {
          const r = await child.discover();
          berthMs.push(r.ms);
          roundTripMs.push(r.roundTripMs);
          devices = r.devices;
          excluded = r.excluded;
        } else if (side === 'floor') {
          const r = await floor.run();
          floorMs.push(r.ms);
          floorProcessMs.push(r.processMs);
          nodeReplayMs.push(replayInNode(recorded.ops));
        } else if (lspciAvailable) {
          const r = await timed(() => run('lspci', lspciArgs, { maxBuffer: 64 << 20 }));
          lspciMs.push(r.ms);
        }
      }
    }
    await child.close();
    const value = median(berthMs);
    const floorMedian = median(floorMs);
    const lspciMedian = lspciAvailable ? median(lspciMs) : Number.NaN;
    const ratio = value / floorMedian;
    const lspciRatio = value / lspciMedian;
    const counts: Record<string, number> = {};
    for (const [op] of recorded.ops) counts[op] = (counts[op] ?? 0) + 1;
    const common = {
      unit: 'ms',
      functions: lspciLines,
      devices,
      excluded,
      device_spec_entries: DEVICE_SPEC.length,
      runs: berthMs.length,
      berth_ms: berthMs.map((x) => Math.round(x)),
      // Each pass as this harness saw it: the child's pass plus a line each way.
      berth_round_trip_ms: Math.round(median(roundTripMs) * 10) / 10,
      berth_process: 'its own (bench/discovery-child.ts), as lspci',
      loadavg_start: loadStart,
      sysfs_base: base,
      quick,
    };
    emit({
      name: 'discovery',
      value,
      baseline: floorMedian,
      ratio,
      // Issue 33 retired this goal (<= 1.5): Node's own per-call cost over the C floor is most of
      // the gap (node_replay_ratio below). Reported beside discovery_lspci, which is judged.
      goal: 'reported: median berth discovery / median raw-read floor (issue 33 retired <= 1.5)',
      pass: true,
      ...common,
      floor: floor.kind,
      floor_ms: floorMs.map((x) => Math.round(x * 10) / 10),
      // The same floor timed as a whole process (start, list parsing, exit), as lspci is.
      floor_process_ms: Math.round(median(floorProcessMs) * 10) / 10,
      // The same list replayed by bare node:fs calls here: Node's share, no Berth work.
      node_replay_ms: Math.round(median(nodeReplayMs) * 10) / 10,
      node_replay_ratio: Math.round((median(nodeReplayMs) / floorMedian) * 1000) / 1000,
      ratio_to_floor_process: Math.round((value / median(floorProcessMs)) * 1000) / 1000,
      floor_ops: recorded.ops.length,
      floor_ops_by_kind: {
        read: counts.r ?? 0,
        readlink: counts.l ?? 0,
        readdir: counts.d ?? 0,
        first_entry: counts.e ?? 0,
        exists: counts.s ?? 0,
        realpath: counts.p ?? 0,
      },
      floor_did: floorDid,
      first_discovery_ms: Math.round(cold.ms),
      first_discovery_in_bench_ms: Math.round(first.ms),
      sysfs_build_ms: Math.round(build.ms),
      note: `floor: ${floor.note}; pci driver only: NVMe functions matched as PCI functions, no nvme id-ctrl`,
    });
    emit({
      name: 'discovery_lspci',
      value,
      baseline: lspciMedian,
      ratio: lspciRatio,
      goal: 'median berth discovery / median lspci <= 1.0',
      pass: lspciRatio <= 1.0,
      ...common,
      lspci_ms: lspciMs.map((x) => Math.round(x)),
      note: lspciAvailable
        ? "lspci also reads every function's config space"
        : 'lspci not found, no baseline',
    });
  } finally {
    await dir.cleanup();
  }
}

await main();
