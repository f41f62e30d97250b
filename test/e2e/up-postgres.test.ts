/**
 * `berth up --db postgres://…` as a newcomer runs it (issue 13): the real CLI
 * starts the scheduler on a PostgreSQL database (started here with initdb),
 * the simulated hosts' devices land in it, the CLI lists them, and a second
 * `berth up` on the same database after a stop finds them again.
 */
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir } from '../helpers/agent.js';
import { type PostgresServer, startPostgres } from '../helpers/postgres.js';
import { available, postgresServer } from '../helpers/prerequisites.js';
import { freePort } from '../helpers/processes.js';
import { berth, cliEnv, parseJson, type Running, start, stop } from './berth-cli.js';

const usable = available(postgresServer(), 'berth up on PostgreSQL');
const UP_TIMEOUT = 120_000;

describe.skipIf(!usable)('berth up --db postgres://', () => {
  let server: PostgresServer;
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let up: Running | undefined;

  beforeAll(async () => {
    server = await startPostgres();
    dir = await tempDir('berth-up-pg-');
  }, 120_000);
  afterAll(async () => {
    await stop(up);
    await server?.stop();
    await dir?.cleanup();
  });

  it('keeps the scheduler in PostgreSQL: the devices are there, through the CLI and in the database', async () => {
    const url = await server.createDatabase(
      `berth_${createHash('sha256').update(dir.path).digest('hex').slice(0, 12)}`,
    );
    const env = cliEnv(join(dir.path, 'client-config.yaml'));
    const args = [
      'up',
      '--listen',
      `127.0.0.1:${await freePort()}`,
      '--state-dir',
      join(dir.path, 'state'),
      '--db',
      url,
    ];
    up = start(args, env);
    await up.waitFor(/Berth is up/, UP_TIMEOUT);
    const listed = parseJson<unknown[]>(await berth(['device', 'list', '-o', 'json'], env));
    expect(listed.length).toBeGreaterThan(0);
    const db = new pg.Client({ connectionString: url });
    await db.connect();
    try {
      const rows = await db.query<{ n: string }>('SELECT COUNT(*) AS n FROM devices');
      expect(Number(rows.rows[0]!.n)).toBe(listed.length);
    } finally {
      await db.end();
    }
    // Stopped and started again on the same database: the same devices (same uuids).
    await stop(up);
    up = start(args, env);
    await up.waitFor(/Berth is up/, UP_TIMEOUT);
    const again = parseJson<{ uuid: string }[]>(await berth(['device', 'list', '-o', 'json'], env));
    expect(again.map((d) => d.uuid).sort()).toEqual((listed as { uuid: string }[]).map((d) => d.uuid).sort());
  }, 300_000);
});
