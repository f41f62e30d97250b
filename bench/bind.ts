/**
 * bind: create + bind + delete of accelerator requests over gRPC against a
 * scheduler whose durable SQLite store (WAL, synchronous FULL, a file on a
 * real disk) holds 10,000 hosts × 8 devices, from 64 concurrent clients on
 * loopback; binds spread round-robin over all hosts.
 *
 * Baseline: an empty unary RPC on a grpc-js server with the same server
 * options, same process layout (server and clients in this process), same
 * concurrency.
 * Goals: bind throughput ≥ 0.25 × empty-RPC throughput; bind p99 ≤ 5 × empty
 * p99; zero double allocations (checked by racing more binds than devices on
 * a few hosts at the end and counting ARQs per device in the database).
 */
import { existsSync } from 'node:fs';
import {
  bindLoop,
  dbFile,
  emptyLoop,
  journalMode,
  loadStore,
  raceAndCount,
  startEmptyServer,
  startScheduler,
  synchronousMode,
} from './bind-harness.js';
import { emit, parseArgs, tempDir } from './lib.js';

async function main() {
  const { quick } = parseArgs();
  const hosts = quick ? 50 : 10_000;
  const concurrency = 64;
  const seconds = quick ? 2 : 20;
  // A real disk, not tmpfs: fsync must cost what it costs.
  const base = existsSync('/var/tmp') ? '/var/tmp' : '/tmp';
  const dir = await tempDir(base, 'berth-bench-bind-');
  try {
    const dbPath = dbFile(dir.path);
    const { store, loadMs } = await loadStore(dbPath, hosts);
    const sync = synchronousMode(store);
    const journal = journalMode(store);
    const { scheduler, client } = await startScheduler(store);
    let stats: Awaited<ReturnType<typeof bindLoop>>;
    let race: Awaited<ReturnType<typeof raceAndCount>>;
    try {
      stats = await bindLoop(client, hosts, {
        concurrency,
        seconds,
        maxCycles: 1_000_000,
        warmupCycles: quick ? 16 : 512,
      });
      race = await raceAndCount(client, dbPath, { concurrency, hosts });
    } finally {
      client.close();
      await scheduler.stop();
    }
    const empty = await startEmptyServer();
    let baseline: Awaited<ReturnType<typeof emptyLoop>>;
    try {
      baseline = await emptyLoop(empty.call, { concurrency, seconds: quick ? 1 : 10, maxCalls: 5_000_000 });
    } finally {
      await empty.stop();
    }
    const ratio = stats.throughput / baseline.throughput;
    const p99Ratio = stats.p99 / baseline.p99;
    const doubles = race.devicesWithTwoArqs + stats.doubleAllocationsSeen + race.allocatedWithoutArq;
    emit({
      name: 'bind',
      value: stats.throughput,
      baseline: baseline.throughput,
      ratio,
      goal: 'bind throughput >= 0.25 x empty RPC; bind p99 <= 5 x empty p99; 0 double allocations',
      pass: ratio >= 0.25 && p99Ratio <= 5 && doubles === 0 && stats.errors === 0,
      unit: 'binds/s',
      throughput_pass: ratio >= 0.25,
      p99_ms: stats.p99,
      baseline_p99_ms: baseline.p99,
      p99_ratio: Math.round(p99Ratio * 100) / 100,
      p99_pass: p99Ratio <= 5,
      p50_ms: stats.p50,
      baseline_p50_ms: baseline.p50,
      cycle_p50_ms: stats.cycleP50,
      cycle_p99_ms: stats.cycleP99,
      cycles: stats.cycles,
      errors: stats.errors,
      first_error: stats.firstError,
      double_allocations: doubles,
      race,
      hosts,
      devices: hosts * 8,
      concurrency,
      seconds: Math.round(stats.seconds * 10) / 10,
      db: `${base} (${journal}, synchronous=${sync === 2 ? 'FULL' : sync})`,
      load_ms: Math.round(loadMs),
      note: 'throughput counts BindAcceleratorRequests calls; each cycle is 3 RPCs (create, bind, delete), 3 durable transactions',
      quick,
    });
  } finally {
    await dir.cleanup();
  }
}

await main();
