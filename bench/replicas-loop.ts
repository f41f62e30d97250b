/**
 * The loop bench/replicas.ts measures, shared with bench/pg-ceiling.ts: the
 * create → bind → delete loop of 64 clients over scheduler processes on one
 * database, with the CPU of the schedulers, of the PostgreSQL server and of
 * the clients read from /proc around it (warm-up excluded), and the
 * round trips the schedulers made to PostgreSQL meanwhile.
 */
import pg from 'pg';
import { SchedulerClient } from '../src/client/sdk.js';
import { openPgStore } from '../src/server/scheduler/stores.js';
import type { PostgresServer } from '../test/helpers/postgres.js';
import { type BerthProcess, schedulerProcess } from '../test/helpers/processes.js';
import { bindLoop, type LoopStats, loadFleet, loopStats } from './bind-harness.js';
import { type CpuUsed, cpuMeter, round } from './lib.js';
import type { RoundTripCounter } from './pg-floor.js';

export const CONCURRENCY = 64;

/** A loop's figures and the CPU its processes used while it ran (warm-up excluded). */
export interface Measured {
  stats: LoopStats;
  cpu: CpuUsed;
  /** The schedulers' round trips to the database in the same span (0 on SQLite). */
  roundTrips: number;
  /** On PostgreSQL, what the server's own upkeep did in the same span (null on SQLite). */
  upkeep: PgUpkeep | null;
}

/**
 * The PostgreSQL server's upkeep and the database's state, read from its
 * statistics views: what could land inside a short measured window and cost
 * the server CPU that is not the loop's (bench/README.md, "Three replicas,
 * judged fairly"). Counters are subtracted over a window; `dead_tuples` is a level.
 */
interface PgUpkeep {
  /** Autovacuum and autoanalyze passes finished (all tables). */
  autovacuums: number;
  autoanalyzes: number;
  /** Checkpoints finished, timed and requested; buffers they wrote. */
  checkpoints: number;
  checkpoint_buffers: number;
  /** Full-page images in WAL (many right after a checkpoint begins) and WAL megabytes written. */
  wal_fpi: number;
  wal_mb: number;
  /** Dead tuples in all tables (a level, at the window's start). */
  dead_tuples: number;
  /** A vacuum running at the window's end (not yet in `autovacuums`). */
  vacuum_running: number;
}

/** Reads the counters of PgUpkeep; `upkeepOver` subtracts two readings. */
async function pgUpkeep(url: string): Promise<PgUpkeep> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const r = await c.query<Record<keyof PgUpkeep, string>>(
      `SELECT (SELECT sum(autovacuum_count) FROM pg_stat_user_tables) AS autovacuums,
              (SELECT sum(autoanalyze_count) FROM pg_stat_user_tables) AS autoanalyzes,
              (SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter) AS checkpoints,
              (SELECT buffers_checkpoint FROM pg_stat_bgwriter) AS checkpoint_buffers,
              (SELECT wal_fpi FROM pg_stat_wal) AS wal_fpi,
              (SELECT wal_bytes / 1048576.0 FROM pg_stat_wal) AS wal_mb,
              (SELECT sum(n_dead_tup) FROM pg_stat_user_tables) AS dead_tuples,
              (SELECT count(*) FROM pg_stat_progress_vacuum) AS vacuum_running`,
    );
    const row = r.rows[0]!;
    return Object.fromEntries(Object.entries(row).map(([k, v]) => [k, Number(v)])) as unknown as PgUpkeep;
  } finally {
    await c.end();
  }
}

/**
 * VACUUM (ANALYZE) and CHECKPOINT: the tables without the dead tuples the loops before left, and
 * the checkpoint (with its full-page images after it) done before the window rather than
 * wherever the 5-minute timer puts it.
 */
async function settle(url: string): Promise<void> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query('VACUUM (ANALYZE)');
    await c.query('CHECKPOINT');
  } finally {
    await c.end();
  }
}

const upkeepOver = (a: PgUpkeep, b: PgUpkeep): PgUpkeep => ({
  autovacuums: b.autovacuums - a.autovacuums,
  autoanalyzes: b.autoanalyzes - a.autoanalyzes,
  checkpoints: b.checkpoints - a.checkpoints,
  checkpoint_buffers: b.checkpoint_buffers - a.checkpoint_buffers,
  wal_fpi: b.wal_fpi - a.wal_fpi,
  wal_mb: round(b.wal_mb - a.wal_mb, 1),
  dead_tuples: a.dead_tuples,
  vacuum_running: b.vacuum_running,
});

/**
 * The bind loop against `replicas`, CONCURRENCY workers split evenly over
 * them; merged stats, and the CPU of the schedulers, of the PostgreSQL server
 * whose postmaster is `postmaster` (null: SQLite) and of the clients from a
 * common warm-up's end to the loop's.
 */
export async function loopOver(
  replicas: Replicas,
  postmaster: number | null,
  hosts: number,
  seconds: number,
  quick: boolean,
  counter: RoundTripCounter,
  warmSeconds = 0,
): Promise<Measured> {
  const clients = replicas.endpoints.map(
    (endpoint) => new SchedulerClient({ endpoint, timeoutMs: 30_000, retries: 1 }),
  );
  const share = (i: number) =>
    Math.floor(CONCURRENCY / clients.length) + (i < CONCURRENCY % clients.length ? 1 : 0);
  try {
    await Promise.all(
      clients.map((client, i) =>
        bindLoop(client, hosts, {
          concurrency: share(i),
          seconds: 0,
          maxCycles: 0,
          warmupCycles: quick ? 16 : 256,
        }),
      ),
    );
    // Then, for the CPU figures, every scheduler runs until its code and heap are warm: one
    // replica of three gets a third of the cycles, and its CPU per cycle was still falling
    // 80 s after its start where one replica's was flat (bench/README.md, "stop 47").
    if (warmSeconds > 0) {
      await Promise.all(
        clients.map((client, i) =>
          bindLoop(client, hosts, {
            concurrency: share(i),
            seconds: warmSeconds,
            maxCycles: 1_000_000,
            warmupCycles: 0,
          }),
        ),
      );
    }
    // The same database state before every measured window (PostgreSQL): no dead tuples left
    // by the loops before, no checkpoint under way (bench/README.md, "Three replicas, judged fairly").
    if (postmaster !== null) await settle(replicas.db);
    const upkeep0 = postmaster !== null ? await pgUpkeep(replicas.db) : null;
    const trips0 = await counter.read(replicas.pids);
    const cpuUsed = cpuMeter(replicas.pids, postmaster);
    const parts = await Promise.all(
      clients.map((client, i) =>
        bindLoop(client, hosts, { concurrency: share(i), seconds, maxCycles: 1_000_000, warmupCycles: 0 }),
      ),
    );
    const cpu = cpuUsed();
    const roundTrips = (await counter.read(replicas.pids)) - trips0;
    const upkeep = upkeep0 ? upkeepOver(upkeep0, await pgUpkeep(replicas.db)) : null;
    const stats = loopStats({
      bindMs: parts.flatMap((p) => p.bindMs),
      cycleMs: parts.flatMap((p) => p.cycleMs),
      seconds: Math.max(...parts.map((p) => p.seconds)),
      errors: parts.reduce((n, p) => n + p.errors, 0),
      firstError: parts.find((p) => p.firstError)?.firstError ?? '',
      doubles: parts.reduce((n, p) => n + p.doubleAllocationsSeen, 0),
    });
    return { stats, cpu, roundTrips, upkeep };
  } finally {
    for (const c of clients) c.close();
  }
}

/**
 * Several measured windows of one configuration as one: their cycles, latencies, CPU and round
 * trips together (each window's upkeep stays with it, in its own cpuDetail).
 */
export function pooled(windows: readonly Measured[]): Measured {
  const stats = loopStats({
    bindMs: windows.flatMap((m) => m.stats.bindMs),
    cycleMs: windows.flatMap((m) => m.stats.cycleMs),
    seconds: windows.reduce((n, m) => n + m.stats.seconds, 0),
    errors: windows.reduce((n, m) => n + m.stats.errors, 0),
    firstError: windows.find((m) => m.stats.firstError)?.stats.firstError ?? '',
    doubles: windows.reduce((n, m) => n + m.stats.doubleAllocationsSeen, 0),
  });
  const sum = (k: keyof CpuUsed) => windows.reduce((n, m) => n + m.cpu[k], 0);
  return {
    stats,
    cpu: { schedulers: sum('schedulers'), postgres: sum('postgres'), clients: sum('clients') },
    roundTrips: windows.reduce((n, m) => n + m.roundTrips, 0),
    upkeep: null,
  };
}

/** CPU ms per completed cycle: each process group's, and `total` (schedulers + PostgreSQL server). */
export function perCycle(m: Measured): {
  schedulers: number;
  postgres: number;
  clients: number;
  total: number;
} {
  const ms = (s: number) => (s * 1000) / Math.max(1, m.stats.cycles);
  return {
    schedulers: ms(m.cpu.schedulers),
    postgres: ms(m.cpu.postgres),
    clients: ms(m.cpu.clients),
    total: ms(m.cpu.schedulers + m.cpu.postgres),
  };
}

export const cpuDetail = (m: Measured, replicas: number) => {
  const c = perCycle(m);
  const wall = m.stats.seconds;
  return {
    replicas,
    cycles_per_s: round(m.stats.throughput, 1),
    cycles: m.stats.cycles,
    errors: m.stats.errors,
    round_trips_per_cycle: round(m.roundTrips / Math.max(1, m.stats.cycles), 2),
    cpu_ms_per_cycle: {
      schedulers: round(c.schedulers, 3),
      postgres: round(c.postgres, 3),
      clients: round(c.clients, 3),
    },
    cores_used: round((m.cpu.schedulers + m.cpu.postgres + m.cpu.clients) / wall, 2),
    ...(m.upkeep ? { upkeep: m.upkeep } : {}),
  };
};

/** Scheduler processes serving one database: where to reach them, their pids, the database. */
export interface Replicas {
  endpoints: string[];
  pids: number[];
  db: string;
}

/** Starts `n` scheduler processes on `db`, runs the loop over them, stops them. */
export async function withReplicas<T>(
  db: string,
  n: number,
  run: (replicas: Replicas) => Promise<T>,
): Promise<T> {
  const procs: BerthProcess[] = [];
  try {
    for (let i = 0; i < n; i++) {
      const p = await schedulerProcess(db, undefined, `scheduler ${i + 1}`);
      await p.start();
      procs.push(p);
    }
    return await run({ endpoints: procs.map((p) => p.endpoint), pids: procs.map((p) => p.pid!), db });
  } finally {
    await Promise.all(procs.map((p) => p.stop()));
  }
}

/** Devices the PostgreSQL database holds bound to two ARQs (must be 0). */
export async function pgDoubleAllocations(url: string): Promise<number> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const r = await c.query<{ n: string }>(
      `SELECT COUNT(*) AS n FROM (SELECT device_uuid FROM arqs WHERE device_uuid IS NOT NULL
       GROUP BY device_uuid HAVING COUNT(*) > 1) t`,
    );
    return Number(r.rows[0]?.n ?? 0);
  } finally {
    await c.end();
  }
}

/**
 * Loads the fleet into a new database, with synchronous commit off for the (untimed) load only,
 * `concurrency` hosts at once.
 */
export async function loadPg(
  server: PostgresServer,
  name: string,
  hosts: number,
  concurrency = 1,
): Promise<string> {
  const url = await server.createDatabase(name);
  const store = await openPgStore(`${url}?options=${encodeURIComponent('-c synchronous_commit=off')}`);
  try {
    await loadFleet(store, hosts, { concurrency });
  } finally {
    await store.close();
  }
  return url;
}
