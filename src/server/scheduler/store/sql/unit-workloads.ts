import type { Arq } from '../../domain/arq.js';
import type { InstanceDevices } from '../../domain/instance.js';
import type { MigrationRecord } from '../../domain/migration.js';
import type { Profile } from '../../domain/profile.js';
import type { IdempotencyRecord, ReadOptions } from '../../usecases/unit-of-work.js';
import * as claims from './nova-claims.js';
import { andThen, type Row, records } from './unit-base.js';
import { EvidenceRows } from './unit-evidence.js';

export abstract class WorkloadRows extends EvidenceRows {
  // --- profiles ------------------------------------------------------------

  async profile(nameOrUuid: string, opts?: ReadOptions): Promise<Profile | null> {
    return this.one(`SELECT record FROM profiles WHERE name = ? OR uuid = ?${this.lock(opts)}`, [
      nameOrUuid,
      nameOrUuid,
    ]);
  }

  async profiles(): Promise<Profile[]> {
    return this.all('SELECT record FROM profiles ORDER BY name');
  }

  async insertProfile(p: Profile): Promise<void> {
    await this.put('INSERT INTO profiles (name, uuid, record) VALUES (?, ?, ?)', [
      p.name,
      p.uuid,
      JSON.stringify(p),
    ]);
  }

  async deleteProfile(name: string): Promise<boolean> {
    return andThen(this.w().run('DELETE FROM profiles WHERE name = ?', [name]), (n) => n > 0);
  }

  // --- ARQs ----------------------------------------------------------------

  async arq(uuid: string, opts?: ReadOptions): Promise<Arq | null> {
    return this.one(`SELECT record FROM arqs WHERE uuid = ?${this.lock(opts)}`, [uuid]);
  }

  async arqs(filter: { instanceUuid?: string; bindClaimFor?: string }, opts?: ReadOptions): Promise<Arq[]> {
    const order = `ORDER BY ${this.d.creationOrder}${this.lock(opts)}`;
    if (filter.bindClaimFor) {
      return this.all(`SELECT record FROM arqs WHERE bind_instance = ? ${order}`, [filter.bindClaimFor]);
    }
    return filter.instanceUuid
      ? this.all(`SELECT record FROM arqs WHERE instance_uuid = ? ${order}`, [filter.instanceUuid])
      : this.all(`SELECT record FROM arqs ${order}`);
  }

  async databaseNow(): Promise<string> {
    return andThen(this.r().get<{ now: string | Date }>(claims.nowSql(this.d)), (row) =>
      new Date(row!.now).toISOString(),
    );
  }

  async putArq(a: Arq): Promise<void> {
    await this.put(
      `INSERT INTO arqs (uuid, instance_uuid, device_uuid, state, guest_address, nova_event, bind_instance, record)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (uuid) DO UPDATE SET instance_uuid = excluded.instance_uuid,
           device_uuid = excluded.device_uuid, state = excluded.state,
           guest_address = excluded.guest_address, bind_instance = excluded.bind_instance,
           record = excluded.record,
           ${claims.KEEP_CLAIM_WHILE_SAME_EVENT}`,
      [
        a.uuid,
        a.instanceUuid,
        a.deviceUuid,
        a.state,
        a.guestAddress ?? null,
        claims.novaEventColumn(a),
        a.bindClaim?.instanceUuid ?? null,
        JSON.stringify(a),
      ],
    );
  }

  // Claims on Nova's events (./nova-claims.ts).
  async claimNovaEvents(owner: string, ttlMs: number, limit: number): Promise<Arq[]> {
    return andThen(this.w().all<Row>(claims.claimSql(this.d), [owner, ttlMs, limit]), records<Arq>);
  }

  async holdNovaEvent(uuid: string, owner: string, ttlMs: number): Promise<void> {
    await this.put(claims.holdSql(this.d), [owner, ttlMs, uuid]);
  }

  async releaseNovaEvent(uuid: string, owner: string): Promise<void> {
    await this.put(claims.RELEASE_SQL, [uuid, owner]);
  }

  async releaseNovaEventClaims(owner: string): Promise<number> {
    return this.w().run(claims.RELEASE_OTHERS_SQL, [owner]);
  }

  async novaEventClaimant(uuid: string, opts?: ReadOptions): Promise<string | null> {
    return andThen(
      this.r().get<{ owner: string | null }>(`${claims.CLAIMANT_SQL}${this.lock(opts)}`, [uuid]),
      (r) => r?.owner ?? null,
    );
  }

  async novaEventsOwedCount(): Promise<number> {
    return this.count(claims.OWED_COUNT_SQL);
  }

  async deleteArq(uuid: string): Promise<void> {
    await this.put('DELETE FROM arqs WHERE uuid = ?', [uuid]);
  }

  async lockInstance(instanceUuid: string): Promise<void> {
    this.w();
    if (this.d.lockInstance) await this.put(this.d.lockInstance, [`instance:${instanceUuid}`]);
  }

  // --- migrations ----------------------------------------------------------

  async migration(uuid: string, opts?: ReadOptions): Promise<MigrationRecord | null> {
    return this.one(`SELECT record FROM migrations WHERE uuid = ?${this.lock(opts)}`, [uuid]);
  }

  async plannedMigrations(instanceUuid: string, opts?: ReadOptions): Promise<MigrationRecord[]> {
    return this.all(
      `SELECT record FROM migrations WHERE instance_uuid = ? AND state = 'planned'
         ORDER BY ${this.d.creationOrder}${this.lock(opts)}`,
      [instanceUuid],
    );
  }

  async putMigration(m: MigrationRecord): Promise<void> {
    await this.put(
      `INSERT INTO migrations (uuid, instance_uuid, state, record) VALUES (?, ?, ?, ?)
         ON CONFLICT (uuid) DO UPDATE SET state = excluded.state, record = excluded.record`,
      [m.uuid, m.instanceUuid, m.state, JSON.stringify(m)],
    );
  }

  // --- instances -----------------------------------------------------------

  async instanceDevices(instanceUuid: string, opts?: ReadOptions): Promise<InstanceDevices | null> {
    return this.one(`SELECT record FROM instance_devices WHERE instance_uuid = ?${this.lock(opts)}`, [
      instanceUuid,
    ]);
  }

  async putInstanceDevices(instanceUuid: string, devices: InstanceDevices): Promise<void> {
    await this.put(
      `INSERT INTO instance_devices (instance_uuid, record) VALUES (?, ?)
         ON CONFLICT (instance_uuid) DO UPDATE SET record = excluded.record`,
      [instanceUuid, JSON.stringify(devices)],
    );
  }

  // --- idempotency keys ----------------------------------------------------

  async idempotencyKey(key: string, opts?: ReadOptions): Promise<IdempotencyRecord | null> {
    return andThen(
      this.r().get<IdempotencyRecord>(
        `SELECT fingerprint, result FROM idempotency_keys WHERE key = ?${this.lock(opts)}`,
        [key],
      ),
      (row) => row ?? null,
    );
  }

  async putIdempotencyKey(key: string, rec: IdempotencyRecord, createdAt: string): Promise<void> {
    await this.put(
      'INSERT INTO idempotency_keys (key, fingerprint, result, created_at) VALUES (?, ?, ?, ?)',
      [key, rec.fingerprint, rec.result, createdAt],
    );
  }
}
