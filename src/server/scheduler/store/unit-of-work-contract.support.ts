/**
 * The contract every unit-of-work backend must pass, below the use cases: what
 * the store contract (store-contract.ts) relies on but cannot see from
 * outside — rollback of a failed unit, the generation compare-and-set, event
 * revisions, locked read-modify-write under concurrency, acknowledgement after
 * commit. A backend's test file calls `runUnitOfWorkContract` with a factory.
 */

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BerthError } from '../../../errors.js';
import type { CleanupJob } from '../domain/cleanup.js';
import { type DeviceRecord, newDevice } from '../domain/device-state.js';
import { facts, hostName, nvmeMedia, pci, testUuid } from '../domain/fixtures.support.js';
import type { HostRecord } from '../domain/host.js';
import { firstSight } from '../domain/media.js';
import {
  FOR_UPDATE,
  NAMES_PER_QUERY,
  type TransactionRunner,
  type UnitOfWork,
} from '../usecases/unit-of-work.js';
import { rejection } from './store-contract.support.js';

export type OpenRunner = (path: string) => Promise<TransactionRunner>;

const NOW = '2026-01-01T00:00:00.000Z';

export const hostRecord = (name: string, registrations = 1): HostRecord => ({
  name: hostName(name),
  endpoint: `${name}:7071`,
  bootId: 'b',
  agentEpoch: 'e',
  agentVersion: 'v',
  features: [],
  drivers: [],
  registrations,
  connected: false,
  registeredAt: NOW,
  lastSeen: NOW,
  inventoryRevision: 0,
  deviceCount: 0,
});

const device = (uuid: string, index = 0): DeviceRecord => ({
  ...newDevice(hostName('h1'), facts({ index }), testUuid(uuid), NOW),
  generation: 1,
});

export function runUnitOfWorkContract(name: string, open: OpenRunner): void {
  describe(`Unit-of-work contract: ${name}`, () => {
    let dir: string;
    let path: string;
    let db: TransactionRunner;

    beforeEach(async () => {
      dir = mkdtempSync(join(tmpdir(), 'berth-uow-'));
      path = join(dir, 'scheduler.db');
      db = await open(path);
    });
    afterEach(async () => {
      await db.close();
      rmSync(dir, { recursive: true, force: true });
    });

    it('what a unit wrote is read back as written, by copy, and survives a reopen', async () => {
      const d = device('d-1');
      await db.run(async (uow) => {
        await uow.putHost(hostRecord('h1'));
        await uow.putDevice(d, null);
        await uow.appendDeviceEvent(d);
      });
      const read = await db.read((r) => r.device({ host: hostName('h1'), address: d.address }));
      expect(read).toEqual(d);
      read!.deviceState = 'error';
      expect((await db.read((r) => r.device({ uuid: testUuid('d-1') })))!.deviceState).toBe('available');
      await db.close();
      db = await open(path);
      expect(await db.read((r) => r.host('h1'))).toEqual(hostRecord('h1'));
      expect(await db.read((r) => r.deviceCount('h1'))).toBe(1);
    });

    it('devices by addresses or media keys, media by keys: only those named, in order; none named is none; beyond the bound refused', async () => {
      const ds = [0, 1, 2, 3].map((i) => ({
        ...newDevice(
          hostName('h1'),
          facts({ index: i, ...nvmeMedia(`nqn.test:m${i % 3}`) }),
          testUuid(`d-${i}`),
          NOW,
        ),
        generation: 1,
      }));
      await db.run(async (uow) => {
        await uow.putHost(hostRecord('h1'));
        for (const d of ds) await uow.putDevice(d, null);
        for (const d of [ds[0]!, ds[2]!]) await uow.putMedia(firstSight(d, null, NOW));
      });
      const named = [ds[3]!.address, ds[1]!.address, '0000:ff:1f.7'];
      const got = await db.run((uow) => uow.devices({ host: hostName('h1'), addresses: named }, FOR_UPDATE));
      expect(got.map((d) => d.address)).toEqual([ds[1]!.address, ds[3]!.address]);
      expect(await db.read((r) => r.devices({ host: hostName('h2'), addresses: named }))).toEqual([]);
      expect(await db.read((r) => r.devices({ host: hostName('h1'), addresses: [] }))).toEqual([]);
      // m0 has devices 0 and 3; m2 has device 2 and m1 device 1, but only m0 and m2 have records.
      const keys = ['nvme:nqn.test:m2', 'nvme:nqn.test:m0', 'nvme:nqn.test:none'];
      const byMedia = await db.run((uow) => uow.devices({ mediaKeys: keys }, FOR_UPDATE));
      expect(byMedia.map((d) => d.uuid)).toEqual(['d-0', 'd-2', 'd-3']);
      const media = await db.run((uow) => uow.mediaByKeys(keys, FOR_UPDATE));
      expect(media.map((m) => m.key)).toEqual(['nvme:nqn.test:m0', 'nvme:nqn.test:m2']);
      expect(await db.read((r) => r.mediaByKeys([]))).toEqual([]);
      const tooMany = Array.from({ length: NAMES_PER_QUERY + 1 }, () => ds[0]!.address);
      await expect(db.read((r) => r.devices({ host: hostName('h1'), addresses: tooMany }))).rejects.toThrow(
        /more than 500/,
      );
      await expect(db.read((r) => r.mediaByKeys(tooMany))).rejects.toThrow(/more than 500/);
    });

    it('a unit that throws leaves nothing, events included, and its error passes through unchanged', async () => {
      const before = await db.read((r) => r.currentRevision());
      const mine = new BerthError('FAILED_PRECONDITION', 'no', { reason: 'DEVICE_ALLOCATED' });
      const e = await rejection(
        db.run(async (uow) => {
          await uow.putHost(hostRecord('h1'));
          await uow.putDevice(device('d-1'), null);
          await uow.appendDeviceEvent(device('d-1'));
          throw mine;
        }),
      );
      expect(e).toBe(mine);
      expect(await db.read((r) => r.host('h1'))).toBeNull();
      expect(await db.read((r) => r.device({ uuid: testUuid('d-1') }))).toBeNull();
      expect(await db.read((r) => r.currentRevision())).toBe(before);
    });

    it("values with quotes, question marks and backslashes are stored as given, in a unit's first statement or a later one", async () => {
      // PostgreSQL sends a unit's first statement with BEGIN, its values as literals (decision 59).
      // Host names are parsed identifiers (decision 60), so the odd values travel in the record's other fields.
      const odd = ["it's", 'a?b', 'back\\slash', "?', '?", 'null', '$1'];
      const name = (i: number) => `odd-${i}`;
      const record = (i: number, endpoint: string) => ({
        ...hostRecord(name(i)),
        agentVersion: odd[i]!,
        endpoint,
      });
      for (const i of odd.keys()) await db.run((uow) => uow.putHost(record(i, odd[i]!)));
      await db.run(async (uow) => {
        await uow.putHost(hostRecord('first'));
        for (const i of odd.keys()) await uow.putHost(record(i, `${odd[i]}?`));
      });
      for (const i of odd.keys()) {
        expect(await db.read((r) => r.host(hostName(name(i))))).toEqual(record(i, `${odd[i]}?`));
      }
      expect((await db.read((r) => r.hosts({ after: name(2), limit: 1 }))).map((h) => h.name)).toEqual([
        name(3),
      ]);
    });

    it('a write that fails fails its unit, even as its last statement, and leaves nothing of it', async () => {
      // PostgreSQL sends a write whose result the unit does not use with the next statement or with COMMIT.
      const profile = { name: 'p', uuid: 'u-1', description: '', groups: [], createdAt: NOW };
      await db.run((uow) => uow.insertProfile(profile));
      // (Below the use cases a duplicate name is the driver's error: they check names under lock.)
      // The failure at the unit's end last: its connection must not go back to the pool mid-transaction.
      await expect(
        db.run(async (uow) => {
          await uow.insertProfile({ ...profile, uuid: 'u-3' });
          await uow.putHost(hostRecord('h2'));
          await uow.host('h2');
        }),
      ).rejects.toThrow();
      await expect(
        db.run(async (uow) => {
          await uow.putHost(hostRecord('h1'));
          await uow.insertProfile({ ...profile, uuid: 'u-2' });
        }),
      ).rejects.toThrow();
      // The connections those units used are whole: later units on them work.
      await Promise.all(
        Array.from({ length: 12 }, (_, i) => db.run((uow) => uow.putHost(hostRecord(`after-${i}`)))),
      );
      expect((await db.read((r) => r.hosts())).map((h) => h.name)).toEqual(
        Array.from({ length: 12 }, (_, i) => `after-${i}`).sort(),
      );
      expect((await db.read((r) => r.profiles())).map((p) => p.uuid)).toEqual(['u-1']);
    });

    it('putDevice is a compare-and-set on the generation: a stale write changes nothing', async () => {
      const d = device('d-1');
      await db.run((uow) => uow.putDevice(d, null));
      const stale = await rejection(
        db.run((uow) => uow.putDevice({ ...d, generation: 3, status: 'maintaining' }, 2)),
      );
      expect([stale.code, stale.reason]).toEqual(['ABORTED', 'CONCURRENT_UPDATE']);
      const again = await rejection(db.run((uow) => uow.putDevice({ ...d, deviceState: 'error' }, null)));
      expect([again.code, again.reason]).toEqual(['ABORTED', 'CONCURRENT_UPDATE']);
      expect(await db.read((r) => r.device({ uuid: testUuid('d-1') }))).toEqual(d);
      await db.run((uow) => uow.putDevice({ ...d, generation: 2, status: 'maintaining' }, 1));
      expect((await db.read((r) => r.device({ uuid: testUuid('d-1') })))!.generation).toBe(2);
    });

    it('a stale compare-and-set fails its unit by the next statement: nothing after it runs, nothing of it is written', async () => {
      const d = device('d-1');
      await db.run((uow) => uow.putDevice(d, null));
      const reached: string[] = [];
      const stale = await rejection(
        db.run(async (uow) => {
          await uow.putDevice(device('d-2'), null);
          await uow.putDevice({ ...d, generation: 3, status: 'maintaining' }, 2);
          reached.push('after the write');
          // PostgreSQL sends the write with this read (decision 91): the read is what fails.
          await uow.device({ uuid: testUuid('d-1') });
          reached.push('after the read');
        }),
      );
      expect([stale.code, stale.reason]).toEqual(['ABORTED', 'CONCURRENT_UPDATE']);
      expect(stale.message).toMatch(/changed while it was being written/);
      expect(reached).not.toContain('after the read');
      expect(await db.read((r) => r.device({ uuid: testUuid('d-2') }))).toBeNull();
      expect(await db.read((r) => r.device({ uuid: testUuid('d-1') }))).toEqual(d);
    });

    it('appended events get increasing revisions in commit order, resumable from any of them', async () => {
      const r0 = await db.read((r) => r.currentRevision());
      await db.run((uow) => uow.putDevice(device('d-1'), null));
      // Units that commit one after another: revisions follow their order.
      for (let g = 1; g <= 5; g++) {
        const rec = { ...device('d-1'), generation: g };
        await db.run((uow) => uow.appendDeviceEvent(rec));
      }
      // Concurrent units: whatever the order, every revision is distinct and increasing.
      await Promise.all(
        [6, 7, 8].map((g) => db.run((uow) => uow.appendDeviceEvent({ ...device('d-1'), generation: g }))),
      );
      const events = await db.read((r) => r.eventsSince(r0, 100));
      expect(events.slice(0, 5).map((e) => e.device.generation)).toEqual([1, 2, 3, 4, 5]);
      const revs = events.map((e) => e.revision);
      expect(revs.every((r, i) => i === 0 || r > revs[i - 1]!)).toBe(true);
      expect(await db.read((r) => r.currentRevision())).toBe(revs[revs.length - 1]);
      expect((await db.read((r) => r.eventsSince(revs[4]!, 100))).map((e) => e.revision)).toEqual(
        revs.slice(5),
      );
      expect(await db.read((r) => r.eventsSince(revs[0]!, 2))).toHaveLength(2);
    });

    it('many concurrent writers: watchers see every event once, each device in commit order, and resume from any revision', async () => {
      // Writers bump shared devices (row-locked, so each device's events have a
      // commit order: generations 2, 3, 4…) and private ones, some two events a
      // unit; watchers read the log while they write. Watcher A follows from
      // its cursor; watcher B a few times forgets a random tail of what it saw
      // and resumes from the last revision it kept, as a client resuming a
      // WatchDevices stream does.
      const SHARED = 4;
      const WRITERS = 12;
      const UNITS = 20;
      const log = { eventLog: true };
      let seed = 7;
      const random = (n: number) => {
        seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
        return seed % n;
      };
      const uuids = [
        ...Array.from({ length: SHARED }, (_, i) => `shared-${i}`),
        ...Array.from({ length: WRITERS }, (_, w) => `own-${w}`),
      ];
      await db.run(async (uow) => {
        for (const [i, uuid] of uuids.entries()) await uow.putDevice(device(uuid, i), null);
      });
      const start = await db.read((r) => r.currentRevision(), log);
      let committed = 0;
      let writing = true;
      const bump = async (uow: UnitOfWork, uuid: string) => {
        const d = (await uow.device({ uuid: testUuid(uuid) }, FOR_UPDATE))!;
        const next = { ...d, generation: d.generation + 1 };
        await uow.putDevice(next, d.generation);
        await uow.appendDeviceEvent(next);
      };
      const writer = async (w: number) => {
        for (let u = 0; u < UNITS; u++) {
          const both = u % 3 === 0;
          const shared = `shared-${(w + u) % SHARED}`;
          await db.run(async (uow) => {
            await bump(uow, u % 2 === 0 ? shared : `own-${w}`);
            if (both) await bump(uow, `own-${w}`);
          });
          committed += both ? 2 : 1;
        }
      };
      type Seen = { revision: number; uuid: string; generation: number };
      const page = async (after: number, limit: number): Promise<Seen[]> =>
        (await db.read((r) => r.eventsSince(after, limit), log)).map((e) => ({
          revision: e.revision,
          uuid: e.device.uuid,
          generation: e.device.generation,
        }));
      const follow = async (forget: boolean): Promise<Seen[]> => {
        const seen: Seen[] = [];
        let cursor = start;
        let forgets = forget ? 8 : 0;
        for (;;) {
          const done = !writing;
          const got = await page(cursor, 1 + random(9));
          for (const e of got) {
            expect(e.revision).toBeGreaterThan(cursor);
            cursor = e.revision;
            seen.push(e);
          }
          if (forgets > 0 && !done && seen.length > 0 && random(4) === 0) {
            forgets--;
            seen.length = random(seen.length + 1);
            cursor = seen.at(-1)?.revision ?? start;
          }
          if (done && got.length === 0) return seen;
          await new Promise((r) => setImmediate(r));
        }
      };
      const watchers = Promise.all([follow(false), follow(true)]);
      await Promise.all(Array.from({ length: WRITERS }, (_, w) => writer(w)));
      writing = false;
      const [a, b] = await watchers;

      expect(b).toEqual(a);
      expect(a).toHaveLength(committed);
      expect(new Set(a.map((e) => `${e.uuid}@${e.generation}`)).size).toBe(committed);
      for (const uuid of uuids) {
        const generations = a.filter((e) => e.uuid === uuid).map((e) => e.generation);
        expect(generations).toEqual(generations.map((_, i) => i + 2));
      }
      // Resumed afterwards from any number (an event's, one between two, the head): exactly what follows it.
      const last = a.at(-1)!.revision;
      for (let k = 0; k < 12; k++) {
        const from = start + random(last - start + 1);
        const rest: Seen[] = [];
        for (let got = await page(from, 50); got.length > 0; got = await page(got.at(-1)!.revision, 50))
          rest.push(...got);
        expect(rest).toEqual(a.filter((e) => e.revision > from));
      }
      expect(await db.read((r) => r.currentRevision(), log)).toBe(last);
    }, 60_000);

    it('32 concurrent read-modify-write units under FOR_UPDATE lose no update', async () => {
      await db.run((uow) => uow.putHost(hostRecord('h1', 0)));
      const bump = (uow: UnitOfWork) =>
        uow.host('h1', FOR_UPDATE).then((h) => uow.putHost({ ...h!, registrations: h!.registrations + 1 }));
      await Promise.all(Array.from({ length: 32 }, () => db.run(bump)));
      expect((await db.read((r) => r.host('h1')))!.registrations).toBe(32);
    });

    it("retention's reads and deletes by key: oldest first, the compaction mark never goes down, a device's latest job is told", async () => {
      for (let g = 1; g <= 4; g++)
        await db.run((uow) => uow.appendDeviceEvent({ ...device('d-1'), generation: g }));
      const events = await db.read((r) => r.oldestDeviceEvents(10));
      expect(events.map((e) => e.at)).toEqual([NOW, NOW, NOW, NOW]);
      const [, second, third] = events.map((e) => e.revision);
      expect(await db.run((uow) => uow.deleteDeviceEventsThrough(third!))).toBe(3);
      expect(await db.run((uow) => uow.deleteDeviceEventsThrough(second!))).toBe(0);
      expect(await db.read((r) => r.compactedRevision())).toBe(third);
      expect((await db.read((r) => r.oldestDeviceEvents(10))).length).toBe(1);

      const job = (jobId: string, deviceUuid: string, finishedAt: string | null): CleanupJob => ({
        jobId,
        deviceUuid: testUuid(deviceUuid),
        host: hostName('h1'),
        address: pci('0000:10:00.0'),
        action: 'sanitize-crypto',
        state: finishedAt ? 'succeeded' : 'running',
        origin: 'release',
        message: '',
        lastSequence: 0,
        createdAt: NOW,
        dispatchedAt: null,
        finishedAt,
      });
      await db.run(async (uow) => {
        // Created in this order; d-1's latest is unfinished, d-2's latest finished first of all.
        await uow.putCleanupJob(job('a', 'd-2', '2026-01-01T00:00:01.000Z'));
        await uow.putCleanupJob(job('b', 'd-1', '2026-01-01T00:00:03.000Z'));
        await uow.putCleanupJob(job('c', 'd-1', '2026-01-01T00:00:02.000Z'));
        await uow.putCleanupJob(job('d', 'd-1', null));
        await uow.putIdempotencyKey('k2', { fingerprint: 'f', result: 'r' }, '2026-01-01T00:00:02.000Z');
        await uow.putIdempotencyKey('k1', { fingerprint: 'f', result: 'r' }, '2026-01-01T00:00:01.000Z');
      });
      expect(await db.read((r) => r.finishedCleanupJobCount())).toBe(3);
      const page1 = await db.read((r) => r.finishedCleanupJobs(null, 2));
      expect(page1.map((j) => [j.jobId, j.latestOfDevice])).toEqual([
        ['a', true],
        ['c', false],
      ]);
      const page2 = await db.read((r) => r.finishedCleanupJobs(page1[1]!, 2));
      expect(page2.map((j) => [j.jobId, j.latestOfDevice])).toEqual([['b', false]]);
      expect(await db.run((uow) => uow.deleteCleanupJob('c'))).toBe(1);
      expect(await db.read((r) => r.cleanupJob('c'))).toBeNull();
      expect(await db.read((r) => r.idempotencyKeyCount())).toBe(2);
      expect(await db.read((r) => r.oldestIdempotencyKeys(1))).toEqual([
        { key: 'k1', createdAt: '2026-01-01T00:00:01.000Z' },
      ]);
      expect(await db.run((uow) => uow.deleteIdempotencyKey('k1'))).toBe(1);
      expect(await db.run((uow) => uow.deleteIdempotencyKey('k1'))).toBe(0);
    });

    it('a read-only unit cannot write', async () => {
      await rejection(db.read((r) => (r as UnitOfWork).putHost(hostRecord('h1'))));
      expect(await db.read((r) => r.host('h1'))).toBeNull();
    });

    it('close commits and answers the units already accepted, then refuses new ones with UNAVAILABLE', async () => {
      const accepted = db.run((uow) => uow.putHost(hostRecord('h1')));
      await db.close();
      await accepted;
      expect((await rejection(db.run((uow) => uow.putHost(hostRecord('h2'))))).code).toBe('UNAVAILABLE');
      expect((await rejection(db.read((r) => r.host('h1')))).code).toBe('UNAVAILABLE');
      db = await open(path);
      expect(await db.read((r) => r.host('h1'))).not.toBeNull();
    });
  });
}
