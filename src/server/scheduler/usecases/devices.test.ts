import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { facts, hostName, hostRegistration } from '../domain/fixtures.support.js';
import { rejection } from '../store/store-contract.support.js';
import { openSqliteStore, type SqliteStore } from '../stores.js';

describe('inventory use case', () => {
  let dir: string;
  let store: SqliteStore;
  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'berth-inventory-'));
    store = await openSqliteStore(join(dir, 's.db'));
    await store.registerHost(hostRegistration('h1'));
  });
  afterEach(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('an update naming one address twice is INVALID_ARGUMENT naming the entry, and changes nothing', async () => {
    const snapshot = await rejection(
      store.upsertInventory(hostName('h1'), {
        kind: 'snapshot',
        revision: 1,
        devices: [facts({ index: 0 }), facts({ index: 0 })],
      }),
    );
    expect([snapshot.code, snapshot.fieldViolations[0]?.field]).toEqual([
      'INVALID_ARGUMENT',
      'devices[1].address',
    ]);
    expect(snapshot.message).toContain('0000:10:00.0');
    const delta = await rejection(
      store.upsertInventory(hostName('h1'), {
        kind: 'delta',
        revision: 2,
        added: [facts({ index: 1 })],
        changed: [facts({ index: 1 })],
        removed: [],
      }),
    );
    expect(delta.code).toBe('INVALID_ARGUMENT');
    expect((await store.listDevices({ host: hostName('h1') })).devices).toEqual([]);
    expect((await store.getHost(hostName('h1'))).inventoryRevision).toBe(0);
  });
});
