/**
 * fleet (issue 33, "a million devices"): the scheduler at 10,000, 100,000 and
 * 1,000,000 devices (500, 5,000 and 50,000 hosts × 20 devices; quick: 100,
 * 1,000 and 2,000), on SQLite and on PostgreSQL. At each size one `berth
 * scheduler serve` process (bin/berth, as the package runs) serves the same
 * work — so what grows from size to size grows with the fleet, not the work:
 *
 * - binds: the create → bind → delete loop of bench/bind.ts, 64 clients,
 *   round-robin over every host (bind p50/p99);
 * - ListDevices: the first page of 500 devices, a page from the middle of the
 *   fleet (its page token), and one host's devices (median of 15 each);
 * - WatchDevices start-up: the time to `synced` for a watch of one host
 *   (median of 15);
 * - the scheduler's peak RSS (VmHWM, /proc/<pid>/status) over all of that,
 *   from its start (which reads the hosts it knew) to the last call;
 * - then, on the same process, a WatchDevices of the whole fleet read to
 *   `synced` and checked (fleet-watch.ts): its time to `synced` and the
 *   process's peak after it (issue 42 item 1);
 * - then a second process on the same database with Placement reporting to a
 *   stand-in Placement (fleet-placement.ts), its peak (issue 42 item 2).
 *
 * Goals (against the same run): peak RSS at 1M ≤ 2 × at 100k (the work; with
 * the whole-fleet watch; with Placement reporting); bind p50 at 1M ≤ 1.2 ×
 * at 10k; per backend.
 *
 * Loading: host 0 is registered through the store's own use cases
 * (registerHost, upsertInventory: every row a real registration writes);
 * every other host is a copy of its rows (hosts, devices, media) with the
 * host's name and new device uuids put in, written in large transactions
 * with durability off (SQLite synchronous=OFF; PostgreSQL
 * synchronous_commit=off), then ANALYZE. The use cases take ~5 minutes per
 * million devices here; the copy takes seconds, and what the scheduler then
 * reads is what the use cases would have written. Not copied: host 0's
 * device events (a fleet's event log is capped by retention, 200,000 rows
 * by default, whatever its size). The load is not timed into any figure.
 */
import { randomUUID } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import Database from 'better-sqlite3';
import pg from 'pg';
import { SchedulerClient } from '../src/client/sdk.js';
import { openPgStore, openSqliteStore } from '../src/server/scheduler/stores.js';
import type { UseCases } from '../src/server/scheduler/usecases/use-cases.js';
import { type PostgresServer, startPostgres } from '../test/helpers/postgres.js';
import { postgresBin } from '../test/helpers/prerequisites.js';
import { schedulerProcess, stopAllProcesses } from '../test/helpers/processes.js';
import { bindLoop, dbFile, hostName, loadFleet } from './bind-harness.js';
import { type PlacementPoint, placementReporting } from './fleet-placement.js';
import { wholeFleetWatch } from './fleet-watch.js';
import { emit, loadNow, median, nowMs, parseArgs, round, tempDir } from './lib.js';

const PER_HOST = 20;
const PAGE = 500;

type Row = Record<string, unknown>;

/** Host 0's rows, as the use cases wrote them. */
interface Template {
  host: Row;
  devices: Row[];
  media: Row[];
}

/** Puts host `h`'s name (and, for a device, a new uuid) into a row of host 0. */
function copier(h: number) {
  const from = hostName(0);
  const to = hostName(h);
  const uuids = new Map<string, string>();
  const text = (v: unknown) => (typeof v === 'string' ? v.replaceAll(from, to) : v);
  return {
    host: (r: Row): Row => ({ ...r, name: to, record: text(r.record) }),
    device: (r: Row): Row => {
      const uuid = randomUUID();
      uuids.set(r.uuid as string, uuid);
      const out: Row = {};
      for (const [k, v] of Object.entries(r)) out[k] = text(v);
      out.uuid = uuid;
      out.record = (out.record as string).replace(r.uuid as string, uuid);
      return out;
    },
    media: (r: Row): Row => ({ key: text(r.key), record: text(r.record) }),
  };
}

/** Loads host 0 through the use cases and returns its rows. */
async function template(store: UseCases, read: (sql: string, p: unknown[]) => Promise<Row[]>) {
  await loadFleet(store, 1, { devicesPerHost: PER_HOST });
  const name = hostName(0);
  return {
    host: (await read('SELECT name, record FROM hosts WHERE name = $1', [name]))[0]!,
    devices: await read('SELECT * FROM devices WHERE host = $1', [name]),
    media: await read('SELECT key, record FROM media WHERE key LIKE $1', [`%:${name}:%`]),
  } satisfies Template;
}

const columnsOf = (rows: Row[]) => Object.keys(rows[0]!).filter((c) => c !== 'seq');

async function loadSqlite(path: string, hosts: number): Promise<void> {
  const store = await openSqliteStore(path);
  const db = store.db.connection;
  db.pragma('synchronous = OFF');
  const t = await template(store, async (sql, p) => db.prepare(sql.replace(/\$\d/g, '?')).all(...p) as Row[]);
  await store.close();
  const raw = new Database(path);
  try {
    raw.pragma('synchronous = OFF');
    const insert = (table: string, cols: string[]) => {
      const st = raw.prepare(
        `INSERT INTO ${table} (${cols.join(', ')}) VALUES (${cols.map(() => '?').join(', ')})`,
      );
      return (r: Row) => st.run(...cols.map((c) => r[c]));
    };
    const host = insert('hosts', ['name', 'record']);
    const device = insert('devices', columnsOf(t.devices));
    const media = insert('media', ['key', 'record']);
    const chunk = raw.transaction((from: number, to: number) => {
      for (let h = from; h < to; h++) {
        const c = copier(h);
        host(c.host(t.host));
        for (const d of t.devices) device(c.device(d));
        for (const m of t.media) media(c.media(m));
      }
    });
    for (let h = 1; h < hosts; h += 1000) chunk(h, Math.min(hosts, h + 1000));
    raw.exec('ANALYZE');
    raw.pragma('wal_checkpoint(TRUNCATE)');
  } finally {
    raw.close();
  }
}

async function loadPostgres(server: PostgresServer, name: string, hosts: number): Promise<string> {
  const url = await server.createDatabase(name);
  const fast = `${url}?options=${encodeURIComponent('-c synchronous_commit=off')}`;
  const store = await openPgStore(fast);
  const c = new pg.Client({ connectionString: fast });
  await c.connect();
  try {
    const t = await template(store, async (sql, p) => (await c.query(sql, p)).rows as Row[]);
    await store.close();
    const insert = async (table: string, cols: string[], rows: Row[]) => {
      if (rows.length === 0) return;
      const values: unknown[] = [];
      const tuples = rows.map((r) => {
        const ps = cols.map((col) => {
          values.push(r[col]);
          return `$${values.length}`;
        });
        return `(${ps.join(', ')})`;
      });
      await c.query(`INSERT INTO ${table} (${cols.join(', ')}) VALUES ${tuples.join(', ')}`, values);
    };
    const deviceCols = columnsOf(t.devices);
    const BATCH = 100; // hosts a statement: 2,000 device rows, 24,000 parameters
    for (let h = 1; h < hosts; h += BATCH) {
      const hs: Row[] = [];
      const ds: Row[] = [];
      const ms: Row[] = [];
      for (let k = h; k < Math.min(hosts, h + BATCH); k++) {
        const cp = copier(k);
        hs.push(cp.host(t.host));
        for (const d of t.devices) ds.push(cp.device(d));
        for (const m of t.media) ms.push(cp.media(m));
      }
      await c.query('BEGIN');
      await insert('hosts', ['name', 'record'], hs);
      await insert('devices', deviceCols, ds);
      await insert('media', ['key', 'record'], ms);
      await c.query('COMMIT');
    }
    await c.query('VACUUM ANALYZE');
  } finally {
    await c.end();
  }
  return url;
}

function vmHwmMiB(pid: number): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : Number.NaN;
}

interface Point extends PlacementPoint {
  devices: number;
  hosts: number;
  peak_rss_mib: number;
  bind_p50_ms: number;
  bind_p99_ms: number;
  binds_per_s: number;
  list_first_page_ms: number;
  list_middle_page_ms: number;
  list_one_host_ms: number;
  watch_one_host_ms: number;
  /** A whole-fleet WatchDevices (fleet-watch.ts): to `synced`, and VmHWM after it. */
  watch_fleet_synced_ms: number;
  watch_fleet_peak_rss_mib: number;
  watch_fleet_changes_during: number;
  start_ms: number;
  load_s: number;
  errors: number;
  loadavg_start: number[];
}

async function medianOf(n: number, f: () => Promise<unknown>): Promise<number> {
  const ms: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = nowMs();
    await f();
    ms.push(nowMs() - t0);
  }
  return median(ms);
}

/**
 * One size: the scheduler process over `db`, the work, its peak; then a
 * whole-fleet watch on the same process (its peak after); then a second
 * process with Placement reporting (fleet-placement.ts).
 */
async function measure(db: string, hosts: number, loadS: number, quick: boolean): Promise<Point> {
  const point = await serve(db, hosts, loadS, quick);
  process.stderr.write(`fleet ${hosts * PER_HOST} before Placement: ${JSON.stringify(point)}\n`);
  const writes = !db.startsWith('postgres');
  return { ...point, ...(await placementReporting(db, hosts, quick ? 1 : 20, vmHwmMiB, writes)) };
}

async function serve(
  db: string,
  hosts: number,
  loadS: number,
  quick: boolean,
): Promise<Omit<Point, keyof PlacementPoint>> {
  const loadStart = loadNow();
  const proc = await schedulerProcess(db, undefined, `scheduler ${hosts} hosts`);
  const t0 = nowMs();
  await proc.start();
  const startMs = nowMs() - t0;
  const client = new SchedulerClient({ endpoint: proc.endpoint, timeoutMs: 60_000, retries: 1 });
  try {
    const stats = await bindLoop(client, hosts, {
      concurrency: 64,
      seconds: quick ? 1 : 8,
      maxCycles: 1_000_000,
      warmupCycles: quick ? 16 : 256,
    });
    const filter = (host = '') => ({ host, type: 0, state: 0, resourceClass: '' });
    const middle = hostName(Math.floor(hosts / 2));
    const token = Buffer.from(JSON.stringify([middle, ''])).toString('base64url');
    const listFirst = await medianOf(15, () =>
      client.devices.listDevices({ filter: filter(), pageSize: PAGE, pageToken: '' }),
    );
    const listMiddle = await medianOf(15, () =>
      client.devices.listDevices({ filter: filter(), pageSize: PAGE, pageToken: token }),
    );
    let k = 0;
    const someHost = () => hostName((k++ * 7919) % hosts);
    const listHost = await medianOf(15, () =>
      client.devices.listDevices({ filter: filter(someHost()), pageSize: PAGE, pageToken: '' }),
    );
    const watchHost = await medianOf(15, async () => {
      const ac = new AbortController();
      for await (const m of client.watchDevices({ filter: filter(someHost()), fromRevision: 0 }, ac.signal)) {
        if (m.synced) break;
      }
      ac.abort();
    });
    // The work's peak, before the whole-fleet watch.
    const peak = round(vmHwmMiB(proc.pid!), 1);
    const fleet = await wholeFleetWatch(client, hosts, hosts * PER_HOST);
    return {
      devices: hosts * PER_HOST,
      hosts,
      peak_rss_mib: peak,
      bind_p50_ms: round(stats.p50),
      bind_p99_ms: round(stats.p99),
      binds_per_s: round(stats.throughput, 1),
      list_first_page_ms: round(listFirst),
      list_middle_page_ms: round(listMiddle),
      list_one_host_ms: round(listHost),
      watch_one_host_ms: round(watchHost),
      watch_fleet_synced_ms: Math.round(fleet.synced_ms),
      watch_fleet_peak_rss_mib: round(vmHwmMiB(proc.pid!), 1),
      watch_fleet_changes_during: fleet.changes_during,
      start_ms: Math.round(startMs),
      load_s: round(loadS, 1),
      errors: stats.errors,
      loadavg_start: loadStart,
    };
  } finally {
    client.close();
    await proc.stop();
  }
}

function report(backend: string, curve: Point[], quick: boolean): void {
  process.stderr.write(`fleet ${backend}:\n`);
  process.stderr.write(
    '  devices    peak MiB  bind p50  bind p99  binds/s  list 1st  list mid  list host  watch host  start ms  load s\n',
  );
  for (const p of curve) {
    const f = (v: number, w = 9) => String(v).padStart(w);
    process.stderr.write(
      `  ${f(p.devices)} ${f(p.peak_rss_mib)} ${f(p.bind_p50_ms)} ${f(p.bind_p99_ms)} ${f(p.binds_per_s, 8)} ${f(p.list_first_page_ms)} ${f(p.list_middle_page_ms)} ${f(p.list_one_host_ms, 10)} ${f(p.watch_one_host_ms, 11)} ${f(p.start_ms)} ${f(p.load_s, 7)}\n`,
    );
  }
  process.stderr.write(
    '  devices    watch fleet: synced ms  peak MiB  changes during   Placement: peak MiB  loaded s  first write s  providers\n',
  );
  for (const p of curve) {
    const f = (v: number, w: number) => String(v).padStart(w);
    process.stderr.write(
      `  ${f(p.devices, 9)} ${f(p.watch_fleet_synced_ms, 24)} ${f(p.watch_fleet_peak_rss_mib, 9)} ${f(p.watch_fleet_changes_during, 15)} ${f(p.placement_peak_rss_mib, 20)} ${f(p.placement_loaded_s, 9)} ${f(p.placement_first_write_s, 14)} ${f(p.placement_providers_written, 10)}\n`,
    );
  }
  const [small, mid, large] = curve as [Point, Point, Point];
  const errors = curve.reduce((n, p) => n + p.errors, 0);
  emit({
    name: `fleet-${backend}-memory`,
    value: large.peak_rss_mib,
    baseline: mid.peak_rss_mib,
    ratio: large.peak_rss_mib / mid.peak_rss_mib,
    goal: `scheduler peak RSS at ${large.devices} devices <= 2 x at ${mid.devices}`,
    pass: large.peak_rss_mib <= 2 * mid.peak_rss_mib && errors === 0,
    unit: 'MiB',
    curve,
    quick,
    loadavg_start: large.loadavg_start,
  });
  emit({
    name: `fleet-${backend}-bind`,
    value: large.bind_p50_ms,
    baseline: small.bind_p50_ms,
    ratio: large.bind_p50_ms / small.bind_p50_ms,
    goal: `bind p50 at ${large.devices} devices <= 1.2 x at ${small.devices}`,
    pass: large.bind_p50_ms <= 1.2 * small.bind_p50_ms && errors === 0,
    unit: 'ms',
    curve,
    quick,
    loadavg_start: small.loadavg_start,
  });
  emit({
    name: `fleet-${backend}-watch-memory`,
    value: large.watch_fleet_peak_rss_mib,
    baseline: mid.watch_fleet_peak_rss_mib,
    ratio: large.watch_fleet_peak_rss_mib / mid.watch_fleet_peak_rss_mib,
    goal: `scheduler peak RSS with a whole-fleet watch read to synced, at ${large.devices} devices <= 2 x at ${mid.devices}`,
    pass: large.watch_fleet_peak_rss_mib <= 2 * mid.watch_fleet_peak_rss_mib,
    unit: 'MiB',
    synced_ms: large.watch_fleet_synced_ms,
    baseline_synced_ms: mid.watch_fleet_synced_ms,
    curve,
    quick,
    loadavg_start: large.loadavg_start,
  });
  reportPlacement(backend, curve, quick, false);
}

/** Each size's point on stderr as it ends: a later size that fails does not take the earlier ones with it. */
function progress(backend: string, p: Point): Point {
  process.stderr.write(`fleet ${backend} ${p.devices}: ${JSON.stringify(p)}\n`);
  return p;
}

/** `--flag value` from the command line ('' when absent). */
const argOf = (flag: string): string =>
  process.argv.includes(flag) ? (process.argv[process.argv.indexOf(flag) + 1] ?? '') : '';

/**
 * `--placement-only`: each size loaded, then only the Placement figure (no
 * work, no whole-fleet watch), at the sizes of `--hosts` (e.g. 5000,50000:
 * the last is judged against the one before it).
 */
async function placementOnly(
  db: string,
  hosts: number,
  quick: boolean,
): Promise<PlacementPoint & { devices: number; loadavg_start: number[] }> {
  const loadStart = loadNow();
  const p = await placementReporting(db, hosts, quick ? 1 : 20, vmHwmMiB, !db.startsWith('postgres'));
  const point = { devices: hosts * PER_HOST, ...p, loadavg_start: loadStart };
  process.stderr.write(`fleet placement ${hosts * PER_HOST}: ${JSON.stringify(point)}\n`);
  return point;
}

/** The Placement figure: the curve's last size against the one before it. */
function reportPlacement(
  backend: string,
  curve: Array<PlacementPoint & { devices: number; loadavg_start: number[] }>,
  quick: boolean,
  placementOnly: boolean,
): void {
  const large = curve[curve.length - 1]!;
  const mid = curve[curve.length - 2] ?? large;
  emit({
    name: `fleet-${backend}-placement-memory`,
    value: large.placement_peak_rss_mib,
    baseline: mid.placement_peak_rss_mib,
    ratio: large.placement_peak_rss_mib / mid.placement_peak_rss_mib,
    goal: `scheduler peak RSS with Placement reporting, at ${large.devices} devices <= 2 x at ${mid.devices}`,
    pass: large.placement_peak_rss_mib <= 2 * mid.placement_peak_rss_mib,
    unit: 'MiB',
    curve,
    quick,
    ...(placementOnly ? { placement_only: true } : {}),
    loadavg_start: large.loadavg_start,
  });
}

async function main() {
  const { quick } = parseArgs();
  const hostsArg = argOf('--hosts');
  const sizes = hostsArg ? hostsArg.split(',').map(Number) : quick ? [5, 50, 100] : [500, 5_000, 50_000];
  const onlyPlacement = process.argv.includes('--placement-only');
  // `--backend sqlite|postgres`: one of them only.
  const only = argOf('--backend');
  const base = existsSync('/var/tmp') ? '/var/tmp' : '/tmp';
  const dir = await tempDir(base, 'berth-bench-fleet-');
  try {
    const sqlite: Point[] = [];
    const sqlitePlacement: Awaited<ReturnType<typeof placementOnly>>[] = [];
    for (const hosts of only === 'postgres' ? [] : sizes) {
      const path = dbFile(`${dir.path}`).replace(/\.db$/, `-${hosts}.db`);
      const t0 = nowMs();
      await loadSqlite(path, hosts);
      if (onlyPlacement) sqlitePlacement.push(await placementOnly(path, hosts, quick));
      else sqlite.push(progress('sqlite', await measure(path, hosts, (nowMs() - t0) / 1000, quick)));
    }
    if (sqlite.length > 0) report('sqlite', sqlite, quick);
    if (sqlitePlacement.length > 0) reportPlacement('sqlite', sqlitePlacement, quick, true);
    if (only === 'sqlite') return;
    if (!postgresBin()) {
      process.stderr.write('fleet: PostgreSQL skipped, it is not installed (apt-get install postgresql)\n');
      return;
    }
    const server = await startPostgres({ durable: true, baseDir: base });
    try {
      const postgres: Point[] = [];
      const pgPlacement: Awaited<ReturnType<typeof placementOnly>>[] = [];
      for (const hosts of sizes) {
        const t0 = nowMs();
        const url = await loadPostgres(server, `bench_fleet_${hosts}`, hosts);
        if (onlyPlacement) pgPlacement.push(await placementOnly(url, hosts, quick));
        else postgres.push(progress('postgres', await measure(url, hosts, (nowMs() - t0) / 1000, quick)));
      }
      if (postgres.length > 0) report('postgres', postgres, quick);
      if (pgPlacement.length > 0) reportPlacement('postgres', pgPlacement, quick, true);
    } finally {
      await server.stop();
    }
  } finally {
    await stopAllProcesses();
    await dir.cleanup();
  }
}

await main();
