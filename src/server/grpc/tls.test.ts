/**
 * TLS inputs: the PEM loader refuses half a key pair and non-PEM files with a
 * ConfigError naming the key, and the agent config's `tls` / `auth` /
 * `scheduler_token_file` keys resolve paths from the config's directory and
 * refuse unknown keys. (Handshakes themselves: test/integration/tls.test.ts.)
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError } from '../../errors.js';
import { parseAgentConfig } from '../agent/config.js';
import { loadAuthOptions } from './auth/configuration.js';
import { channelCredentials, loadTls, serverCredentials } from './tls.js';

describe('TLS and auth configuration', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-tlscfg-'));
    await writeFile(join(dir, 'not.pem'), 'hello');
    await writeFile(join(dir, 'tokens.yaml'), `${'t'.repeat(20)}: admin\n`);
    await writeFile(join(dir, 'secret'), `${'k'.repeat(40)}\n`);
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('refuses half a key pair, missing files and non-PEM content', async () => {
    await expect(loadTls({ cert: join(dir, 'a.crt') })).rejects.toThrow(/together/);
    await expect(loadTls({ ca: join(dir, 'missing.pem') })).rejects.toThrow(/tls\.ca: cannot read/);
    await expect(loadTls({ ca: join(dir, 'not.pem') })).rejects.toThrow(/tls\.ca: .* not a PEM/);
    expect(() => serverCredentials({})).toThrow(ConfigError);
    expect(() =>
      serverCredentials({ cert: Buffer.from('x'), key: Buffer.from('y'), requireClientCert: true }),
    ).toThrow(/needs a ca/);
    expect(channelCredentials(undefined)._isSecure()).toBe(false);
  });

  it('reads the agent config security keys, relative to the config directory', async () => {
    const cfg = parseAgentConfig(
      {
        tls: { cert: 'a.crt', key: 'a.key', ca: '/etc/ca.crt' },
        auth: {
          static_tokens_file: 'tokens.yaml',
          jwt_secret_file: 'secret',
          cert_roles: { s: 'scheduler' },
        },
        scheduler_token_file: 'agent.token',
      },
      {},
      dir,
    );
    expect(cfg.tls).toEqual({ cert: join(dir, 'a.crt'), key: join(dir, 'a.key'), ca: '/etc/ca.crt' });
    expect(cfg.schedulerTokenFile).toBe(join(dir, 'agent.token'));
    const auth = await loadAuthOptions(cfg.auth!);
    expect(auth).toMatchObject({
      mode: 'token',
      jwt: { hs256Secret: 'k'.repeat(40) },
      staticTokens: [{ token: 't'.repeat(20), roles: ['admin'] }],
      certRoles: { s: 'scheduler' },
    });
    expect(parseAgentConfig({}, {}, dir).auth).toBeNull();
    expect(parseAgentConfig({ auth: { mode: 'none' } }, {}, dir).auth).toEqual({ mode: 'none' });
    expect(parseAgentConfig({}, { insecureNoAuth: true }, dir).auth).toEqual({ mode: 'none' });
  });

  it('names the key of every security config mistake', () => {
    const bad: [unknown, RegExp][] = [
      [{ tls: { cert: 'a' } }, /^tls: cert and key/],
      [{ tls: { cert: 'a', key: 'b', crt: 'c' } }, /^tls\.crt: unknown key/],
      [{ tls: 'yes' }, /^tls: expected a mapping/],
      [{ auth: {} }, /^auth: give/],
      [{ auth: { mode: 'off' } }, /^auth\.mode: /],
      [{ auth: { jwt_issuer: 5, jwt_secret_file: 's' } }, /^auth\.jwt_issuer: /],
      [{ auth: { cert_roles: { a: 1 } } }, /^auth\.cert_roles\.a: /],
      [{ auth: { tokens: 'x' } }, /^auth\.tokens: unknown key/],
    ];
    for (const [doc, re] of bad)
      expect(() => parseAgentConfig(doc, {}, dir), JSON.stringify(doc)).toThrow(re);
  });

  it('refuses an unknown role in cert_roles when loading', async () => {
    await expect(loadAuthOptions({ mode: 'token', certRoles: { a: 'root' } })).rejects.toThrow(
      /cert_roles\.a/,
    );
  });
});
