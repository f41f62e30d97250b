/**
 * `berth device watch` and the SDK's watchDevicesResuming across what a
 * long-lived watch meets in production: a scheduler restart (SIGTERM and
 * start again), a scheduler killed with SIGKILL and started again, and — on
 * PostgreSQL — the SIGKILL of the replica the watch was on, the watch going
 * on through another replica of the endpoint list. Each time the watch says
 * so on stderr, reconnects with backoff and resumes after the last revision
 * it printed: every change made meanwhile arrives once, none twice, and the
 * initial state is not sent again.
 */
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SchedulerClient, type WatchOptions } from '../../src/client/sdk.js';
import { DeviceStatus, deviceStatusToJSON } from '../../src/gen/berth/scheduler/v1/device.js';
import type { WatchDevicesResponse } from '../../src/gen/berth/scheduler/v1/device_service.js';
import { buildSimHost, type SimHost } from '../../src/sim/host.js';
import { tempDir } from '../helpers/agent.js';
import { cliEnv, type Running, start, stop } from '../helpers/berth-cli.js';
import { vfHostDefinition } from '../helpers/invariants.js';
import { type PostgresServer, startPostgres } from '../helpers/postgres.js';
import { available, postgresServer } from '../helpers/prerequisites.js';
import {
  agentProcess,
  type BerthProcess,
  freePort,
  schedulerProcess,
  stopAllProcesses,
} from '../helpers/processes.js';
import { eventually } from '../helpers/wait.js';

const HOST = 'watch-host';
const VFS = 3;

interface WatchLine {
  revision: number;
  initial: boolean;
  synced: boolean;
  device: { uuid: string; status: string } | null;
}

/** The JSON lines a `berth device watch -o json` printed so far. */
const linesOf = (w: Running): WatchLine[] =>
  w
    .stdout()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as WatchLine);

/** The SDK's resuming watch, collected in the background, with what it told. */
function sdkWatch(client: SchedulerClient) {
  const seen: WatchLine[] = [];
  const told: string[] = [];
  const stop = new AbortController();
  const options: WatchOptions = {
    signal: stop.signal,
    onRetry: (e) => told.push(`retry ${e.error.codeName} after ${e.resumeAfter}`),
    onResumed: (e) => told.push(`resumed after ${e.resumeAfter}`),
  };
  const done = (async () => {
    for await (const m of client.watchDevicesResuming({}, options)) seen.push(asLine(m));
  })();
  return { seen, told, stop: () => stop.abort(), done };
}

/** An SDK message as the CLI prints it (status in short lower case). */
const asLine = (m: WatchDevicesResponse): WatchLine => ({
  revision: m.revision,
  initial: m.initial,
  synced: m.synced,
  device: m.device
    ? {
        uuid: m.device.uuid,
        status: deviceStatusToJSON(m.device.status).slice('DEVICE_STATUS_'.length).toLowerCase(),
      }
    : null,
});

/** Changes are checked by revision: each exactly once, in order, after the first synced. */
function changesAfterSync(revisions: WatchLine[]) {
  const synced = revisions.findIndex((m) => m.synced);
  const after = revisions.slice(synced + 1);
  return { after, initialAgain: after.some((m) => m.initial) };
}

async function setStatus(client: SchedulerClient, uuid: string, status: DeviceStatus) {
  return (await client.devices.setDeviceStatus({ device: { ref: { $case: 'uuid', value: uuid } }, status }))
    .device!;
}

describe('watches that survive a scheduler restart and a SIGKILL', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let sim: SimHost;
  let scheduler: BerthProcess;
  let agent: BerthProcess;
  let client: SchedulerClient;
  let watch: Running | undefined;

  beforeAll(async () => {
    dir = await tempDir('berth-watch-resume-');
    sim = await buildSimHost(join(dir.path, 'host'), vfHostDefinition(HOST, VFS));
    scheduler = await schedulerProcess(join(dir.path, 'sched.db'));
    await scheduler.start();
    agent = await agentProcess(sim, { scheduler: scheduler.endpoint });
    await agent.start();
    client = new SchedulerClient({ endpoint: scheduler.endpoint, timeoutMs: 20_000 });
    await eventually(
      () => client.devices.listDevices({ filter: { host: HOST } }),
      (r) => r.devices.length === VFS,
      30_000,
    );
  }, 120_000);
  afterAll(async () => {
    await stop(watch);
    client?.close();
    await stopAllProcesses();
    await dir?.cleanup();
  }, 30_000);

  it('berth device watch and the SDK resume after their revision, and say so', async () => {
    const [d] = (await client.devices.listDevices({ filter: { host: HOST } })).devices;
    const uuid = d!.uuid;
    watch = start(
      ['device', 'watch', '-o', 'json', '--endpoint', scheduler.endpoint],
      cliEnv(join(dir.path, 'client.yaml')),
    );
    await watch.waitFor(/"synced":true/, 60_000);
    const sdk = sdkWatch(client);
    await eventually(
      async () => sdk.seen.some((m) => m.synced),
      (ok) => ok,
      30_000,
    );

    const first = await setStatus(client, uuid, DeviceStatus.DEVICE_STATUS_MAINTAINING);
    const rev = (w: WatchLine[]) => w.at(-1)?.revision ?? 0;
    await eventually(
      async () => rev(linesOf(watch!)),
      (r) => r >= 1 && linesOf(watch!).some((l) => !l.initial && l.device?.status === 'maintaining'),
      30_000,
    );
    const beforeRestart = rev(linesOf(watch!));

    // 1. A restart: SIGTERM (the watch ends UNAVAILABLE "shutting down"), then the same command again.
    await scheduler.stop();
    await eventually(
      async () => watch!.stderr(),
      (e) => /lost the watch on 127\.0\.0\.1:\d+ \(UNAVAILABLE: .*\); reconnecting in [\d.]+ s/.test(e),
      30_000,
    );
    await scheduler.start();
    await eventually(
      async () => watch!.stderr(),
      (e) =>
        new RegExp(
          `watching 127\\.0\\.0\\.1:\\d+ again after .*resumed after revision ${beforeRestart}`,
        ).test(e),
      60_000,
    );
    const second = await setStatus(client, uuid, DeviceStatus.DEVICE_STATUS_ENABLED);

    // 2. A SIGKILL, then a start — once both watchers are back (each has its own backoff).
    for (const seen of [() => linesOf(watch!), () => sdk.seen]) {
      await eventually(
        async () => seen(),
        (l) => l.some((x) => x.device?.status === 'enabled' && !x.initial),
        30_000,
      );
    }
    const beforeKill = rev(linesOf(watch!));
    await scheduler.kill('SIGKILL');
    await eventually(
      async () => watch!.stderr().match(/lost the watch/g)?.length ?? 0,
      (n) => n >= 2,
      30_000,
    );
    await scheduler.start();
    await eventually(
      async () => watch!.stderr(),
      (e) => new RegExp(`resumed after revision ${beforeKill}`).test(e),
      60_000,
    );
    await setStatus(client, uuid, DeviceStatus.DEVICE_STATUS_MAINTAINING);
    await eventually(
      async () => linesOf(watch!).filter((l) => !l.initial && l.device?.status === 'maintaining').length,
      (n) => n === 2,
      30_000,
    );

    // Every change once, in revision order; the initial state was not sent again.
    // The SDK's watcher has its own backoff: it may resume a moment after the CLI's.
    await eventually(
      async () => sdk.seen.filter((l) => !l.initial && l.device?.status === 'maintaining').length,
      (n) => n === 2,
      30_000,
    );
    for (const seen of [linesOf(watch), sdk.seen]) {
      const { after, initialAgain } = changesAfterSync(seen);
      expect(initialAgain).toBe(false);
      const revs = after.map((m) => m.revision);
      expect(revs).toEqual([...new Set(revs)].sort((a, b) => a - b));
      expect(after.filter((m) => m.device?.uuid === uuid).map((m) => m.device!.status)).toEqual([
        'maintaining',
        'enabled',
        'maintaining',
      ]);
    }
    expect(first.generation).toBeLessThan(second.generation);
    expect(sdk.told.filter((t) => t.startsWith('resumed')).length).toBe(2);
    expect(sdk.told.filter((t) => t.startsWith('retry UNAVAILABLE')).length).toBeGreaterThanOrEqual(2);
    sdk.stop();
    await sdk.done;

    // Ctrl-C ends a watch: exit 0.
    watch.child.kill('SIGINT');
    expect(await watch.exited).toEqual({ code: 0, signal: null });
  }, 300_000);
});

const pgUsable = available(postgresServer(), 'a watch surviving the SIGKILL of its replica');

describe.skipIf(!pgUsable)('a watch on replicas of one PostgreSQL database', () => {
  let pg: PostgresServer;
  let dir: Awaited<ReturnType<typeof tempDir>>;
  const replicas: BerthProcess[] = [];
  let watch: Running | undefined;
  let viaB: SchedulerClient | undefined;

  beforeAll(async () => {
    pg = await startPostgres();
    dir = await tempDir('berth-watch-replicas-');
  }, 120_000);
  afterAll(async () => {
    await stop(watch);
    viaB?.close();
    await stopAllProcesses();
    await pg?.stop();
    await dir?.cleanup();
  }, 30_000);

  it('goes on through the next replica of the endpoint list when its replica is SIGKILLed', async () => {
    const url = await pg.createDatabase(
      `berth_${createHash('sha256').update(dir.path).digest('hex').slice(0, 12)}`,
    );
    for (const name of ['A', 'B']) {
      const p = await schedulerProcess(url, await freePort(), `scheduler ${name}`);
      await p.start();
      replicas.push(p);
    }
    const [a, b] = replicas as [BerthProcess, BerthProcess];
    const sim = await buildSimHost(join(dir.path, 'host'), vfHostDefinition(HOST, VFS));
    const agent = await agentProcess(sim, { scheduler: [a.endpoint, b.endpoint] });
    await agent.start();
    viaB = new SchedulerClient({ endpoint: b.endpoint, timeoutMs: 20_000 });
    const client = viaB;
    await eventually(
      () => client.devices.listDevices({ filter: { host: HOST } }),
      (r) => r.devices.length === VFS,
      30_000,
    );
    const uuid = (await client.devices.listDevices({ filter: { host: HOST } })).devices[0]!.uuid;

    // The endpoint list: A first, so the watch is on A.
    watch = start(
      ['device', 'watch', '-o', 'json', '--endpoint', `${a.endpoint},${b.endpoint}`],
      cliEnv(join(dir.path, 'client.yaml')),
    );
    await watch.waitFor(/"synced":true/, 60_000);
    await setStatus(client, uuid, DeviceStatus.DEVICE_STATUS_MAINTAINING);
    await eventually(
      async () => linesOf(watch!),
      (l) => l.some((x) => !x.initial && x.device?.status === 'maintaining'),
      30_000,
    );
    const before = linesOf(watch).at(-1)!.revision;

    await a.kill('SIGKILL');
    await eventually(
      async () => watch!.stderr(),
      (e) => new RegExp(`resumed after revision ${before}`).test(e),
      60_000,
    );
    expect(watch.stderr()).toMatch(/lost the watch on 127\.0\.0\.1:\d+,127\.0\.0\.1:\d+ \(UNAVAILABLE: /);
    await setStatus(client, uuid, DeviceStatus.DEVICE_STATUS_ENABLED);
    await eventually(
      async () => linesOf(watch!),
      (l) => l.some((x) => !x.initial && x.device?.status === 'enabled' && x.revision > before),
      30_000,
    );
    const { after, initialAgain } = changesAfterSync(linesOf(watch));
    expect(initialAgain).toBe(false);
    expect(after.filter((m) => m.device?.uuid === uuid).map((m) => m.device!.status)).toEqual([
      'maintaining',
      'enabled',
    ]);
  }, 300_000);
});
