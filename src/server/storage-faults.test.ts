import { describe, expect, it } from 'vitest';
import { classifySqliteFailure } from './storage-faults.js';

const sqliteError = (code: string, message = 'boom') => Object.assign(new Error(message), { code });

describe('SQLite failures in Berth terms', () => {
  it.each([
    ['SQLITE_CORRUPT', 'UNAVAILABLE', 'STORE_DAMAGED', true],
    ['SQLITE_CORRUPT_INDEX', 'UNAVAILABLE', 'STORE_DAMAGED', true],
    ['SQLITE_NOTADB', 'UNAVAILABLE', 'STORE_DAMAGED', true],
    ['SQLITE_FULL', 'RESOURCE_EXHAUSTED', 'STORE_DISK_FULL', false],
    ['SQLITE_IOERR_WRITE', 'UNAVAILABLE', 'STORE_IO_ERROR', false],
    ['SQLITE_READONLY', 'UNAVAILABLE', 'STORE_IO_ERROR', false],
  ])('%s → %s (%s), damage: %s', (code, berthCode, reason, damaged) => {
    const f = classifySqliteFailure(sqliteError(code), '/var/lib/berth/sched.db')!;
    expect([f.error.code, f.error.reason, f.damage !== null]).toEqual([berthCode, reason, damaged]);
    expect(f.error.message).toContain('/var/lib/berth/sched.db');
  });

  it("names whose database it is: the agent's journal", () => {
    const f = classifySqliteFailure(
      sqliteError('SQLITE_FULL'),
      '/var/lib/berth/agent-journal.db',
      "the agent on h1's",
    )!;
    expect(f.error.message).toBe(
      "the agent on h1's disk is full (/var/lib/berth/agent-journal.db): nothing of this request was written",
    );
  });

  it('leaves other errors (constraint violations, our own) alone', () => {
    expect(classifySqliteFailure(sqliteError('SQLITE_CONSTRAINT_UNIQUE'), 'x')).toBeNull();
    expect(classifySqliteFailure(new Error('plain'), 'x')).toBeNull();
  });
});
