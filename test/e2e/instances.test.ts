/**
 * What a newcomer runs into with `bin/berth up`, end to end on the real CLI:
 * a second instance on the same state directory (or SQLite file) and a busy
 * port are refused in one line naming the running one; the admin token
 * survives a restart (so an exported BERTH_TOKEN keeps working) and a refused
 * BERTH_TOKEN is explained; an agent's endpoint given to a client command is
 * named as such; and generic gRPC tools find Health and decode the ErrorInfo
 * reason by name through reflection (buf curl, and a reflection-only client
 * as grpcurl works).
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { credentials, Metadata, type ServiceError } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { DeviceServiceClient } from '../../src/gen/berth/scheduler/v1/device_service.js';
import { tempDir } from '../helpers/agent.js';
import { berth, cliEnv, parseJson, type Running, start, stop } from '../helpers/berth-cli.js';
import { freePort } from '../helpers/processes.js';
import { ReflectionClient } from '../helpers/reflection-client.js';

const run = promisify(execFile);
const BUF = join(process.cwd(), 'node_modules/.bin/buf');
const UP_TIMEOUT = 120_000;

interface ClientConfig {
  endpoint: string;
  token: string;
  state_dir: string;
}

describe('berth up instances, tokens and gRPC tooling', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let up: Running | undefined;
  let port: number;
  let configPath: string;
  let env: NodeJS.ProcessEnv;
  let stateDir: string;

  const startUp = async () => {
    up = start(['up', '--listen', `127.0.0.1:${port}`, '--state-dir', stateDir], env);
    await up.waitFor(/Berth is up/, UP_TIMEOUT);
    return parseYaml(await readFile(configPath, 'utf8')) as ClientConfig;
  };

  beforeAll(async () => {
    dir = await tempDir('berth-instances-');
    port = await freePort();
    configPath = join(dir.path, 'client-config.yaml');
    env = cliEnv(configPath);
    stateDir = join(dir.path, 'state');
  });
  afterAll(async () => {
    await stop(up);
    await dir?.cleanup();
  }, 30_000);

  it(
    'refuses a second berth up on the same state directory, naming the first, and leaves its client config alone',
    async () => {
      const first = await startUp();
      const before = await readFile(configPath, 'utf8');
      const other = await freePort();
      const second = await berth(['up', '--listen', `127.0.0.1:${other}`, '--state-dir', stateDir], env);
      expect(second.code, second.stdout + second.stderr).toBe(1);
      expect(second.stderr.trim().split('\n')).toEqual([
        `berth: FAILED_PRECONDITION: state directory ${stateDir} is in use by berth up (pid ${up!.child.pid}, serving ${first.endpoint}); stop it first, or use another --state-dir [INSTANCE_RUNNING]`,
      ]);
      expect(await readFile(configPath, 'utf8')).toBe(before);

      // The scheduler's SQLite file is locked as well, for a standalone scheduler.
      const sched = await berth(
        [
          'scheduler',
          'serve',
          '--db',
          join(stateDir, 'scheduler.db'),
          '--listen',
          `127.0.0.1:${other}`,
          '--insecure-no-auth',
        ],
        env,
      );
      expect(sched.code).toBe(1);
      expect(sched.stderr).toContain(
        `database ${join(stateDir, 'scheduler.db')} is in use by scheduler (pid ${up!.child.pid}, serving ${first.endpoint})`,
      );
    },
    UP_TIMEOUT + 60_000,
  );

  it("writes each simulated host's agent.yaml as the agent runs it", async () => {
    const file = join(stateDir, 'sim', 'sim-host-1', 'agent.yaml');
    const cfg = parseYaml(await readFile(file, 'utf8')) as Record<string, unknown>;
    expect(cfg).toMatchObject({
      host: 'sim-host-1',
      scheduler: `127.0.0.1:${port}`,
      state_dir: join(stateDir, 'agents', 'sim-host-1'),
      auth: {
        static_tokens_file: join(stateDir, 'tokens.yaml'),
        scheduler_public_key_file: join(stateDir, 'scheduler-signing.pub'),
      },
      // Its own token: an agent registers only its own host (invariant 10).
      scheduler_token_file: join(stateDir, 'agent-sim-host-1.token'),
    });
    expect(existsSync(join(stateDir, 'agents', 'sim-host-1', 'agent-journal.db'))).toBe(true);
    // The file is a working agent configuration: the dry run reads it as it is.
    const dry = await berth(['agent', 'discover', '-c', file, '-o', 'json'], env);
    expect(dry.code, dry.stderr).toBe(0);
    expect(parseJson<{ devices: unknown[] }>(dry).devices).toHaveLength(9);
  }, 60_000);

  it('says a busy port is in use, in one line, with the flag to change', async () => {
    const res = await berth(
      ['up', '--listen', `127.0.0.1:${port}`, '--state-dir', join(dir.path, 'other-state')],
      cliEnv(join(dir.path, 'other-config.yaml')),
    );
    expect(res.code).toBe(1);
    expect(res.stderr.trim().split('\n')).toEqual([
      `berth: FAILED_PRECONDITION: port 127.0.0.1:${port} is in use (another berth up? use --listen) [ADDRESS_IN_USE]`,
    ]);
  }, 60_000);

  it('names an agent endpoint as an agent, and takes http:// endpoints', async () => {
    const hosts = parseJson<{ endpoint: string }[]>(await berth(['host', 'list', '-o', 'json'], env));
    const agent = hosts[0]!.endpoint;
    const res = await berth(['device', 'list', '--endpoint', agent], env);
    expect(res.code).toBe(1);
    expect(res.stderr).toMatch(/^berth: UNIMPLEMENTED: /);
    expect(res.stderr).toContain(`${agent} (--endpoint) is a Berth agent, not a scheduler`);
    const viaUrl = await berth(['host', 'list', '--endpoint', `http://127.0.0.1:${port}/`], env);
    expect(viaUrl.code, viaUrl.stderr).toBe(0);
  }, 60_000);

  it('serves Health and the ErrorInfo type through reflection: buf curl and a reflection-only client read the reason by name', async () => {
    const base = `http://127.0.0.1:${port}`;
    const curl = (args: string[]) =>
      run(BUF, ['curl', '--protocol', 'grpc', '--http2-prior-knowledge', ...args], { timeout: 30_000 }).then(
        (r) => ({ code: 0, stdout: r.stdout, stderr: r.stderr }),
        (e: { code?: number; stdout?: string; stderr?: string }) => ({
          code: e.code ?? -1,
          stdout: e.stdout ?? '',
          stderr: e.stderr ?? '',
        }),
      );
    const health = await curl([`${base}/grpc.health.v1.Health/Check`]);
    expect(health.code, health.stderr).toBe(0);
    expect(JSON.parse(health.stdout)).toEqual({ status: 'SERVING' });
    const services = (await curl(['--list-services', base])).stdout.trim().split('\n');
    expect(services).toContain('grpc.health.v1.Health');
    expect(services).toContain('berth.scheduler.v1.DeviceService');
    expect(services).not.toContain('berth.agent.v1.AgentService');

    const { token } = parseYaml(await readFile(configPath, 'utf8')) as ClientConfig;
    const available = '{"device": {"hostAddress": {"host": "sim-host-1", "address": "0000:3e:00.0"}}}';
    const refused = await curl([
      '-v',
      '-H',
      `authorization: Bearer ${token}`,
      '-d',
      available,
      `${base}/berth.scheduler.v1.DeviceService/CleanDevice`,
    ]);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain('"type": "google.rpc.ErrorInfo"');
    expect(refused.stderr).toMatch(/berth-error-reason: DEVICE_ALREADY_CLEAN/i);

    // As grpcurl does: resolve google.rpc.ErrorInfo by name through reflection and decode the detail.
    const reflection = new ReflectionClient(`127.0.0.1:${port}`);
    const devices = new DeviceServiceClient(`127.0.0.1:${port}`, credentials.createInsecure());
    try {
      const md = new Metadata();
      md.set('authorization', `Bearer ${token}`);
      const err = await new Promise<ServiceError>((resolve) =>
        devices.getDevice(
          { device: { ref: { $case: 'uuid', value: '00000000-0000-4000-8000-000000000000' } } },
          md,
          (e) => resolve(e!),
        ),
      );
      expect(err.code).toBe(5); // NOT_FOUND
      const details = await reflection.errorDetails(err);
      expect(details).toEqual([
        {
          type: 'google.rpc.ErrorInfo',
          value: expect.objectContaining({ reason: 'DEVICE_NOT_FOUND', domain: 'berth.dev' }),
        },
      ]);
    } finally {
      reflection.close();
      devices.close();
    }
  }, 90_000);

  it(
    'keeps the admin token across a restart, so an exported BERTH_TOKEN keeps working; explains a stale one',
    async () => {
      const { token } = parseYaml(await readFile(configPath, 'utf8')) as ClientConfig;
      up!.child.kill('SIGTERM');
      expect(await up!.exited).toEqual({ code: 0, signal: null });
      const again = await startUp();
      expect(again.token).toBe(token);
      const exported = await berth(
        ['host', 'list', '-o', 'json'],
        cliEnv(configPath, { BERTH_TOKEN: token }),
      );
      expect(exported.code, exported.stderr).toBe(0);

      const stale = await berth(
        ['host', 'list'],
        cliEnv(configPath, { BERTH_TOKEN: 'berth_stale-token-from-an-older-state-dir' }),
      );
      expect(stale.code).toBe(1);
      expect(stale.stderr.trim().split('\n')).toHaveLength(1);
      expect(stale.stderr).toContain('UNAUTHENTICATED: invalid token [CREDENTIALS_INVALID]');
      expect(stale.stderr).toContain(`$BERTH_TOKEN, which overrides the one in ${configPath}`);
    },
    UP_TIMEOUT + 60_000,
  );
});
