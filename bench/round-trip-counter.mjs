/**
 * Preloaded into the scheduler processes of a benchmark (`NODE_OPTIONS=--import`,
 * bench/pg-floor.ts `countRoundTrips`): counts node-pg's round trips to the
 * database — calls of `Client.prototype.query`, one request and its answer each
 * (a string of several statements is one), as bench/statements.ts counts them —
 * and on SIGUSR2 writes the count so far to BERTH_BENCH_ROUND_TRIPS_DIR/<pid>.
 * Plain JavaScript: the schedulers run dist/ with node, without a TypeScript loader.
 */
import { renameSync, writeFileSync } from 'node:fs';
import pg from 'pg';

const dir = process.env.BERTH_BENCH_ROUND_TRIPS_DIR;
if (dir) {
  let count = 0;
  const query = pg.Client.prototype.query;
  pg.Client.prototype.query = function (...args) {
    count++;
    return query.apply(this, args);
  };
  process.on('SIGUSR2', () => {
    const tmp = `${dir}/.${process.pid}`;
    writeFileSync(tmp, String(count));
    renameSync(tmp, `${dir}/${process.pid}`);
  });
}
