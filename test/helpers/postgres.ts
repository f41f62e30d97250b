/**
 * A real PostgreSQL server for the tests of the PostgreSQL store (issue 13):
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

export interface PostgresServer {
  /** postgres://… for a database of this server (created by `createDatabase`). */
  url(database: string): string;
  /** Creates a database (if missing) and returns its URL. */
  createDatabase(name: string): Promise<string>;
  stop(): Promise<void>;
}

const USER = 'berth';

/** How to run a PostgreSQL binary: as `postgres` when we are root. */
function asServerUser(bin: string, args: string[]): [string, string[]] {
  return process.getuid?.() === 0 ? ['runuser', ['-u', 'postgres', '--', bin, ...args]] : [bin, args];
}

export interface PostgresOptions {
  /**
   * Keep PostgreSQL's durability (fsync, synchronous commit, full-page
   * writes), as a benchmark against SQLite's synchronous=FULL must; tests turn it off.
   */
  durable?: boolean;
  /** Where the data directory goes (default the OS temp dir; benchmarks use a real disk). */
  baseDir?: string;
}

export async function startPostgres(options: PostgresOptions = {}): Promise<PostgresServer> {
  const bin = postgresBin();
  if (!bin) throw new Error('PostgreSQL binaries not found under /usr/lib/postgresql');
  const dir = mkdtempSync(join(options.baseDir ?? tmpdir(), 'berth-pg-'));
  if (process.getuid?.() === 0) {
    const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
    chownSync(dir, uid, gid);
  }
  const data = join(dir, 'data');
  const [initCmd, initArgs] = asServerUser(join(bin, 'initdb'), [
    '-D',
    data,
    '-U',
    USER,
    '--auth=trust',
    '--no-sync',
    '-E',
    'UTF8',
  ]);
  execFileSync(initCmd, initArgs, { stdio: 'pipe', timeout: 120_000 });
  const port = await freePort();
  const [cmd, args] = asServerUser(join(bin, 'postgres'), [
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
  ]);
  const server: ChildProcess = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  server.stderr?.on('data', (c: Buffer) => {
    log = (log + c.toString()).slice(-4000);
  });
  const exited = new Promise<void>((resolve) => server.once('exit', () => resolve()));
  const url = (database: string) => `postgres://${USER}@127.0.0.1:${port}/${database}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    const c = new pg.Client({ connectionString: url('postgres') });
    try {
      await c.connect();
      await c.end();
      break;
    } catch (err) {
      await c.end().catch(() => {});
      if (server.exitCode !== null || Date.now() > deadline) {
        server.kill('SIGKILL');
        rmSync(dir, { recursive: true, force: true });
        throw new Error(`PostgreSQL did not start: ${(err as Error).message}\n${log}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
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
        created.add(name);
      }
      return url(name);
    },
    async stop() {
      server.kill('SIGINT'); // fast shutdown
      await Promise.race([exited, new Promise((r) => setTimeout(r, 15_000))]);
      if (server.exitCode === null && server.signalCode === null) server.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
