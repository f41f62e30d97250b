/**
 * Where the replicas benchmark's time goes (not in run.ts: a tool for
 * bench/README.md's "why"): the create → bind → delete loop of
 * bench/replicas.ts (64 clients, `--hosts` hosts × 8, `--seconds`) against
 * `--replicas N` scheduler processes on one durable PostgreSQL database, or
 * `--sqlite` for one scheduler on a SQLite file, while
 * - `pg_stat_activity` is sampled every 20 ms: each Berth session's state and
 *   wait (or the statement it runs), counted;
 * - the CPU time of the schedulers, of every PostgreSQL process and of this
 *   process (the clients) is read from /proc before and after: CPU per bind
 *   of each, and the share of the two cores they used.
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

const arg = (name: string, fallback: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1]! : fallback;
};
const hosts = Number(arg('hosts', '2000'));
const seconds = Number(arg('seconds', '10'));
const replicas = Number(arg('replicas', '1'));
const sqliteOnly = process.argv.includes('--sqlite');
const cpuProf = process.argv.includes('--cpu-prof') ? arg('cpu-prof', '/tmp') : '';
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
  const server = sqliteOnly ? null : await startPostgres({ durable: true, baseDir: base });
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
      if (!server) return;
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
    await dir.cleanup();
  }
}

await main();
