/**
 * The journal's record of media, on a real SQLite file in a temp dir: every
 * transition, what survives a reopen, the upgrade of a journal that recorded
 * holds by address, and the bounds (pruning, what a registration carries).
 */
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { tempDir } from '../../../test/helpers/agent.js';
import { CleanupJournal } from './cleanup-journal.js';
import { MAX_REPORTED_MEDIA, reportedMedia } from './media.js';
import { PRUNE_AFTER_MS, type SeenMedia } from './media-ledger.js';

const dirs: { cleanup: () => Promise<void> }[] = [];
const journals: CleanupJournal[] = [];
afterEach(async () => {
  for (const j of journals.splice(0)) j.close();
  for (const d of dirs.splice(0)) await d.cleanup();
});

async function stateDir(): Promise<string> {
  const d = await tempDir('berth-ledger-');
  dirs.push(d);
  return d.path;
}

function open(dir: string): CleanupJournal {
  const j = new CleanupJournal(dir);
  journals.push(j);
  return j;
}

function reopen(j: CleanupJournal, dir: string): CleanupJournal {
  j.close();
  journals.splice(journals.indexOf(j), 1);
  return open(dir);
}

const seen = (address: string, key: string, extra: Partial<SeenMedia> = {}): SeenMedia => ({
  address,
  key,
  cleanable: true,
  assumeClean: false,
  oneTimeUse: false,
  slotPrefix: `pci-slot:h:${address}:144d:a824:`,
  ...extra,
});

const A = '0000:01:00.0';
const B = '0000:06:00.0';
const NQN = 'nvme:nqn.2019-08.org.qemu:SER-A';
const binding = { arqUuid: 'arq-1', instanceUuid: 'vm-1' };

describe('MediaLedger', () => {
  it('first sight: a cleanable media is dirty (unknown provenance), declared clean only when every entry says so; others keep no record', async () => {
    const j = open(await stateDir());
    const r = j.media.observe(
      [
        seen(A, NQN),
        seen('0000:02:00.0', 'nvme:declared', { assumeClean: true }),
        // Two controllers of one subsystem, only one of them declared: not declared.
        seen('0000:03:00.0', 'nvme:shared', { assumeClean: true }),
        seen('0000:04:00.0', 'nvme:shared'),
        seen('0000:05:00.0', 'pci-slot:h:0000:05:00.0:10de:2204::', { cleanable: false }),
      ],
      [],
      1000,
    );
    expect(r.created.map((c) => [c.key, c.condition])).toEqual([
      [NQN, 'dirty'],
      ['nvme:declared', 'declared_clean'],
      ['nvme:shared', 'dirty'],
    ]);
    expect(r.declared).toEqual([{ key: 'nvme:declared', address: '0000:02:00.0' }]);
    expect(j.media.get(NQN)).toMatchObject({
      condition: 'dirty',
      reason: expect.stringMatching(/unknown provenance/),
    });
    expect(j.media.get('pci-slot:h:0000:05:00.0:10de:2204::')).toBeUndefined();
    // The same pass again changes nothing and writes nothing.
    const again = j.media.observe(
      [seen(A, NQN), seen('0000:02:00.0', 'nvme:declared', { assumeClean: true })],
      [],
      2000,
    );
    expect(again).toMatchObject({ created: [], moved: [], declared: [], changed: [] });
  });

  it('assume_clean never makes media seen dirty, held or burned clean', async () => {
    const j = open(await stateDir());
    j.media.observe([seen(A, NQN)], []);
    j.media.observe([seen(A, NQN, { assumeClean: true })], []);
    expect(j.media.get(NQN)?.condition).toBe('dirty');
    j.media.markClean(NQN, A);
    j.media.hold(NQN, A, binding, { cleanable: true, oneTimeUse: false });
    j.media.observe([seen(A, NQN, { assumeClean: true })], []);
    expect(j.media.get(NQN)?.condition).toBe('held');
  });

  it("a hold keeps its binding's project across a restart; a cleanup clears it with the binding", async () => {
    const dir = await stateDir();
    let j = open(dir);
    j.media.observe([seen(A, NQN)], []);
    j.media.markClean(NQN, A, 10);
    j.media.hold(NQN, A, { ...binding, projectId: 'proj-p' }, { cleanable: true, oneTimeUse: false }, 20);
    j = reopen(j, dir);
    expect(j.media.get(NQN)).toMatchObject({ condition: 'held', arqUuid: 'arq-1', projectId: 'proj-p' });
    j.media.markClean(NQN, A, 30);
    j = reopen(j, dir);
    expect(j.media.get(NQN)?.projectId).toBeUndefined();
    // A binding without a project (a gRPC bind) records none.
    j.media.hold(NQN, A, binding, { cleanable: true, oneTimeUse: false }, 40);
    expect(reopen(j, dir).media.get(NQN)?.projectId).toBeUndefined();
  });

  it('held media follows its key to another address, and keeps one address while two controllers reach it', async () => {
    const dir = await stateDir();
    let j = open(dir);
    j.media.observe([seen(A, NQN)], []);
    j.media.markClean(NQN, A, 10);
    const held = j.media.hold(NQN, A, binding, { cleanable: true, oneTimeUse: false }, 20);
    expect(held).toMatchObject({ condition: 'held', arqUuid: 'arq-1', since: 20, lastAddress: A });
    j = reopen(j, dir);
    const r = j.media.observe([seen(B, NQN)], [], 30);
    expect(r.moved).toEqual([{ key: NQN, from: A, to: B, condition: 'held' }]);
    expect(j.media.get(NQN)).toMatchObject({
      condition: 'held',
      arqUuid: 'arq-1',
      since: 20,
      lastAddress: B,
    });
    // Reached through B and a second controller: the record stays at B, pass after pass.
    for (let i = 0; i < 3; i++) {
      expect(j.media.observe([seen('0000:07:00.0', NQN), seen(B, NQN)], [], 40 + i).moved).toEqual([]);
    }
    expect(reopen(j, dir).media.get(NQN)?.lastAddress).toBe(B);
  });

  it('clean after a judged cleanup, dirty after a failed one; the burn stays until released, durably', async () => {
    const dir = await stateDir();
    let j = open(dir);
    j.media.observe([seen(A, NQN)], []);
    j.media.markClean(NQN, A);
    j.media.hold(NQN, A, binding, { cleanable: true, oneTimeUse: true });
    expect(j.media.get(NQN)).toMatchObject({ condition: 'held', burned: true });
    j.media.markDirty(NQN, A, 'its cleanup failed: boom');
    expect(j.media.get(NQN)).toMatchObject({
      condition: 'dirty',
      burned: true,
      arqUuid: '',
      reason: 'its cleanup failed: boom',
    });
    j.media.markClean(NQN, A);
    j = reopen(j, dir);
    expect(j.media.get(NQN)).toMatchObject({ condition: 'clean', burned: true });
    const released = j.media.release(NQN, 99);
    expect(released).toMatchObject({ condition: 'clean', burned: false, since: 99 });
    // Idempotent: a second release writes nothing.
    expect(j.media.release(NQN, 100)).toMatchObject({ burned: false, since: 99 });
    expect(reopen(j, dir).media.get(NQN)).toMatchObject({ burned: false, since: 99 });
  });

  it('a one-time-use device that is not cleaned: the burn is its record; released, it keeps a record of being unused', async () => {
    const dir = await stateDir();
    let j = open(dir);
    const gpu = 'pci-dsn:10de:a0-b1-c2-d3-e4-f5-06-17:00.0';
    j.media.hold(gpu, '0000:65:00.0', binding, { cleanable: false, oneTimeUse: true });
    j = reopen(j, dir);
    expect(j.media.get(gpu)).toMatchObject({ condition: 'not_cleanable', burned: true, arqUuid: 'arq-1' });
    // Seen as a device that is not cleaned: the burn is kept.
    j.media.observe([seen('0000:65:00.0', gpu, { cleanable: false, oneTimeUse: true })], []);
    expect(j.media.get(gpu)?.burned).toBe(true);
    expect(j.media.release(gpu)).toMatchObject({ condition: 'not_cleanable', burned: false });
    // Kept: without a record, a one-time-use media is of unknown use at its next sight.
    j = reopen(j, dir);
    expect(j.media.get(gpu)).toMatchObject({ condition: 'not_cleanable', burned: false });
    j.media.observe([seen('0000:65:00.0', gpu, { cleanable: false, oneTimeUse: true })], []);
    expect(j.media.get(gpu)).toMatchObject({ burned: false });
  });

  it('media no longer cleaned here is never "clean" again without a cleanup; cleaned again, it is dirty', async () => {
    const j = open(await stateDir());
    j.media.observe([seen(A, NQN)], []);
    j.media.markClean(NQN, A);
    j.media.observe([seen(A, NQN, { cleanable: false })], []);
    expect(j.media.get(NQN)).toBeUndefined();
    j.media.observe([seen(A, NQN)], []);
    expect(j.media.get(NQN)?.condition).toBe('dirty');
  });

  it('an identity found where the slot was known: the slot’s held state passes to it', async () => {
    const j = open(await stateDir());
    const slot = `pci-slot:h:${A}:144d:a824:144d:a824`;
    j.media.observe([seen(A, slot)], []);
    j.media.markClean(slot, A);
    j.media.hold(slot, A, binding, { cleanable: true, oneTimeUse: false }, 5);
    const r = j.media.observe([seen(A, NQN, { assumeClean: true })], [], 10);
    expect(r.created).toEqual([{ key: NQN, address: A, condition: 'held', inheritedFrom: slot }]);
    expect(j.media.get(NQN)).toMatchObject({ condition: 'held', arqUuid: 'arq-1', since: 5 });
    expect(j.media.get(slot)).toBeUndefined();
  });

  it('upgrade: holds recorded by address move onto the media found there; one not found stays until it is', async () => {
    const dir = await stateDir();
    // A journal as the agent wrote it before media records (schema version 2).
    const old = new Database(join(dir, 'agent-journal.db'));
    old.exec(`CREATE TABLE cleanup_jobs (job_id TEXT PRIMARY KEY, address TEXT NOT NULL, action TEXT NOT NULL,
      state TEXT NOT NULL, started_at INTEGER NOT NULL, finished_at INTEGER);
      CREATE TABLE cleanup_events (job_id TEXT NOT NULL, sequence INTEGER NOT NULL, event TEXT NOT NULL, PRIMARY KEY (job_id, sequence));
      CREATE TABLE held_devices (address TEXT PRIMARY KEY, arq_uuid TEXT NOT NULL, instance_uuid TEXT NOT NULL, since INTEGER NOT NULL);
      INSERT INTO held_devices VALUES ('${A}', 'arq-old', 'vm-old', 111), ('0000:09:00.0', 'arq-gone', 'vm-gone', 222);
      INSERT INTO cleanup_jobs VALUES ('job-old', '${A}', 'shred', 'succeeded', 1, 2);`);
    old.pragma('user_version = 2');
    old.close();
    let j = open(dir);
    expect(j.legacyHolds().map((h) => h.address)).toEqual([A, '0000:09:00.0']);
    // The old jobs are still there, without a media key.
    expect(j.load('job-old')?.address).toBe(A);
    expect(j.jobMediaKey('job-old')).toBe('');
    // Declared clean by the operator: a hold is stronger.
    const r = j.media.observe([seen(A, NQN, { assumeClean: true })], j.legacyHolds(), 500);
    expect(r.migrated).toEqual([{ address: A, key: NQN, arqUuid: 'arq-old' }]);
    expect(j.media.get(NQN)).toMatchObject({
      condition: 'held',
      arqUuid: 'arq-old',
      instanceUuid: 'vm-old',
      since: 111,
      lastAddress: A,
    });
    j = reopen(j, dir);
    expect(j.legacyHolds()).toEqual([
      { address: '0000:09:00.0', arqUuid: 'arq-gone', instanceUuid: 'vm-gone', since: 222 },
    ]);
    expect(j.media.get(NQN)?.condition).toBe('held');
    // The missing device comes back later: its hold follows it then.
    j.media.observe([seen('0000:09:00.0', 'nvme:late')], j.legacyHolds());
    expect(j.media.get('nvme:late')).toMatchObject({ condition: 'held', arqUuid: 'arq-gone' });
    expect(j.legacyHolds()).toEqual([]);
  });

  it('prunes at start only clean records not seen for long; held, dirty and burned ones stay', async () => {
    const dir = await stateDir();
    let j = open(dir);
    const long = Date.now() - PRUNE_AFTER_MS - 1000;
    j.media.observe(
      [seen(A, 'nvme:clean'), seen(B, 'nvme:dirty'), seen('0000:07:00.0', 'nvme:burned')],
      [],
      long,
    );
    j.media.markClean('nvme:clean', A, long);
    j.media.markClean('nvme:burned', '0000:07:00.0', long);
    j.media.hold('nvme:burned', '0000:07:00.0', binding, { cleanable: true, oneTimeUse: true }, long);
    j.media.markClean('nvme:burned', '0000:07:00.0', long);
    j = reopen(j, dir);
    expect(j.prunedMedia).toBe(1);
    expect(
      j.media
        .all()
        .map((r) => r.key)
        .sort(),
    ).toEqual(['nvme:burned', 'nvme:dirty']);
  });

  it('a registration carries held and burned media first, then dirt, newest first, at most MAX_REPORTED_MEDIA', async () => {
    const j = open(await stateDir());
    const n = MAX_REPORTED_MEDIA + 3;
    const list = Array.from({ length: n }, (_, i) =>
      seen(
        `0000:${(i >> 5).toString(16).padStart(2, '0')}:${(i & 31).toString(16).padStart(2, '0')}.0`,
        `nvme:m${i}`,
      ),
    );
    j.media.observe(list, [], 1);
    j.media.markClean('nvme:m7', list[7]!.address, 2);
    j.media.hold('nvme:m7', list[7]!.address, binding, { cleanable: true, oneTimeUse: false }, 3);
    j.media.markClean('nvme:m8', list[8]!.address, 4);
    const { records, leftOut } = reportedMedia(j.media);
    expect(records).toHaveLength(MAX_REPORTED_MEDIA);
    expect(leftOut).toBe(2);
    expect(records[0]).toMatchObject({ key: 'nvme:m7', condition: 'held' });
    expect(records.map((r) => r.key)).not.toContain('nvme:m8');
  });
});

describe('an agent killed while it cleaned', () => {
  it('the next start finds the job interrupted and its media dirty', async () => {
    const dir = await stateDir();
    const { CleanupRunner } = await import('./cleanup-runner.js');
    const { pino } = await import('pino');
    let j = open(dir);
    j.media.observe([seen(A, NQN)], []);
    j.media.markClean(NQN, A);
    j.begin('job-killed', A, 'sanitize-crypto', NQN);
    // kill -9: nothing more is written.
    j = reopen(j, dir);
    const changed: string[] = [];
    const runner = new CleanupRunner(j, {} as never, () => undefined, pino({ level: 'silent' }), {
      defaultTimeoutMs: 1000,
      onMediaChanged: (r) => changed.push(`${r.key} ${r.condition}`),
    });
    expect(runner.recover().map((x) => x.jobId)).toEqual(['job-killed']);
    expect(j.media.get(NQN)).toMatchObject({
      condition: 'dirty',
      reason: 'its cleanup was interrupted by an agent restart',
    });
    expect(changed).toEqual([`${NQN} dirty`]);
  });
});

describe('MediaLedger custody (decision 62)', () => {
  const GPU = 'pci-dsn:10de:a0-b1-c2-d3-e4-f5-06-17:00.0';
  const gpuSeen = (extra: Partial<SeenMedia> = {}) =>
    seen('0000:65:00.0', GPU, { cleanable: false, oneTimeUse: true, ...extra });
  const all = { keys: 'all' as const, except: new Set<string>() };
  const T = Date.now();

  it('a media a full pass no longer sees breaks custody, durably; seen again it is dirty (cleaned) with the gap as reason', async () => {
    const dir = await stateDir();
    let j = open(dir);
    j.media.startCustody('boot-1', T + 1);
    j.media.observe([seen(A, NQN, { assumeClean: true })], [], T + 10, all);
    j.media.markClean(NQN, A, T + 20);
    // A partial pass that did not look for it changes nothing.
    expect(j.media.observe([], [], T + 30, { keys: new Set(['other']), except: new Set() }).lost).toEqual([]);
    // A failed driver's media is not looked for.
    expect(j.media.observe([], [], T + 35, { keys: 'all', except: new Set([NQN]) }).lost).toEqual([]);
    const gone = j.media.observe([], [], T + 40, all);
    expect(gone.lost).toEqual([{ key: NQN, lastAddress: A }]);
    // Recorded before anything else happens: a restart of the agent with the same boot id keeps the break.
    j = reopen(j, dir);
    expect(j.media.startCustody('boot-1', T + 45)).toEqual({ previous: 'boot-1', broken: 0 });
    expect(j.media.get(NQN)).toMatchObject({ condition: 'clean', custodyBrokenAt: T + 40 });
    // Looked for again while gone: the first break stays.
    j.media.observe([], [], T + 50, all);
    expect(j.media.get(NQN)?.custodyBrokenAt).toBe(T + 40);
    const back = j.media.observe([seen(B, NQN, { assumeClean: true })], [], T + 60, all);
    expect(back.regained).toMatchObject([
      { key: NQN, address: B, brokeAt: T + 40, condition: 'dirty', burned: false },
    ]);
    const r = j.media.get(NQN)!;
    expect(r).toMatchObject({ condition: 'dirty', since: T + 60, custodyBrokenAt: 0, lastAddress: B });
    expect(r.reason).toContain(`custody broke at ${new Date(T + 40).toISOString()}`);
    expect(r.reason).toContain('no longer saw it at 0000:01:00.0');
    // A proven cleanup restores it.
    expect(j.media.markClean(NQN, B, T + 70)).toMatchObject({ condition: 'clean', custodyBrokenAt: 0 });
  });

  it('a new boot id breaks the custody of every record; a one-time-use media seen again is held (burned) with the gap as reason', async () => {
    const dir = await stateDir();
    let j = open(dir);
    expect(j.media.startCustody('boot-1', T + 1)).toEqual({ previous: '', broken: 0 });
    j.media.observe([seen(A, NQN, { assumeClean: true }), gpuSeen({ assumeClean: true })], [], T + 10, all);
    j.media.markClean(NQN, A, T + 20);
    expect(j.media.get(GPU)).toMatchObject({ condition: 'not_cleanable', burned: false });
    j = reopen(j, dir);
    expect(j.media.startCustody('boot-2', T + 30)).toEqual({ previous: 'boot-1', broken: 2 });
    expect(j.media.get(GPU)?.custodyBreak).toContain('boot id boot-1, now boot-2');
    const o = j.media.observe(
      [seen(A, NQN, { assumeClean: true }), gpuSeen({ assumeClean: true })],
      [],
      T + 40,
      all,
    );
    expect(o.regained.map((g) => [g.key, g.condition, g.burned])).toEqual([
      [NQN, 'dirty', false],
      [GPU, 'not_cleanable', true],
    ]);
    expect(j.media.get(GPU)).toMatchObject({ burned: true, since: T + 40, arqUuid: '' });
    expect(j.media.get(GPU)?.reason).toContain('what happened to it since is unknown');
    // Only an operator's release clears it; the record stays, unused.
    expect(j.media.release(GPU, T + 50)).toMatchObject({ burned: false, reason: '' });
  });

  it('a held record seen again after a break stays held, newer than any cleanup elsewhere', async () => {
    const j = open(await stateDir());
    j.media.startCustody('b', T + 1);
    j.media.observe([seen(A, NQN, { assumeClean: true })], [], T + 10, all);
    j.media.hold(NQN, A, binding, { cleanable: true, oneTimeUse: false }, T + 20);
    j.media.observe([], [], T + 30, all);
    j.media.observe([seen(A, NQN)], [], T + 40, all);
    expect(j.media.get(NQN)).toMatchObject({ condition: 'held', since: T + 40, arqUuid: 'arq-1' });
  });

  it('a one-time-use media with no record is held unless assume_clean vouches it unused; an upgraded journal takes what it finds as unused once', async () => {
    const fresh = open(await stateDir());
    fresh.media.startCustody('b', T + 1);
    const o = fresh.media.observe([gpuSeen()], [], T + 10, all);
    expect(o.unrecorded).toMatchObject([{ key: GPU, held: true }]);
    expect(fresh.media.get(GPU)).toMatchObject({ condition: 'not_cleanable', burned: true });
    expect(fresh.media.get(GPU)?.reason).toContain('whether it was used is unknown');
    const vouched = open(await stateDir());
    vouched.media.startCustody('b', T + 1);
    vouched.media.observe([gpuSeen({ assumeClean: true })], [], T + 10, all);
    expect(vouched.media.get(GPU)).toMatchObject({ burned: false });
    // A one-time-use media Berth cleans (Nova's clean-one-time-use) is scrubbed, not held.
    vouched.media.observe([seen(A, NQN, { oneTimeUse: true })], [], T + 20, all);
    expect(vouched.media.get(NQN)).toMatchObject({ condition: 'dirty', burned: false });

    // A journal of the agent before custody (schema version 4): no record of its unused GPU.
    const dir = await stateDir();
    const old = open(dir);
    old.close();
    journals.splice(journals.indexOf(old), 1);
    const db = new Database(join(dir, 'agent-journal.db'));
    db.exec(
      `DROP TABLE custody; ALTER TABLE media DROP COLUMN custody_broken_at; ALTER TABLE media DROP COLUMN custody_break;
       ALTER TABLE media DROP COLUMN write_counters; ALTER TABLE media DROP COLUMN project_id;`,
    );
    db.pragma('user_version = 4');
    db.close();
    const up = open(dir);
    expect(up.media.startCustody('b', T + 1)).toEqual({ previous: '', broken: 0 });
    const first = up.media.observe([gpuSeen()], [], T + 10, all);
    expect(first.unrecorded).toMatchObject([{ key: GPU, held: false }]);
    expect(up.media.get(GPU)).toMatchObject({ burned: false });
    // Once: another one-time-use media seen later, with no record, is held.
    const other = 'pci-dsn:10de:00-00-00-00-00-00-00-02:00.0';
    up.media.observe(
      [gpuSeen(), seen('0000:66:00.0', other, { cleanable: false, oneTimeUse: true })],
      [],
      T + 20,
      all,
    );
    expect(up.media.get(other)).toMatchObject({ burned: true });
    expect(reopen(up, dir).media.startCustody('b', T + 30)).toEqual({ previous: 'b', broken: 0 });
  });

  it('a device neither cleaned nor one-time-use keeps no record, custody or not', async () => {
    const j = open(await stateDir());
    j.media.startCustody('b', T + 1);
    j.media.observe([seen('0000:66:00.0', 'pci-dsn:8086:x:00.0', { cleanable: false })], [], T + 10, all);
    expect(j.media.size).toBe(0);
  });
});

describe('assume_clean vouches for what a new journal first finds, nothing later', () => {
  it("a drive first seen after the journal's first full discovery is dirty, whatever the entry says; across a reopen too", async () => {
    const dir = await stateDir();
    const j = open(dir);
    const everything = { keys: 'all' as const, except: new Set<string>() };
    const other = 'nvme:nqn.2019-08.org.qemu:SER-B';
    j.media.observe([seen(A, NQN, { assumeClean: true })], [], 1_000, everything);
    expect(j.media.get(NQN)).toMatchObject({ condition: 'declared_clean' });
    // Carried in later (from another host, say): the entry vouched for what the operator installed, not for this.
    j.media.observe(
      [seen(A, NQN, { assumeClean: true }), seen(B, other, { assumeClean: true })],
      [],
      2_000,
      everything,
    );
    expect(j.media.get(other)).toMatchObject({ condition: 'dirty' });
    // The agent started again on the same journal: still nothing new is vouched for.
    const again = reopen(j, dir);
    const third = 'nvme:nqn.2019-08.org.qemu:SER-C';
    again.media.observe([seen('0000:07:00.0', third, { assumeClean: true })], [], 3_000, everything);
    expect(again.media.get(third)).toMatchObject({ condition: 'dirty' });
  });
});
