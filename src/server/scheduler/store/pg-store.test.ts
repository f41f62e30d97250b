/**
 * The PostgreSQL backend against the same contracts as SQLite (issue 13): the
 * store contract (every use case through UseCaseStore) and the unit-of-work
 * contract, on a real PostgreSQL server started for this file. Each test's
 * path names its own database, so a reopen finds what was acknowledged.
 */
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe } from 'vitest';
import { type PostgresServer, startPostgres } from '../../../../test/helpers/postgres.js';
import { available, postgresServer } from '../../../../test/helpers/prerequisites.js';
import { openPgStore, PgDatabase } from './pg-store.js';
import { runStoreContract } from './store-contract.js';
import { runUnitOfWorkContract } from './unit-of-work-contract.js';

const usable = available(postgresServer(), 'the PostgreSQL store contract');

let server: PostgresServer | undefined;
beforeAll(async () => {
  if (usable) server = await startPostgres();
}, 120_000);
afterAll(async () => {
  await server?.stop();
});

/** One database per test path: `berth_<hash>`. */
const databaseFor = async (path: string) =>
  server!.createDatabase(`berth_${createHash('sha256').update(path).digest('hex').slice(0, 16)}`);

// Without PostgreSQL the whole file is skipped (one line above says why), not left empty.
describe.skipIf(!usable)('PostgreSQL backend', () => {
  runStoreContract('postgres', async (path, options) => openPgStore(await databaseFor(path), options));
  runUnitOfWorkContract('postgres', async (path) => {
    const db = new PgDatabase(await databaseFor(path));
    await db.migrate();
    return db;
  });
});
