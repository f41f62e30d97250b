/**
 * Ctrl-C and SIGTERM on a pseudo-terminal, where the progress bars are drawn:
 * `device clean --wait` and `device watch-cleanup` leave the cursor shown and
 * line wrap on (a bar hides the one and turns off the other), exit 130/143
 * and say that the cleanup goes on; `berth demo` interrupted in the middle of
 * its failed-cleanup step undoes what it injected (the fault, its ARQs and
 * profiles, the GPU it burned), keeps what it could not finish in its ledger
 * for the next demo, which undoes it first and then runs through; and a
 * second demo on the same `berth up` refuses while the first runs.
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeClientConfig } from '../../src/client/client-config.js';
import { SchedulerClient } from '../../src/client/sdk.js';
import { startUp, type Up } from '../../src/client/up/berth-up.js';
import { DeviceState } from '../../src/gen/berth/scheduler/v1/device.js';
import { createLogger } from '../../src/logging.js';
import { withStateLock } from '../../src/sim/nvme-cli/state.js';
import { tempDir } from '../helpers/agent.js';
import { BERTH, berth, cliEnv, type Running, start, stop } from '../helpers/berth-cli.js';
import { available, scriptPty } from '../helpers/prerequisites.js';
import { runInPty, terminalRestored } from '../helpers/pty.js';
import { eventually } from '../helpers/wait.js';

const usable = available(scriptPty(), 'Ctrl-C on a pseudo-terminal');
const SLOW = 300_000;
/** A progress bar on the terminal: the cursor hidden (ESC [?25l), then the bar. */
const BAR_DRAWN = new RegExp(`${String.fromCharCode(27)}\\[\\?25l[\\s\\S]*\\|[\u2588\u2591]+\\|`);

describe.skipIf(!usable)('interrupted commands on a terminal', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let up: Up;
  let sdk: SchedulerClient;
  let env: NodeJS.ProcessEnv;
  let demoA: Running | undefined;

  /** Changes a simulated controller's nvme-cli state (its sanitize time, its faults). */
  const controller = (
    host: string,
    name: string,
    change: (c: { sanitize: { durationMs: number }; faults?: Record<string, unknown> }) => void,
  ) =>
    withStateLock(join(up.stateDir, 'sim', host, 'nvme-sim.json'), (state) => {
      const c = state.controllers.find((x) => x.name === name)!;
      change(c as never);
      return { changed: true, result: undefined };
    });
  const faultsOf = async (host: string, name: string) =>
    (
      JSON.parse(await readFile(join(up.stateDir, 'sim', host, 'nvme-sim.json'), 'utf8')) as {
        controllers: { name: string; faults?: Record<string, unknown> }[];
      }
    ).controllers.find((c) => c.name === name)?.faults ?? {};
  const device = async (uuid: string) =>
    (await sdk.devices.getDevice({ device: { ref: { $case: 'uuid', value: uuid } } })).device!;
  const cesDrive = async (host: string) =>
    (await sdk.devices.listDevices({ filter: { host } })).devices.find((d) =>
      d.traits.includes('HW_NVME_CES'),
    )!;

  beforeAll(async () => {
    dir = await tempDir('berth-interrupts-');
    up = await startUp({
      listen: '127.0.0.1:0',
      stateDir: join(dir.path, 'state'),
      logger: createLogger({ level: 'silent' }),
    });
    const config = join(dir.path, 'client.yaml');
    await writeClientConfig({ endpoint: up.endpoint, token: up.adminToken, state_dir: up.stateDir }, config);
    env = { ...cliEnv(config), TERM: 'xterm' };
    sdk = new SchedulerClient({ endpoint: up.endpoint, token: up.adminToken });
    await eventually(
      () => sdk.devices.listDevices({}),
      (r) => r.devices.length === 18,
      60_000,
    );
  }, SLOW);
  afterAll(async () => {
    await stop(demoA);
    sdk?.close();
    await up?.stop();
    await dir?.cleanup();
  }, 60_000);

  it(
    'clean --wait (Ctrl-C) and watch-cleanup (SIGTERM) restore the cursor and line wrap and exit 130/143',
    async () => {
      const host = 'sim-host-2';
      const drive = await cesDrive(host);
      const ctrl = drive.attributes.nvme_controller!;
      // A drive in error: one failed cleanup.
      await controller(host, ctrl, (c) => {
        c.faults = { sanitize: { mode: 'sanitize-fails' } };
        c.sanitize.durationMs = 0;
      });
      await sdk.profiles.createProfile({
        profile: {
          name: 'intr',
          groups: [
            {
              vendorId: drive.vendorId,
              productId: drive.productId,
              requiredTraits: ['HW_NVME_CES'],
              count: 1,
            },
          ],
        },
      });
      const [arq] = (await sdk.arqs.createAcceleratorRequests({ profileName: 'intr' })).acceleratorRequests;
      await sdk.arqs.bindAcceleratorRequests({
        bindings: [{ arqUuid: arq!.uuid, instanceUuid: 'vm-intr', host }],
      });
      await sdk.arqs.deleteAcceleratorRequests({ instanceUuid: 'vm-intr' });
      await eventually(
        () => device(drive.uuid),
        (d) => d.deviceState === DeviceState.DEVICE_STATE_ERROR,
        60_000,
      );
      // The re-clean will run for two minutes: long enough to be interrupted on a bar.
      await controller(host, ctrl, (c) => {
        c.faults = {};
        c.sanitize.durationMs = 120_000;
      });

      const clean = runInPty([BERTH, 'device', 'clean', drive.uuid, '--wait'], env);
      await clean.waitFor(BAR_DRAWN, 120_000);
      clean.ctrlC();
      expect(await clean.result()).toBe(130);
      expect(terminalRestored(clean.output())).toEqual({ cursor: true, wrap: true });
      expect(clean.output()).toMatch(
        /berth: interrupted: .*stopped following; the cleanup goes on on the host/,
      );

      const follow = runInPty([BERTH, 'device', 'watch-cleanup', drive.uuid], env);
      await follow.waitFor(BAR_DRAWN, 120_000);
      const pid = follow.pidOf('dist/client/cli/main.js');
      expect(pid, follow.output()).toBeDefined();
      process.kill(pid!, 'SIGTERM');
      expect(await follow.result()).toBe(143);
      expect(terminalRestored(follow.output())).toEqual({ cursor: true, wrap: true });

      // The cleanup went on without them.
      await controller(host, ctrl, (c) => {
        c.sanitize.durationMs = 200;
      });
      await eventually(
        () => device(drive.uuid),
        (d) => d.deviceState === DeviceState.DEVICE_STATE_AVAILABLE,
        60_000,
      );
      await sdk.profiles.deleteProfile({ name: 'intr' });
    },
    SLOW,
  );

  it(
    'an interrupted demo undoes what it injected; the next one finishes the undo and runs; two at once are refused',
    async () => {
      const ledger = join(up.stateDir, 'demo-ledger.json');
      const demo = runInPty([BERTH, 'demo'], env);
      await demo.waitFor(/The demo uses (\S+) as the source host/, 120_000);
      const src = /The demo uses (\S+) as the source host/.exec(demo.output())![1]!;
      const drive = await cesDrive(src);
      const ctrl = drive.attributes.nvme_controller!;
      // Step 9's failing cleanup will last two minutes: the demo is interrupted in it.
      await demo.waitFor(/== 8\. /, 120_000);
      await controller(src, ctrl, (c) => {
        c.sanitize.durationMs = 120_000;
      });
      await demo.waitFor(/== 9\. [\s\S]*Injected a fault[\s\S]*Following the cleanup/, 120_000);
      expect(await faultsOf(src, ctrl)).toEqual({ sanitize: { mode: 'sanitize-fails' } });
      demo.ctrlC();
      const code = await demo.result(120_000);
      const out = demo.output();
      expect(code, out).toBe(130);
      expect(terminalRestored(out)).toEqual({ cursor: true, wrap: true });
      expect(out).toContain('INTERRUPTED at step 9.');
      expect(out).toMatch(/Undo: cleared the injected sanitize fault of \S+'s nvme\d/);
      expect(out).toMatch(
        /Undo: \S+ is still being cleaned \(the demo's fault is cleared\); the next berth demo checks it/,
      );

      // What it injected is gone: the fault, its ARQs, its profiles; the GPU it burned is back.
      expect(await faultsOf(src, ctrl)).toEqual({});
      expect((await sdk.arqs.listAcceleratorRequests({})).acceleratorRequests).toEqual([]);
      expect(
        (await sdk.profiles.listProfiles({})).profiles.filter((p) => p.name.startsWith('demo-')),
      ).toEqual([]);
      expect((await sdk.devices.listDevices({})).devices.filter((d) => d.burned)).toEqual([]);
      // What it could not finish waits in its ledger.
      const left = JSON.parse(await readFile(ledger, 'utf8')) as { dirtied: string[]; faults: unknown[] };
      expect(left).toMatchObject({ dirtied: [drive.uuid], faults: [] });

      // The next demo undoes the rest first, then runs through; a second one at the same time is refused.
      await controller(src, ctrl, (c) => {
        c.sanitize.durationMs = 300;
      });
      demoA = start(['demo'], env);
      await demoA.waitFor(
        /A demo that did not finish \(run [0-9a-f]+\) left changes behind; undoing them first/,
        60_000,
      );
      const second = await berth(['demo'], env, 60_000);
      expect(second.code).toBe(1);
      expect(second.stderr).toMatch(
        /^berth: FAILED_PRECONDITION: the demo of the berth up in \S+ is in use by berth demo \(pid \d+[,)].*\[INSTANCE_RUNNING\]$/m,
      );
      expect(await demoA.exited).toEqual({ code: 0, signal: null });
      expect(demoA.stdout()).toMatch(/All 9 steps did what they should/);
      expect(existsSync(ledger)).toBe(false);
      expect((await device(drive.uuid)).deviceState).toBe(DeviceState.DEVICE_STATE_AVAILABLE);
    },
    SLOW,
  );
});
