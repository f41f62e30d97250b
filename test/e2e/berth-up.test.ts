/**
 * The README's first command as a user runs it: `bin/berth up` in a terminal
 * (here a child process), then client commands in another that find it through
 * the client configuration `berth up` wrote — `device list -o json`, and the
 * demo against this external `berth up` (faults injected through its state
 * directory) — then Ctrl-C-like SIGTERM, and a clean exit 0.
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { SchedulerClient } from '../../src/client/sdk.js';
import { tempDir } from '../helpers/agent.js';
import { eventually } from '../helpers/grpc.js';
import { freePort } from '../helpers/processes.js';
import { berth, cliEnv, parseJson, type Running, start, stop } from './berth-cli.js';

describe('berth up (quick start)', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let up: Running | undefined;

  beforeAll(async () => {
    dir = await tempDir('berth-up-smoke-');
  });
  afterAll(async () => {
    await stop(up);
    await dir?.cleanup();
  }, 30_000);

  it('starts, writes the client config, answers the CLI and the demo, stops on SIGTERM with 0', async () => {
    const port = await freePort();
    const config = join(dir.path, 'client-config.yaml');
    const env = cliEnv(config);
    const stateDir = join(dir.path, 'state');
    up = start(['up', '--listen', `127.0.0.1:${port}`, '--state-dir', stateDir], env);
    await up.waitFor(/Berth is up/, 90_000);
    expect(up.stdout()).toContain(`scheduler  127.0.0.1:${port}`);
    const written = parseYaml(await readFile(config, 'utf8')) as {
      endpoint: string;
      token: string;
      state_dir: string;
    };
    expect(written.endpoint).toBe(`127.0.0.1:${port}`);
    // Every RPC stays authenticated: berth up generated an admin token for the CLI.
    expect(written.token).toMatch(/^berth_/);
    expect(written.state_dir).toBe(stateDir);
    expect(existsSync(join(stateDir, 'sim', 'sim-host-1', 'nvme-sim.json'))).toBe(true);

    // "Berth is up" follows the agents' registration; the scheduler takes in
    // their inventories a moment later.
    const anonymous = new SchedulerClient({ endpoint: `127.0.0.1:${port}`, retries: 1 });
    const refused = await anonymous.hosts.listHosts({}).catch((e: { codeName?: string }) => e.codeName);
    anonymous.close();
    expect(refused).toBe('UNAUTHENTICATED');
    const sdk = new SchedulerClient({ endpoint: `127.0.0.1:${port}`, token: written.token });
    try {
      await eventually(
        () => sdk.devices.listDevices({ filter: undefined, pageSize: 0, pageToken: '' }),
        (r) => r.devices.length === 18,
        60_000,
      );
    } finally {
      sdk.close();
    }
    // No --endpoint: the CLI finds the scheduler through $BERTH_CONFIG.
    const list = await berth(['device', 'list', '-o', 'json'], env);
    expect(list.code, list.stderr).toBe(0);
    const devices = parseJson<{ host: string; device_state: string }[]>(list);
    expect(devices).toHaveLength(18);
    expect(new Set(devices.map((d) => d.host))).toEqual(new Set(['sim-host-1', 'sim-host-2']));

    // The demo against this external berth up: the failed cleanup goes through the state directory.
    const demo = await berth(['demo'], env, 170_000);
    expect(demo.code, `${demo.stdout}\n${demo.stderr}`).toBe(0);
    expect(demo.stdout).toContain(`Using the Berth scheduler at 127.0.0.1:${port}.`);
    expect(demo.stdout).toMatch(/phase=failed /);
    expect(demo.stdout).toMatch(/All 9 steps did what they should/);
    // It left no instance behind.
    const arqs = parseJson<unknown[]>(await berth(['arq', 'list', '-o', 'json'], env));
    expect(arqs).toEqual([]);

    up.child.kill('SIGTERM');
    expect(await up.exited).toEqual({ code: 0, signal: null });
  }, 300_000);
});
