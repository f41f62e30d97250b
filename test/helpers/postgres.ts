/**
 * A real PostgreSQL server for the tests of the PostgreSQL store
 * (docs/decisions.md 36, 37):
 * `initdb` in a temporary directory, `postgres` on a free port on 127.0.0.1
 * (its socket in the same directory), stopped and removed at the end. As root
 * both run as the `postgres` user (the server refuses to run as root). Test
 * durability is not what is measured here, so fsync is off (benchmarks keep it:
 * `durable`).
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { chownSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { postgresBin } from './prerequisites.js';
import { freePort } from './processes.js';
import { sleep } from './wait.js';

export interface PostgresServer {
  /** postgres://… for a database of this server (created by `createDatabase`). */
  url(database: string): string;
  /** Creates a database (if missing) and returns its URL. */
  createDatabase(name: string): Promise<string>;
  /** Stops the server, keeping its data (the database goes away, as in an outage). */
  halt(): Promise<void>;
  /** Starts it again on the same port and data. */
  resume(): Promise<void>;
  stop(): Promise<void>;
}

const USER = 'berth';

/**
 * Who runs PostgreSQL's binaries: the `postgres` user when we are root (the
 * server refuses root). Set on the child itself (spawn's uid/gid), not through
 * runuser, so a signal reaches the server: runuser does not pass SIGINT on,
 * and the server it leaves behind runs until it notices its directory is gone.
 */
function serverUser(): { uid: number; gid: number; env: NodeJS.ProcessEnv } | Record<string, never> {
  if (process.getuid?.() !== 0) return {};
  const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
  const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
  return { uid, gid, env: { ...process.env, HOME: '/var/lib/postgresql', USER: 'postgres' } };
}

export interface PostgresOptions {
  /**
   * Keep PostgreSQL's durability (fsync, synchronous commit, full-page
   * writes), as a benchmark against SQLite's synchronous=FULL must; tests turn it off.
   */
  durable?: boolean;
  /** Where the data directory goes (default the OS temp dir; benchmarks use a real disk). */
  baseDir?: string;
  /**
   * Load pg_stat_statements, tracking nested statements too (`track=all`), so a
   * benchmark can count calls and time per statement; each database that reads
   * it needs `CREATE EXTENSION pg_stat_statements` (`createDatabase` does it).
   * It costs the server CPU: not for a figure that is judged.
   */
  statementStats?: boolean;
}

export async function startPostgres(options: PostgresOptions = {}): Promise<PostgresServer> {
  const bin = postgresBin();
  if (!bin) throw new Error('PostgreSQL binaries not found under /usr/lib/postgresql');
  const dir = mkdtempSync(join(options.baseDir ?? tmpdir(), 'berth-pg-'));
  const user = serverUser();
  if ('uid' in user) chownSync(dir, user.uid, user.gid);
  const data = join(dir, 'data');
  execFileSync(join(bin, 'initdb'), ['-D', data, '-U', USER, '--auth=trust', '--no-sync', '-E', 'UTF8'], {
    stdio: 'pipe',
    timeout: 120_000,
    ...user,
  });
  const port = await freePort();
  const args = [
    '-D',
    data,
    '-p',
    String(port),
    '-k',
    dir,
    '-c',
    'listen_addresses=127.0.0.1',
    ...(options.durable
      ? []
      : ['-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off']),
    '-c',
    'max_connections=200',
    ...(options.statementStats
      ? ['-c', 'shared_preload_libraries=pg_stat_statements', '-c', 'pg_stat_statements.track=all']
      : []),
  ];
  const url = (database: string) => `postgres://${USER}@127.0.0.1:${port}/${database}`;
  let server: ChildProcess;
  let exited: Promise<void>;
  /** Starts the server on the data directory and waits until it accepts connections. */
  const run = async () => {
    server = spawn(join(bin, 'postgres'), args, { stdio: ['ignore', 'ignore', 'pipe'], ...user });
    let log = '';
    server.stderr?.on('data', (c: Buffer) => {
      log = (log + c.toString()).slice(-4000);
    });
    exited = new Promise<void>((resolve) => server.once('exit', () => resolve()));
    const deadline = Date.now() + 60_000;
    for (;;) {
      const c = new pg.Client({ connectionString: url('postgres') });
      try {
        await c.connect();
        await c.end();
        return;
      } catch (err) {
        await c.end().catch(() => {});
        if (server.exitCode !== null || Date.now() > deadline) {
          server.kill('SIGKILL');
          throw new Error(`PostgreSQL did not start: ${(err as Error).message}\n${log}`);
        }
        await sleep(100);
      }
    }
  };
  /** Fast shutdown (SIGINT), SIGKILL if it lingers. */
  const halt = async () => {
    if (server.exitCode !== null || server.signalCode !== null) return;
    server.kill('SIGINT');
    await Promise.race([exited, new Promise((r) => setTimeout(r, 15_000))]);
    if (server.exitCode === null && server.signalCode === null) server.kill('SIGKILL');
    await exited;
  };
  try {
    await run();
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  const created = new Set<string>();
  return {
    url,
    async createDatabase(name) {
      if (!created.has(name)) {
        const c = new pg.Client({ connectionString: url('postgres') });
        await c.connect();
        try {
          const exists = await c.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
          if (exists.rowCount === 0) await c.query(`CREATE DATABASE "${name.replace(/"/g, '')}"`);
        } finally {
          await c.end();
        }
        if (options.statementStats) {
          const d = new pg.Client({ connectionString: url(name) });
          await d.connect();
          try {
            await d.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
          } finally {
            await d.end();
          }
        }
        created.add(name);
      }
      return url(name);
    },
    halt,
    resume: run,
    async stop() {
      await halt();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
