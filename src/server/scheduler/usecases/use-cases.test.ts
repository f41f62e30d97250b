import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { facts, hostName, hostRegistration, instanceId } from '../domain/fixtures.support.js';
import { validateProfile } from '../domain/profile.js';
import { rejection } from '../store/store-contract.support.js';
import { openSqliteStore, type SqliteStore } from '../stores.js';
import type { Change } from './use-cases.js';

const reg = hostRegistration('h1');

describe('the use cases tell of every commit', () => {
  let dir: string;
  let store: SqliteStore;
  let changes: Change[];
  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'berth-changes-'));
    store = await openSqliteStore(join(dir, 's.db'));
    changes = [];
    store.onChange((c) => changes.push(c));
  });
  afterEach(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('once per committed read-write unit, before its caller hears back; never for a read or a refused unit', async () => {
    const registered = store.registerHost(reg).then(() => changes.length);
    expect(await registered).toBe(1);
    expect(changes).toEqual([{ cleanupsOn: [] }]);
    await store.listHosts();
    await store.getHost(hostName('h1'));
    expect(changes).toHaveLength(1);
    expect((await rejection(store.deleteHost(hostName('nowhere')))).code).toBe('NOT_FOUND');
    expect((await rejection(store.createArqs({ profileName: 'none' }))).code).toBe('NOT_FOUND');
    expect(changes).toHaveLength(1);
  });

  it('names the hosts on which the unit queued cleanups, for the dispatcher', async () => {
    await store.registerHost(reg);
    await store.upsertInventory(hostName('h1'), {
      kind: 'snapshot',
      revision: 1,
      devices: [facts({ index: 0 })],
    });
    await store.createProfile(
      validateProfile({ name: 'nvme', groups: [{ resourceClass: 'CUSTOM_NVME_144D_A808' }] }),
    );
    const [arq] = await store.createArqs({ profileName: 'nvme' });
    await store.bindArqs([{ arqUuid: arq!.uuid, instanceUuid: instanceId('i1'), host: hostName('h1') }]);
    changes.length = 0;
    const { released } = await store.deleteArqs({ instanceUuid: instanceId('i1') });
    expect(released.map((d) => d.deviceState)).toEqual(['pending_cleaning']);
    expect(changes).toEqual([{ cleanupsOn: ['h1'] }]);
  });
});
