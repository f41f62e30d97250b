import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BerthError } from '../../../errors.js';
import { facts, hostName } from '../domain/fixtures.support.js';
import { openSqliteStore } from '../stores.js';
import { runMediaContract } from './media-contract.support.js';
import { runNovaClaimsContract } from './nova-claims-contract.support.js';
import { SQLITE } from './sql/dialect.js';
import { LEGACY_SQLITE_MIGRATIONS } from './sql/legacy-schema.fixture.js';
import { claimSql, OWED_COUNT_SQL } from './sql/nova-claims.js';
import { SqliteDatabase } from './sqlite-store.js';
import { runStoreContract } from './store-contract.support.js';
import { hostRecord, runUnitOfWorkContract } from './unit-of-work-contract.support.js';
import { runUpgradeContract } from './upgrade-contract.support.js';

runStoreContract('sqlite', (path, options) => openSqliteStore(path, options));
runMediaContract('sqlite', (path, options) => openSqliteStore(path, options));
runNovaClaimsContract('sqlite', (path, options) => openSqliteStore(path, options));
runUnitOfWorkContract('sqlite', async (path) => new SqliteDatabase(path));
runUpgradeContract('sqlite', {
  async legacy(path, upTo) {
    // As SqliteDatabase did before the one schema sequence: each migration once, recorded.
    const db = new Database(path);
    db.pragma('journal_mode = WAL');
    db.exec(
      'CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)',
    );
    for (const m of LEGACY_SQLITE_MIGRATIONS.filter((m) => m.version <= upTo)) {
      db.exec(m.sql);
      db.prepare('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)').run(
        m.version,
        m.name,
        new Date().toISOString(),
      );
    }
    return {
      exec: async (sql, params = []) => {
        db.prepare(sql).run(...params.map((v) => (typeof v === 'boolean' ? Number(v) : v)));
      },
      close: async () => void db.close(),
    };
  },
  open: (path, options) => openSqliteStore(path, options),
  async structure(path) {
    const db = new Database(path, { readonly: true });
    try {
      const rows = db
        .prepare(
          "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name",
        )
        .all() as Array<{ type: string; name: string; tbl_name: string; sql: string }>;
      return rows.map((r) => `${r.type} ${r.name} on ${r.tbl_name}: ${r.sql.replace(/\s+/g, ' ')}`);
    } finally {
      db.close();
    }
  },
});

describe('SqliteStore specifics', () => {
  it('uses WAL, records each migration once, and allocation reads through the host index', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'berth-sqlite-'));
    const path = join(dir, 's.db');
    try {
      const s1 = await openSqliteStore(path);
      await s1.registerHost({
        name: hostName('h1'),
        endpoint: 'h1:1',
        bootId: 'b',
        agentEpoch: 'e',
        agentVersion: 'v',
        features: [],
        drivers: [],
      });
      await s1.upsertInventory(hostName('h1'), { kind: 'snapshot', revision: 1, devices: [facts()] });
      await s1.close();
      await (await openSqliteStore(path)).close();
      const db = new Database(path, { readonly: true });
      try {
        expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
        const rows = db.prepare('SELECT version FROM schema_migrations').all() as Array<{ version: number }>;
        expect(rows.map((r) => r.version)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9]);
        const plan = db
          .prepare(
            "EXPLAIN QUERY PLAN SELECT record FROM devices WHERE host = ? AND resource_class = ? AND device_state = 'available'",
          )
          .all('h1', 'X') as Array<{ detail: string }>;
        expect(plan.map((p) => p.detail).join(' ')).toMatch(/USING INDEX devices_host_class_state/);
        const arqPlan = db
          .prepare('EXPLAIN QUERY PLAN SELECT record FROM arqs WHERE instance_uuid = ?')
          .all('i') as Array<{ detail: string }>;
        expect(arqPlan.map((p) => p.detail).join(' ')).toMatch(/arqs_instance/);
        // Nova's senders read only the owed events (decision 77), through their partial index.
        for (const sql of [
          OWED_COUNT_SQL,
          claimSql(SQLITE)
            .replace(/^UPDATE[\s\S]*?IN \(/, '')
            .replace(/\)\s+AND[\s\S]*$/, ''),
        ]) {
          const owedPlan = db
            .prepare(`EXPLAIN QUERY PLAN ${sql}`)
            .all(...(sql.includes('?') ? [10] : [])) as Array<{
            detail: string;
          }>;
          expect(owedPlan.map((p) => p.detail).join(' '), sql).toMatch(/arqs_nova_owed/);
        }
      } finally {
        db.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('SqliteDatabase: group commit and serialised units', () => {
  let dir: string;
  let db: SqliteDatabase;
  /** A second connection on the same file: it sees only what was committed. */
  let other: Database.Database;
  const committed = (name: string) =>
    other.prepare('SELECT 1 FROM hosts WHERE name = ?').get(name) !== undefined;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'berth-sqlite-gc-'));
    db = new SqliteDatabase(join(dir, 's.db'));
    other = new Database(join(dir, 's.db'), { readonly: true });
  });
  afterEach(async () => {
    other.close();
    await db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('units of one turn share one transaction, each acknowledged only after its COMMIT', async () => {
    const seenByOthers: boolean[] = [];
    const answered: boolean[] = [];
    const units = ['a', 'b', 'c'].map((name, i) =>
      db
        .run(async (uow) => {
          await uow.putHost(hostRecord(name));
          // While the third unit runs, the first two are written but not committed.
          if (i === 2) seenByOthers.push(committed('a'), committed('b'), committed('c'));
          return name;
        })
        .then((v) => {
          answered.push(committed(v));
          return v;
        }),
    );
    expect(await Promise.all(units)).toEqual(['a', 'b', 'c']);
    expect(seenByOthers).toEqual([false, false, false]);
    expect(answered).toEqual([true, true, true]);
  });

  it('a unit that throws rolls back alone; the others of its batch commit', async () => {
    const results = await Promise.allSettled([
      db.run((uow) => uow.putHost(hostRecord('a'))),
      db.run(async (uow) => {
        await uow.putHost(hostRecord('b'));
        throw new BerthError('FAILED_PRECONDITION', 'no');
      }),
      db.run((uow) => uow.putHost(hostRecord('c'))),
    ]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect(['a', 'b', 'c'].map(committed)).toEqual([true, false, true]);
  });

  it('two units never interleave on the connection, and a read waits for the batch to end', async () => {
    const trace: string[] = [];
    let readDuringBatch: Promise<unknown> | undefined;
    const unit = (name: string) =>
      db.run(async (uow) => {
        for (let step = 0; step < 3; step++) {
          trace.push(`${name}${step}`);
          await uow.host(name);
        }
        await uow.putHost(hostRecord(name));
        // Asked for mid-batch, answered after it: never an uncommitted (here rolled-back) row.
        readDuringBatch ??= db.read((r) => r.host('x'));
        if (name === 'x') throw new BerthError('ABORTED', 'roll x back');
      });
    const settled = await Promise.allSettled([unit('x'), unit('y')]);
    expect(settled.map((s) => s.status)).toEqual(['rejected', 'fulfilled']);
    expect(trace).toEqual(['x0', 'x1', 'x2', 'y0', 'y1', 'y2']);
    expect(await readDuringBatch).toBeNull();
  });

  it('a unit used after it ended is refused', async () => {
    let leaked: { host(name: string): Promise<unknown> } | undefined;
    await db.run(async (uow) => {
      leaked = uow;
    });
    await expect(leaked!.host('a')).rejects.toThrow(/after it ended/);
  });
});
