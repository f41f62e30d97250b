/**
 * How one PostgreSQL unit's statements reach the server (pg-store.ts runs
 * the units): the shared SQL's executor (./sql/unit-base.ts `Executor`) on
 * the unit's pooled client, and the statements' texts.
 *
 * A round trip is the unit of the scheduler's CPU and of much of the
 * server's (docs/decisions.md 86, 92), so a unit sends as few as it can:
 * - what need not wait for an answer — the unit's BEGIN, the writes and
 *   locks whose result it does not use (`later`), a compare-and-set behind
 *   its guard (`laterChanging`) — goes with the next statement that does, or
 *   with the unit's end (pg-store.ts `commitSql`);
 * - the statements a unit asks for together (in one turn of the event loop,
 *   without awaiting one before the next: `Promise.all`) go in one round
 *   trip, in the order they were asked for (decision 95). Each is still a
 *   statement of its own, so under READ COMMITTED each reads a snapshot
 *   taken when it starts: a read asked for after a locking read (the media
 *   rows, then their devices) sees what that lock's holder committed.
 * A round trip of several statements is one string of the simple protocol
 * (values as literals, escaped by the driver; Berth's statements hold no `?`
 * inside a literal), and a failure anywhere in it stops the rest and fails
 * every statement it carried. A statement sent alone is prepared.
 */
import type pg from 'pg';
import { BerthError } from '../../../errors.js';
import type { Executor } from './sql/unit.js';

/**
 * A statement's text as PostgreSQL takes it, per text of the shared SQL
 * (which writes `?`, ./sql/dialect.ts): numbered `$1…` for a prepared
 * statement, and cut at its `?`s for a string with literals. Prepared once per
 * connection and then only bound and executed (a name per distinct text):
 * PostgreSQL parses and plans each once, and the scheduler sends less per
 * call — +15–28% binds/s in a 64-client loop (bench/README.md). The texts are
 * Berth's own, a bounded set (the device query's optional filters give the
 * most variants); past MAX_STATEMENTS a new text runs unnamed and is cut
 * again at each use, so nothing can grow without end.
 */
interface Statement {
  name?: string;
  /** Numbered `$1…`. */
  text: string;
  /** The text between its `?`s (one more than it has parameters). */
  pieces: string[];
}

const STATEMENTS = new Map<string, Statement>();
const MAX_STATEMENTS = 500;

function statement(sql: string): Statement {
  let st = STATEMENTS.get(sql);
  if (st === undefined) {
    const pieces = sql.split('?');
    let text = pieces[0]!;
    for (let i = 1; i < pieces.length; i++) text += `$${i}${pieces[i]}`;
    st = { text, pieces };
    if (STATEMENTS.size < MAX_STATEMENTS) {
      st.name = `berth_${STATEMENTS.size + 1}`;
      STATEMENTS.set(sql, st);
    }
  }
  return st;
}

/**
 * Text as an SQL string literal: what node-postgres's `escapeLiteral` gives
 * (quotes doubled; with a backslash, doubled too and the literal written
 * `E'…'`, whatever `standard_conforming_strings` says), without its loop that
 * appends one character at a time (records are kilobytes of JSON).
 */
export function quote(text: string): string {
  const quoted = `'${text.replaceAll("'", "''")}'`;
  return text.includes('\\') ? ` E${quoted.replaceAll('\\', '\\\\')}` : quoted;
}

/** A value as an SQL literal, for a string of statements (the simple protocol takes no parameters). */
function literal(v: unknown): string {
  if (v === null || v === undefined) return 'NULL';
  if (typeof v === 'boolean') return v ? 'TRUE' : 'FALSE';
  if (typeof v === 'number') {
    if (!Number.isFinite(v))
      throw new BerthError('INTERNAL', `a statement parameter is not a finite number: ${v}`);
    return String(v);
  }
  return quote(String(v));
}

/** A failed guard's number (`laterChanging`) in the message; not its quotes, which lc_messages translates. */
const MISS_RE = /berth-miss:(\d+):/;

/** A statement the unit awaits, not sent yet. */
interface Asked {
  sql: string;
  params: readonly unknown[];
  resolve: (r: pg.QueryResult) => void;
  reject: (err: unknown) => void;
  answer: Promise<pg.QueryResult>;
}

/** The shared SQL's statements on one unit's client (module comment). */
export class UnitExecutor implements Executor {
  /** Statements not sent yet, in order: text, or one the unit awaits. */
  private pending: Array<string | Asked> = [];
  /** How many of `pending` the unit awaits (a send is scheduled when the first is asked for). */
  private asked = 0;
  /** The misses of the guarded writes sent or pending (`laterChanging`), by the guard's number. */
  private readonly misses: Array<() => BerthError> = [];
  /** A guarded write's miss, once a statement met it: the transaction is failed, every later one gets it too. */
  private missed: BerthError | null = null;

  constructor(
    private readonly client: pg.PoolClient,
    /** The BEGIN not sent yet. */
    begin: string | null,
  ) {
    if (begin !== null) this.pending.push(begin);
  }

  /** Whether BEGIN was sent (else the unit's end has nothing to roll back). */
  begun = false;

  /** Whether the unit ended: nothing more is sent. */
  private ended = false;

  /**
   * The unit's work is done: the statements not sent yet, in order, for its
   * end to send. A statement it asked for and did not await is never sent,
   * and the unit fails (INTERNAL).
   */
  finish(): string[] {
    if (this.abandon() > 0)
      throw new BerthError('INTERNAL', 'a unit ended with a statement it did not await');
    const p = this.pending as string[];
    this.pending = [];
    return p;
  }

  /**
   * The unit ended (failed, or `finish`): nothing more is sent on its client,
   * which goes back to the pool. What it asked for and was not sent yet (the
   * siblings of a failed `Promise.all`) rejects, and is not left pending.
   * Returns how many.
   */
  abandon(): number {
    this.ended = true;
    const unsent = this.pending.filter((p): p is Asked => typeof p !== 'string');
    if (unsent.length === 0) return 0;
    this.pending = this.pending.filter((p) => typeof p === 'string');
    this.asked = 0;
    const err = new BerthError('INTERNAL', 'a statement was not sent: its unit ended first');
    for (const a of unsent) {
      // Handled here: its caller may have gone (a failed Promise.all) and must not see an unhandled rejection.
      a.answer.catch(() => {});
      a.reject(err);
    }
    return unsent.length;
  }

  private text(sql: string, params: readonly unknown[]): string {
    const pieces = statement(sql).pieces;
    let out = pieces[0]!;
    for (let i = 1; i < pieces.length; i++) out += literal(params[i - 1]) + pieces[i];
    return out;
  }

  later(sql: string, params: readonly unknown[] = []): void {
    this.pending.push(this.text(sql, params));
  }

  /**
   * The write, with a guard that fails its string when it changed no row (`berth-miss:N:0` cast
   * to an integer, 22P02; `met` makes it the write's error). ELSE reads `w`: the planner cannot fold it.
   */
  laterChanging(sql: string, params: readonly unknown[], miss: () => BerthError): void {
    const n = this.misses.push(miss) - 1;
    this.pending.push(
      `WITH w AS (${this.text(sql, params)} RETURNING 1) SELECT CASE WHEN EXISTS (SELECT 1 FROM w) THEN 1 ` +
        `ELSE ('berth-miss:${n}:' || (SELECT count(*) FROM w))::int END`,
    );
  }

  /** `err` as the unit sees it: a guard's miss as its write's error (only a string, never a lone statement, carries a guard). */
  met(err: unknown): unknown {
    const e = err as { code?: unknown; message?: unknown };
    if (e?.code === '22P02' && typeof e.message === 'string') {
      const n = MISS_RE.exec(e.message)?.[1];
      const miss = n === undefined ? undefined : this.misses[Number(n)];
      if (miss) this.missed = miss();
    }
    return this.missed ?? err;
  }

  /** Asks for a statement's answer: sent, with every statement asked for in this turn, once the turn is over. */
  private query(sql: string, params: readonly unknown[] = []): Promise<pg.QueryResult> {
    if (this.missed) return Promise.reject(this.missed);
    if (this.ended)
      return Promise.reject(new BerthError('INTERNAL', 'a unit of work was used after it ended'));
    let resolve!: (r: pg.QueryResult) => void;
    let reject!: (err: unknown) => void;
    const answer = new Promise<pg.QueryResult>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    this.pending.push({ sql, params, resolve, reject, answer });
    // After the promise jobs now queued have run: what they ask for goes too.
    if (++this.asked === 1) process.nextTick(() => this.send());
    return answer;
  }

  private send(): void {
    // The unit ended meanwhile (`abandon` settled what it had asked for).
    if (this.ended || this.asked === 0) return;
    const parts = this.pending;
    this.pending = [];
    this.asked = 0;
    const only = parts.length === 1 ? parts[0] : undefined;
    if (only !== undefined && typeof only !== 'string') {
      const st = statement(only.sql);
      this.client
        .query({ name: st.name, text: st.text, values: only.params as unknown[] })
        .then(only.resolve, only.reject);
      return;
    }
    const asked = parts.filter((p): p is Asked => typeof p !== 'string');
    let sql: string;
    try {
      sql = parts.map((p) => (typeof p === 'string' ? p : this.text(p.sql, p.params))).join('; ');
    } catch (err) {
      for (const a of asked) a.reject(err);
      return;
    }
    this.begun = true;
    this.client.query(sql).then(
      (r) => {
        // One result a statement; a string of one statement gives it alone.
        const results = (Array.isArray(r) ? r : [r]) as pg.QueryResult[];
        const offset = results.length - parts.length;
        parts.forEach((p, i) => {
          if (typeof p === 'string') return;
          const answer = results[offset + i];
          if (answer) p.resolve(answer);
          else
            p.reject(
              new BerthError(
                'INTERNAL',
                `PostgreSQL answered ${results.length} statements of ${parts.length}`,
              ),
            );
        });
      },
      (err: unknown) => {
        const e = this.met(err);
        for (const a of asked) a.reject(e);
      },
    );
  }

  async all<R>(sql: string, params?: readonly unknown[]): Promise<R[]> {
    return (await this.query(sql, params)).rows as R[];
  }

  async get<R>(sql: string, params?: readonly unknown[]): Promise<R | undefined> {
    return (await this.query(sql, params)).rows[0] as R | undefined;
  }

  async run(sql: string, params?: readonly unknown[]): Promise<number> {
    return (await this.query(sql, params)).rowCount ?? 0;
  }
}
