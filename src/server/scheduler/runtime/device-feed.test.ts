import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { facts, hostName, hostRegistration } from '../domain/fixtures.support.js';
import { openSqliteStore, type SqliteStore } from '../stores.js';
import { DeviceFeed } from './device-feed.js';
import { EventHub } from './event-hub.js';

describe('DeviceFeed', () => {
  let dir: string;
  let store: SqliteStore;
  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'berth-feed-'));
    store = await openSqliteStore(join(dir, 's.db'));
    await store.registerHost(hostRegistration('h1'));
  });
  afterEach(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('serves what the store has, to many readers with one read, and older history from the store', async () => {
    await store.upsertInventory(hostName('h1'), {
      kind: 'snapshot',
      revision: 1,
      devices: [facts({ index: 0 })],
    });
    const before = await store.currentRevision();
    const feed = new DeviceFeed(store);
    expect(await feed.since(before, 100)).toEqual([]);
    await store.upsertInventory(hostName('h1'), {
      kind: 'delta',
      revision: 2,
      added: [facts({ index: 1 }), facts({ index: 2 })],
      changed: [],
      removed: [],
    });
    const reads = await Promise.all(Array.from({ length: 50 }, () => feed.since(before, 100)));
    const fromStore = await store.eventsSince(before, 100);
    for (const r of reads) expect(r.map((e) => e.revision)).toEqual(fromStore.map((e) => e.revision));
    expect(reads[0]![0]!.device.address).toBe(fromStore[0]!.device.address);
    // One object per event for every reader: the service converts and encodes it once, keyed by it.
    for (const r of reads) expect(r[0]).toBe(reads[0]![0]);
    // From before the feed started: the store answers.
    expect((await feed.since(0, 100)).map((e) => e.revision)).toEqual(
      (await store.eventsSince(0, 100)).map((e) => e.revision),
    );
    // The limit and a revision in the middle.
    const mid = fromStore[0]!.revision;
    expect((await feed.since(mid, 1)).map((e) => e.revision)).toEqual([fromStore[1]!.revision]);
  });
});

describe('EventHub', () => {
  it('a wait after a missed notify returns at once (no lost wake-up)', async () => {
    const hub = new EventHub();
    const seen = hub.version;
    hub.notify(); // lands between a reader's store read and its wait
    const t0 = Date.now();
    await hub.wait(undefined, seen, 5_000);
    expect(Date.now() - t0).toBeLessThan(1_000);
  });

  it('a wait with nothing new blocks until the next notify', async () => {
    // The clock is the test's: everything the wait could act on in the next
    // 4.9 s (its own timer included) has run, and it still waits.
    vi.useFakeTimers();
    try {
      const hub = new EventHub();
      let woke = false;
      const p = hub.wait(undefined, hub.version, 5_000).then(() => {
        woke = true;
      });
      await vi.advanceTimersByTimeAsync(4_900);
      expect(woke).toBe(false);
      hub.notify();
      await p;
      expect(woke).toBe(true);
    } finally {
      vi.useRealTimers();
    }
  });
});
