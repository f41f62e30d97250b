/**
 * Where the replicas benchmark's time goes (not in run.ts: a tool for
 * bench/README.md's "why"): the create → bind → delete loop of
 * bench/replicas.ts (64 clients, `--hosts` hosts × 8, `--seconds`) against
 * `--replicas N` scheduler processes on one durable PostgreSQL database, or
 * `--sqlite` for one scheduler on a SQLite file, while
 * - `pg_stat_activity` is sampled every 20 ms (not with `--statements`): each
 *   Berth session's state and wait (or the statement it runs), counted;
 * - the CPU time of the schedulers, of every PostgreSQL process and of this
 *   process (the clients) is read from /proc before and after: CPU per bind
 *   of each, and the share of the two cores they used.
 * - the round trips each scheduler made to PostgreSQL (bench/pg-floor.ts
 *   `countRoundTrips`), per cycle;
 * - with `--statements`, pg_stat_statements (reset after the warm-up): calls
 *   and execution time per cycle of each statement, and the commits,
 *   rollbacks and deadlocks of the database per cycle (pg_stat_database).
 * - the updates a cycle of each table and the share of them PostgreSQL made
 *   HOT (pg_stat_user_tables), which write no index entry;
 * `--socket` reaches PostgreSQL through its Unix socket rather than TCP.
 * `--cpu-prof DIR` starts the schedulers on dist/ with node's `--cpu-prof`
 * (run bin/berth once first: it builds dist/), so their profiles land in DIR.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { SchedulerClient } from '../src/client/sdk.js';
import { openPgStore } from '../src/server/scheduler/stores.js';
import { startPostgres } from '../test/helpers/postgres.js';
import {
  type BerthProcess,
  freePort,
  schedulerProcess,
  stopAllProcesses,
} from '../test/helpers/processes.js';
import { bindLoop, dbFile, loadFleet, loadStore } from './bind-harness.js';
import { cpuMeter, postmasterOf, round, sleep, tempDir } from './lib.js';
import { countRoundTrips } from './pg-floor.js';

const arg = (name: string, fallback: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1]! : fallback;
};
const hosts = Number(arg('hosts', '2000'));
const seconds = Number(arg('seconds', '10'));
const replicas = Number(arg('replicas', '1'));
const sqliteOnly = process.argv.includes('--sqlite');
const cpuProf = process.argv.includes('--cpu-prof') ? arg('cpu-prof', '/tmp') : '';
const statementStats = process.argv.includes('--statements');

/** The database's transaction counters (pg_stat_database), to subtract. */
async function databaseCounters(c: pg.Client): Promise<Record<string, number>> {
  const r = await c.query<Record<string, string>>(
    `SELECT xact_commit, xact_rollback, deadlocks, conflicts FROM pg_stat_database WHERE datname = current_database()`,
  );
  return Object.fromEntries(Object.entries(r.rows[0]!).map(([k, v]) => [k, Number(v)]));
}

/**
 * Updates and HOT updates (pg_stat_user_tables) of the tables a cycle
 * updates: counters to subtract. A HOT update writes no index entry
 * (docs/decisions.md 99). The counters reach the view within a second of a
 * commit, which a run of `--seconds` makes small.
 */
async function updateCounters(c: pg.Client): Promise<Record<string, { upd: number; hot: number }>> {
  const r = await c.query<{ relname: string; upd: string; hot: string }>(
    `SELECT relname, n_tup_upd AS upd, n_tup_hot_upd AS hot FROM pg_stat_user_tables WHERE n_tup_upd > 0`,
  );
  return Object.fromEntries(r.rows.map((x) => [x.relname, { upd: Number(x.upd), hot: Number(x.hot) }]));
}

/** pg_stat_statements of this database since its reset: per cycle, calls and execution ms of each statement. */
async function statementsPerCycle(c: pg.Client, cycles: number) {
  const r = await c.query<{ q: string; calls: string; ms: number; rows: string }>(
    `SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 90) AS q, calls, total_exec_time AS ms, rows
     FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
     ORDER BY calls DESC`,
  );
  const calls = r.rows.reduce((n, x) => n + Number(x.calls), 0);
  const ms = r.rows.reduce((n, x) => n + x.ms, 0);
  return {
    calls_per_cycle: round(calls / cycles, 2),
    exec_ms_per_cycle: round(ms / cycles, 3),
    top: r.rows
      .slice(0, 30)
      .map(
        (x) =>
          `${round(Number(x.calls) / cycles, 3)} calls ${round(x.ms / cycles, 4)} ms ${round(Number(x.rows) / cycles, 2)} rows | ${x.q}`,
      ),
  };
}
/** A scheduler on dist/ with --cpu-prof (bin/berth takes no node flags, and NODE_OPTIONS refuses --cpu-prof). */
async function profiledScheduler(db: string): Promise<{ child: ChildProcess; endpoint: string }> {
  const port = await freePort();
  const child = spawn(
    process.execPath,
    [
      '--cpu-prof',
      `--cpu-prof-dir=${cpuProf}`,
      join(process.cwd(), 'dist/client/cli/main.js'),
      'scheduler',
      'serve',
      '--db',
      db,
      '--listen',
      `127.0.0.1:${port}`,
      '--insecure-no-auth',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, BERTH_LOG_LEVEL: 'warn' } },
  );
  await new Promise<void>((resolve, reject) => {
    let out = '';
    const look = (c: Buffer) => {
      out += c;
      if (out.includes('"listening"')) resolve();
    };
    child.stdout!.on('data', look);
    child.stderr!.on('data', look);
    child.once('exit', (code) => reject(new Error(`scheduler exited (${code}): ${out}`)));
  });
  return { child, endpoint: `127.0.0.1:${port}` };
}

/** The same database through the server's Unix socket instead of TCP on 127.0.0.1. */
async function socketUrl(url: string): Promise<string> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const dir = (
      await c.query<{ d: string }>("SELECT current_setting('unix_socket_directories') AS d")
    ).rows[0]!.d.split(',')[0]!.trim();
    const u = new URL(url);
    return `postgres://${u.username}@/${u.pathname.slice(1)}?host=${encodeURIComponent(dir)}&port=${u.port}`;
  } finally {
    await c.end();
  }
}

async function main() {
  const base = '/var/tmp';
  const dir = await tempDir(base, 'berth-bench-profile-');
  const server = sqliteOnly ? null : await startPostgres({ durable: true, baseDir: base, statementStats });
  const counter = countRoundTrips();
  const procs: BerthProcess[] = [];
  const profiled: ChildProcess[] = [];
  try {
    let db: string;
    if (server) {
      db = await server.createDatabase('profile');
      if (process.argv.includes('--socket')) db = await socketUrl(db);
      const store = await openPgStore(`${db}?options=${encodeURIComponent('-c synchronous_commit=off')}`);
      await loadFleet(store, hosts, { concurrency: 8 });
      await store.close();
    } else {
      db = dbFile(dir.path);
      (await loadStore(db, hosts)).store.close();
    }
    const endpoints: string[] = [];
    for (let i = 0; i < (server ? replicas : 1); i++) {
      if (cpuProf) {
        const p = await profiledScheduler(db);
        profiled.push(p.child);
        endpoints.push(p.endpoint);
        continue;
      }
      const p = await schedulerProcess(db, undefined, `scheduler ${i + 1}`);
      await p.start();
      procs.push(p);
      endpoints.push(p.endpoint);
    }
    const pids = [...procs.map((p) => p.pid!), ...profiled.map((c) => c.pid!)];
    const clients = endpoints.map((endpoint) => new SchedulerClient({ endpoint, timeoutMs: 30_000 }));
    // Warm up, then measure.
    await Promise.all(
      clients.map((c) => bindLoop(c, hosts, { concurrency: 8, seconds: 1, maxCycles: 200, warmupCycles: 0 })),
    );
    const samples = new Map<string, number>();
    let sampling = true;
    const sampler = (async () => {
      // Its own statements would be counted with Berth's, and it costs the server CPU.
      if (!server || statementStats) return;
      const c = new pg.Client({ connectionString: db });
      await c.connect();
      while (sampling) {
        const r = await c.query<{ s: string }>(
          `SELECT coalesce(state, '?') || ' | ' || coalesce(wait_event_type || ':' || wait_event, 'cpu') || ' | ' ||
             left(regexp_replace(query, '\\s+', ' ', 'g'), 70) AS s
           FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
             AND backend_type = 'client backend'`,
        );
        for (const { s } of r.rows) samples.set(s, (samples.get(s) ?? 0) + 1);
        await sleep(20);
      }
      await c.end();
    })();
    const postmaster = server ? await postmasterOf(db) : 0;
    const stats0 = server && statementStats ? new pg.Client({ connectionString: db }) : null;
    await stats0?.connect();
    await stats0?.query('SELECT pg_stat_statements_reset()');
    const counters0 = stats0 ? await databaseCounters(stats0) : null;
    const tables = server ? new pg.Client({ connectionString: db }) : null;
    await tables?.connect();
    const updates0 = tables ? await updateCounters(tables) : {};
    const trips0 = await counter.read(pids);
    const cpuUsed = cpuMeter(pids, server ? postmaster : null);
    const t0 = performance.now();
    const stats = await Promise.all(
      clients.map((c, i) =>
        bindLoop(c, hosts, {
          concurrency: Math.floor(64 / clients.length) + (i < 64 % clients.length ? 1 : 0),
          seconds,
          maxCycles: 1_000_000,
          warmupCycles: 0,
        }),
      ),
    );
    const wall = (performance.now() - t0) / 1000;
    const cycles = stats.reduce((n, s) => n + s.cycles, 0);
    const used = cpuUsed();
    const trips = (await counter.read(pids)) - trips0;
    let hotUpdates: Record<string, string> | undefined;
    if (tables) {
      await sleep(1500);
      const updates = await updateCounters(tables);
      await tables.end();
      hotUpdates = Object.fromEntries(
        Object.entries(updates).map(([t, u]) => {
          const upd = u.upd - (updates0[t]?.upd ?? 0);
          const hot = u.hot - (updates0[t]?.hot ?? 0);
          return [
            t,
            `${round(upd / cycles, 2)} updates a cycle, ${round((100 * hot) / Math.max(upd, 1), 1)}% HOT`,
          ];
        }),
      );
    }
    let statements: unknown;
    if (stats0 && counters0) {
      const counters = await databaseCounters(stats0);
      statements = {
        per_cycle: Object.fromEntries(
          Object.entries(counters).map(([k, v]) => [k, round((v - counters0[k]!) / cycles, 3)]),
        ),
        ...(await statementsPerCycle(stats0, cycles)),
      };
      await stats0.end();
    }
    sampling = false;
    await sampler;
    for (const c of clients) c.close();
    const total = [...samples.values()].reduce((a, b) => a + b, 0);
    const out = {
      backend: server ? 'postgres' : 'sqlite',
      replicas: pids.length,
      hosts,
      cycles_per_s: round(cycles / wall, 1),
      errors: stats.reduce((n, s) => n + s.errors, 0),
      loadavg: loadavg().map((l) => round(l)),
      cpu_ms_per_cycle: Object.fromEntries(
        Object.entries(used).map(([k, v]) => [k, round((v * 1000) / cycles, 3)]),
      ),
      cores_used: Object.fromEntries(Object.entries(used).map(([k, v]) => [k, round(v / wall, 2)])),
      round_trips_per_cycle: round(trips / cycles, 2),
      ...(hotUpdates ? { hot_updates: hotUpdates } : {}),
      ...(statements ? { statements } : {}),
      pg_stat_activity: [...samples.entries()]
        .sort((a, b) => b[1] - a[1])
        .slice(0, 25)
        .map(([s, n]) => `${round((100 * n) / total, 1)}% ${s}`),
    };
    process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
  } finally {
    await Promise.all(procs.map((p) => p.stop()));
    // SIGTERM: the scheduler stops cleanly and node writes its profile on the way out.
    await Promise.all(
      profiled.map(
        (c) =>
          new Promise((r) => {
            if (c.exitCode !== null) return r(null);
            c.once('exit', r);
            c.kill('SIGTERM');
          }),
      ),
    );
    await stopAllProcesses();
    await server?.stop();
    counter.close();
    await dir.cleanup();
  }
}

await main();
