import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cyborgOptionsFromFlags } from './config.js';

describe('berth scheduler serve --cyborg-* and --cyborg-config', () => {
  it('is off without any of them; without listen it says so', async () => {
    expect(await cyborgOptionsFromFlags({})).toBeNull();
    await expect(cyborgOptionsFromFlags({ novaUrl: 'http://nova:8774/v2.1' })).rejects.toThrow(
      'cyborg.listen: required to serve the Cyborg API (--cyborg-listen)',
    );
  });

  it('reads the file, the flags override it; mistakes name the key or flag', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'berth-cyborg-'));
    await writeFile(join(dir, 'nova'), 'nova-token\n');
    await writeFile(join(dir, 'ks'), 'ks-token\n');
    await writeFile(join(dir, 'empty'), '\n');
    await writeFile(
      join(dir, 'cyborg.yaml'),
      [
        'listen: 0.0.0.0:6666',
        'auth: {type: keystone, auth_url: "https://keystone:5000/v3", token_file: ks}',
        'nova: {url: "https://nova:8774/v2.1", auth: {type: token, token_file: nova}}',
        'timeout: 5',
      ].join('\n'),
    );
    expect(await cyborgOptionsFromFlags({ cyborgConfig: join(dir, 'cyborg.yaml') })).toEqual({
      listen: '0.0.0.0:6666',
      auth: {
        type: 'keystone',
        authUrl: 'https://keystone:5000/v3',
        credentials: { type: 'token', token: 'ks-token' },
      },
      nova: {
        url: 'https://nova:8774/v2.1',
        auth: { type: 'token', token: 'nova-token' },
        claimTtlSeconds: 60,
      },
      timeoutSeconds: 5,
      retryMaxSeconds: 30,
      plaintext: false,
      trustProxyHeaders: false,
    });
    expect(
      await cyborgOptionsFromFlags({
        cyborgConfig: join(dir, 'cyborg.yaml'),
        cyborgListen: '127.0.0.1:7777',
        cyborgAuth: 'berth',
        novaAuth: 'noauth',
      }),
    ).toMatchObject({
      listen: '127.0.0.1:7777',
      auth: { type: 'berth' },
      nova: { auth: { type: 'noauth' } },
    });
    const base = {
      cyborgListen: '127.0.0.1:6666',
      novaUrl: 'http://nova:8774/v2.1',
      novaTokenFile: join(dir, 'nova'),
    };
    expect((await cyborgOptionsFromFlags({ ...base, cyborgAuth: 'noauth' }))?.auth).toEqual({
      type: 'noauth',
    });
    // No Nova (a lab): no events, the API is served all the same.
    expect(
      (await cyborgOptionsFromFlags({ cyborgListen: '127.0.0.1:6666', cyborgAuth: 'noauth' }))?.nova,
    ).toBeNull();
    const refused: Array<[object, string]> = [
      [{ ...base }, 'cyborg.auth.auth_url: required with auth type keystone (--cyborg-keystone-url)'],
      [{ ...base, cyborgKeystoneUrl: 'https://k/v3' }, 'cyborg.auth.token_file: required'],
      [{ ...base, cyborgAuth: 'ldap' }, 'cyborg: auth.type: expected keystone, berth or noauth, got "ldap"'],
      [{ ...base, cyborgAuth: 'noauth', novaUrl: undefined }, 'cyborg.nova.url: required with nova.auth'],
      [{ ...base, cyborgAuth: 'noauth', novaUrl: 'nova:8774' }, 'expected an http(s) URL'],
      [{ ...base, cyborgAuth: 'noauth', novaTokenFile: join(dir, 'empty') }, 'is empty'],
      [{ ...base, cyborgAuth: 'noauth', novaTokenFile: join(dir, 'missing') }, 'cannot read'],
      [{ ...base, cyborgAuth: 'noauth', novaAuth: 'basic' }, 'expected token or noauth, got "basic"'],
      [{ ...base, cyborgAuth: 'noauth', cyborgListen: 'nowhere' }, 'expected host:port'],
      [{ cyborgConfig: join(dir, 'absent.yaml') }, '--cyborg-config: cannot read'],
    ];
    for (const [flags, says] of refused) {
      await expect(cyborgOptionsFromFlags(flags), JSON.stringify(flags)).rejects.toThrow(says);
    }
    // The validating credential as an application credential (renewed; a token is not).
    await writeFile(join(dir, 'ac-secret'), 'ac-secret-value\n');
    const withCredential = (auth: string) =>
      writeFile(
        join(dir, 'ac.yaml'),
        [
          'listen: 127.0.0.1:6666',
          `auth: {type: keystone, auth_url: "https://k/v3", ${auth}}`,
          'nova: {url: "http://nova/v2.1", auth: {type: noauth}}',
        ].join('\n'),
      );
    await withCredential('application_credential_id: ac1, application_credential_secret_file: ac-secret');
    expect((await cyborgOptionsFromFlags({ cyborgConfig: join(dir, 'ac.yaml') }))?.auth).toEqual({
      type: 'keystone',
      authUrl: 'https://k/v3',
      credentials: { type: 'app-credential', authUrl: 'https://k/v3', id: 'ac1', secret: 'ac-secret-value' },
    });
    await withCredential('application_credential_id: ac1');
    await expect(cyborgOptionsFromFlags({ cyborgConfig: join(dir, 'ac.yaml') })).rejects.toThrow(
      'cyborg.auth: application_credential_id and application_credential_secret_file go together',
    );
    await withCredential(
      'application_credential_id: ac1, application_credential_secret_file: ac-secret, token_file: ks',
    );
    await expect(cyborgOptionsFromFlags({ cyborgConfig: join(dir, 'ac.yaml') })).rejects.toThrow(
      'token_file and application_credential_id are exclusive',
    );
    // TLS behind a proxy: plain HTTP and the proxy's headers, from the file or the flags.
    await writeFile(
      join(dir, 'proxied.yaml'),
      'listen: 127.0.0.1:6666\nauth: {type: noauth}\nplaintext: true\ntrust_proxy_headers: true\n',
    );
    expect(await cyborgOptionsFromFlags({ cyborgConfig: join(dir, 'proxied.yaml') })).toMatchObject({
      plaintext: true,
      trustProxyHeaders: true,
    });
    expect(
      await cyborgOptionsFromFlags({ ...base, cyborgAuth: 'noauth', cyborgTrustProxyHeaders: true }),
    ).toMatchObject({ plaintext: false, trustProxyHeaders: true });
    await writeFile(join(dir, 'bad-proxy.yaml'), 'listen: 127.0.0.1:1\ntrust_proxy_headers: "yes"\n');
    await expect(cyborgOptionsFromFlags({ cyborgConfig: join(dir, 'bad-proxy.yaml') })).rejects.toThrow(
      'trust_proxy_headers: expected true or false, got "yes"',
    );
    // The claim on a Nova event outlasts a send (decision 77): set with the file, checked against the timeout.
    const claims = async (nova: string, timeout = 2) => {
      await writeFile(
        join(dir, 'claims.yaml'),
        `listen: 127.0.0.1:1\nauth: {type: noauth}\ntimeout: ${timeout}\n${nova}\n`,
      );
      return cyborgOptionsFromFlags({ cyborgConfig: join(dir, 'claims.yaml') });
    };
    expect(
      (await claims('nova: {url: "http://nova/v2.1", auth: {type: noauth}, claim_ttl: 8}'))?.nova,
    ).toMatchObject({
      claimTtlSeconds: 8,
    });
    expect((await claims('nova: {url: "http://nova/v2.1", auth: {type: noauth}}', 20))?.nova).toMatchObject({
      claimTtlSeconds: 80,
    });
    await expect(
      claims('nova: {url: "http://nova/v2.1", auth: {type: noauth}, claim_ttl: 7}'),
    ).rejects.toThrow('claims.yaml: cyborg.nova.claim_ttl: 7 s is shorter than 4 × timeout (2 s)');
    await expect(claims('nova: {claim_ttl: 9}')).rejects.toThrow('cyborg.nova.url: required with nova.auth');
    await writeFile(join(dir, 'extra.yaml'), 'listen: 127.0.0.1:1\nport: 5\n');
    await expect(cyborgOptionsFromFlags({ cyborgConfig: join(dir, 'extra.yaml') })).rejects.toThrow(
      'unknown key',
    );
  });
});
