/**
 * The journal's erasure certificates on a real SQLite file: since decision 63
 * an agent signs after the scheduler's link of a media, so it may hold two
 * links of one seq of a media (its own older one, and one after another
 * host's); a journal from before keeps every certificate it had.
 */
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { tempDir } from '../../../test/helpers/agent.js';
import { CleanupJournal } from './cleanup-journal.js';

const dirs: { cleanup: () => Promise<void> }[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await d.cleanup();
});

const M = 'nvme:nqn.moved';
const cert = (hash: string, seq: number, issuedAt: number) => ({
  hash: `sha256:${hash.repeat(64)}`,
  mediaKey: M,
  seq,
  jobId: `job-${hash}`,
  issuedAt,
  jws: `jws-${hash}`,
});

describe('the journal of erasure certificates', () => {
  it('holds two links of one seq of a media (a fork the scheduler chose the other side of), by seq then by when signed', async () => {
    const d = await tempDir('berth-journal-');
    dirs.push(d);
    const j = new CleanupJournal(d.path);
    try {
      j.storeCertificate(cert('a', 1, 100));
      j.storeCertificate(cert('c', 2, 300));
      j.storeCertificate(cert('b', 2, 200));
      expect(j.mediaCertificates(M).map((c) => c.jobId)).toEqual(['job-a', 'job-b', 'job-c']);
      // Never replaced: the same hash twice is refused.
      expect(() => j.storeCertificate(cert('a', 1, 100))).toThrow(/UNIQUE/);
    } finally {
      j.close();
    }
  });

  it('a journal from before decision 63 keeps its certificates', async () => {
    const d = await tempDir('berth-journal-');
    dirs.push(d);
    new CleanupJournal(d.path).close();
    // Back to the table as it was (UNIQUE per media and seq), with one certificate, at version 5
    // (custody's migration applied, decision 63's, the write counters' and the project's not).
    const old = new Database(join(d.path, 'agent-journal.db'));
    old.exec(`DROP TABLE erasure_certificates;
      CREATE TABLE erasure_certificates (hash TEXT PRIMARY KEY, media_key TEXT NOT NULL, seq INTEGER NOT NULL,
        job_id TEXT NOT NULL, issued_at INTEGER NOT NULL, jws TEXT NOT NULL, delivered INTEGER NOT NULL DEFAULT 0,
        UNIQUE (media_key, seq));
      INSERT INTO erasure_certificates VALUES ('sha256:${'a'.repeat(64)}', '${M}', 1, 'job-a', 100, 'jws-a', 1);
      ALTER TABLE media DROP COLUMN write_counters; ALTER TABLE media DROP COLUMN project_id;`);
    old.pragma('user_version = 5');
    old.close();
    const j = new CleanupJournal(d.path);
    try {
      expect(j.mediaCertificates(M)).toEqual([{ ...cert('a', 1, 100), delivered: true }]);
      j.storeCertificate(cert('b', 1, 200));
      expect(j.mediaCertificates(M).map((c) => c.jobId)).toEqual(['job-a', 'job-b']);
    } finally {
      j.close();
    }
  });
});
