import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { facts } from '../domain/test-fixtures.js';
import { openSqliteStore } from './sqlite-store.js';
import { runStoreContract } from './store-contract.js';

runStoreContract('sqlite', (path) => openSqliteStore(path));

describe('SqliteStore specifics', () => {
  it('uses WAL, records each migration once, and allocation reads through the host index', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'berth-sqlite-'));
    const path = join(dir, 's.db');
    try {
      const s1 = await openSqliteStore(path);
      await s1.registerHost({
        name: 'h1',
        endpoint: 'h1:1',
        bootId: 'b',
        agentEpoch: 'e',
        agentVersion: 'v',
        features: [],
        drivers: [],
      });
      await s1.upsertInventory('h1', { kind: 'snapshot', revision: 1, devices: [facts()] });
      await s1.close();
      await (await openSqliteStore(path)).close();
      const db = new Database(path, { readonly: true });
      try {
        expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
        const rows = db.prepare('SELECT version FROM schema_migrations').all() as Array<{ version: number }>;
        expect(rows.map((r) => r.version)).toEqual([1, 2]);
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
      } finally {
        db.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
