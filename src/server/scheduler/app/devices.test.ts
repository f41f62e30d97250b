/**
 * WatchDevices' initial state read a page at a time (decision 71): with
 * changes committed between the pages — to devices whose page was read, to
 * devices whose page was not, devices removed on both sides — the client's
 * state at `synced` equals the store's, and no change is told twice or lost.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { DeviceRecord } from '../domain/device-state.js';
import { hostName, hostRegistration, pciFacts } from '../domain/fixtures.support.js';
import { DeviceFeed } from '../runtime/device-feed.js';
import { EventHub } from '../runtime/event-hub.js';
import { openSqliteStore, type SqliteStore } from '../stores.js';
import { Devices, type DeviceWatchItem } from './devices.js';

const HOSTS = ['h-a', 'h-b', 'h-c', 'h-d', 'h-e'];
const PER_HOST = 6;

describe('WatchDevices, initial state in pages', () => {
  let dir: string;
  let store: SqliteStore;
  let hub: EventHub;
  let devices: Devices;

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'berth-watch-pages-'));
    store = await openSqliteStore(join(dir, 'scheduler.db'));
    hub = new EventHub();
    store.onChange(() => hub.notify());
    for (const name of HOSTS) {
      await store.registerHost(hostRegistration(name));
      const facts = Array.from({ length: PER_HOST }, (_, index) => pciFacts({ index }));
      await store.upsertInventory(hostName(name), { kind: 'snapshot', revision: 1, devices: facts });
    }
    devices = new Devices({
      useCases: store,
      hub,
      feed: new DeviceFeed(store),
      placement: null,
      snapshotPage: 7,
    });
  });
  afterEach(async () => {
    hub.close();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Everything the store holds now, by uuid, in the watch's terms (status and state). */
  const storeState = async () => {
    const page = await store.listDevices({}, { pageSize: 5000 });
    return new Map(page.devices.map((d) => [d.uuid, summary(d)]));
  };
  const summary = (d: DeviceRecord) => `${d.host} ${d.address} ${d.status} ${d.deviceState}`;

  it('folds to the store at synced, with changes between the pages told once', async () => {
    const all = (await store.listDevices({}, { pageSize: 5000 })).devices;
    const byUuid = [...all].sort((a, b) => (a.uuid < b.uuid ? -1 : 1));
    expect(byUuid).toHaveLength(HOSTS.length * PER_HOST);
    const stop = new AbortController();
    const items: DeviceWatchItem[] = [];
    const held = new Map<string, string>();
    let changedAt = -1;
    let laterUuid = '';
    for await (const item of devices.watch({}, 0, stop.signal)) {
      items.push(item);
      if (item.kind === 'initial') held.set(item.device.uuid, summary(item.device));
      if (item.kind === 'change') {
        if (item.event.removed) held.delete(item.event.device.uuid);
        else held.set(item.event.device.uuid, summary(item.event.device));
      }
      // After the first page: change one device already shown and one not yet
      // read (its page will show the change; it must not come again), and take a
      // whole host away (some of its devices shown, some not).
      if (item.kind === 'initial' && items.length === 7 && changedAt < 0) {
        // A host with devices still to come and none changed here (a device in
        // maintenance would keep its host from being deleted).
        const shown = byUuid[0]!;
        const victim = byUuid.find((d) => !held.has(d.uuid) && d.host !== shown.host)!.host;
        const later = [...byUuid].reverse().find((d) => !held.has(d.uuid) && d.host !== victim)!;
        laterUuid = later.uuid;
        await store.setDeviceStatus({ uuid: shown.uuid }, 'maintaining');
        await store.setDeviceStatus({ uuid: later.uuid }, 'maintaining');
        await store.deleteHost(hostName(victim));
        changedAt = await store.currentRevision();
      }
      if (item.kind === 'synced') break;
    }
    stop.abort();
    expect(changedAt).toBeGreaterThan(0);
    const synced = items[items.length - 1]!;
    expect(synced).toMatchObject({ kind: 'synced' });
    expect((synced as { revision: number }).revision).toBeGreaterThanOrEqual(changedAt);
    // The client's state at synced is the store's.
    expect(held).toEqual(await storeState());
    // No device shown twice in the initial state, no change told twice.
    const initial = items.filter((i) => i.kind === 'initial').map((i) => i.device.uuid);
    expect(new Set(initial).size).toBe(initial.length);
    const changes = items.flatMap((i) => (i.kind === 'change' ? [i.event.revision] : []));
    expect(new Set(changes).size).toBe(changes.length);
    expect(changes).toEqual([...changes].sort((a, b) => a - b));
    // The device changed before its page was read came once, in its page, changed.
    const later = laterUuid;
    const aboutLater = items.filter(
      (i) =>
        (i.kind === 'initial' && i.device.uuid === later) ||
        (i.kind === 'change' && i.event.device.uuid === later),
    );
    expect(aboutLater).toHaveLength(1);
    expect(aboutLater[0]).toMatchObject({ kind: 'initial', device: { status: 'maintaining' } });
  });

  it('goes on with the changes after synced, and a state filter still tells a device leaving it', async () => {
    const stop = new AbortController();
    const it = devices.watch({ state: 'available' }, 0, stop.signal);
    let n = 0;
    for (;;) {
      const { value } = await it.next();
      if (value?.kind === 'synced') break;
      n++;
    }
    expect(n).toBe(HOSTS.length * PER_HOST);
    const one = (await store.listDevices({}, { pageSize: 1 })).devices[0]!;
    const pending = it.next();
    await store.deleteHost(hostName(one.host));
    const { value } = await pending;
    expect(value).toMatchObject({ kind: 'change', event: { removed: true } });
    stop.abort();
  });
});
