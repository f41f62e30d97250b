/**
 * The floor under PostgreSQL's CPU per bind cycle (issue 42 item 4, decision
 * 92): what the round trips alone cost, before any of Berth's own work.
 *
 * - `countRoundTrips` makes the scheduler processes started after it count
 *   their round trips to the database (bench/round-trip-counter.mjs, preloaded
 *   with NODE_OPTIONS): one call of node-pg's `Client.prototype.query` is one
 *   round trip, as bench/statements.ts counts them, but over the measured loop
 *   itself, with its concurrency (coalesced NOTIFYs, lease renewals, retried
 *   units included).
 * - `bareRoundTripCost` measures the CPU of one round trip of a bare node-pg
 *   client against the same server in the same run: CONCURRENCY loops through
 *   a pool of the scheduler's size, each a named prepared primary-key read of
 *   a host (the cheapest statement Berth sends alone); this process's CPU and
 *   the server's (bench/lib.ts cpuMeter) per round trip.
 *
 * Round trips per cycle × that cost is the floor: what a scheduler speaking
 * node-pg to PostgreSQL pays a cycle even if everything else were free. On
 * SQLite the floor is 0 (the database is in the scheduler's process).
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { hostName } from './bind-harness.js';
import { cpuMeter, nowMs, sleep } from './lib.js';

const PRELOAD = fileURLToPath(new URL('./round-trip-counter.mjs', import.meta.url));

/** Reads how many round trips scheduler processes made so far. */
export interface RoundTripCounter {
  /** The round trips the processes `pids` made since they started, summed. */
  read(pids: readonly number[]): Promise<number>;
  /** Stops preloading the counter into new processes and removes its directory. */
  close(): void;
}

/**
 * Makes every Node process started from now on by this one (the schedulers:
 * bin/berth runs node) count its round trips to PostgreSQL; `read` asks them
 * (SIGUSR2) for their counts.
 */
export function countRoundTrips(): RoundTripCounter {
  const dir = mkdtempSync(join(tmpdir(), 'berth-round-trips-'));
  const before = { options: process.env.NODE_OPTIONS, dir: process.env.BERTH_BENCH_ROUND_TRIPS_DIR };
  process.env.BERTH_BENCH_ROUND_TRIPS_DIR = dir;
  process.env.NODE_OPTIONS = `${before.options ?? ''} --import ${PRELOAD}`.trim();
  return {
    async read(pids) {
      let total = 0;
      for (const pid of pids) {
        const file = join(dir, String(pid));
        rmSync(file, { force: true });
        process.kill(pid, 'SIGUSR2');
        const deadline = nowMs() + 10_000;
        while (!existsSync(file)) {
          if (nowMs() > deadline)
            throw new Error(`scheduler process ${pid} did not report its round trips (preload ${PRELOAD})`);
          await sleep(5);
        }
        total += Number(readFileSync(file, 'utf8'));
      }
      return total;
    },
    close() {
      if (before.options === undefined) delete process.env.NODE_OPTIONS;
      else process.env.NODE_OPTIONS = before.options;
      if (before.dir === undefined) delete process.env.BERTH_BENCH_ROUND_TRIPS_DIR;
      else process.env.BERTH_BENCH_ROUND_TRIPS_DIR = before.dir;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** CPU of one round trip of a bare node-pg client, and how fast they went. */
export interface RoundTripCost {
  roundTrips: number;
  perSecond: number;
  /** CPU µs per round trip: this process (the client) and the PostgreSQL server. */
  clientUs: number;
  serverUs: number;
}

/**
 * `concurrency` loops, for `seconds` after a short warm-up, each reading one
 * host by primary key (`SELECT record FROM hosts WHERE name = $1`, a named
 * prepared statement) through one pool of `poolSize` connections to `url`
 * (a database with the bench fleet of `hosts` hosts), whose server's
 * postmaster is `postmaster`.
 */
export async function bareRoundTripCost(
  url: string,
  postmaster: number,
  hosts: number,
  seconds: number,
  concurrency = 64,
  poolSize = 10,
): Promise<RoundTripCost> {
  const pool = new pg.Pool({ connectionString: url, max: poolSize });
  let done = 0;
  const loops = async (until: number) => {
    let next = 0;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (nowMs() < until) {
          const name = hostName(next++ % hosts);
          const r = await pool.query({
            name: 'bench_floor_read',
            text: 'SELECT record FROM hosts WHERE name = $1',
            values: [name],
          });
          if (r.rowCount !== 1) throw new Error(`floor: host ${name} not found in ${url}`);
          done++;
        }
      }),
    );
  };
  try {
    await loops(nowMs() + Math.min(1_000, seconds * 200));
    done = 0;
    const used = cpuMeter([], postmaster);
    const t0 = nowMs();
    await loops(t0 + seconds * 1000);
    const wall = (nowMs() - t0) / 1000;
    const cpu = used();
    const n = Math.max(1, done);
    return {
      roundTrips: done,
      perSecond: done / wall,
      clientUs: (cpu.clients * 1e6) / n,
      serverUs: (cpu.postgres * 1e6) / n,
    };
  } finally {
    await pool.end();
  }
}
