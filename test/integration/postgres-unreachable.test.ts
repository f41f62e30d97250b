/**
 * A scheduler whose PostgreSQL database stops answering (decision 37: with
 * several replicas, a load balancer and the agents must go to another one):
 * its health turns NOT_SERVING within a look of its link-lease keeper, every
 * call is UNAVAILABLE with STORE_UNAVAILABLE (never INTERNAL), /metrics says
 * `berth_store_reachable 0`; when the database is back, it serves again.
 */
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { credentials, Metadata, makeClientConstructor } from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BerthClientError, SchedulerClient } from '../../src/client/sdk.js';
import { Scheduler } from '../../src/server/scheduler/scheduler.js';
import { tempDir } from '../helpers/agent.js';
import { berth, cliEnv } from '../helpers/berth-cli.js';
import { type PostgresServer, startPostgres } from '../helpers/postgres.js';
import { available, postgresServer } from '../helpers/prerequisites.js';
import { eventually } from '../helpers/wait.js';

const usable = available(postgresServer(), 'a scheduler whose PostgreSQL goes away');

const HealthClient = makeClientConstructor(
  healthService as unknown as Parameters<typeof makeClientConstructor>[0],
  'grpc.health.v1.Health',
);

/** The overall health status ('' service) a server reports over gRPC. */
function health(endpoint: string): Promise<string> {
  const client = new HealthClient(endpoint, credentials.createInsecure()) as unknown as {
    check(
      req: { service: string },
      md: Metadata,
      opts: { deadline: number },
      cb: (err: Error | null, res: { status: string }) => void,
    ): void;
    close(): void;
  };
  return new Promise<string>((resolve, reject) =>
    client.check({ service: '' }, new Metadata(), { deadline: Date.now() + 5_000 }, (err, res) => {
      client.close();
      if (err) reject(err);
      else resolve(res.status);
    }),
  );
}

describe.skipIf(!usable)('a scheduler whose PostgreSQL database stops answering', () => {
  let pg: PostgresServer;
  let scheduler: Scheduler;
  let client: SchedulerClient;
  let dir: Awaited<ReturnType<typeof tempDir>>;

  beforeAll(async () => {
    dir = await tempDir('berth-pg-unreachable-');
    pg = await startPostgres();
    const url = await pg.createDatabase(
      `berth_${createHash('sha256').update('unreachable').digest('hex').slice(0, 12)}`,
    );
    scheduler = await Scheduler.start({
      db: url,
      listen: '127.0.0.1:0',
      auth: { mode: 'none' },
      metricsListen: '127.0.0.1:0',
      linkLeases: { intervalMs: 200, ttlMs: 2_000 },
    });
    client = new SchedulerClient({ endpoint: scheduler.address, timeoutMs: 15_000, retries: 0 });
  }, 120_000);
  afterAll(async () => {
    client?.close();
    await scheduler?.stop();
    await pg?.stop();
    await dir?.cleanup();
  });

  const metric = async () => {
    const text = await (await fetch(`http://${scheduler.metricsAddress}/metrics`)).text();
    return /^berth_store_reachable(?:\{[^}]*\})? (\d)/m.exec(text)?.[1];
  };

  const healthBecomes = (state: string) =>
    eventually(
      () => health(scheduler.address),
      (s) => s === state,
      30_000,
    );

  it('NOT_SERVING and STORE_UNAVAILABLE while it is down; serving again when it is back', async () => {
    expect(await health(scheduler.address)).toBe('SERVING');
    expect(await eventually(metric, (v) => v === '1')).toBe('1');

    await pg.halt();
    expect(await healthBecomes('NOT_SERVING')).toBe('NOT_SERVING');
    expect(scheduler.state).toMatchObject({ kind: 'degraded', reason: 'database_unreachable' });
    expect(await metric()).toBe('0');
    const err = await client.hosts.listHosts({}).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(BerthClientError);
    expect(err).toMatchObject({ codeName: 'UNAVAILABLE', reason: 'STORE_UNAVAILABLE' });
    // The operator's probe says why.
    const probe = await berth(
      ['health', '--endpoint', scheduler.address],
      cliEnv(join(dir.path, 'cfg.yaml')),
    );
    expect(probe.code).toBe(1);
    expect(probe.stderr).toContain('is not serving: NOT_SERVING (STORE_UNAVAILABLE: ');

    await pg.resume();
    expect(await healthBecomes('SERVING')).toBe('SERVING');
    expect(scheduler.state).toEqual({ kind: 'serving' });
    expect(await metric()).toBe('1');
    expect((await client.hosts.listHosts({})).hosts).toEqual([]);
  }, 120_000);
});
