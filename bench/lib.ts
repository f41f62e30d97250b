/**
 * Shared helpers for the benchmarks: argument parsing, the one-line JSON
 * result every benchmark prints, order statistics and small timing tools.
 *
 * Every benchmark measures its own baseline in the same run and reports a
 * ratio, because the machines these run on are shared and noisy: an absolute
 * figure from a busy CI box means little, a ratio against the same box at the
 * same moment means something.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

export interface BenchArgs {
  /** Tiny sizes for CI smoke runs. */
  quick: boolean;
}

export function parseArgs(argv = process.argv.slice(2)): BenchArgs {
  return { quick: argv.includes('--quick') };
}

/** One benchmark's figures, printed as a single JSON line on stdout. */
export interface BenchResult {
  name: string;
  value: number;
  baseline: number;
  /** value / baseline, so the goal reads the same whatever the machine. */
  ratio: number;
  /** Human-readable goal, e.g. "ratio <= 1.0". */
  goal: string;
  pass: boolean;
  unit: string;
  [detail: string]: unknown;
}

/** The 1, 5 and 15 minute load averages now, rounded. */
export function loadNow(): number[] {
  return loadavg().map((l) => round(l, 2));
}

/** The load when this benchmark process started: a figure's start unless it says otherwise. */
const LOAD_AT_PROCESS_START = loadNow();

/**
 * Prints one figure. `loadavg_start` is the load average when the figure's
 * measurement began (a benchmark that measures several figures one after the
 * other passes each its own, from loadNow()); without it, the load when the
 * benchmark process started. `loadavg` is the load at the end. run.ts flags a
 * figure whose start was above the machine's core count.
 */
export function emit(result: BenchResult & { loadavg_start?: number[] }): void {
  const out = {
    ...result,
    ratio: round(result.ratio, 3),
    value: round(result.value, 3),
    baseline: round(result.baseline, 3),
    loadavg_start: result.loadavg_start ?? LOAD_AT_PROCESS_START,
    loadavg: loadNow(),
  };
  process.stdout.write(`${JSON.stringify(out)}\n`);
}

export function round(n: number, digits = 2): number {
  if (!Number.isFinite(n)) return n;
  const f = 10 ** digits;
  return Math.round(n * f) / f;
}

/** Sorted copy; the order statistics below take sorted input. */
export const sorted = (xs: readonly number[]): number[] => [...xs].sort((a, b) => a - b);

/** Nearest-rank percentile of sorted values (p in 0..100). */
export function percentile(sortedValues: readonly number[], p: number): number {
  if (sortedValues.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sortedValues.length);
  return sortedValues[Math.min(sortedValues.length - 1, Math.max(0, rank - 1))]!;
}

export const median = (xs: readonly number[]): number => percentile(sorted(xs), 50);

/** Milliseconds since an arbitrary origin, sub-millisecond resolution. */
export const nowMs = (): number => performance.now();

/** CLOCK_MONOTONIC in ms (process.hrtime): the same clock in every process of the host. */
export const monoMs = (): number => Number(process.hrtime.bigint()) / 1e6;

/** Runs `fn`, returns its duration in ms and its value. */
export async function timed<T>(fn: () => Promise<T>): Promise<{ ms: number; value: T }> {
  const t0 = nowMs();
  const value = await fn();
  return { ms: nowMs() - t0, value };
}

/** A temporary directory under `base` (e.g. /dev/shm for speed, /var/tmp for a real disk). */
export async function tempDir(
  base: string,
  prefix: string,
): Promise<{ path: string; cleanup(): Promise<void> }> {
  const path = await mkdtemp(join(base, prefix));
  return { path, cleanup: () => rm(path, { recursive: true, force: true }) };
}

/**
 * Runs `tasks` with at most `concurrency` in flight, each worker looping until
 * `deadline` (ms, nowMs clock) or until `maxIterations` in total have started.
 * Both bounds hold so a stuck server cannot keep the benchmark running.
 */
export async function runWorkers(
  concurrency: number,
  opts: { deadline: number; maxIterations: number },
  task: (worker: number, iteration: number) => Promise<void>,
): Promise<number> {
  let started = 0;
  const worker = async (w: number) => {
    while (nowMs() < opts.deadline && started < opts.maxIterations) {
      const i = started++;
      await task(w, i);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, (_, w) => worker(w)));
  return started;
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Clock ticks per second of /proc/PID/stat's times (USER_HZ). */
const TICK = 100;

/** Fields of /proc/PID/stat after the command's closing parenthesis (field 3 is index 0), or null once it ended. */
function statFields(pid: number | string): string[] | null {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  } catch {
    return null;
  }
}

/** A process's CPU time (utime + stime), in seconds; 0 once it ended. */
function processCpu(pid: number): number {
  const f = statFields(pid);
  return f ? (Number(f[11]) + Number(f[12])) / TICK : 0;
}

/** CPU of one PostgreSQL server: the postmaster and its children (ended backends count in its cutime). */
function postgresCpu(postmaster: number): number {
  let total = 0;
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    const f = statFields(d);
    if (!f || (Number(d) !== postmaster && Number(f[1]) !== postmaster)) continue;
    total += (Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) / TICK;
  }
  return total;
}

/** The postmaster serving `url`: the parent of a backend. */
export async function postmasterOf(url: string): Promise<number> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const pid = (await c.query<{ p: number }>('SELECT pg_backend_pid() AS p')).rows[0]!.p;
    return Number(statFields(pid)?.[1] ?? 0);
  } finally {
    await c.end();
  }
}

/** CPU seconds used since a meter started: the schedulers, the PostgreSQL server (0 without one), this process (the clients). */
export interface CpuUsed {
  schedulers: number;
  postgres: number;
  clients: number;
}

/**
 * Starts counting the CPU of the scheduler processes `pids`, of the PostgreSQL
 * server whose postmaster is `postmaster` (null: none) and of this process;
 * the function returned reads what each used since.
 */
export function cpuMeter(pids: readonly number[], postmaster: number | null): () => CpuUsed {
  const schedulers = () => pids.reduce((n, pid) => n + processCpu(pid), 0);
  const server = () => (postmaster === null ? 0 : postgresCpu(postmaster));
  const s0 = schedulers();
  const p0 = server();
  const c0 = process.cpuUsage();
  return () => {
    const c = process.cpuUsage(c0);
    return { schedulers: schedulers() - s0, postgres: server() - p0, clients: (c.user + c.system) / 1e6 };
  };
}
