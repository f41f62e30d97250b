import type { AgentKeyRecord, CertificateRecord } from '../../domain/certificate.js';
import type { CleanupEvent, CleanupJob } from '../../domain/cleanup.js';
import type { ReadOptions } from '../../usecases/unit-of-work.js';
import { andThen } from './unit-base.js';
import { DeviceRows } from './unit-devices.js';

export abstract class EvidenceRows extends DeviceRows {
  // --- erasure certificates --------------------------------------------------

  async agentKeys(host?: string): Promise<AgentKeyRecord[]> {
    return andThen(
      this.all<AgentKeyRecord>(
        `SELECT record FROM agent_keys${host === undefined ? '' : ' WHERE host = ?'}`,
        host === undefined ? [] : [host],
      ),
      (keys) =>
        keys.sort((a, b) =>
          a.host < b.host
            ? -1
            : a.host > b.host
              ? 1
              : a.pinnedAt < b.pinnedAt
                ? -1
                : a.pinnedAt > b.pinnedAt
                  ? 1
                  : 0,
        ),
    );
  }

  async putAgentKey(k: AgentKeyRecord): Promise<void> {
    await this.w().run(
      `INSERT INTO agent_keys (host, kid, retired_at, record) VALUES (?, ?, ?, ?)
         ON CONFLICT (host, kid) DO UPDATE SET retired_at = excluded.retired_at, record = excluded.record`,
      [k.host, k.kid, k.retiredAt, JSON.stringify(k)],
    );
  }

  async lastCertificate(mediaKey: string, opts?: ReadOptions): Promise<CertificateRecord | null> {
    return this.one(
      `SELECT record FROM erasure_certificates WHERE media_key = ? ORDER BY seq DESC LIMIT 1${this.lock(opts)}`,
      [mediaKey],
    );
  }

  async certificateAt(mediaKey: string, seq: number): Promise<CertificateRecord | null> {
    return this.one('SELECT record FROM erasure_certificates WHERE media_key = ? AND seq = ?', [
      mediaKey,
      seq,
    ]);
  }

  async certificate(hash: string): Promise<CertificateRecord | null> {
    return this.one('SELECT record FROM erasure_certificates WHERE hash = ?', [hash]);
  }

  async certificates(filter: {
    deviceUuid?: string;
    jobId?: string;
    instanceUuid?: string;
  }): Promise<CertificateRecord[]> {
    const where: string[] = [];
    const params: unknown[] = [];
    for (const [column, value] of [
      ['device_uuid', filter.deviceUuid],
      ['job_id', filter.jobId],
      ['instance_uuid', filter.instanceUuid],
    ] as const) {
      if (value === undefined) continue;
      where.push(`${column} = ?`);
      params.push(value);
    }
    return this.all(
      `SELECT record FROM erasure_certificates${where.length ? ` WHERE ${where.join(' AND ')}` : ''}
         ORDER BY media_key, seq`,
      params,
    );
  }

  async putCertificate(c: CertificateRecord): Promise<boolean> {
    return andThen(
      this.w().run(
        `INSERT INTO erasure_certificates (hash, media_key, seq, host, job_id, device_uuid, instance_uuid, received_at, record)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (hash) DO NOTHING`,
        [
          c.hash,
          c.mediaKey,
          c.seq,
          c.host,
          c.jobId,
          c.deviceUuid,
          c.instanceUuid,
          c.receivedAt,
          JSON.stringify(c),
        ],
      ),
      (n) => n > 0,
    );
  }

  async deleteCertificate(hash: string): Promise<number> {
    return this.w().run('DELETE FROM erasure_certificates WHERE hash = ?', [hash]);
  }

  async oldestCertificates(
    before: string,
    limit: number,
  ): Promise<{ hash: string; mediaKey: string; seq: number }[]> {
    return andThen(
      this.r().all<{ hash: string; media_key: string; seq: number | string }>(
        'SELECT hash, media_key, seq FROM erasure_certificates WHERE received_at < ? ORDER BY received_at LIMIT ?',
        [before, limit],
      ),
      (rows) => rows.map((r) => ({ hash: r.hash, mediaKey: r.media_key, seq: Number(r.seq) })),
    );
  }

  async instanceOwner(instanceUuid: string): Promise<string | null> {
    return andThen(
      this.r().get<{ subject: string }>('SELECT subject FROM instance_owners WHERE instance_uuid = ?', [
        instanceUuid,
      ]),
      (row) => row?.subject ?? null,
    );
  }

  async putInstanceOwner(instanceUuid: string, subject: string, at: string): Promise<void> {
    await this.put(
      'INSERT INTO instance_owners (instance_uuid, subject, created_at) VALUES (?, ?, ?) ON CONFLICT (instance_uuid) DO NOTHING',
      [instanceUuid, subject, at],
    );
  }

  // --- cleanup -------------------------------------------------------------

  async cleanupJob(jobId: string, opts?: ReadOptions): Promise<CleanupJob | null> {
    return this.one(`SELECT record FROM cleanup_jobs WHERE job_id = ?${this.lock(opts)}`, [jobId]);
  }

  async latestCleanupJob(deviceUuid: string): Promise<CleanupJob | null> {
    return this.one(
      `SELECT record FROM cleanup_jobs WHERE device_uuid = ? ORDER BY ${this.d.creationOrder} DESC LIMIT 1`,
      [deviceUuid],
    );
  }

  async cleanupEvents(jobId: string, afterSequence: number): Promise<CleanupEvent[]> {
    return andThen(
      this.r().all<{ event: string }>(
        'SELECT event FROM cleanup_events WHERE job_id = ? AND sequence > ? ORDER BY sequence',
        [jobId, afterSequence],
      ),
      (rows) => rows.map((r) => JSON.parse(r.event) as CleanupEvent),
    );
  }

  async putCleanupJob(j: CleanupJob): Promise<void> {
    await this.put(
      `INSERT INTO cleanup_jobs (job_id, device_uuid, state, finished_at, record) VALUES (?, ?, ?, ?, ?)
         ON CONFLICT (job_id) DO UPDATE SET state = excluded.state, finished_at = excluded.finished_at,
           record = excluded.record`,
      [j.jobId, j.deviceUuid, j.state, j.finishedAt, JSON.stringify(j)],
    );
  }

  async addCleanupEvent(ev: CleanupEvent): Promise<boolean> {
    return andThen(
      this.w().run(
        'INSERT INTO cleanup_events (job_id, sequence, event) VALUES (?, ?, ?) ON CONFLICT DO NOTHING',
        [ev.jobId, ev.sequence, JSON.stringify(ev)],
      ),
      (n) => n > 0,
    );
  }
}
