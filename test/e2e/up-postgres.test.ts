/**
 * `berth up --db postgres://…` as a newcomer runs it (docs/decisions.md 36): the real CLI
 * starts the scheduler on a PostgreSQL database (started here with initdb),
 * the simulated hosts' devices land in it, the CLI lists them, and a second
 * `berth up` on the same database after a stop finds them again.
 */
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir } from '../helpers/agent.js';
import { berth, cliEnv, parseJson, type Running, start, stop } from '../helpers/berth-cli.js';
import { type PostgresServer, startPostgres } from '../helpers/postgres.js';
import { available, postgresServer } from '../helpers/prerequisites.js';
import { freePort } from '../helpers/processes.js';

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

  it('--replicas 2: two schedulers on the database, each answering, every host followed by one of them', async () => {
    const url = await server.createDatabase(
      `berth_${createHash('sha256').update(`${dir.path}/replicas`).digest('hex').slice(0, 12)}`,
    );
    const env = cliEnv(join(dir.path, 'client-config-replicas.yaml'));
    const state = join(dir.path, 'state-replicas');
    const refused = await berth(['up', '--state-dir', state, '--replicas', '2'], env);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain(
      '--replicas 2: several schedulers share one PostgreSQL database; give --db',
    );
    const bad = await berth(['up', '--state-dir', state, '--db', url, '--replicas', 'two'], env);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--replicas: "two" is not a number of schedulers from 1 to 9');

    await stop(up);
    up = start(
      [
        'up',
        '--listen',
        `127.0.0.1:${await freePort()}`,
        '--state-dir',
        state,
        '--db',
        url,
        '--replicas',
        '2',
      ],
      env,
    );
    await up.waitFor(/Berth is up/, UP_TIMEOUT);
    const second = /scheduler\s+(\S+)\s+\(replica 2, same database\)/.exec(up.stdout())?.[1];
    expect(second, up.stdout()).toBeTruthy();
    const first = parseJson<{ uuid: string }[]>(await berth(['device', 'list', '-o', 'json'], env));
    const viaSecond = parseJson<{ uuid: string }[]>(
      await berth(['device', 'list', '-o', 'json', '--endpoint', second!], env),
    );
    expect(viaSecond.map((d) => d.uuid).sort()).toEqual(first.map((d) => d.uuid).sort());
    const hosts = parseJson<{ name: string; connected: boolean; followed_by: string }[]>(
      await berth(['host', 'list', '-o', 'json', '--endpoint', second!], env),
    );
    expect(hosts.length).toBe(2);
    for (const h of hosts) {
      expect(h.connected, h.name).toBe(true);
      expect(h.followed_by, h.name).toMatch(/^[0-9a-f-]{36}$/);
    }
  }, 300_000);
});
