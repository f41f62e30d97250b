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
}

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
    const trips0 = await counter.read(replicas.pids);
    const cpuUsed = cpuMeter(replicas.pids, postmaster);
    const parts = await Promise.all(
      clients.map((client, i) =>
        bindLoop(client, hosts, { concurrency: share(i), seconds, maxCycles: 1_000_000, warmupCycles: 0 }),
      ),
    );
    const cpu = cpuUsed();
    const roundTrips = (await counter.read(replicas.pids)) - trips0;
    const stats = loopStats({
      bindMs: parts.flatMap((p) => p.bindMs),
      cycleMs: parts.flatMap((p) => p.cycleMs),
      seconds: Math.max(...parts.map((p) => p.seconds)),
      errors: parts.reduce((n, p) => n + p.errors, 0),
      firstError: parts.find((p) => p.firstError)?.firstError ?? '',
      doubles: parts.reduce((n, p) => n + p.doubleAllocationsSeen, 0),
    });
    return { stats, cpu, roundTrips };
  } finally {
    for (const c of clients) c.close();
  }
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
  };
};

/** Scheduler processes serving one database: where to reach them and their pids. */
export interface Replicas {
  endpoints: string[];
  pids: number[];
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
    return await run({ endpoints: procs.map((p) => p.endpoint), pids: procs.map((p) => p.pid!) });
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
