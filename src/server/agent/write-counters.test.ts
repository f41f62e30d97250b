/**
 * The journal's rule for write counters (decision 64), on a real SQLite
 * journal: a clean record is judged by the counters read at each discovery;
 * counters that grew, or went down, make it dirty with a reason naming them.
 * Inputs are ones the simulator would not produce by itself (counters past
 * 2^64, reset to zero, another controller's).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { tempDir } from '../../../test/helpers/agent.js';
import type { WriteCounters } from '../../plugins/types.js';
import { CleanupJournal } from './cleanup-journal.js';
import { reportedMedia } from './media.js';
import type { SeenMedia } from './media-ledger.js';
import { writeCountersChange } from './media-write-counters.js';

const dirs: { cleanup: () => Promise<void> }[] = [];
const journals: CleanupJournal[] = [];
afterEach(async () => {
  for (const j of journals.splice(0)) j.close();
  for (const d of dirs.splice(0)) await d.cleanup();
});

async function open(): Promise<{ j: CleanupJournal; dir: string }> {
  const d = await tempDir('berth-counters-');
  dirs.push(d);
  const j = new CleanupJournal(d.path);
  journals.push(j);
  return { j, dir: d.path };
}

const A = '0000:01:00.0';
const KEY = 'nvme:nqn.2019-08.org.example:SER-A';
const BIG = (2n ** 64n + 5n).toString();
/** The agent's clock in these tests: now (a record last seen long ago would be pruned at a reopen). */
const T = Date.now();

const counters = (over: Partial<WriteCounters> = {}): WriteCounters => ({
  controller: 'nvme0',
  cntlid: 1,
  dataUnitsWritten: BIG,
  hostWriteCommands: '5000',
  powerCycles: '12',
  powerOnHours: '9000',
  at: T + 1_000,
  ...over,
});

const seen = (c: WriteCounters | undefined, extra: Partial<SeenMedia> = {}): SeenMedia => ({
  address: A,
  key: KEY,
  cleanable: true,
  assumeClean: false,
  oneTimeUse: false,
  slotPrefix: `pci-slot:h:${A}:144d:a824:`,
  ...(c ? { counters: c } : {}),
  ...extra,
});

describe('writeCountersChange', () => {
  it('writes (Data Units Written, Host Write Commands up) and any counter down are dirt; hours and cycles up are not', () => {
    const r = counters();
    expect(
      writeCountersChange(r, counters({ powerOnHours: '9001', powerCycles: '13', at: T + 2_000 })),
    ).toBeNull();
    expect(writeCountersChange(r, counters({ dataUnitsWritten: (2n ** 64n + 6n).toString() }))).toBe(
      `it was written since it was recorded clean (Data Units Written ${BIG} → ${2n ** 64n + 6n}, read through nvme0 (cntlid 1))`,
    );
    expect(writeCountersChange(r, counters({ hostWriteCommands: '5001' }))).toMatch(
      /^it was written since it was recorded clean \(Host Write Commands 5000 → 5001,/,
    );
    const reset = writeCountersChange(r, counters({ dataUnitsWritten: '0', hostWriteCommands: '7' }));
    expect(reset).toMatch(
      /went down since it was recorded clean \(Data Units Written .* → 0, Host Write Commands 5000 → 7,/,
    );
    expect(reset).toMatch(/its history is unknown$/);
    // A counter down wins over one up: the history is unknown, whatever else moved.
    expect(writeCountersChange(r, counters({ powerOnHours: '1', hostWriteCommands: '6000' }))).toMatch(
      /went down .*Power On Hours 9000 → 1/,
    );
  });
});

describe('the journal judges clean records by their write counters', () => {
  it('a clean record keeps its counters across a reopen and turns dirty when the drive was written', async () => {
    const { j, dir } = await open();
    j.media.observe([seen(undefined)], []);
    j.media.markClean(KEY, A, T + 1_000, counters());
    j.close();
    journals.splice(0);
    const again = new CleanupJournal(dir);
    journals.push(again);
    expect(again.media.get(KEY)?.writeCounters).toEqual(counters());
    // Clean records are reported with their counters (the scheduler's view of the evidence).
    expect(reportedMedia(again.media).records).toEqual([]);

    // Nothing written: still clean, however the hours go.
    let r = again.media.observe([seen(counters({ powerOnHours: '9100', at: T + 5_000 }))], [], T + 5_000);
    expect(r.countersMoved).toEqual([]);
    expect(again.media.get(KEY)?.condition).toBe('clean');

    r = again.media.observe([seen(counters({ hostWriteCommands: '5100', at: T + 6_000 }))], [], T + 6_000);
    expect(r.countersMoved).toEqual([
      { key: KEY, address: A, reason: expect.stringMatching(/^it was written since it was recorded clean/) },
    ]);
    const dirty = again.media.get(KEY)!;
    expect(dirty).toMatchObject({ condition: 'dirty', since: T + 6_000, reason: r.countersMoved[0]!.reason });
    expect(dirty.writeCounters).toBeUndefined();
    expect(r.changed).toEqual([KEY]);
    // Dirty stays dirty until a cleanup, whatever the counters say next.
    again.media.observe([seen(counters({ at: T + 7_000 }))], [], T + 7_000);
    expect(again.media.get(KEY)?.condition).toBe('dirty');
  });

  it('counters that went down make it dirty (unknown history)', async () => {
    const { j } = await open();
    j.media.observe([seen(undefined)], []);
    j.media.markClean(KEY, A, T + 1_000, counters());
    const r = j.media.observe(
      [seen(counters({ dataUnitsWritten: '0', hostWriteCommands: '0', at: T + 2_000 }))],
      [],
    );
    expect(r.countersMoved[0]?.reason).toMatch(/went down .*its history is unknown/);
    expect(j.media.get(KEY)?.condition).toBe('dirty');
  });

  it("counters read before the record's, or through another controller, are not compared", async () => {
    const { j } = await open();
    j.media.observe([seen(undefined)], []);
    j.media.markClean(KEY, A, T + 1_000, counters({ at: T + 1_000 }));
    // Read by a discovery that began before the cleanup ended: lower, but older than the record.
    j.media.observe([seen(counters({ dataUnitsWritten: '1', at: T + 999 }))], []);
    // Another port of a dual-port drive counts its own writes: nothing to compare with.
    j.media.observe(
      [seen(counters({ cntlid: 2, controller: 'nvme1', dataUnitsWritten: '1', at: T + 2_000 }))],
      [],
    );
    expect(j.media.get(KEY)).toMatchObject({ condition: 'clean', writeCounters: counters() });
  });

  it('a clean record without counters (an older journal) takes the first ones read; declared clean media gets them at first sight', async () => {
    const { j } = await open();
    j.media.observe([seen(undefined)], []);
    j.media.markClean(KEY, A, T + 1_000);
    expect(j.media.get(KEY)?.writeCounters).toBeUndefined();
    j.media.observe([seen(counters({ at: T + 2_000 }))], []);
    expect(j.media.get(KEY)).toMatchObject({
      condition: 'clean',
      writeCounters: counters({ at: T + 2_000 }),
    });

    const declared = 'nvme:declared';
    j.media.observe(
      [seen(counters({ at: T + 3_000 }), { key: declared, address: '0000:02:00.0', assumeClean: true })],
      [],
    );
    expect(j.media.get(declared)).toMatchObject({
      condition: 'declared_clean',
      writeCounters: counters({ at: T + 3_000 }),
    });
    const r = j.media.observe(
      [
        seen(counters({ dataUnitsWritten: `${BIG}1`, at: T + 4_000 }), {
          key: declared,
          address: '0000:02:00.0',
          assumeClean: true,
        }),
      ],
      [],
    );
    expect(r.countersMoved.map((m) => m.key)).toEqual([declared]);
    expect(j.media.get(declared)?.condition).toBe('dirty');
  });

  it('held and dirty records are not judged by counters (a tenant writes; a cleanup follows anyway)', async () => {
    const { j } = await open();
    j.media.observe([seen(undefined)], []);
    j.media.markClean(KEY, A, T + 1_000, counters());
    j.media.hold(KEY, A, { arqUuid: 'arq-1', instanceUuid: 'vm-1' }, { cleanable: true, oneTimeUse: false });
    const r = j.media.observe([seen(counters({ hostWriteCommands: '99999', at: T + 5_000 }))], []);
    expect(r.countersMoved).toEqual([]);
    expect(j.media.get(KEY)).toMatchObject({ condition: 'held', arqUuid: 'arq-1' });
    expect(j.media.get(KEY)?.writeCounters).toBeUndefined();
  });
});
