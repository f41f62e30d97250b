/**
 * The upgrade contract every backend must pass: a database made by an older
 * scheduler — its schema built by the migration lists of that time
 * (sql/legacy-schema.fixture.ts), its rows written as that code wrote them —
 * opens with today's code, is migrated in place to the one schema sequence
 * (sql/schema.ts), ends with the same structure as a database made today,
 * and reads back every record, completed where fields were added since
 * (usecases/upgrade.ts). A backend's test file calls `runUpgradeContract`.
 */

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type DeviceRecord, newDevice } from '../domain/device-state.js';
import { facts, hostName, instanceId, testUuid } from '../domain/fixtures.support.js';
import { validateProfile } from '../domain/profile.js';
import type { UseCases } from '../usecases/use-cases.js';
import { MIGRATIONS } from './sql/schema.js';

/** A database as the older scheduler left it. */
export interface LegacyDatabase {
  /** One statement written with `?` placeholders (booleans as the backend stores them). */
  exec(sql: string, params?: unknown[]): Promise<void>;
  close(): Promise<void>;
}

export interface UpgradeBackend {
  /**
   * A new database at `path` with the backend's legacy migrations up to
   * `upTo` applied and recorded as the code of that time did.
   */
  legacy(path: string, upTo: number): Promise<LegacyDatabase>;
  /** Today's store on `path` (migrating it). */
  open(path: string, options?: { now?: () => Date }): Promise<UseCases>;
  /** The database's schema (tables, columns, types, keys, indexes), one sorted line each. */
  structure(path: string): Promise<string[]>;
}

const T0 = '2026-01-01T00:00:00.000Z';
const nvme = validateProfile({ name: 'nvme', groups: [{ resourceClass: 'CUSTOM_NVME_144D_A808' }] });
const T1 = '2026-01-02T00:00:00.000Z';

/** A device record as written before media were followed and proofs existed. */
function oldDevice(): { rec: DeviceRecord; json: string } {
  const rec: DeviceRecord = {
    ...newDevice(hostName('h1'), facts({ index: 0 }), testUuid('old-device'), T0),
    generation: 3,
    lastCleanup: {
      jobId: 'job-2',
      action: 'sanitize-crypto',
      outcome: 'succeeded',
      message: '',
      startedAt: T0,
      finishedAt: T1,
    },
  };
  const { media: _m, mediaReason: _r, ...old } = rec;
  return { rec, json: JSON.stringify(old) };
}

export function runUpgradeContract(name: string, backend: UpgradeBackend): void {
  describe(`Upgrade contract: ${name}`, () => {
    let dir: string;
    let path: string;
    let store: UseCases | undefined;

    beforeEach(() => {
      dir = mkdtempSync(join(tmpdir(), 'berth-upgrade-'));
      path = join(dir, 'scheduler.db');
    });
    afterEach(async () => {
      await store?.close();
      store = undefined;
      rmSync(dir, { recursive: true, force: true });
    });

    it('a database of the two-sequence schema is migrated in place, reads back every record completed, and serves', async () => {
      const legacy = await backend.legacy(path, Number.POSITIVE_INFINITY);
      const host = {
        name: 'h1',
        endpoint: 'h1:7071',
        bootId: 'b',
        agentEpoch: 'e',
        agentVersion: '0.1.0',
        features: ['cleanup.v1'],
        drivers: ['nvme'],
        registrations: 1,
        connected: false,
        registeredAt: T0,
        lastSeen: T0,
        inventoryRevision: 1,
        deviceCount: 0,
      };
      const device = oldDevice();
      await legacy.exec('INSERT INTO hosts (name, record) VALUES (?, ?)', ['h1', JSON.stringify(host)]);
      await legacy.exec(
        `INSERT INTO devices (uuid, host, address, type, resource_class, vendor_id, product_id, iommu_group,
           device_state, generation, record) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
        [
          device.rec.uuid,
          'h1',
          device.rec.address,
          device.rec.type,
          device.rec.resourceClass,
          device.rec.vendorId,
          device.rec.productId,
          device.rec.iommuGroup,
          'available',
          3,
          device.json,
        ],
      );
      await legacy.exec('INSERT INTO device_events (device_uuid, removed, record, at) VALUES (?, ?, ?, ?)', [
        device.rec.uuid,
        false,
        device.json,
        T0,
      ]);
      for (const [jobId, finishedAt] of [
        ['job-1', T0],
        ['job-2', T1],
      ] as const) {
        const job = {
          jobId,
          deviceUuid: device.rec.uuid,
          host: hostName('h1'),
          address: device.rec.address,
          action: 'sanitize-crypto',
          state: 'succeeded',
          origin: 'release',
          message: '',
          lastSequence: 1,
          createdAt: T0,
          dispatchedAt: T0,
          finishedAt,
        };
        await legacy.exec(
          'INSERT INTO cleanup_jobs (job_id, device_uuid, state, finished_at, record) VALUES (?, ?, ?, ?, ?)',
          [jobId, device.rec.uuid, 'succeeded', finishedAt, JSON.stringify(job)],
        );
      }
      // An ARQ from before guest addresses were kept, and NICs from before they had a devname.
      const arq = {
        uuid: 'old-arq',
        profileName: 'nvme',
        groupId: 0,
        group: nvme.groups[0]!,
        state: 'initial',
        instanceUuid: null,
        host: null,
        deviceUuid: null,
        deviceAddress: null,
        attachHandle: null,
        tag: '',
        error: '',
        createdAt: T0,
        deviceType: '',
      };
      await legacy.exec(
        'INSERT INTO arqs (uuid, instance_uuid, device_uuid, state, record) VALUES (?, ?, ?, ?, ?)',
        [arq.uuid, null, null, 'initial', JSON.stringify(arq)],
      );
      const nic = { mac: '52:54:00:aa:bb:01', address: '', tag: 'net', vlan: null, model: 'virtio' };
      await legacy.exec('INSERT INTO instance_devices (instance_uuid, record) VALUES (?, ?)', [
        'old-vm',
        JSON.stringify({ nics: [nic], disks: [] }),
      ]);
      await legacy.close();

      store = await backend.open(path);
      expect(await store.schemaVersion()).toBe(MIGRATIONS.at(-1)!.version);
      const upgraded = await backend.structure(path);
      // The same structure as a database made today.
      const freshPath = join(dir, 'fresh.db');
      await (await backend.open(freshPath)).close();
      expect(upgraded).toEqual(await backend.structure(freshPath));

      const completed: DeviceRecord = {
        ...device.rec,
        lastCleanup: { ...device.rec.lastCleanup!, proof: null },
      };
      expect(await store.getDevice({ uuid: device.rec.uuid })).toEqual(completed);
      expect((await store.listDevices({ host: hostName('h1') })).devices).toEqual([completed]);
      expect(await store.eventsSince(0, 10)).toEqual([{ revision: 1, removed: false, device: completed }]);
      expect((await store.latestCleanupJob(device.rec.uuid))?.jobId).toBe('job-2');
      expect(await store.getArq(testUuid('old-arq'))).toEqual({ ...arq, guestAddress: null });
      expect(await store.getInstanceDevices('old-vm')).toEqual({
        nics: [{ ...nic, devname: null }],
        disks: [],
      });

      // It serves: the old device binds, and a new event follows the old one.
      await store.createProfile(nvme);
      const [fresh] = await store.createArqs({ profileName: 'nvme' });
      const bound = await store.bindArqs([
        { arqUuid: fresh!.uuid, instanceUuid: instanceId('vm-1'), host: hostName('h1') },
      ]);
      expect(bound.devices.map((d) => [d.uuid, d.deviceState, d.generation])).toEqual([
        [device.rec.uuid, 'allocated', 4],
      ]);
      expect((await store.eventsSince(1, 10)).map((e) => e.revision)).toEqual([2]);
    });

    it('a database from before retention gets its finished cleanups indexed on the way (migration 3)', async () => {
      const legacy = await backend.legacy(path, 2);
      for (const [jobId, finishedAt] of [
        ['job-1', T0],
        ['job-2', null],
      ] as const) {
        const job = { jobId, deviceUuid: 'd-1', host: hostName('h1'), address: '0000:10:00.0', finishedAt };
        await legacy.exec(
          'INSERT INTO cleanup_jobs (job_id, device_uuid, state, record) VALUES (?, ?, ?, ?)',
          [jobId, 'd-1', finishedAt ? 'succeeded' : 'running', JSON.stringify(job)],
        );
      }
      await legacy.close();
      store = await backend.open(path, { now: () => new Date('2026-03-01T00:00:00Z') });
      const counts = await store.pruneHistory({
        historyMs: 86_400_000,
        maxRows: 1_000,
        requestIdMs: 86_400_000,
      });
      // The finished job that is not its device's latest went: its finished_at was filled in.
      expect(counts.cleanupJobs).toBe(1);
      expect(await store.latestCleanupJob('d-1')).toMatchObject({ jobId: 'job-2' });
    });
  });
}
