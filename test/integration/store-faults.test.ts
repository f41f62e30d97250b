import { existsSync, rmSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { SchedulerClient } from '../../src/client/sdk.js';
import { validateProfile } from '../../src/server/scheduler/domain/profile.js';
import { Scheduler } from '../../src/server/scheduler/scheduler.js';
import { openSqliteStore } from '../../src/server/scheduler/stores.js';
import { tempDir } from '../helpers/agent.js';
import { berth, cliEnv } from '../helpers/berth-cli.js';
import { expectCode } from '../helpers/errors.js';
import { available, root } from '../helpers/prerequisites.js';
import { freePort, schedulerProcess } from '../helpers/processes.js';
import { mountTinyTmpfs } from '../helpers/tmpfs.js';

const spec = (i: number) =>
  validateProfile({
    name: `profile-${i}`,
    description: 'x'.repeat(400),
    groups: [{ resourceClass: 'CUSTOM_NVME_144D_A808', count: 1 }],
  });
/** The same, as CreateProfile takes it. */
const profile = (i: number) => ({
  profile: {
    name: `profile-${i}`,
    uuid: '',
    description: 'x'.repeat(400),
    groups: [
      {
        resourceClass: 'CUSTOM_NVME_144D_A808',
        vendorId: '',
        productId: '',
        requiredTraits: [],
        forbiddenTraits: [],
        liveMigratable: 0,
        count: 1,
      },
    ],
    createdAt: undefined,
  },
});

describe("the scheduler's database failing", () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it('damaged pages: found at start; NOT_SERVING, STORE_DAMAGED on every call, in /metrics and the CLI', async () => {
    const dir = await tempDir('berth-damage-');
    cleanups.push(dir.cleanup);
    const db = join(dir.path, 'sched.db');
    const store = await openSqliteStore(db);
    for (let i = 0; i < 200; i++) await store.createProfile(spec(i));
    await store.close();
    // Three pages in the middle of the file overwritten, as a bad disk or a stray write would.
    const fh = await open(db, 'r+');
    try {
      const { size } = await fh.stat();
      expect(size).toBeGreaterThan(16 * 4096);
      for (const page of [6, 7, 8]) await fh.write(Buffer.alloc(4096, 0xa5), 0, 4096, page * 4096);
    } finally {
      await fh.close();
    }
    const metricsPort = await freePort();
    const s = await Scheduler.start({
      db,
      listen: '127.0.0.1:0',
      auth: { mode: 'none' },
      metricsListen: `127.0.0.1:${metricsPort}`,
    });
    cleanups.push(() => s.stop());
    expect(s.state).toMatchObject({ kind: 'degraded', reason: 'store_damaged' });
    const client = new SchedulerClient({ endpoint: s.address, retries: 1 });
    cleanups.push(async () => client.close());
    const err = await expectCode(client.profiles.listProfiles({}), 'UNAVAILABLE', 'STORE_DAMAGED');
    expect(err.message).toContain(db);
    expect(err.message).toContain('damaged');
    // Health says so, for load balancers and systemd.
    const health = await berth(['health', '--endpoint', s.address], cliEnv(join(dir.path, 'cfg.yaml')));
    expect(health.code).toBe(1);
    expect(health.stderr).toContain('is not serving: NOT_SERVING (STORE_DAMAGED: ');
    // The CLI prints why, in one line.
    const list = await berth(
      ['profile', 'list', '--endpoint', s.address],
      cliEnv(join(dir.path, 'cfg.yaml'), { BERTH_TOKEN: 'unused-with-auth-off' }),
    );
    expect(list.code).not.toBe(0);
    expect(list.stderr).toMatch(/^berth: UNAVAILABLE: the scheduler's database .* is damaged/m);
    const metrics = await (await fetch(`http://${s.metricsAddress}/metrics`)).text();
    expect(metrics).toMatch(/^berth_store_damaged\{why=".+"\} 1$/m);
    // In place of the 0 it showed while the database was sound, not beside it.
    expect(metrics).not.toMatch(/^berth_store_damaged\{component="scheduler"\} 0$/m);
  }, 60_000);

  const tmpfsTest = 'the full-disk test on a tiny tmpfs';
  it.skipIf(!available(root(), tmpfsTest))(
    'a full disk: RESOURCE_EXHAUSTED "the scheduler\'s disk is full", nothing half-written',
    async (t) => {
      const dir = await tempDir('berth-full-');
      cleanups.push(dir.cleanup);
      const fs = mountTinyTmpfs(dir.path, 'mnt', '1m');
      if (fs.path === null) {
        t.skip(fs.why);
        return;
      }
      cleanups.push(fs.unmount);
      const mnt = fs.path;
      const db = join(mnt, 'sched.db');
      const s = await Scheduler.start({ db, listen: '127.0.0.1:0', auth: { mode: 'none' } });
      cleanups.push(() => s.stop());
      const client = new SchedulerClient({ endpoint: s.address, retries: 1 });
      cleanups.push(async () => client.close());
      let created = 0;
      let refusal: Awaited<ReturnType<typeof expectCode>> | null = null;
      for (let i = 0; i < 5000 && !refusal; i++) {
        try {
          await client.profiles.createProfile(profile(i));
          created++;
        } catch {
          refusal = await expectCode(
            client.profiles.createProfile(profile(i)),
            'RESOURCE_EXHAUSTED',
            'STORE_DISK_FULL',
          );
        }
      }
      expect(refusal, 'the disk never filled').not.toBeNull();
      expect(created, 'some profiles fit before the disk filled').toBeGreaterThan(10);
      expect(refusal!.message).toContain("the scheduler's disk is full");
      expect(refusal!.message).toContain(db);
      // What was acknowledged is there; the refused one is not.
      const { profiles } = await client.profiles.listProfiles({});
      expect(profiles).toHaveLength(created);
    },
    120_000,
  );

  it('a write-ahead log lost after a kill -9 is reported at start (log, /metrics); a clean stop is not', async () => {
    const dir = await tempDir('berth-wal-');
    cleanups.push(dir.cleanup);
    const db = join(dir.path, 'sched.db');
    const child = await schedulerProcess(db);
    cleanups.push(async () => void (await child.kill('SIGKILL')));
    const endpoint = await child.start();
    const c1 = new SchedulerClient({ endpoint, retries: 1 });
    await c1.profiles.createProfile(profile(1));
    c1.close();
    await child.kill('SIGKILL');
    expect(existsSync(`${db}-wal`), 'a killed scheduler leaves its WAL').toBe(true);
    rmSync(`${db}-wal`);
    rmSync(`${db}-shm`, { force: true });

    const start = async () => {
      const lines: string[] = [];
      const logger = pino({ level: 'info' }, { write: (l: string) => void lines.push(l) });
      const s = await Scheduler.start({
        db,
        listen: '127.0.0.1:0',
        auth: { mode: 'none' },
        logger,
        metricsListen: `127.0.0.1:${await freePort()}`,
      });
      const metrics = await (await fetch(`http://${s.metricsAddress}/metrics`)).text();
      return { s, lines, metrics };
    };
    const first = await start();
    cleanups.push(() => first.s.stop());
    const lost = first.lines.find((l) => l.includes('write-ahead log'));
    expect(lost, first.lines.join('')).toBeDefined();
    expect(JSON.parse(lost!)).toMatchObject({ level: 50, db });
    expect(lost).toMatch(
      new RegExp(
        `pid ${child.pid}.*${db.replace(/[/.]/g, '\\$&')}-wal is missing: the commits since the last checkpoint are lost`,
      ),
    );
    expect(first.metrics).toMatch(/^berth_store_commits_lost\{wal="[^"]*sched\.db-wal"[^}]*\} 1$/m);
    // What the lost WAL held is really gone (this is the case being reported).
    const c2 = new SchedulerClient({ endpoint: first.s.address, retries: 1 });
    expect((await c2.profiles.listProfiles({})).profiles).toHaveLength(0);
    c2.close();
    await first.s.stop();
    cleanups.pop();

    // After a clean stop there is no WAL either, and nothing is reported.
    const second = await start();
    cleanups.push(() => second.s.stop());
    expect(second.lines.filter((l) => l.includes('write-ahead log'))).toEqual([]);
    // The alarm's series is there, at 0 (an alert rule sees it while all is well).
    expect(second.metrics).toMatch(/^berth_store_commits_lost\{component="scheduler"\} 0$/m);
    expect(second.metrics).not.toMatch(/^berth_store_commits_lost\{wal=/m);
  }, 60_000);
});
