/**
 * What a failure of a database file (the scheduler's store, an agent's
 * journal) means, in Berth's error taxonomy, so a caller never sees
 * `internal error (id …)` for a full disk or a damaged file: a
 * damaged database (SQLITE_CORRUPT, SQLITE_NOTADB, a failed integrity check)
 * stops the scheduler's store — it serves nothing until an operator restores
 * it — a full disk is RESOURCE_EXHAUSTED with nothing written, and an I/O
 * error is UNAVAILABLE. `owner` words the message: "the scheduler's", "the agent on host-a's".
 */
import { BerthError } from '../errors.js';

/** The error every call gets once the database is known to be damaged. */
export function storeDamaged(path: string, why: string, owner = "the scheduler's"): BerthError {
  return new BerthError(
    'UNAVAILABLE',
    `${owner} database ${path} is damaged (${why}); it serves nothing until it is restored from a backup (docs/operator-guide.md)`,
    { reason: 'STORE_DAMAGED', metadata: { path } },
  );
}

/** A SQLite failure as Berth reports it, and whether it means the file is damaged; null when it is not one. */
export function classifySqliteFailure(
  err: unknown,
  path: string,
  owner = "the scheduler's",
): { error: BerthError; damage: string | null } | null {
  const code = (err as { code?: unknown }).code;
  if (typeof code !== 'string' || !code.startsWith('SQLITE_')) return null;
  const message = (err as Error).message;
  if (code.startsWith('SQLITE_CORRUPT') || code === 'SQLITE_NOTADB') {
    return { error: storeDamaged(path, `${code}: ${message}`, owner), damage: `${code}: ${message}` };
  }
  if (code === 'SQLITE_FULL') {
    return {
      error: new BerthError(
        'RESOURCE_EXHAUSTED',
        `${owner} disk is full (${path}): nothing of this request was written`,
        { reason: 'STORE_DISK_FULL', metadata: { path } },
      ),
      damage: null,
    };
  }
  if (code.startsWith('SQLITE_IOERR') || code.startsWith('SQLITE_READONLY') || code === 'SQLITE_CANTOPEN') {
    return {
      error: new BerthError('UNAVAILABLE', `${owner} database ${path} cannot be used (${code}: ${message})`, {
        reason: 'STORE_IO_ERROR',
        metadata: { path },
      }),
      damage: null,
    };
  }
  return null;
}
