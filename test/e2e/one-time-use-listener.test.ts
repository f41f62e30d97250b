/**
 * examples/one-time-use-listener.ts, the sample cleanup listener of
 * specs/one-time-use-devices.txt, run as an operator runs it (a child process)
 * against the real scheduler and an agent on 127.0.0.1:0, on the demo host's
 * one-time-use GPU (10de:25b6). The operator's command is a small script that
 * records each run and can be told to fail or to block, so the test decides
 * when a cleanup ends: a failure, a listener killed between its command and the
 * release, and a device released by hand and burned by a new tenant while its
 * command ran — inputs the listener would never produce by itself.
 */
import { readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Device } from '../../src/gen/berth/scheduler/v1/device.js';
import { demoHostDefinition } from '../../src/sim/host.js';
import { tempDir } from '../helpers/agent.js';
import { type Running, start, stop } from '../helpers/berth-cli.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import { expectCode } from '../helpers/errors.js';
import { createAndBind, createClassProfile, uuidRef } from '../helpers/invariants.js';
import { eventually } from '../helpers/wait.js';

const HOST = 'otu-host';
const GPU = '0000:3c:00.0';
const SCRIPT = join(process.cwd(), 'examples/one-time-use-listener.ts');
/** Per test: up to three listener starts (about a second each on an idle machine, far more on a loaded one). */
const SLOW = 120_000;

/** The operator's command: records its run, then fails, blocks or succeeds as the files in its directory say. */
const COMMAND = `
import { appendFileSync, existsSync } from 'node:fs';
const dir = process.argv[2];
const e = process.env;
appendFileSync(dir + '/runs.jsonl', JSON.stringify({
  uuid: e.BERTH_DEVICE_UUID, host: e.BERTH_DEVICE_HOST, address: e.BERTH_DEVICE_ADDRESS,
  vendor: e.BERTH_DEVICE_VENDOR_ID, product: e.BERTH_DEVICE_PRODUCT_ID, token: e.BERTH_TOKEN ?? null,
}) + '\\n');
if (existsSync(dir + '/fail')) process.exit(3);
if (existsSync(dir + '/block')) {
  await new Promise((resolve) => {
    const t = setInterval(() => existsSync(dir + '/unblock') && (clearInterval(t), resolve()), 20);
  });
}
`;

interface LogLine {
  level: string;
  msg: string;
  device?: string;
  exit_code?: number;
}

describe('the one-time-use cleanup listener (examples/one-time-use-listener.ts)', () => {
  let c: Cluster;
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let listeners: Running[] = [];

  beforeAll(async () => {
    // The demo host without its NVMe controllers: the X710 VFs and the one-time-use GPU.
    c = await startCluster([{ ...demoHostDefinition(HOST), nvme: [], nvmeDeviceSpec: [] }]);
    await c.waitForDevices(HOST, 5);
    await createClassProfile(c.client, 'gpu', 'CUSTOM_PCI_10DE_25B6');
    dir = await tempDir('berth-otu-listener-');
    await writeFile(join(dir.path, 'command.mjs'), COMMAND);
  }, 60_000);

  afterEach(async () => {
    // A command left blocked by a failed test (its listener SIGKILLed) ends too.
    await writeFile(join(dir.path, 'unblock'), '');
    for (const l of listeners) await stop(l);
    listeners = [];
    for (const f of ['runs.jsonl', 'fail', 'block', 'unblock']) await rm(join(dir.path, f), { force: true });
  });

  afterAll(async () => {
    await c?.stop();
    await dir?.cleanup();
  });

  const gpu = async (): Promise<Device> =>
    (
      await c.client.devices.getDevice({
        device: { ref: { $case: 'hostAddress', value: { host: HOST, address: GPU } } },
      })
    ).device!;

  /** A tenant uses the GPU and is deleted: it stays reserved (burned) until released. */
  const burn = async (instance: string): Promise<Device> => {
    const bound = await createAndBind(c.client, 'gpu', instance, HOST);
    expect(bound.deviceAddress).toBe(GPU);
    await c.client.arqs.deleteAcceleratorRequests({ uuids: [], instanceUuid: instance });
    const d = await gpu();
    expect([d.burned, d.reserved, d.allocatable]).toEqual([true, 1, false]);
    return d;
  };

  const listen = (): Running => {
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      BERTH_ENDPOINT: c.scheduler.address,
      BERTH_TOKEN: 'admin-token-the-command-must-not-see',
      BERTH_CONFIG: join(dir.path, 'no-client-config.yaml'),
    };
    const l = start(
      ['--import', 'tsx', SCRIPT, '--', process.execPath, join(dir.path, 'command.mjs'), dir.path],
      env,
      { bin: process.execPath },
    );
    listeners.push(l);
    return l;
  };

  const logs = (l: Running): LogLine[] =>
    l
      .stdout()
      .split('\n')
      .filter((s) => s.trim() !== '')
      .map((s) => JSON.parse(s) as LogLine);
  const count = (l: Running, msg: string) => logs(l).filter((x) => x.msg === msg).length;
  const waitCount = (l: Running, msg: string, n: number) =>
    eventually(
      () => count(l, msg),
      (k) => {
        if (l.child.exitCode !== null) throw new Error(`listener exited:\n${l.stdout()}\n${l.stderr()}`);
        return k >= n;
      },
      30_000,
    );
  const runs = async (): Promise<{ uuid: string; host: string; address: string; token: string | null }[]> => {
    const text = await readFile(join(dir.path, 'runs.jsonl'), 'utf8').catch(() => '');
    return text
      .split('\n')
      .filter((s) => s !== '')
      .map((s) => JSON.parse(s));
  };

  it(
    'cleans and releases a device burned before it started and one burned while it runs',
    async () => {
      const first = await burn('vm-otu-1');
      const l = listen();
      await waitCount(l, 'released', 1);
      expect(await gpu()).toMatchObject({ burned: false, reserved: 0, allocatable: true });
      expect(await runs()).toEqual([
        {
          uuid: first.uuid,
          host: HOST,
          address: GPU,
          vendor: '10de',
          product: '25b6',
          // The command runs without the listener's admin token.
          token: null,
        },
      ]);
      // Synced: the listing is behind it; the next burn arrives as a change.
      await waitCount(l, 'synced', 1);
      await burn('vm-otu-2');
      await waitCount(l, 'released', 2);
      expect(await gpu()).toMatchObject({ burned: false, allocatable: true });
      expect(await runs()).toHaveLength(2);
      // The VFs (not one-time-use) were never handed to the command.
      expect(new Set((await runs()).map((r) => r.address))).toEqual(new Set([GPU]));
      l.child.kill('SIGTERM');
      expect(await l.exited).toEqual({ code: 0, signal: null });
    },
    SLOW,
  );

  it(
    'a failing command leaves the device burned and is logged; a restart tries again',
    async () => {
      await writeFile(join(dir.path, 'fail'), '');
      const burned = await burn('vm-otu-fail');
      const l = listen();
      await waitCount(l, 'cleanup command failed; the device stays burned', 1);
      expect(logs(l).find((x) => x.level === 'error')).toMatchObject({ device: burned.uuid, exit_code: 3 });
      expect(count(l, 'released')).toBe(0);
      expect(await gpu()).toMatchObject({ burned: true, reserved: 1, generation: burned.generation });
      await stop(l);

      await rm(join(dir.path, 'fail'));
      const again = listen();
      await waitCount(again, 'released', 1);
      expect(await gpu()).toMatchObject({ burned: false, allocatable: true });
      expect(await runs()).toHaveLength(2);
    },
    SLOW,
  );

  it(
    'killed between its command and the release: the next start runs the command again and releases; a released device is left alone',
    async () => {
      await writeFile(join(dir.path, 'block'), '');
      await burn('vm-otu-kill');
      const l = listen();
      await eventually(runs, (r) => r.length === 1, 30_000);
      l.child.kill('SIGKILL');
      await l.exited;
      // The orphaned command finishes with success, but nobody released the device.
      await writeFile(join(dir.path, 'unblock'), '');
      expect(await gpu()).toMatchObject({ burned: true });

      await rm(join(dir.path, 'block'));
      const restarted = listen();
      await waitCount(restarted, 'released', 1);
      expect(await runs()).toHaveLength(2);
      expect(await gpu()).toMatchObject({ burned: false, allocatable: true });
      await stop(restarted);

      // Nothing is burned: a new start queues nothing (the listing is processed before "synced").
      const idle = listen();
      await waitCount(idle, 'synced', 1);
      expect(logs(idle).map((x) => x.msg)).toEqual(['started', 'synced']);
      expect(await runs()).toHaveLength(2);
    },
    SLOW,
  );

  it(
    'a device released by hand and burned by a new tenant while its command ran is not released by that run',
    async () => {
      await writeFile(join(dir.path, 'block'), '');
      const first = await burn('vm-otu-a');
      const l = listen();
      await eventually(runs, (r) => r.length === 1, 30_000);

      // Meanwhile an operator releases it by hand, and a new tenant uses it and leaves: burned
      // again, at a later generation, holding the new tenant's data.
      await c.client.devices.releaseDevice({ device: uuidRef(first.uuid) });
      const second = await burn('vm-otu-b');
      expect(second.generation).toBeGreaterThan(first.generation);
      // A release naming the first burn's generation is refused and changes nothing.
      const stale = await expectCode(
        c.client.devices.releaseDevice({ device: uuidRef(first.uuid), generation: first.generation }),
        'ABORTED',
        'GENERATION_CONFLICT',
      );
      expect(stale.message).toContain(String(first.generation));
      expect(await gpu()).toEqual(second);

      // The first run ends with success; it cleaned the first tenant's burn, not the second's:
      // the second burn gets its own run before the device is released.
      await rm(join(dir.path, 'block'));
      await writeFile(join(dir.path, 'unblock'), '');
      await waitCount(l, 'released', 1);
      expect(
        count(l, 'the device changed while its command ran; not released (handled again at its new state)'),
      ).toBe(1);
      expect(await runs()).toHaveLength(2);
      expect(await gpu()).toMatchObject({ burned: false, allocatable: true });
    },
    SLOW,
  );

  it(
    'refuses to start without a command (usage, exit 2)',
    async () => {
      const l = start(
        ['--import', 'tsx', SCRIPT],
        { ...process.env, BERTH_ENDPOINT: c.scheduler.address },
        {
          bin: process.execPath,
        },
      );
      listeners.push(l);
      expect((await l.exited).code).toBe(2);
      expect(l.stderr()).toContain('a command to run for each device is required');
    },
    SLOW,
  );
});
