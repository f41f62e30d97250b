/**
 * The ceiling of PostgreSQL's bind cycle (issue 42 item 4, decision 96; not in
 * run.ts: a tool, like bench/replicas-profile.ts). Is `pg_cpu_per_cycle` ≤ 2.0
 * × SQLite reachable at all on this machine with Berth's data model and
 * durability? This measures the best case a client could reach:
 *
 * - PostgreSQL started as bench/replicas.ts starts it (durable: fsync,
 *   synchronous commit, full-page writes; data on /var/tmp), the bench fleet
 *   (`--hosts`, default 2,000 × 8 VFs) loaded through `openPgStore`: the real
 *   schema and rows.
 * - The scheduler's three units of a cycle — create an ARQ, bind it, delete it
 *   — as PL/pgSQL functions (bench/pg-ceiling-sql.ts): the same tables, reads
 *   with FOR UPDATE, writes, advisory locks and device events, ONE round trip
 *   each; the records built in SQL (jsonb). Before anything is measured, one
 *   cycle of each variant and one of the real use cases (in this process, on
 *   the same database) are compared row by row: the ARQ, device, media and
 *   event records they write must be equal but for ids, host and times, else
 *   the tool stops.
 * - `statements`: the same units sent as the scheduler sends them (its
 *   statements, batching and round trips, 17 a cycle) from a bare node-pg client,
 *   records built in JavaScript: what "fewer round trips" saves apart from
 *   "less work in the statements".
 * - Each variant: 64 concurrent create → bind → delete loops through one
 *   `pg.Pool` of 10 (the scheduler's), the coalesced NOTIFY (one per 10 ms
 *   after a commit, as pg-store.ts) and a LISTEN connection as the scheduler
 *   keeps; `--warm` s (default 15) then `--seconds` s (default 20) measured;
 *   the CPU of this process (the client) and of the server (bench/lib.ts
 *   cpuMeter) per cycle, round trips and commits per cycle. Checked after:
 *   no error, no device handed out while another live ARQ held it, every ARQ
 *   deleted, no device or media left held, one device event per bind and per
 *   delete, one owner per bind.
 * - In the same run, the baseline: one real scheduler on SQLite with the real
 *   bind loop (bench/replicas-loop.ts, as replicas.ts measures it: 256 cycles,
 *   `--sqlite-warm` s (default 60), then `--seconds` s). `--real-pg` also runs
 *   one real scheduler on the same PostgreSQL database the same way.
 *
 * The ceiling's client is a bare driver: the real scheduler also spends gRPC
 * and domain CPU a cycle (part of SQLite's figure too). So if the ceiling's
 * server + bare client alone is above 2.0 × SQLite, no client-side design
 * reaches the goal on this machine; below it, the difference is the room left
 * for the scheduler's own work. `--statements-stats` loads
 * pg_stat_statements (track=all: the functions' statements too) and prints
 * each variant's statements per cycle; it costs the server CPU, so its CPU
 * figures are not the ones to quote. `--quick`: a smoke run (50 hosts, 2 s).
 *
 *   npx tsx bench/pg-ceiling.ts [--hosts N] [--seconds S] [--warm S] [--sqlite-warm S] [--real-pg] [--quick]
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import type { HostName, InstanceId, Uuid } from '../src/identifiers.js';
import { openPgStore } from '../src/server/scheduler/stores.js';
import { startPostgres } from '../test/helpers/postgres.js';
import { postgresBin } from '../test/helpers/prerequisites.js';
import { stopAllProcesses } from '../test/helpers/processes.js';
import { dbFile, hostName, loadStore, PROFILE } from './bind-harness.js';
import { cpuMeter, loadNow, nowMs, postmasterOf, round, tempDir } from './lib.js';
import {
  CEILING_FUNCTIONS,
  type CycleOps,
  functionOps,
  SUBJECT,
  statementOps,
  type Trips,
} from './pg-ceiling-sql.js';
import { countRoundTrips } from './pg-floor.js';
import {
  CONCURRENCY,
  cpuDetail,
  loadPg,
  loopOver,
  type Measured,
  perCycle,
  withReplicas,
} from './replicas-loop.js';

const arg = (name: string, fallback: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1]! : fallback;
};
const quick = process.argv.includes('--quick');
const hosts = Number(arg('hosts', quick ? '50' : '2000'));
const seconds = Number(arg('seconds', quick ? '2' : '20'));
const warm = Number(arg('warm', quick ? '1' : '15'));
const sqliteWarm = Number(arg('sqlite-warm', quick ? '0' : '60'));
const realPg = process.argv.includes('--real-pg');
const statementStats = process.argv.includes('--statements-stats');
const POOL = 10;
const CHANNEL = 'berth_changes';
/** pg-store.ts: transient failures a unit is run again for. */
const TRANSIENT = new Set(['40001', '40P01', '23505']);

/** The scheduler's coalesced NOTIFY (pg-store.ts notifySoon): one for every commit in 10 ms. */
class Notifier {
  private timer: NodeJS.Timeout | null = null;
  sent = 0;
  constructor(
    private readonly pool: pg.Pool,
    private readonly trips: Trips,
  ) {}
  soon(): void {
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.sent++;
      this.trips.n++;
      void this.pool.query(`NOTIFY ${CHANNEL}`).catch(() => {});
    }, 10);
  }
  async flush(): Promise<void> {
    while (this.timer) await new Promise((r) => setTimeout(r, 5));
  }
}

/** What every loop of a variant did, warm-up included: what the database must show after. */
interface Tally {
  creates: number;
  binds: number;
  deletes: number;
  retries: number;
  errors: number;
  firstError: string;
  doubles: number;
}

/** Runs `op`, again (at most 5 times) on a transient failure, as the scheduler's runner does. */
async function retried<T>(tally: Tally, op: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await op();
    } catch (err) {
      const code = (err as { code?: string }).code;
      if (code && TRANSIENT.has(code) && attempt < 5) {
        tally.retries++;
        continue;
      }
      throw err;
    }
  }
}

/** CONCURRENCY loops of create → bind (hosts round-robin) → delete until `until` (nowMs); completed cycles. */
async function cycles(ops: CycleOps, notifier: Notifier, tally: Tally, until: number): Promise<number> {
  const held = new Set<string>();
  let cursor = Math.floor(Math.random() * hosts);
  let done = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (nowMs() < until) {
        try {
          const arq = randomUUID();
          await retried(tally, () => ops.create(arq));
          notifier.soon();
          tally.creates++;
          const host = hostName(cursor++ % hosts);
          const instance = randomUUID();
          const device = await retried(tally, () => ops.bind(arq, instance, host));
          notifier.soon();
          tally.binds++;
          if (held.has(device)) tally.doubles++;
          held.add(device);
          await Promise.resolve();
          held.delete(device);
          await retried(tally, () => ops.delete(arq));
          notifier.soon();
          tally.deletes++;
          done++;
        } catch (e) {
          tally.errors++;
          if (!tally.firstError) tally.firstError = (e as Error).message;
        }
      }
    }),
  );
  await notifier.flush();
  return done;
}

async function counts(c: pg.Client) {
  const r = await c.query<Record<string, number>>(
    `SELECT (SELECT count(*) FROM arqs)::int AS arqs,
            (SELECT count(*) FROM devices WHERE device_state <> 'available')::int AS devices_not_available,
            (SELECT count(*) FROM media WHERE record::jsonb->>'condition' = 'held')::int AS media_held,
            (SELECT count(*) FROM device_events)::int AS events,
            (SELECT count(*) FROM instance_owners)::int AS owners,
            (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database())::float8 AS commits`,
  );
  return r.rows[0]!;
}

/** One variant: warm-up, then the measured loops; its CPU per cycle and what the database shows after. */
async function measure(
  url: string,
  postmaster: number,
  variant: 'functions' | 'statements',
  stats: pg.Client,
) {
  const pool = new pg.Pool({ connectionString: url, max: POOL });
  const listener = new pg.Client({ connectionString: url });
  await listener.connect();
  let heard = 0;
  listener.on('notification', () => heard++);
  await listener.query(`LISTEN ${CHANNEL}`);
  const trips: Trips = { n: 0 };
  const ops =
    variant === 'functions' ? functionOps(pool, PROFILE, trips) : statementOps(pool, PROFILE, trips);
  const notifier = new Notifier(pool, trips);
  const tally: Tally = {
    creates: 0,
    binds: 0,
    deletes: 0,
    retries: 0,
    errors: 0,
    firstError: '',
    doubles: 0,
  };
  try {
    const before = await counts(stats);
    await cycles(ops, notifier, tally, nowMs() + warm * 1000);
    if (statementStats) await stats.query('SELECT pg_stat_statements_reset()');
    const mid = await counts(stats);
    const trips0 = trips.n;
    const notifies0 = notifier.sent;
    const at = loadNow();
    const used = cpuMeter([], postmaster);
    const t0 = nowMs();
    const n = await cycles(ops, notifier, tally, t0 + seconds * 1000);
    const wall = (nowMs() - t0) / 1000;
    const cpu = used();
    const after = await counts(stats);
    const per = (x: number) => x / Math.max(1, n);
    const statements = statementStats ? await statementsPerCycle(stats, n) : undefined;
    const checks = {
      errors: tally.errors,
      first_error: tally.firstError || undefined,
      devices_handed_out_while_held: tally.doubles,
      arqs_left: after.arqs,
      devices_not_available: after.devices_not_available,
      media_held: after.media_held,
      events_written: after.events! - before.events!,
      events_expected: tally.binds + tally.deletes,
      owners_written: after.owners! - before.owners!,
      owners_expected: tally.binds,
      cycles_all: tally.deletes,
      creates_binds_deletes: [tally.creates, tally.binds, tally.deletes],
    };
    const ok =
      checks.errors === 0 &&
      checks.devices_handed_out_while_held === 0 &&
      checks.arqs_left === 0 &&
      checks.devices_not_available === 0 &&
      checks.media_held === 0 &&
      checks.events_written === checks.events_expected &&
      checks.owners_written === checks.owners_expected &&
      tally.creates === tally.binds &&
      tally.binds === tally.deletes;
    return {
      variant,
      cycles: n,
      cycles_per_s: round(n / wall, 1),
      server_ms_per_cycle: round(per(cpu.postgres * 1000), 3),
      client_ms_per_cycle: round(per(cpu.clients * 1000), 3),
      sum_ms_per_cycle: round(per((cpu.postgres + cpu.clients) * 1000), 3),
      round_trips_per_cycle: round(per(trips.n - trips0), 2),
      notifies_per_cycle: round(per(notifier.sent - notifies0), 2),
      commits_per_cycle: round(per(after.commits! - mid.commits!), 2),
      retries: tally.retries,
      notifications_heard: heard,
      cores_used: round((cpu.postgres + cpu.clients) / wall, 2),
      loadavg_start: at,
      loadavg_end: loadNow(),
      checks: { ok, ...checks },
      ...(statements ? { statements } : {}),
    };
  } finally {
    await pool.end();
    await listener.end();
  }
}

/** pg_stat_statements since its reset, per cycle (with --statements-stats). */
async function statementsPerCycle(c: pg.Client, n: number) {
  const r = await c.query<{ q: string; calls: string; ms: number }>(
    `SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 100) AS q, calls, total_exec_time AS ms
     FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
     ORDER BY calls DESC LIMIT 40`,
  );
  return r.rows.map((x) => `${round(Number(x.calls) / n, 3)} calls ${round(x.ms / n, 4)} ms | ${x.q}`);
}

// ---- the functions write what the scheduler writes -------------------------

/** The records a cycle wrote, after its bind and after its delete. */
type Snapshot = Record<string, unknown>;

async function rowsOf(c: pg.Client, arq: string, device: string): Promise<Snapshot> {
  const one = async (sql: string, v: unknown[]) =>
    ((await c.query<{ r: string }>(sql, v)).rows[0]?.r ?? null) as string | null;
  const dev = await one('SELECT record AS r FROM devices WHERE uuid = $1', [device]);
  const key = (JSON.parse(dev!) as { media: { key: string } }).media.key;
  return {
    arq: await one('SELECT record AS r FROM arqs WHERE uuid = $1', [arq]),
    device: dev,
    media: await one('SELECT record AS r FROM media WHERE key = $1', [key]),
    event: await one(
      'SELECT record AS r FROM device_events WHERE device_uuid = $1 ORDER BY revision DESC LIMIT 1',
      [device],
    ),
  };
}

/** A record with its ids, host and times replaced by names, keys sorted: what two cycles must share. */
function normal(json: string | null, names: Array<[string, string]>): string {
  if (json === null) return 'null';
  let s = json;
  for (const [value, name] of names) s = s.replaceAll(value, name);
  s = s.replace(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z/g, '<time>');
  const sortKeys = (v: unknown): unknown =>
    Array.isArray(v)
      ? v.map(sortKeys)
      : v && typeof v === 'object'
        ? Object.fromEntries(
            Object.entries(v)
              .sort(([a], [b]) => a.localeCompare(b))
              .map(([k, x]) => [k, sortKeys(x)]),
          )
        : v;
  return JSON.stringify(sortKeys(JSON.parse(s)));
}

/**
 * One cycle through the scheduler's own use cases (this process, the same
 * database), one of each variant, each on a host of its own; the rows they
 * wrote compared. Returns the differences (none: the variants write what the
 * scheduler writes).
 */
async function sameWrites(url: string, stats: pg.Client): Promise<string[]> {
  const cycle = async (host: HostName, run: (arq: string, instance: string) => Promise<[string, string]>) => {
    const instance = randomUUID();
    const [arq, device] = await run(randomUUID(), instance);
    const bound = await rowsOf(stats, arq, device);
    return { arq, device, instance, host, bound };
  };
  const store = await openPgStore(url);
  const real = await (async () => {
    const host = hostName(0);
    const r = await cycle(host, async (_, instance) => {
      const arq = (await store.createArqs({ profileName: PROFILE, tags: [] }))[0]!.uuid;
      const bound = await store.bindArqs(
        [{ arqUuid: arq, instanceUuid: instance as InstanceId, host }],
        undefined,
        undefined,
        undefined,
        SUBJECT,
      );
      return [arq, bound.devices[0]!.uuid];
    });
    await store.deleteArqs({ uuids: [r.arq as Uuid] });
    return { ...r, deleted: await rowsOf(stats, r.arq, r.device) };
  })();
  await store.close();
  const out: string[] = [];
  for (const [i, variant] of (['functions', 'statements'] as const).entries()) {
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    const trips: Trips = { n: 0 };
    const ops =
      variant === 'functions' ? functionOps(pool, PROFILE, trips) : statementOps(pool, PROFILE, trips);
    try {
      const host = hostName(1 + i);
      const v = await cycle(host, async (arq, instance) => {
        await ops.create(arq);
        return [arq, await ops.bind(arq, instance, host)];
      });
      await ops.delete(v.arq);
      const deleted = await rowsOf(stats, v.arq, v.device);
      for (const [when, a, b] of [
        ['after bind', real.bound, v.bound],
        ['after delete', real.deleted, deleted],
      ] as const) {
        for (const what of Object.keys(a)) {
          const names = (x: {
            arq: string;
            instance: string;
            device: string;
            host: string;
          }): Array<[string, string]> => [
            [x.arq, '<arq>'],
            [x.instance, '<instance>'],
            [x.device, '<device>'],
            [x.host, '<host>'],
          ];
          const want = normal(a[what] as string | null, names(real));
          const got = normal(b[what] as string | null, names(v));
          if (want !== got)
            out.push(`${variant}: the ${what} ${when}: scheduler ${want} / ${variant} ${got}`);
        }
      }
    } finally {
      await pool.end();
    }
  }
  return out;
}

async function main() {
  if (!postgresBin()) throw new Error('pg-ceiling: PostgreSQL is not installed (apt-get install postgresql)');
  const base = '/var/tmp';
  const dir = await tempDir(base, 'berth-bench-ceiling-');
  const counter = countRoundTrips();
  const server = await startPostgres({ durable: true, baseDir: base, statementStats });
  try {
    // The baseline: one real scheduler on SQLite, as replicas.ts measures it.
    const sqlitePath = dbFile(dir.path);
    (await loadStore(sqlitePath, hosts)).store.close();
    const sqliteAt = loadNow();
    const sqlite: Measured = await withReplicas(sqlitePath, 1, (r) =>
      loopOver(r, null, hosts, seconds, quick, counter, sqliteWarm),
    );
    const url = await loadPg(server, 'ceiling', hosts, 8);
    const postmaster = await postmasterOf(url);
    const stats = new pg.Client({ connectionString: url });
    await stats.connect();
    try {
      await stats.query(CEILING_FUNCTIONS);
      const differences = await sameWrites(url, stats);
      if (differences.length > 0) {
        throw new Error(
          `pg-ceiling: the variants do not write what the scheduler writes:\n${differences.join('\n')}`,
        );
      }
      const functions = await measure(url, postmaster, 'functions', stats);
      const statements = await measure(url, postmaster, 'statements', stats);
      const real = realPg
        ? await withReplicas(url, 1, (r) =>
            loopOver(r, postmaster, hosts, seconds, quick, counter, sqliteWarm),
          )
        : null;
      const sqliteMs = perCycle(sqlite).total;
      const ratio = (x: number) => round(x / sqliteMs, 2);
      const out = {
        name: 'pg_ceiling',
        hosts,
        seconds,
        concurrency: CONCURRENCY,
        pool: POOL,
        sqlite_scheduler_ms_per_cycle: round(sqliteMs, 3),
        ceiling_server_ms_per_cycle: functions.server_ms_per_cycle,
        ceiling_client_ms_per_cycle: functions.client_ms_per_cycle,
        ceiling_sum_ms_per_cycle: functions.sum_ms_per_cycle,
        ceiling_ratio: ratio(functions.sum_ms_per_cycle),
        ceiling_server_ratio: ratio(functions.server_ms_per_cycle),
        goal_budget_ms_per_cycle: round(2 * sqliteMs, 3),
        room_for_scheduler_work_ms_per_cycle: round(2 * sqliteMs - functions.sum_ms_per_cycle, 3),
        ceiling_round_trips_per_cycle: functions.round_trips_per_cycle,
        statements_sum_ms_per_cycle: statements.sum_ms_per_cycle,
        statements_ratio: ratio(statements.sum_ms_per_cycle),
        statements_round_trips_per_cycle: statements.round_trips_per_cycle,
        functions,
        statements,
        sqlite: { ...cpuDetail(sqlite, 1), loadavg_start: sqliteAt },
        ...(real
          ? {
              real_pg: {
                ...cpuDetail(real, 1),
                total_ms_per_cycle: round(perCycle(real).total, 3),
                ratio: ratio(perCycle(real).total),
              },
            }
          : {}),
        checks_ok: functions.checks.ok && statements.checks.ok && sqlite.stats.errors === 0,
        quick,
        loadavg: loadNow(),
      };
      process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
      if (!out.checks_ok) process.exitCode = 1;
    } finally {
      await stats.end();
    }
  } finally {
    await stopAllProcesses();
    await server.stop();
    counter.close();
    await dir.cleanup();
  }
}

await main();
