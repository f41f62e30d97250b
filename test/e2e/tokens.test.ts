/**
 * `berth token create|secret` for the standalone path: a static token added to
 * the file `scheduler serve --static-tokens` reads, and an HS256 JWT for
 * `--jwt-secret-file`, each accepted by a real scheduler for its role only.
 */
import { readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { tempDir } from '../helpers/agent.js';
import { berth, cliEnv, type Running, start, stop } from '../helpers/berth-cli.js';
import { freePort } from '../helpers/processes.js';

describe('berth token', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let env: NodeJS.ProcessEnv;
  let scheduler: Running | undefined;

  beforeAll(async () => {
    dir = await tempDir('berth-tokens-');
    env = cliEnv(join(dir.path, 'client-config.yaml'));
  });
  afterAll(async () => {
    await stop(scheduler);
    await dir?.cleanup();
  }, 30_000);

  it('makes static tokens and JWTs a standalone scheduler accepts, each for its role', async () => {
    const tokens = join(dir.path, 'tokens.yaml');
    const secret = join(dir.path, 'jwt.secret');
    const admin = await berth(
      ['token', 'create', '--role', 'admin', '--subject', 'ops', '--static-tokens', tokens],
      env,
    );
    expect(admin.code, admin.stderr).toBe(0);
    const adminToken = admin.stdout.trim();
    expect(adminToken).toMatch(/^berth_[A-Za-z0-9_-]{43}$/);
    const reader = await berth(['token', 'create', '--role', 'reader', '--static-tokens', tokens], env);
    const hostClient = await berth(
      ['token', 'create', '--role', 'host-client', '--subject', 'node-7', '--static-tokens', tokens],
      env,
    );
    expect(hostClient.code, hostClient.stderr).toBe(0);
    expect(parseYaml(await readFile(tokens, 'utf8'))).toEqual({
      [adminToken]: { roles: ['admin'], subject: 'ops' },
      [reader.stdout.trim()]: 'reader',
      [hostClient.stdout.trim()]: { roles: ['host-client'], subject: 'node-7' },
    });
    expect((await stat(tokens)).mode & 0o777).toBe(0o600);

    expect((await berth(['token', 'secret', secret], env)).code).toBe(0);
    const again = await berth(['token', 'secret', secret], env);
    expect(again.code).toBe(2);
    expect(again.stderr).toContain('never overwritten');
    const jwt = await berth(
      [
        'token',
        'create',
        '--role',
        'reader',
        '--subject',
        'dashboard',
        '--jwt-secret-file',
        secret,
        '--expires-in',
        '1h',
      ],
      env,
    );
    expect(jwt.code, jwt.stderr).toBe(0);

    const port = await freePort();
    scheduler = start(
      [
        'scheduler',
        'serve',
        '--db',
        join(dir.path, 'scheduler.db'),
        '--listen',
        `127.0.0.1:${port}`,
        '--static-tokens',
        tokens,
        '--jwt-secret-file',
        secret,
      ],
      env,
    );
    await scheduler.waitFor(/"event":"listening"/, 60_000);
    const as = (token: string, ...args: string[]) =>
      berth([...args, '--endpoint', `127.0.0.1:${port}`, '--token', token], env);
    expect((await as(adminToken, 'profile', 'list')).code).toBe(0);
    const byJwt = await as(jwt.stdout.trim(), 'host', 'list', '-o', 'json');
    expect(byJwt.code, byJwt.stderr).toBe(0);
    const denied = await as(jwt.stdout.trim(), 'profile', 'create', 'p', '--resource-class', 'CUSTOM_X');
    expect(denied.code).toBe(1);
    expect(denied.stderr).toMatch(/^berth: PERMISSION_DENIED: .*requires role admin.*\[ROLE_NOT_ALLOWED\]/);
  }, 120_000);

  it('refuses an unknown role, a JWT without a subject and a short secret, naming the flag', async () => {
    const bad = await berth(['token', 'create', '--role', 'wizard'], env);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain(
      '--role: expected one of admin, service, reader, agent, scheduler, host-client, got "wizard"',
    );
    const noHost = await berth(['token', 'create', '--role', 'host-client'], env);
    expect(noHost.code).toBe(2);
    expect(noHost.stderr).toContain('--subject: a host-client token acts for one host');
    const secret = join(dir.path, 'short.secret');
    await writeFile(secret, 'too short\n');
    const noSub = await berth(['token', 'create', '--role', 'reader', '--jwt-secret-file', secret], env);
    expect(noSub.stderr).toContain('--subject: a JWT needs a subject');
    const short = await berth(
      ['token', 'create', '--role', 'reader', '--subject', 's', '--jwt-secret-file', secret],
      env,
    );
    expect(short.code).toBe(2);
    expect(short.stderr).toContain('fewer than 32 bytes');
  }, 60_000);
});
