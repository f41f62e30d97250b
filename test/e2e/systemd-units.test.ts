/**
 * The scheduler's systemd unit as shipped, with its TLS drop-in
 * (deploy/systemd/berth-scheduler.service.d/tls.conf): `systemd-analyze
 * verify` accepts both, and the unit's own command lines — ExecStart, then
 * the start gate ExecStartPost (`berth health`) — run as systemd would run
 * them (its Environment= lines, %d and $CREDENTIALS_DIRECTORY pointing at the
 * LoadCredential= files) against the TLS scheduler ExecStart started. Without
 * the drop-in's variables the same start gate fails, in one line saying why.
 */
import { execFile } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { copyFile, mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateStaticToken, writeStaticTokenFile } from '../../src/server/grpc/auth/tokens.js';
import { tempDir } from '../helpers/agent.js';
import { BERTH, berth } from '../helpers/berth-cli.js';
import { makeCa } from '../helpers/certs.js';
import { available, openssl, systemdAnalyze } from '../helpers/prerequisites.js';
import { BerthProcess, freePort, stopAllProcesses } from '../helpers/processes.js';

const UNIT = join(process.cwd(), 'deploy/systemd/berth-scheduler.service');
const DROP_IN = join(process.cwd(), 'deploy/systemd/berth-scheduler.service.d/tls.conf');
const usable = available(openssl(), 'the scheduler unit over TLS');
const verifiable = available(systemdAnalyze(), 'systemd-analyze verify of the TLS drop-in');

/** The `[Service]` settings of a unit file: each key with its values, in order. */
function settings(text: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const line of text.split('\n')) {
    const m = /^([A-Za-z]+)=(.*)$/.exec(line.trim());
    if (!m) continue;
    out.set(m[1]!, [...(out.get(m[1]!) ?? []), m[2]!]);
  }
  return out;
}

/** Environment= assignments (`A=1 B=2` on one line), with %d as systemd resolves it. */
function environment(lines: string[], credentials: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of lines) {
    for (const word of line.split(/\s+/).filter(Boolean)) {
      const i = word.indexOf('=');
      env[word.slice(0, i)] = word.slice(i + 1).replaceAll('%d', credentials);
    }
  }
  return env;
}

/** A command line as systemd expands it: `${X}` one word, `$X` split into words, %d the credentials. */
function expand(line: string, env: Record<string, string>, credentials: string): string[] {
  const words: string[] = [];
  for (const word of line.split(/\s+/).filter(Boolean)) {
    const whole = /^\$([A-Za-z_][A-Za-z0-9_]*)$/.exec(word);
    if (whole) {
      words.push(...(env[whole[1]!] ?? '').split(/\s+/).filter(Boolean));
      continue;
    }
    words.push(
      word
        .replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g, (_m, k: string) => env[k] ?? '')
        .replaceAll('%d', credentials),
    );
  }
  return words;
}

describe.skipIf(!usable)('the scheduler unit with its TLS drop-in', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let credentials: string;
  let unit: Map<string, string[]>;
  let dropIn: Map<string, string[]>;
  let scheduler: BerthProcess;
  let port: number;

  beforeAll(async () => {
    dir = await tempDir('berth-systemd-');
    unit = settings(await readFile(UNIT, 'utf8'));
    dropIn = settings(await readFile(DROP_IN, 'utf8'));
    // The credentials LoadCredential= hands the service, under the names it gives them.
    credentials = join(dir.path, 'credentials');
    await mkdir(credentials);
    const certs = join(dir.path, 'certs');
    await mkdir(certs);
    const ca = await makeCa(certs, 'berth-ca');
    const serverName = environment(dropIn.get('Environment')!, credentials).BERTH_TLS_SERVER_NAME!;
    const leaf = await ca.leaf('berth-scheduler', [`DNS:${serverName}`]);
    const source: Record<string, string> = {
      tokens: join(dir.path, 'tokens.yaml'),
      'signing-key': join(dir.path, 'signing.pem'),
      'tls-cert': leaf.cert,
      'tls-key': leaf.key,
      'tls-ca': leaf.ca,
    };
    await writeStaticTokenFile(source.tokens!, [{ token: generateStaticToken(), roles: ['admin'] }]);
    await writeFile(
      source['signing-key']!,
      generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }) as string,
    );
    for (const line of [...(unit.get('LoadCredential') ?? []), ...(dropIn.get('LoadCredential') ?? [])]) {
      const name = line.slice(0, line.indexOf(':'));
      expect(source[name], `a file for LoadCredential=${line}`).toBeDefined();
      await copyFile(source[name]!, join(credentials, name));
    }
    port = await freePort();
  }, 60_000);
  afterAll(async () => {
    await stopAllProcesses();
    await dir?.cleanup();
  }, 30_000);

  /** The service's environment: the unit's Environment= (listening on every address of a free port), the drop-in's. */
  const serviceEnv = (withDropIn: boolean) => ({
    ...environment(unit.get('Environment')!, credentials),
    BERTH_LISTEN: `0.0.0.0:${port}`,
    ...(withDropIn ? environment(dropIn.get('Environment')!, credentials) : {}),
    CREDENTIALS_DIRECTORY: credentials,
  });
  /** One of the unit's command lines, pointed at this checkout's berth and a state directory of the test's. */
  const commandLine = (key: 'ExecStart' | 'ExecStartPost', env: Record<string, string>) => {
    const line = unit.get(key)![0]!.replaceAll('/var/lib/berth-scheduler', join(dir.path, 'state'));
    const [bin, ...args] = expand(line, env, credentials);
    expect(bin).toBe('/usr/local/bin/berth');
    return args;
  };

  it('ExecStart serves TLS from the drop-in, and the start gate ExecStartPost passes against it', async () => {
    await mkdir(join(dir.path, 'state'), { recursive: true });
    const env = serviceEnv(true);
    scheduler = new BerthProcess({
      name: 'berth-scheduler.service',
      args: commandLine('ExecStart', env),
      env,
    });
    await scheduler.start();
    const gate = await berth(
      commandLine('ExecStartPost', env),
      { ...process.env, ...env, HOME: dir.path },
      180_000,
    );
    expect(gate.code, gate.stderr).toBe(0);
    expect(gate.stdout.trim()).toBe(`127.0.0.1:${port}: SERVING`);
    expect(gate.stderr).toBe('');
  }, 240_000);

  it('without the drop-in, the start gate fails in one line that says the scheduler speaks TLS', async () => {
    const env = serviceEnv(false);
    const args = commandLine('ExecStartPost', env).map((a) => (a === '120' ? '0' : a));
    const gate = await berth(args, { ...process.env, ...env, HOME: dir.path }, 60_000);
    expect(gate.code).toBe(3);
    expect(gate.stderr.trim().split('\n')).toEqual([
      expect.stringMatching(
        /is not serving: UNAVAILABLE: 127\.0\.0\.1:\d+ speaks TLS, and this client connected in plaintext/,
      ),
    ]);
  }, 60_000);

  it.skipIf(!verifiable)('systemd-analyze verify accepts the unit with its drop-in', async () => {
    const units = join(dir.path, 'units');
    await mkdir(join(units, 'berth-scheduler.service.d'), { recursive: true });
    await writeFile(
      join(units, 'berth-scheduler.service'),
      (await readFile(UNIT, 'utf8')).replaceAll('/usr/local/bin/berth', BERTH),
    );
    await copyFile(DROP_IN, join(units, 'berth-scheduler.service.d', 'tls.conf'));
    const out = await new Promise<{ code: number; stderr: string }>((resolve) =>
      execFile('systemd-analyze', ['verify', join(units, 'berth-scheduler.service')], (err, _o, stderr) =>
        resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stderr }),
      ),
    );
    expect(out.code, out.stderr).toBe(0);
    expect(out.stderr.trim()).toBe('');
  });
});
