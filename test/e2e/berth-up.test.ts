/**
 * The README's first command as a user runs it: `bin/berth up` in a terminal
 * (here a child process), then client commands in another that find it through
 * the client configuration `berth up` wrote — `device list -o json`, and the
 * demo against this external `berth up` (faults injected through its state
 * directory) — then Ctrl-C-like SIGTERM, and a clean exit 0.
 */
import { existsSync, readdirSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { type AddressInfo, createServer } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { SchedulerClient } from '../../src/client/sdk.js';
import { tempDir } from '../helpers/agent.js';
import { berth, cliEnv, parseJson, type Running, start, stop } from '../helpers/berth-cli.js';
import { freePort } from '../helpers/processes.js';
import { eventually } from '../helpers/wait.js';

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
    // The generic gRPC client it suggests is one this checkout has (buf, a dev dependency).
    expect(up.stdout()).toMatch(
      /^ {2}node_modules\/\.bin\/buf curl --protocol grpc .* --list-methods http:\/\/127\.0\.0\.1:\d+$/m,
    );
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

  it('fails at once, exit 2, when it cannot write the client configuration: nothing starts, nothing is left', async () => {
    // A file where a directory should be: mkdir fails even for root (as a read-only HOME does for a service account).
    await writeFile(join(dir.path, 'not-a-dir'), '');
    const env = cliEnv(join(dir.path, 'not-a-dir', 'config.yaml'));
    const stateDir = join(dir.path, 'unwritable-config-state');
    const port = await freePort();
    const r = await berth(['up', '--listen', `127.0.0.1:${port}`, '--state-dir', stateDir], env, 60_000);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toEqual([
      expect.stringMatching(
        /^berth: usage: cannot write the client configuration \S+not-a-dir\/config\.yaml \(\$BERTH_CONFIG\): (ENOTDIR|EEXIST): .*; set BERTH_CONFIG to a file this user can write$/,
      ),
    ]);
    expect(r.stdout).not.toContain('Berth is up');
    // No credentials were made, and the state directory is free for the next berth up.
    expect(existsSync(join(stateDir, 'tokens.yaml'))).toBe(false);
    expect(existsSync(join(stateDir, 'scheduler-signing.pem'))).toBe(false);
  }, 120_000);

  it('a start that fails (its port is taken) leaves no new token or key behind', async () => {
    const busy = createServer();
    await new Promise<void>((r) => busy.listen(0, '127.0.0.1', r));
    const port = (busy.address() as AddressInfo).port;
    try {
      const stateDir = join(dir.path, 'busy-port-state');
      const r = await berth(
        ['up', '--listen', `127.0.0.1:${port}`, '--state-dir', stateDir],
        cliEnv(join(dir.path, 'busy-config.yaml')),
        60_000,
      );
      expect(r.code).not.toBe(0);
      expect(r.stderr).toMatch(/in use/);
      const left = existsSync(stateDir) ? readdirSync(stateDir) : [];
      expect(left.filter((f) => /token|signing/.test(f))).toEqual([]);
    } finally {
      await new Promise<void>((r) => busy.close(() => r()));
    }
  }, 120_000);

  it('the banner names the Placement it reports to, and says when it does not answer', async () => {
    const port = await freePort();
    const dead = await freePort();
    const env = cliEnv(join(dir.path, 'placement-config.yaml'));
    const stateDir = join(dir.path, 'placement-state');
    const r = start(
      [
        'up',
        '--listen',
        `127.0.0.1:${port}`,
        '--state-dir',
        stateDir,
        '--placement-url',
        `http://127.0.0.1:${dead}`,
      ],
      env,
    );
    try {
      await r.waitFor(/Stop with Ctrl-C/, 90_000);
      expect(r.stdout()).toContain(`  placement  http://127.0.0.1:${dead}   (report, noauth`);
      expect(r.stdout()).toMatch(
        /^ {13}UNREACHABLE \(ECONNREFUSED\): Berth runs and reports once it answers; follow it with \S+ placement status$/m,
      );
    } finally {
      await stop(r);
    }
  }, 120_000);
});
