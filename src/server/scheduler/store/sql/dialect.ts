/**
 * What differs between the SQL of the two backends, and nothing else: the
 * port's queries (./unit.ts) and the schema (./schema.ts) are written once
 * and read these few words where SQLite and PostgreSQL disagree.
 *
 * Placeholders are not here: every statement is written with `?`, which
 * better-sqlite3 takes as it is and the PostgreSQL executor numbers `$1…`
 * once per text (pg-store.ts). Insert-or-ignore is not here either: SQLite
 * (3.24 and later) accepts PostgreSQL's `ON CONFLICT … DO NOTHING` / `DO
 * UPDATE`, with the same meaning for the unique keys Berth conflicts on.
 */

export interface Dialect {
  readonly name: 'sqlite' | 'postgres';
  /**
   * Appended to a read that locks what it returns (`SELECT … FOR UPDATE`).
   * Empty on SQLite: a unit's IMMEDIATE transaction holds the whole database.
   */
  readonly forUpdate: string;
  /**
   * The statement that serialises the units locking one instance (its one
   * parameter is a key naming the instance), or null where the unit's
   * transaction already serialises every writer (SQLite).
   */
  readonly lockInstance: string | null;
  /** The larger of two values: SQLite's two-argument `MAX`, PostgreSQL's `GREATEST`. */
  greatest(a: string, b: string): string;
  /**
   * The column that orders rows by creation (the ARQs of an instance, a
   * device's cleanup jobs): SQLite's implicit `rowid`, PostgreSQL's `seq`
   * identity column (schema.ts).
   */
  readonly creationOrder: string;
  /** A boolean as a column returns it (SQLite 0/1, PostgreSQL true/false). */
  bool(value: unknown): boolean;
  /** The database's time now, comparable with a `timestamp` column (claims on Nova's events). */
  readonly now: string;
  /** The database's time `ms` milliseconds from now (`ms` an SQL expression, a `?`). */
  nowPlusMs(ms: string): string;
  /** Appended to a sub-select whose rows a claim takes: rows another unit holds are passed over. */
  readonly skipLocked: string;

  // --- schema (./schema.ts) -------------------------------------------------
  /** A 64-bit integer column. */
  readonly int64: string;
  /** A boolean column. */
  readonly boolean: string;
  /** A time column (link leases; PostgreSQL compares it with `now()`). */
  readonly timestamp: string;
  /** The event log's key: increasing, never reused. */
  readonly revisionKey: string;
  /** The creation-order column's definition (with its comma), or '' where it is implicit. */
  readonly creationOrderColumn: string;
  /** Index columns ending in creation order (every SQLite index ends in the rowid already). */
  inCreationOrder(columns: string): string;
  /** A text field of the JSON `record` column (`a.b`: field b of object a). */
  recordField(field: string): string;
}

export const SQLITE: Dialect = Object.freeze({
  name: 'sqlite',
  forUpdate: '',
  lockInstance: null,
  greatest: (a: string, b: string) => `MAX(${a}, ${b})`,
  creationOrder: 'rowid',
  bool: (v: unknown) => v === 1 || v === true,
  // ISO 8601 to the millisecond, as text: ordered as the times are.
  now: "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
  nowPlusMs: (ms: string) => `strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('%+.3f seconds', ${ms} / 1000.0))`,
  skipLocked: '',
  int64: 'INTEGER',
  boolean: 'INTEGER',
  timestamp: 'TEXT',
  // AUTOINCREMENT: revisions strictly increase and are never reused.
  revisionKey: 'INTEGER PRIMARY KEY AUTOINCREMENT',
  creationOrderColumn: '',
  inCreationOrder: (columns: string) => columns,
  recordField: (field: string) => `json_extract(record, '$.${field}')`,
});

export const POSTGRES: Dialect = Object.freeze({
  name: 'postgres',
  forUpdate: ' FOR UPDATE',
  lockInstance: 'SELECT pg_advisory_xact_lock(hashtextextended(?, 0))',
  greatest: (a: string, b: string) => `GREATEST(${a}, ${b})`,
  creationOrder: 'seq',
  bool: (v: unknown) => v === true,
  now: 'now()',
  nowPlusMs: (ms: string) => `now() + ${ms} * interval '1 millisecond'`,
  skipLocked: ' FOR UPDATE SKIP LOCKED',
  int64: 'BIGINT',
  boolean: 'BOOLEAN',
  timestamp: 'TIMESTAMPTZ',
  // Taken under one advisory lock held to COMMIT, so revisions follow commit order (pg-store.ts).
  revisionKey: 'BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY',
  creationOrderColumn: 'seq BIGINT GENERATED ALWAYS AS IDENTITY,',
  inCreationOrder: (columns: string) => `${columns}, seq`,
  recordField: (field: string) =>
    field.includes('.')
      ? `(record::jsonb #>> '{${field.replaceAll('.', ',')}}')`
      : `(record::jsonb ->> '${field}')`,
});
