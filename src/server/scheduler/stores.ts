/**
 * The scheduler's store: a backend (store/, the unit-of-work port's adapters)
 * composed with the use cases (usecases/). This is the one module that knows
 * both; a backend knows only the port it implements (issue 41 item 8, the
 * `store-only-the-port` rule), and the scheduler, the tests and the
 * benchmarks open their stores here.
 */
import { openPgDatabase, type PgDatabase, type PgDatabaseOptions } from './store/pg-store.js';
import { SqliteDatabase, type SqliteDatabaseOptions } from './store/sqlite-store.js';
import { type UseCases, type UseCasesOptions, useCasesOver } from './usecases/use-cases.js';

/** The use cases over SQLite; `db` is the backend. */
export type SqliteStore = UseCases<SqliteDatabase>;

/** The use cases over PostgreSQL; `db` is the backend. */
export type PgStore = UseCases<PgDatabase>;

/** Opens (creating and migrating if needed) a store on the SQLite file `path` (`:memory:` for none). */
export async function openSqliteStore(
  path: string,
  options: SqliteDatabaseOptions & UseCasesOptions = {},
): Promise<SqliteStore> {
  return useCasesOver(new SqliteDatabase(path, options), options);
}

/** Opens (creating the schema and migrating if needed) a store on a `postgres://` URL. */
export async function openPgStore(
  url: string,
  options: PgDatabaseOptions & UseCasesOptions = {},
): Promise<PgStore> {
  return useCasesOver(await openPgDatabase(url, options), options);
}
