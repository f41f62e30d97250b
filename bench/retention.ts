/**
 * retention: the same bind storm (create + bind + delete over gRPC, 64
 * concurrent clients, durable SQLite on a real disk) twice in one run — once
 * with retention effectively off (the baseline) and once with a row cap and a
 * pass every second, as `berth scheduler serve --retention-rows` runs it.
 *
 * Goals: with retention the device event log ends at or under its cap after a
 * final pass (it grows without limit otherwise), and binds keep ≥ 0.9× the
 * throughput of the run without pruning (pruning works in small units).
 */
import { existsSync, statSync } from 'node:fs';
import Database from 'better-sqlite3';
import type { RetentionPolicy } from '../src/server/scheduler/domain/retention.js';
import { bindLoop, dbFile, loadStore, startScheduler } from './bind-harness.js';
import { emit, parseArgs, tempDir } from './lib.js';

const size = (path: string) => (existsSync(path) ? statSync(path).size : 0);

async function storm(
  base: string,
  hosts: number,
  seconds: number,
  retention: RetentionPolicy,
  intervalMs: number,
  quick: boolean,
) {
  const dir = await tempDir(base, 'berth-bench-retention-');
  try {
    const dbPath = dbFile(dir.path);
    const { store } = await loadStore(dbPath, hosts);
    const { scheduler, client } = await startScheduler(store, { retention, retentionIntervalMs: intervalMs });
    let stats: Awaited<ReturnType<typeof bindLoop>>;
    let peakEvents = 0;
    const rows = () => {
      const db = new Database(dbPath, { readonly: true });
      try {
        return (db.prepare('SELECT COUNT(*) AS n FROM device_events').get() as { n: number }).n;
      } finally {
        db.close();
      }
    };
    const sampler = setInterval(() => {
      peakEvents = Math.max(peakEvents, rows());
    }, 500);
    try {
      stats = await bindLoop(client, hosts, {
        concurrency: 64,
        seconds,
        maxCycles: 1_000_000,
        warmupCycles: quick ? 16 : 256,
      });
      clearInterval(sampler);
      await scheduler.pruner.pass();
    } finally {
      clearInterval(sampler);
      client.close();
    }
    const events = rows();
    const bytes = size(dbPath) + size(`${dbPath}-wal`);
    await scheduler.stop();
    return { stats, events, peakEvents: Math.max(peakEvents, events), bytes };
  } finally {
    await dir.cleanup();
  }
}

async function main() {
  const { quick } = parseArgs();
  const hosts = quick ? 20 : 200;
  const seconds = quick ? 3 : 20;
  const cap = quick ? 1_000 : 20_000;
  const base = existsSync('/var/tmp') ? '/var/tmp' : '/tmp';
  const off = await storm(
    base,
    hosts,
    seconds,
    { historyMs: 3_650 * 86_400_000, maxRows: 1_000_000_000, requestIdMs: 86_400_000 },
    3_600_000,
    quick,
  );
  const on = await storm(
    base,
    hosts,
    seconds,
    { historyMs: 7 * 86_400_000, maxRows: cap, requestIdMs: 86_400_000 },
    1_000,
    quick,
  );
  const ratio = on.stats.throughput / off.stats.throughput;
  const bounded = on.events <= cap;
  emit({
    name: 'retention',
    value: on.stats.throughput,
    baseline: off.stats.throughput,
    ratio,
    goal: 'with a row cap the event log ends <= the cap; bind throughput with pruning >= 0.9 x without',
    pass: bounded && ratio >= 0.9 && on.stats.errors === 0,
    unit: 'binds/s',
    cap,
    events_with_retention: on.events,
    peak_events_with_retention: on.peakEvents,
    events_without: off.events,
    db_bytes_with_retention: on.bytes,
    db_bytes_without: off.bytes,
    p99_ms_with_retention: on.stats.p99,
    p99_ms_without: off.stats.p99,
    errors: on.stats.errors + off.stats.errors,
    first_error: on.stats.firstError || off.stats.firstError,
    hosts,
    seconds,
    quick,
  });
}

await main();
