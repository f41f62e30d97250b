/**
 * `berth scheduler serve --cyborg-listen …`: the Cyborg API is opt-in, on its
 * own address, printed in the `listening` line; without Placement in report
 * mode the scheduler refuses to start, saying why (the API's behaviour is
 * test/integration/cyborg-nova.test.ts's). `--cyborg-config` reads the same
 * settings from a YAML file; without a Nova (no `--nova-url`) the API is
 * served, and one log line says no event is sent. With `--tls-cert` and
 * `--tls-key` the API is HTTPS with that certificate; `--cyborg-plaintext`
 * keeps it HTTP (behind a proxy), `--cyborg-trust-proxy-headers` makes its
 * links follow X-Forwarded-*.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { request } from 'node:https';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir } from '../helpers/agent.js';
import { berth, cliEnv, type Running, start, stop } from '../helpers/berth-cli.js';
import { makeCa } from '../helpers/certs.js';
import { available, openssl } from '../helpers/prerequisites.js';

describe('berth scheduler serve --cyborg-listen', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let env: NodeJS.ProcessEnv;
  let running: Running | undefined;

  beforeAll(async () => {
    dir = await tempDir('berth-cyborg-serve-');
    env = cliEnv(join(dir.path, 'client.yaml'));
  });
  afterAll(async () => {
    await stop(running);
    await dir?.cleanup();
  });

  const cyborg = [
    '--cyborg-listen',
    '127.0.0.1:0',
    '--cyborg-auth',
    'noauth',
    '--nova-url',
    'http://127.0.0.1:9/v2.1',
    '--nova-auth',
    'noauth',
  ];

  it('serves the API on its own address, printed in the listening line', async () => {
    running = start(
      [
        'scheduler',
        'serve',
        '--db',
        join(dir.path, 'a.db'),
        '--listen',
        '127.0.0.1:0',
        '--insecure-no-auth',
        // A Placement that does not answer does not stop the start (the API needs the setting).
        '--placement-url',
        'http://127.0.0.1:9',
        '--placement-auth',
        'noauth',
        ...cyborg,
      ],
      env,
    );
    await running.waitFor(/"event":"listening"/, 60_000);
    const line = JSON.parse(
      running
        .stdout()
        .split('\n')
        .find((l) => l.includes('"listening"'))!,
    );
    expect(line.cyborg).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/v2$/);
    const res = await fetch(line.cyborg, { headers: { 'OpenStack-API-Version': 'accelerator 2.1' } });
    expect(res.status).toBe(200);
    expect(res.headers.get('openstack-api-version')).toBe('accelerator 2.1');
    expect(((await res.json()) as { max_version: string }).max_version).toBe('2.3');
    // The CLI pointed at the Cyborg port (HTTP/1.1, not gRPC) says what it reached, and what to give.
    const cyborgPort = new URL(line.cyborg).host;
    const wrong = await berth(['device', 'list', '--endpoint', cyborgPort], env);
    expect(wrong.code).toBe(3);
    expect(wrong.stderr.trim()).toBe(
      `berth: UNAVAILABLE: ${cyborgPort} (--endpoint) is Berth's Cyborg API (for Nova), not the scheduler's gRPC endpoint: give the scheduler's --listen address (berth scheduler serve prints it as "endpoint")`,
    );
    // Nothing there: the same hint as $BERTH_ENDPOINT gets.
    const nothing = await berth(['device', 'list', '--endpoint', '127.0.0.1:1'], env);
    expect(nothing.code).toBe(3);
    expect(nothing.stderr.trim()).toMatch(
      /^berth: UNAVAILABLE: .*ECONNREFUSED.*; nothing answers at 127\.0\.0\.1:1 \(--endpoint\): is berth up \(or the scheduler\) running, and is that its address\?$/,
    );
  }, 90_000);

  it('refuses to start without Placement in report mode, and a Cyborg flag without --cyborg-listen', async () => {
    const noPlacement = await berth(
      [
        'scheduler',
        'serve',
        '--db',
        join(dir.path, 'b.db'),
        '--listen',
        '127.0.0.1:0',
        '--insecure-no-auth',
        ...cyborg,
      ],
      env,
    );
    expect(noPlacement.code).toBe(2);
    expect(noPlacement.stderr).toContain('the Cyborg API needs Placement in report mode');
    const stray = await berth(
      [
        'scheduler',
        'serve',
        '--db',
        join(dir.path, 'c.db'),
        '--listen',
        '127.0.0.1:0',
        '--insecure-no-auth',
        '--nova-url',
        'http://n/v2.1',
      ],
      env,
    );
    expect(stray.code).toBe(2);
    expect(stray.stderr).toContain('cyborg.listen: required to serve the Cyborg API (--cyborg-listen)');
  }, 90_000);

  it('--cyborg-config: the settings from a YAML file (the flags override it); no Nova: served, one line says so', async () => {
    await writeFile(join(dir.path, 'cyborg.yaml'), 'listen: 127.0.0.1:1\nauth: {type: noauth}\n');
    const lab = start(
      [
        'scheduler',
        'serve',
        '--db',
        join(dir.path, 'd.db'),
        '--listen',
        '127.0.0.1:0',
        '--insecure-no-auth',
        '--placement-url',
        'http://127.0.0.1:9',
        '--placement-auth',
        'noauth',
        '--cyborg-config',
        join(dir.path, 'cyborg.yaml'),
        '--cyborg-listen',
        '127.0.0.1:0',
      ],
      { ...env, BERTH_LOG_LEVEL: 'info' },
    );
    try {
      await lab.waitFor(/"event":"listening"/, 60_000);
      const line = JSON.parse(
        lab
          .stdout()
          .split('\n')
          .find((l) => l.includes('"listening"'))!,
      );
      // The flag's port 0, not the file's 1.
      expect(line.cyborg).toMatch(/^http:\/\/127\.0\.0\.1:\d{4,5}\/v2$/);
      // The file's noauth: a user name is a caller.
      const res = await fetch(`${line.cyborg}/device_profiles`, { headers: { 'X-Auth-Token': 'alice' } });
      expect(res.status).toBe(200);
      const log = `${lab.stdout()}\n${lab.stderr()}`;
      const said = log.split('\n').filter((l) => l.includes('no accelerator-request-bound event is sent'));
      expect(said, log).toHaveLength(1);
      expect(said[0]).toContain('no --nova-url');
    } finally {
      await stop(lab);
    }
  }, 90_000);

  it.skipIf(!available(openssl(), 'the Cyborg API over TLS'))(
    '--tls-cert/--tls-key: the Cyborg API is HTTPS with the same certificate; --cyborg-plaintext keeps it HTTP',
    async () => {
      const authority = await makeCa(dir.path, 'serve-ca');
      const cert = await authority.leaf('berth-scheduler');
      const serve = (db: string, extra: string[]) =>
        start(
          [
            'scheduler',
            'serve',
            '--db',
            join(dir.path, db),
            '--listen',
            '127.0.0.1:0',
            '--insecure-no-auth',
            '--tls-cert',
            cert.cert,
            '--tls-key',
            cert.key,
            '--placement-url',
            'http://127.0.0.1:9',
            '--placement-auth',
            'noauth',
            '--cyborg-listen',
            '127.0.0.1:0',
            '--cyborg-auth',
            'noauth',
            ...extra,
          ],
          env,
        );
      const listening = async (r: Running) => {
        await r.waitFor(/"event":"listening"/, 60_000);
        return JSON.parse(
          r
            .stdout()
            .split('\n')
            .find((l) => l.includes('"listening"'))!,
        ) as { cyborg: string };
      };
      const tls = serve('e.db', []);
      try {
        const { cyborg } = await listening(tls);
        expect(cyborg).toMatch(/^https:\/\/127\.0\.0\.1:\d+\/v2$/);
        // Verified with the CA that signed the gRPC certificate; the links say https.
        const ca = await readFile(cert.ca);
        const doc = await new Promise<string>((resolve, reject) => {
          const req = request(cyborg, { ca }, (res) => {
            let body = '';
            res.on('data', (b: Buffer) => {
              body += b.toString();
            });
            res.on('end', () => resolve(body));
          });
          req.on('error', reject);
          req.end();
        });
        expect(JSON.parse(doc).links).toEqual([{ href: `${cyborg}/`, rel: 'self' }]);
      } finally {
        await stop(tls);
      }
      const plain = serve('f.db', ['--cyborg-plaintext', '--cyborg-trust-proxy-headers']);
      try {
        const { cyborg } = await listening(plain);
        expect(cyborg).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/v2$/);
        const res = await fetch(cyborg, {
          headers: { 'X-Forwarded-Proto': 'https', 'X-Forwarded-Host': 'cyborg.example' },
        });
        expect(((await res.json()) as { links: unknown }).links).toEqual([
          { href: 'https://cyborg.example/v2/', rel: 'self' },
        ]);
      } finally {
        await stop(plain);
      }
    },
    120_000,
  );
});
