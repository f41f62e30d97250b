/**
 * statements: what one BindAcceleratorRequests costs the database, counted on
 * both backends (issue 33): the statements the store runs and the round trips
 * to the database, per bind. One scheduler in this process (its gRPC server on
 * loopback, the SDK client) over a SQLite file (synchronous FULL) and over a
 * PostgreSQL database, 100 hosts × 8 VFs; ARQs are created before and deleted
 * after, uncounted; the binds run one at a time, so no group commit merges two
 * binds' transactions and every statement counted is one bind's. The other
 * two calls of a client's cycle are counted too, one ARQ a call:
 * CreateAcceleratorRequests and DeleteAcceleratorRequests.
 *
 * Counted at the drivers: PostgreSQL's `Client.prototype.query` (one call is
 * one round trip; a string of several statements, as a unit's commit sends, is
 * counted as its statements), better-sqlite3's `Statement.prototype.run/get/all`
 * (in the process: no round trip). The scheduler's background work on the
 * same connections (lease renewals every 2 s on PostgreSQL) is counted in a
 * window of the same length with no binds and subtracted.
 */
import { existsSync } from 'node:fs';
import Database from 'better-sqlite3';
import pg from 'pg';
import { pino } from 'pino';
import { SchedulerClient } from '../src/client/sdk.js';
import { Scheduler } from '../src/server/scheduler/scheduler.js';
import { openPgStore } from '../src/server/scheduler/stores.js';
import type { UseCases } from '../src/server/scheduler/usecases/use-cases.js';
import { startPostgres } from '../test/helpers/postgres.js';
import { postgresBin } from '../test/helpers/prerequisites.js';
import { dbFile, hostName, loadFleet, loadStore, PROFILE } from './bind-harness.js';
import { emit, loadNow, nowMs, parseArgs, round, sleep, tempDir } from './lib.js';

interface Counts {
  statements: number;
  roundTrips: number;
  texts: Map<string, number>;
}

const counts: Counts = { statements: 0, roundTrips: 0, texts: new Map() };
let counting = false;

function note(text: string, roundTrip: boolean): void {
  if (!counting) return;
  if (roundTrip) counts.roundTrips++;
  // A unit's commit string: `SELECT pg_advisory_xact_lock_shared(…); INSERT …; COMMIT`.
  const parts = text.split(/;\s+(?=SELECT|INSERT|UPDATE|DELETE|COMMIT|BEGIN|NOTIFY)/);
  for (const p of parts) {
    counts.statements++;
    const key = p
      .replace(/\s+/g, ' ')
      .replace(/'[^']*'/g, "'…'")
      .slice(0, 72);
    counts.texts.set(key, (counts.texts.get(key) ?? 0) + 1);
  }
}

function instrument(): void {
  const query = pg.Client.prototype.query as (...a: unknown[]) => unknown;
  pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
    const q = args[0];
    note(typeof q === 'string' ? q : ((q as { text?: string }).text ?? ''), true);
    return query.apply(this, args);
  } as typeof pg.Client.prototype.query;
  const probe = new Database(':memory:');
  const proto = Object.getPrototypeOf(probe.prepare('SELECT 1')) as Record<string, unknown>;
  probe.close();
  for (const m of ['run', 'get', 'all', 'iterate']) {
    const f = proto[m] as (...a: unknown[]) => unknown;
    proto[m] = function (this: { source: string }, ...args: unknown[]) {
      note(this.source, false);
      return f.apply(this, args);
    };
  }
}

function reset(): void {
  counts.statements = 0;
  counts.roundTrips = 0;
  counts.texts = new Map();
}

/** Per-bind statements and round trips of `binds` sequential binds, background subtracted. */
async function measure(store: UseCases, hosts: number, binds: number) {
  const scheduler = await Scheduler.start({
    store,
    listen: '127.0.0.1:0',
    logger: pino({ level: 'silent' }),
    auth: { mode: 'none' },
  });
  const client = new SchedulerClient({ endpoint: scheduler.address, timeoutMs: 30_000 });
  try {
    const create = async (n: number) => {
      const uuids: string[] = [];
      for (let i = 0; i < n; i++) {
        const r = await client.arqs.createAcceleratorRequests({
          profileName: PROFILE,
          requestId: '',
          tags: [],
        });
        uuids.push(r.acceleratorRequests[0]!.uuid);
      }
      return uuids;
    };
    const bindAll = async (uuids: string[]) => {
      for (const [i, arqUuid] of uuids.entries()) {
        await client.arqs.bindAcceleratorRequests({
          bindings: [{ arqUuid, instanceUuid: crypto.randomUUID(), host: hostName(i % hosts), tag: '' }],
        });
      }
    };
    // Warm-up (prepared statements, caches), uncounted.
    const warm = await create(Math.min(binds, 32));
    await bindAll(warm);
    await client.arqs.deleteAcceleratorRequests({ uuids: warm, instanceUuid: '' });

    // The other two calls of a client's cycle, one ARQ each: create, and (after the binds) delete.
    reset();
    counting = true;
    const arqs = await create(binds);
    counting = false;
    const created = { statements: counts.statements, roundTrips: counts.roundTrips };
    reset();
    counting = true;
    const t0 = nowMs();
    await bindAll(arqs);
    const ms = nowMs() - t0;
    counting = false;
    const during = { ...counts, texts: counts.texts };
    reset();
    counting = true;
    await sleep(ms);
    counting = false;
    const idle = { statements: counts.statements, roundTrips: counts.roundTrips };
    reset();
    counting = true;
    for (const uuid of arqs) await client.arqs.deleteAcceleratorRequests({ uuids: [uuid], instanceUuid: '' });
    counting = false;
    const deleted = { statements: counts.statements, roundTrips: counts.roundTrips };
    const perBind = (n: number) => n / binds;
    return {
      statements: perBind(during.statements - idle.statements),
      roundTrips: perBind(during.roundTrips - idle.roundTrips),
      background: idle,
      // Background work is not subtracted from these (small against 400 calls: see background).
      create: {
        statements: round(perBind(created.statements)),
        round_trips: round(perBind(created.roundTrips)),
      },
      delete: {
        statements: round(perBind(deleted.statements)),
        round_trips: round(perBind(deleted.roundTrips)),
      },
      top: [...during.texts.entries()]
        .sort((a, b) => b[1] - a[1])
        .slice(0, 16)
        .map(([text, n]) => ({ per_bind: round(n / binds), text })),
      bindMs: ms / binds,
    };
  } finally {
    client.close();
    await scheduler.stop();
  }
}

async function main() {
  const { quick } = parseArgs();
  const hosts = quick ? 10 : 100;
  const binds = quick ? 40 : 400;
  const base = existsSync('/var/tmp') ? '/var/tmp' : '/tmp';
  instrument();
  const dir = await tempDir(base, 'berth-bench-statements-');
  try {
    const loadStart = loadNow();
    const { store } = await loadStore(dbFile(dir.path), hosts);
    const sqlite = await measure(store, hosts, binds);
    await store.close();
    const sqliteFigures = {
      statements_per_bind: round(sqlite.statements),
      create_arq: sqlite.create,
      delete_arq: sqlite.delete,
      round_trips_per_bind: 0,
      sequential_bind_ms: round(sqlite.bindMs),
      top_statements: sqlite.top,
    };
    if (!postgresBin()) {
      process.stderr.write(
        'statements: PostgreSQL skipped, it is not installed (apt-get install postgresql)\n',
      );
      emit({
        name: 'statements',
        value: sqlite.statements,
        baseline: sqlite.statements,
        ratio: 1,
        goal: 'reported: statements and round trips per bind (PostgreSQL not installed: SQLite only)',
        pass: true,
        unit: 'statements/bind',
        sqlite: sqliteFigures,
        binds,
        quick,
        loadavg_start: loadStart,
      });
      return;
    }
    const server = await startPostgres({ durable: true, baseDir: base });
    try {
      const url = await server.createDatabase('bench_statements');
      const loader = await openPgStore(`${url}?options=${encodeURIComponent('-c synchronous_commit=off')}`);
      await loadFleet(loader, hosts);
      await loader.close();
      const store = await openPgStore(url);
      const postgres = await measure(store, hosts, binds);
      await store.close();
      emit({
        name: 'statements',
        value: postgres.statements,
        baseline: sqlite.statements,
        ratio: postgres.statements / sqlite.statements,
        goal: 'reported: statements and round trips per bind, PostgreSQL against SQLite',
        pass: true,
        unit: 'statements/bind',
        postgres: {
          statements_per_bind: round(postgres.statements),
          create_arq: postgres.create,
          delete_arq: postgres.delete,
          round_trips_per_bind: round(postgres.roundTrips),
          background_in_window: postgres.background,
          sequential_bind_ms: round(postgres.bindMs),
          top_statements: postgres.top,
        },
        sqlite: sqliteFigures,
        binds,
        quick,
        loadavg_start: loadStart,
      });
    } finally {
      await server.stop();
    }
  } finally {
    await dir.cleanup();
  }
}

await main();
