/**
 * scale: the bind loop of bench/bind.ts (create + bind + delete, 64
 * concurrent clients, durable SQLite on a real disk) against a scheduler with
 * 100 hosts and against one with 10,000 hosts × 8 devices. Allocation reads
 * only one host's candidates through an index, so bind latency should not
 * grow with the fleet.
 * Goal: bind p50 at 10,000 hosts ≤ 1.2 × bind p50 at 100 hosts.
 */
import { existsSync } from 'node:fs';
import { bindLoop, dbFile, loadStore, startScheduler } from './bind-harness.js';
import { emit, parseArgs, round, tempDir } from './lib.js';

async function measure(hosts: number, base: string, seconds: number, quick: boolean) {
  const dir = await tempDir(base, `berth-bench-scale-${hosts}-`);
  try {
    const { store, loadMs } = await loadStore(dbFile(dir.path), hosts);
    const { scheduler, client } = await startScheduler(store);
    try {
      const stats = await bindLoop(client, hosts, {
        concurrency: 64,
        seconds,
        maxCycles: 1_000_000,
        warmupCycles: quick ? 16 : 512,
      });
      return { ...stats, loadMs };
    } finally {
      client.close();
      await scheduler.stop();
    }
  } finally {
    await dir.cleanup();
  }
}

async function main() {
  const { quick } = parseArgs();
  const small = quick ? 10 : 100;
  const large = quick ? 100 : 10_000;
  const seconds = quick ? 1 : 15;
  const base = existsSync('/var/tmp') ? '/var/tmp' : '/tmp';
  // Small first, then large, then small again: the baseline is the mean of
  // both small runs, so load that drifts during the run hits both sides.
  const a = await measure(small, base, seconds / 2, quick);
  const big = await measure(large, base, seconds, quick);
  const b = await measure(small, base, seconds / 2, quick);
  const baseline = (a.p50 + b.p50) / 2;
  const ratio = big.p50 / baseline;
  emit({
    name: 'scale',
    value: big.p50,
    baseline,
    ratio,
    goal: `bind p50 at ${large} hosts <= 1.2 x bind p50 at ${small} hosts`,
    pass: ratio <= 1.2 && big.errors === 0,
    unit: 'ms',
    hosts_small: small,
    hosts_large: large,
    p50_small_runs_ms: [round(a.p50), round(b.p50)],
    p99_small_ms: round(Math.max(a.p99, b.p99)),
    p99_large_ms: round(big.p99),
    throughput_small: round((a.throughput + b.throughput) / 2, 1),
    throughput_large: round(big.throughput, 1),
    cycles: a.cycles + big.cycles + b.cycles,
    errors: a.errors + big.errors + b.errors,
    first_error: a.firstError || big.firstError || b.firstError,
    load_large_ms: Math.round(big.loadMs),
    concurrency: 64,
    quick,
  });
}

await main();
