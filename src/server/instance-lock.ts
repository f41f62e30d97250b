/**
 * One running instance per state: a second `berth up` on the same state
 * directory, or a second scheduler on the same SQLite file, refuses to start
 * instead of fighting the first over the same hosts.
 *
 * The lock is a kernel lock, not a marker file: an exclusive SQLite lock on
 * `<path>.lock` (SQLite's own fcntl locking, through better-sqlite3 which
 * Berth already uses), held by an open connection for the life of the
 * instance. The kernel drops it when the process ends, however it ends, so a
 * `kill -9` never leaves a stale lock behind and no timeout guesses whether
 * the owner is alive. Who holds it (pid, endpoint) is written beside it in
 * `<path>.owner.json`, only to word the refusal.
 */
import { readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import Database from 'better-sqlite3';
import { BerthError } from '../errors.js';

export interface InstanceOwner {
  /** What holds the lock: "berth up", "scheduler". */
  kind: string;
  pid: number;
  /** Where it serves, once it does. */
  endpoint?: string;
  startedAt: string;
}

export interface LockOptions {
  /** What is locked, for the refusal: e.g. "state directory /x". */
  what: string;
  kind: string;
  /** Appended to the refusal: what to do instead (e.g. "or use another --state-dir"). */
  hint?: string;
}

/** The refusal when another instance holds the lock. */
export class InstanceRunningError extends BerthError {
  constructor(
    readonly what: string,
    readonly owner: InstanceOwner | null,
    hint?: string,
  ) {
    const who = owner
      ? `${owner.kind} (pid ${owner.pid}${owner.endpoint ? `, serving ${owner.endpoint}` : ', starting'})`
      : 'another Berth process';
    super('FAILED_PRECONDITION', `${what} is in use by ${who}; stop it first${hint ? `, ${hint}` : ''}`, {
      reason: 'INSTANCE_RUNNING',
      metadata: {
        ...(owner ? { pid: String(owner.pid) } : {}),
        ...(owner?.endpoint ? { endpoint: owner.endpoint } : {}),
      },
    });
    this.name = 'InstanceRunningError';
  }
}

export class InstanceLock {
  private owner: InstanceOwner;

  private constructor(
    private readonly db: Database.Database,
    private readonly ownerPath: string,
    owner: InstanceOwner,
    /**
     * The previous holder when it did not release the lock (killed, crashed, the
     * machine lost power): its owner file was still there. null after a clean stop.
     */
    readonly uncleanPredecessor: InstanceOwner | null,
  ) {
    this.owner = owner;
  }

  /** Takes the lock at `path` (`<path>.lock`), or throws InstanceRunningError naming the holder. */
  static acquire(path: string, options: LockOptions): InstanceLock {
    const lockPath = `${path}.lock`;
    const ownerPath = `${path}.owner.json`;
    const db = new Database(lockPath, { timeout: 0 });
    try {
      db.pragma('locking_mode = EXCLUSIVE');
      // Nothing is ever written: no journal file beside the lock.
      db.pragma('journal_mode = MEMORY');
      db.exec('BEGIN EXCLUSIVE');
    } catch (err) {
      db.close();
      if ((err as { code?: string }).code === 'SQLITE_BUSY') {
        throw new InstanceRunningError(options.what, readOwner(ownerPath), options.hint);
      }
      throw err;
    }
    const lock = new InstanceLock(
      db,
      ownerPath,
      { kind: options.kind, pid: process.pid, startedAt: new Date().toISOString() },
      readOwner(ownerPath),
    );
    lock.writeOwner();
    return lock;
  }

  /** Records where the instance serves (for the next one's refusal). */
  setEndpoint(endpoint: string): void {
    this.owner = { ...this.owner, endpoint };
    this.writeOwner();
  }

  release(): void {
    if (!this.db.open) return;
    rmSync(this.ownerPath, { force: true });
    this.db.close();
  }

  private writeOwner(): void {
    const tmp = `${this.ownerPath}.${process.pid}.tmp`;
    writeFileSync(tmp, `${JSON.stringify(this.owner)}\n`);
    renameSync(tmp, this.ownerPath);
  }
}

function readOwner(path: string): InstanceOwner | null {
  try {
    const o = JSON.parse(readFileSync(path, 'utf8')) as InstanceOwner;
    return typeof o.pid === 'number' && typeof o.kind === 'string' ? o : null;
  } catch {
    return null;
  }
}
