/**
 * bind: BindAcceleratorRequests over gRPC against a scheduler whose durable
 * SQLite store (WAL, synchronous FULL, a file on a real disk) holds 10,000
 * hosts × 8 devices, from 64 concurrent clients on loopback; binds spread
 * round-robin over all hosts.
 *
 * What is timed: the bind phase alone — each round creates its ARQs first and
 * deletes them after, untimed, so the figure is one RPC and one durable
 * transaction per bind. Create + bind + delete cycles are reported on their
 * own line (`bind_cycle`), informational.
 *
 * Baseline: an empty unary RPC on the SAME scheduler grpc.Server (registered
 * through the extraServices seam, so it passes the same interceptors: metrics,
 * auth with the same token, the malformed-request guard), through the SDK's
 * own promise wrapper on the same connection, same concurrency. Baseline
 * segments and bind rounds alternate so drifting machine load hits both.
 *
 * Goals: bind throughput ≥ 0.25 × empty-RPC throughput; bind p99 ≤ 5 × empty
 * p99; zero double allocations (seen by clients within a round, and checked by
 * racing more binds than devices on a few hosts at the end and counting ARQs
 * per device in the database).
 */
import { existsSync } from 'node:fs';
import {
  type BindPhaseStats,
  bindLoop,
  bindRound,
  dbFile,
  EMPTY_PATH,
  emptyClient,
  emptyOnScheduler,
  emptySamples,
  emptySegment,
  journalMode,
  loadStore,
  raceAndCount,
  startScheduler,
  summarize,
  synchronousMode,
} from './bind-harness.js';
import { emit, parseArgs, round, tempDir } from './lib.js';

async function main() {
  const { quick } = parseArgs();
  const hosts = quick ? 50 : 10_000;
  const concurrency = 64;
  // Timed seconds of binds, and of the baseline, in `rounds` alternating segments.
  const bindSeconds = quick ? 2 : 20;
  const emptySeconds = quick ? 1 : 10;
  const rounds = quick ? 2 : 4;
  // Two binds per host per round at most: 8 devices each, nothing deleted within a round.
  const roundSize = hosts * 2;
  const cycleSeconds = quick ? 1 : 10;
  // A real disk, not tmpfs: fsync must cost what it costs.
  const base = existsSync('/var/tmp') ? '/var/tmp' : '/tmp';
  const dir = await tempDir(base, 'berth-bench-bind-');
  try {
    const dbPath = dbFile(dir.path);
    const { store, loadMs } = await loadStore(dbPath, hosts);
    const sync = synchronousMode(store);
    const journal = journalMode(store);
    const { scheduler, client, token } = await startScheduler(store, { extraServices: emptyOnScheduler });
    const empty = emptyClient(scheduler.address, token);
    const binds: BindPhaseStats = {
      samples: emptySamples(),
      errors: 0,
      firstError: '',
      doubleAllocationsSeen: 0,
      rounds: 0,
      createSeconds: 0,
      deleteSeconds: 0,
    };
    const baselineSamples = emptySamples();
    let cycles: Awaited<ReturnType<typeof bindLoop>>;
    let race: Awaited<ReturnType<typeof raceAndCount>>;
    try {
      // Warm-up of both paths (JIT, statement cache, connection), not counted.
      await bindLoop(client, hosts, {
        concurrency,
        seconds: 0,
        maxCycles: 0,
        warmupCycles: quick ? 16 : 512,
      });
      await emptySegment(empty.call, emptySamples(), {
        concurrency,
        seconds: quick ? 0.2 : 2,
        maxCalls: 5_000,
      });
      for (let r = 0; r < rounds; r++) {
        await emptySegment(empty.call, baselineSamples, {
          concurrency,
          seconds: emptySeconds / rounds,
          maxCalls: 5_000_000,
        });
        // A round that runs out of ARQs early leaves its time to the next ones.
        await bindRound(client, hosts, binds, {
          concurrency,
          size: roundSize,
          maxSeconds: (bindSeconds - binds.samples.seconds) / (rounds - r),
        });
      }
      cycles = await bindLoop(client, hosts, {
        concurrency,
        seconds: cycleSeconds,
        maxCycles: 1_000_000,
        warmupCycles: 0,
      });
      race = await raceAndCount(client, dbPath, { concurrency, hosts });
    } finally {
      empty.close();
      client.close();
      await scheduler.stop();
    }
    const stats = summarize(binds.samples);
    const baseline = summarize(baselineSamples);
    const ratio = stats.throughput / baseline.throughput;
    const p99Ratio = stats.p99 / baseline.p99;
    const doubles =
      race.devicesWithTwoArqs +
      binds.doubleAllocationsSeen +
      cycles.doubleAllocationsSeen +
      race.allocatedWithoutArq;
    const errors = binds.errors + cycles.errors;
    const db = `${base} (${journal}, synchronous=${sync === 2 ? 'FULL' : sync})`;
    emit({
      name: 'bind',
      value: stats.throughput,
      baseline: baseline.throughput,
      ratio,
      goal: 'bind throughput >= 0.25 x empty RPC; bind p99 <= 5 x empty p99; 0 double allocations',
      pass: ratio >= 0.25 && p99Ratio <= 5 && doubles === 0 && errors === 0,
      unit: 'binds/s',
      throughput_pass: ratio >= 0.25,
      p99_ms: round(stats.p99),
      baseline_p99_ms: round(baseline.p99),
      p99_ratio: round(p99Ratio),
      p99_pass: p99Ratio <= 5,
      p50_ms: round(stats.p50),
      baseline_p50_ms: round(baseline.p50),
      binds: stats.calls,
      baseline_calls: baseline.calls,
      bind_seconds: round(binds.samples.seconds, 1),
      baseline_seconds: round(baselineSamples.seconds, 1),
      rounds: binds.rounds,
      untimed_create_s: round(binds.createSeconds, 1),
      untimed_delete_s: round(binds.deleteSeconds, 1),
      errors,
      first_error: binds.firstError || cycles.firstError,
      double_allocations: doubles,
      race,
      hosts,
      devices: hosts * 8,
      concurrency,
      db,
      load_ms: Math.round(loadMs),
      baseline_method: `${EMPTY_PATH} served empty on the scheduler's own grpc.Server (same interceptors, auth), SDK client`,
      note: 'only BindAcceleratorRequests calls are timed: ARQs created before each round and deleted after it, untimed',
      quick,
    });
    // The cycle a client actually runs, informational: 3 RPCs, 3 durable transactions.
    emit({
      name: 'bind_cycle',
      value: cycles.throughput,
      baseline: baseline.throughput,
      ratio: cycles.throughput / baseline.throughput,
      goal: 'informational (each cycle is 3 RPCs: create, bind, delete)',
      pass: cycles.errors === 0 && cycles.doubleAllocationsSeen === 0,
      unit: 'cycles/s',
      cycle_p50_ms: round(cycles.cycleP50),
      cycle_p99_ms: round(cycles.cycleP99),
      bind_p99_in_cycle_ms: round(cycles.p99),
      cycles: cycles.cycles,
      seconds: round(cycles.seconds, 1),
      errors: cycles.errors,
      hosts,
      concurrency,
      db,
      quick,
    });
  } finally {
    await dir.cleanup();
  }
}

await main();
