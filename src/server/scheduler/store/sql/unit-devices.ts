/** The SQL unit of work (./unit.ts), its devices' part: hosts, devices, media and the device event log. */
import { BerthError } from '../../../../errors.js';
import type { CandidateQuery } from '../../domain/allocation.js';
import type { DeviceRecord } from '../../domain/device-state.js';
import type { HostRecord } from '../../domain/host.js';
import type { DeviceEvent, DeviceRef } from '../../domain/inventory.js';
import type { MediaState } from '../../domain/media.js';
import {
  type DeviceCount,
  type DeviceQuery,
  NAMES_PER_QUERY,
  type ReadOptions,
} from '../../usecases/unit-of-work.js';
import { andThen, SqlUnitBase } from './unit-base.js';

export abstract class DeviceRows extends SqlUnitBase {
  // --- hosts ---------------------------------------------------------------

  async host(name: string, opts?: ReadOptions): Promise<HostRecord | null> {
    return this.one(`SELECT record FROM hosts WHERE name = ?${this.lock(opts)}`, [name]);
  }

  async hosts(page?: { after: string; limit: number }): Promise<HostRecord[]> {
    return page
      ? this.all('SELECT record FROM hosts WHERE name > ? ORDER BY name LIMIT ?', [page.after, page.limit])
      : this.all('SELECT record FROM hosts ORDER BY name');
  }

  async deviceCount(host: string): Promise<number> {
    return this.count('SELECT COUNT(*) AS n FROM devices WHERE host = ?', [host]);
  }

  async putHost(h: HostRecord): Promise<void> {
    await this.put(
      'INSERT INTO hosts (name, record) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET record = excluded.record',
      [h.name, JSON.stringify(h)],
    );
  }

  async deleteHost(name: string): Promise<void> {
    await this.put('DELETE FROM hosts WHERE name = ?', [name]);
  }

  // --- devices -------------------------------------------------------------

  async device(ref: DeviceRef, opts?: ReadOptions): Promise<DeviceRecord | null> {
    return 'uuid' in ref
      ? this.one(`SELECT record FROM devices WHERE uuid = ?${this.lock(opts)}`, [ref.uuid])
      : this.one(`SELECT record FROM devices WHERE host = ? AND address = ?${this.lock(opts)}`, [
          ref.host,
          ref.address,
        ]);
  }

  async devices(query: DeviceQuery, opts?: ReadOptions): Promise<DeviceRecord[]> {
    const where: string[] = [];
    const params: unknown[] = [];
    const eq = (column: string, value: string | undefined) => {
      if (!value) return;
      where.push(`${column} = ?`);
      params.push(value);
    };
    eq('host', query.host);
    eq('type', query.type);
    eq('device_state', query.state);
    eq('resource_class', query.resourceClass);
    eq('media_key', query.mediaKey);
    if (query.states) {
      where.push(`device_state IN (${query.states.map(() => '?').join(', ')})`);
      params.push(...query.states);
    }
    for (const [column, names] of [
      ['address', query.addresses],
      ['media_key', query.mediaKeys],
    ] as const) {
      if (!names) continue;
      if (names.length === 0) return [];
      where.push(`${column} IN (${inList(names, column)})`);
      params.push(...names);
    }
    if (query.after) {
      where.push('(host, address) > (?, ?)');
      params.push(query.after.host, query.after.address);
    }
    if (query.afterUuid !== undefined) {
      where.push('uuid > ?');
      params.push(query.afterUuid);
    }
    const order = query.afterUuid !== undefined ? 'uuid' : 'host, address';
    let sql = `SELECT record FROM devices ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY ${order}`;
    if (query.limit !== undefined) {
      sql += ' LIMIT ?';
      params.push(query.limit);
    }
    return this.all(sql + this.lock(opts), params);
  }

  async allocationCandidates(query: CandidateQuery, opts?: ReadOptions): Promise<DeviceRecord[]> {
    return 'resourceClass' in query
      ? this.all(
          `SELECT record FROM devices WHERE host = ? AND resource_class = ? AND device_state = 'available'
             ORDER BY host, address${this.lock(opts)}`,
          [query.host, query.resourceClass],
        )
      : this.all(
          `SELECT record FROM devices WHERE host = ? AND vendor_id = ? AND product_id = ?
             AND device_state = 'available' ORDER BY host, address${this.lock(opts)}`,
          [query.host, query.vendorId, query.productId],
        );
  }

  async busyIommuGroups(host: string): Promise<number[]> {
    return andThen(
      this.r().all<{ g: number }>(
        `SELECT DISTINCT iommu_group AS g FROM devices WHERE host = ? AND iommu_group IS NOT NULL
           AND device_state IN ('allocated', 'pending_cleaning', 'cleaning')`,
        [host],
      ),
      (rows) => rows.map((r) => r.g),
    );
  }

  async deviceCounts(): Promise<DeviceCount[]> {
    return this.r().all<DeviceCount>(
      'SELECT type, device_state AS state, resource_class AS "resourceClass", COUNT(*) AS count FROM devices GROUP BY type, device_state, resource_class',
    );
  }

  async putDevice(rec: DeviceRecord, previousGeneration: number | null): Promise<void> {
    const json = JSON.stringify(rec);
    // Not host and address: a uuid names one (host, address) for good, and
    // SQLite rewrites the entries of every index whose columns an UPDATE sets.
    const columns = [
      rec.type,
      rec.resourceClass,
      rec.vendorId,
      rec.productId,
      rec.iommuGroup,
      rec.deviceState,
      rec.generation,
      rec.media?.key || null,
      json,
    ];
    const [sql, params] =
      previousGeneration === null
        ? [
            `INSERT INTO devices (uuid, host, address, type, resource_class, vendor_id, product_id, iommu_group,
               device_state, generation, media_key, record) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT DO NOTHING`,
            [rec.uuid, rec.host, rec.address, ...columns],
          ]
        : [
            `UPDATE devices SET type = ?, resource_class = ?, vendor_id = ?, product_id = ?, iommu_group = ?,
               device_state = ?, generation = ?, media_key = ?, record = ?
             WHERE uuid = ? AND generation = ?`,
            [...columns, rec.uuid, previousGeneration],
          ];
    const miss = () =>
      new BerthError(
        'ABORTED',
        `device ${rec.uuid} (${rec.host} ${rec.address}) changed while it was being written; retry`,
        { reason: 'CONCURRENT_UPDATE', metadata: { device_uuid: rec.uuid } },
      );
    const x = this.w();
    // PostgreSQL: not awaited alone for its count; a miss fails the unit at its next statement (decision 91).
    if (x.laterChanging) {
      x.laterChanging(sql, params, miss);
      this.lastDevice = { rec, json };
      return;
    }
    return andThen(x.run(sql, params), (n) => {
      if (n === 0) throw miss();
      this.lastDevice = { rec, json };
    });
  }

  async appendDeviceEvent(rec: DeviceRecord, removed = false): Promise<void> {
    this.w();
    // Taken now: what the log says is the device as it was at this call.
    const json = this.lastDevice?.rec === rec ? this.lastDevice.json : JSON.stringify(rec);
    this.events.push({ deviceUuid: rec.uuid, removed, record: json, at: rec.updatedAt });
  }

  async deleteDevice(uuid: string): Promise<void> {
    await this.put('DELETE FROM devices WHERE uuid = ?', [uuid]);
  }

  // --- media ---------------------------------------------------------------

  async media(key: string, opts?: ReadOptions): Promise<MediaState | null> {
    return this.one(`SELECT record FROM media WHERE key = ?${this.lock(opts)}`, [key]);
  }

  async mediaByKeys(keys: readonly string[], opts?: ReadOptions): Promise<MediaState[]> {
    if (keys.length === 0) return [];
    return this.all(
      `SELECT record FROM media WHERE key IN (${inList(keys, 'key')}) ORDER BY key${this.lock(opts)}`,
      [...keys],
    );
  }

  async putMedia(m: MediaState): Promise<void> {
    await this.put(
      `INSERT INTO media (key, record, host) VALUES (?, ?, ?)
       ON CONFLICT (key) DO UPDATE SET record = excluded.record, host = excluded.host, forgotten = NULL`,
      [m.key, JSON.stringify(m), m.host],
    );
  }

  async reportedMediaCount(host: string): Promise<number> {
    const n = await this.count(
      `SELECT COUNT(*) AS n FROM media m WHERE m.host = ? AND m.forgotten IS NULL
         AND NOT EXISTS (SELECT 1 FROM devices d WHERE d.media_key = m.key)`,
      [host],
    );
    return Number(n);
  }

  async mediaForgotten(key: string): Promise<string | null> {
    const row = await this.r().get<{ forgotten: string | null }>(
      'SELECT forgotten FROM media WHERE key = ?',
      [key],
    );
    return row?.forgotten ?? null;
  }

  async forgetMedia(key: string, note: string): Promise<void> {
    await this.put('UPDATE media SET forgotten = ? WHERE key = ?', [note, key]);
  }

  // --- device event log ----------------------------------------------------

  async currentRevision(): Promise<number> {
    return andThen(
      this.r().get<{ r: number | null }>('SELECT MAX(revision) AS r FROM device_events'),
      (row) => row?.r ?? 0,
    );
  }

  async eventsSince(revision: number, limit: number): Promise<DeviceEvent[]> {
    return andThen(
      this.r().all<{ revision: number; removed: unknown; record: string }>(
        'SELECT revision, removed, record FROM device_events WHERE revision > ? ORDER BY revision LIMIT ?',
        [revision, limit],
      ),
      (rows) =>
        rows.map((r) => ({
          revision: r.revision,
          removed: this.d.bool(r.removed),
          device: JSON.parse(r.record) as DeviceRecord,
        })),
    );
  }

  async compactedRevision(): Promise<number> {
    return andThen(
      this.r().get<{ value: number }>("SELECT value FROM retention_marks WHERE name = 'device_events'"),
      (row) => row?.value ?? 0,
    );
  }
}

/** The placeholders of an IN list of at most NAMES_PER_QUERY names. */
function inList(names: readonly string[], column: string): string {
  if (names.length > NAMES_PER_QUERY) {
    throw new Error(`a query names ${names.length} values of ${column}, more than ${NAMES_PER_QUERY}`);
  }
  return names.map(() => '?').join(', ');
}
