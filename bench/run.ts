/**
 * Runs every benchmark, each in its own child process (so memory figures and
 * crashes stay per benchmark), and prints their JSON lines on stdout plus a
 * summary table on stderr. `--quick` passes through (tiny sizes, CI smoke).
 * `--only a,b` runs a subset. `--out FILE` also writes the results as a JSON
 * array with the machine description. Exits non-zero only when a benchmark
 * crashed or printed no result: a missed goal is reported, not hidden, and
 * not a failure of the run.
 */
import { execFileSync, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from './lib.js';

export const BENCHMARKS = [
  'discovery',
  'bind',
  'scale',
  'watch',
  'zeroing',
  'memory',
  'retention',
  'replicas',
  'statements',
  'fleet',
  'hotplug',
] as const;
/** Per-benchmark wall-clock limit; a hung benchmark is killed and counted as a crash. */
const LIMIT_MS = { quick: 60_000, full: 15 * 60_000 };
/**
 * Longer limits (full runs): fleet loads and serves 1M devices on two backends; replicas
 * measures five PostgreSQL configurations of ~80 s each besides SQLite's (decision 98).
 */
const LONGER_MS: Record<string, number> = { fleet: 45 * 60_000, replicas: 25 * 60_000 };
/**
 * Longer limits (quick runs): replicas starts PostgreSQL and eight scheduler
 * processes, which took 145–158 s at load 16 (2026-11-28): its CPU figures
 * (issue 42) must still reach their end. fleet starts two scheduler processes
 * a size (one with Placement), six sizes.
 */
const QUICK_LONGER_MS: Record<string, number> = { replicas: 4 * 60_000, fleet: 4 * 60_000 };

function machine() {
  let nproc = String(cpus().length);
  try {
    nproc = execFileSync('nproc', { encoding: 'utf8' }).trim();
  } catch {}
  return {
    nproc: Number(nproc),
    cpu: cpus()[0]?.model ?? 'unknown',
    memory_gib: Math.round((totalmem() / 2 ** 30) * 10) / 10,
    node: process.version,
    loadavg_start: loadavg().map((l) => Math.round(l * 100) / 100),
  };
}

function runOne(
  name: string,
  quick: boolean,
): Promise<{ lines: object[]; code: number | null; ms: number; stderr: string }> {
  const file = fileURLToPath(new URL(`./${name}.ts`, import.meta.url));
  const t0 = Date.now();
  return new Promise((resolve) => {
    const child = spawn(
      process.execPath,
      ['--expose-gc', '--import', 'tsx', file, ...(quick ? ['--quick'] : [])],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let out = '';
    let err = '';
    child.stdout.on('data', (c: Buffer) => {
      out += c;
    });
    child.stderr.on('data', (c: Buffer) => {
      err += c;
    });
    const timer = setTimeout(
      () => child.kill('SIGKILL'),
      quick ? (QUICK_LONGER_MS[name] ?? LIMIT_MS.quick) : (LONGER_MS[name] ?? LIMIT_MS.full),
    );
    child.on('close', (code) => {
      clearTimeout(timer);
      const lines: object[] = [];
      for (const l of out.split('\n')) {
        if (!l.startsWith('{')) continue;
        try {
          lines.push(JSON.parse(l) as object);
        } catch {}
      }
      resolve({ lines, code, ms: Date.now() - t0, stderr: err.slice(-4000) });
    });
  });
}

/**
 * A figure's load average at its start (`loadavg_start`, 1 minute), flagged
 * LOADED when above the core count: the figure then shared the cores with
 * other work.
 */
function overloaded(r: Record<string, unknown>, nproc: number): { flag: boolean; text: string } {
  const start = Array.isArray(r.loadavg_start) ? Number(r.loadavg_start[0]) : Number.NaN;
  if (!Number.isFinite(start)) return { flag: false, text: '?' };
  const flag = start > nproc;
  return { flag, text: flag ? `${start} LOADED (> ${nproc} cores)` : String(start) };
}

async function main() {
  const argv = process.argv.slice(2);
  const { quick } = parseArgs(argv);
  const onlyArg = argv.indexOf('--only');
  const only = onlyArg >= 0 ? (argv[onlyArg + 1] ?? '').split(',') : null;
  const outArg = argv.indexOf('--out');
  const outFile = outArg >= 0 ? argv[outArg + 1] : undefined;
  const m = machine();
  process.stderr.write(`machine: ${JSON.stringify(m)}\n`);
  const results: Array<Record<string, unknown>> = [];
  let crashed = 0;
  for (const name of BENCHMARKS) {
    if (only && !only.includes(name)) continue;
    process.stderr.write(`running ${name}${quick ? ' (quick)' : ''}...\n`);
    const r = await runOne(name, quick);
    if (r.code !== 0 || r.lines.length === 0) {
      crashed++;
      process.stderr.write(`${name} CRASHED (exit ${r.code}, ${r.ms} ms):\n${r.stderr}\n`);
      results.push({ name, crashed: true, exit: r.code });
      continue;
    }
    for (const l of r.lines) {
      process.stdout.write(`${JSON.stringify(l)}\n`);
      const rec = { ...(l as Record<string, unknown>), wall_ms: r.ms };
      results.push({ ...rec, loaded: overloaded(rec, m.nproc).flag });
    }
  }
  process.stderr.write('\nname               value      baseline   ratio   pass  unit     load at start\n');
  let loaded = 0;
  for (const r of results) {
    if (r.crashed) {
      process.stderr.write(`${String(r.name).padEnd(18)} CRASHED\n`);
      continue;
    }
    const f = (x: unknown) => String(x).padEnd(10);
    const load = overloaded(r, m.nproc);
    if (load.flag) loaded++;
    process.stderr.write(
      `${String(r.name).padEnd(18)} ${f(r.value)} ${f(r.baseline)} ${String(r.ratio).padEnd(7)} ${String(r.pass).padEnd(5)} ${String(r.unit).padEnd(8)} ${load.text}\n`,
    );
    // pg_cpu_per_cycle's floor (bench/pg-floor.ts): what its round trips alone cost; SQLite's is 0.
    if (r.floor_ms_per_cycle !== undefined)
      process.stderr.write(
        `${''.padEnd(18)} floor ${r.floor_ms_per_cycle} ms/cycle (${r.round_trips_per_cycle} round trips × ${r.round_trip_cpu_us} µs; SQLite 0): ${r.floor_ratio} × the baseline\n`,
      );
  }
  // Curves (bench/fleet.ts): each figure of each size, so the shape shows whether cost grows with the fleet.
  const curves = new Set<string>();
  for (const r of results) {
    if (!Array.isArray(r.curve)) continue;
    const text = JSON.stringify(r.curve);
    if (curves.has(text)) continue;
    curves.add(text);
    const rows = r.curve as Array<Record<string, unknown>>;
    const cols = Object.keys(rows[0] ?? {}).filter((k) => k !== 'loadavg_start');
    process.stderr.write(`\n${String(r.name).replace(/-[a-z]+$/, '')} curve:\n`);
    process.stderr.write(`${cols.map((c) => c.padStart(Math.max(8, c.length))).join(' ')}\n`);
    for (const row of rows) {
      process.stderr.write(`${cols.map((c) => String(row[c]).padStart(Math.max(8, c.length))).join(' ')}\n`);
    }
  }
  if (loaded > 0) {
    process.stderr.write(
      `${loaded} figure(s) marked LOADED were measured with a 1-minute load average above the ${m.nproc} cores: other work shared the machine, read them with care\n`,
    );
  }
  const end = { ...m, loadavg_end: loadavg().map((l) => Math.round(l * 100) / 100) };
  process.stderr.write(`load average at the end: ${end.loadavg_end.join(' ')}\n`);
  if (outFile) writeFileSync(outFile, `${JSON.stringify({ machine: end, quick, results }, null, 2)}\n`);
  process.exitCode = crashed > 0 ? 1 : 0;
}

await main();
