import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cyborgOptionsFromFlags } from './config.js';

describe('berth scheduler serve --cyborg-*', () => {
  it('is off without --cyborg-listen, and a stray flag says what it needs', async () => {
    expect(await cyborgOptionsFromFlags({})).toBeNull();
    await expect(cyborgOptionsFromFlags({ novaUrl: 'http://nova:8774/v2.1' })).rejects.toThrow(
      '--nova-url needs --cyborg-listen',
    );
  });

  it('reads noauth, berth and keystone callers and Nova token credentials; mistakes name the flag', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'berth-cyborg-'));
    await writeFile(join(dir, 'nova'), 'nova-token\n');
    await writeFile(join(dir, 'ks'), 'ks-token\n');
    await writeFile(join(dir, 'empty'), '\n');
    const base = {
      cyborgListen: '127.0.0.1:6666',
      novaUrl: 'http://nova:8774/v2.1',
      novaTokenFile: join(dir, 'nova'),
    };
    expect(await cyborgOptionsFromFlags({ ...base, cyborgAuth: 'noauth' })).toMatchObject({
      listen: '127.0.0.1:6666',
      auth: { type: 'noauth' },
      nova: { url: 'http://nova:8774/v2.1', auth: { type: 'token', token: 'nova-token' } },
    });
    expect((await cyborgOptionsFromFlags({ ...base, cyborgAuth: 'berth' }))?.auth).toEqual({ type: 'berth' });
    expect(
      (
        await cyborgOptionsFromFlags({
          ...base,
          cyborgKeystoneUrl: 'https://keystone:5000/v3',
          cyborgKeystoneTokenFile: join(dir, 'ks'),
        })
      )?.auth,
    ).toEqual({
      type: 'keystone',
      authUrl: 'https://keystone:5000/v3',
      credentials: { type: 'token', token: 'ks-token' },
    });
    const refused: Array<[object, string]> = [
      [{ ...base }, '--cyborg-auth keystone needs --cyborg-keystone-url'],
      [{ ...base, cyborgAuth: 'ldap' }, '--cyborg-auth: expected keystone, berth or noauth, got "ldap"'],
      [{ ...base, cyborgAuth: 'noauth', novaUrl: undefined }, '--cyborg-listen needs --nova-url'],
      [{ ...base, cyborgAuth: 'noauth', novaUrl: 'nova:8774' }, '--nova-url: expected an http(s) URL'],
      [{ ...base, cyborgAuth: 'noauth', novaTokenFile: join(dir, 'empty') }, 'the file is empty'],
      [{ ...base, cyborgAuth: 'noauth', novaTokenFile: join(dir, 'missing') }, 'cannot read it'],
      [{ ...base, cyborgAuth: 'noauth', novaAuth: 'basic' }, '--nova-auth: expected noauth or token'],
    ];
    for (const [flags, says] of refused) {
      await expect(cyborgOptionsFromFlags(flags), JSON.stringify(flags)).rejects.toThrow(says);
    }
  });
});
