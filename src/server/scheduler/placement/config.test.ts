import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { placementOptionsFromFlags } from './config.js';

describe('Placement settings from flags and a file', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-placement-config-'));
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  it('is off without any Placement flag', async () => {
    expect(await placementOptionsFromFlags({})).toBeNull();
    expect(await placementOptionsFromFlags({ placementCreateRoots: false })).toBeNull();
  });

  it('reads the file, resolves secret files beside it, and lets the flags override it', async () => {
    await writeFile(join(dir, 'secret'), 'the-secret\n');
    const file = join(dir, 'placement.yaml');
    await writeFile(
      file,
      [
        'url: http://placement.example:8778',
        'mode: clean-one-time-use',
        'compute_nodes: {berth-1: node-1.example}',
        'poll_interval: 2',
        'drift_interval: 1.5',
        'auth:',
        '  type: app-credential',
        '  auth_url: https://keystone.example:5000',
        '  application_credential_id: abc',
        '  application_credential_secret_file: secret',
        '  interface: [internal]',
      ].join('\n'),
    );
    const o = await placementOptionsFromFlags({ placementConfig: file, placementMode: 'report' });
    expect(o).toMatchObject({
      url: 'http://placement.example:8778',
      mode: 'report',
      computeNodes: { 'berth-1': 'node-1.example' },
      pollSeconds: 2,
      resyncSeconds: 300,
      driftSeconds: 1.5,
      auth: { type: 'app-credential', id: 'abc', secret: 'the-secret', interfaces: ['internal'] },
    });
  });

  it('names the key and the value of every mistake', async () => {
    const bad = (flags: Parameters<typeof placementOptionsFromFlags>[0]) =>
      placementOptionsFromFlags(flags).then(
        () => '',
        (e: Error) => e.message,
      );
    expect(await bad({ placementUrl: 'http://x:8778' })).toMatch(/auth\.type is required \(--placement-auth/);
    expect(await bad({ placementUrl: 'ftp://x', placementAuth: 'noauth' })).toMatch(
      /placement: url: expected an http\(s\) URL, got "ftp:\/\/x"/,
    );
    expect(await bad({ placementUrl: 'http://x', placementAuth: 'kerberos' })).toMatch(
      /auth\.type: expected noauth, token or app-credential, got "kerberos"/,
    );
    expect(await bad({ placementAuth: 'noauth' })).toMatch(/placement\.url: required \(--placement-url\)/);
    expect(await bad({ placementUrl: 'http://x', placementAuth: 'token' })).toMatch(/token_file: required/);
    expect(
      await bad({ placementUrl: 'http://x', placementAuth: 'token', placementTokenFile: join(dir, 'none') }),
    ).toMatch(/token_file: cannot read/);
    expect(await bad({ placementUrl: 'http://x', placementAuth: 'noauth', placementMode: 'both' })).toMatch(
      /mode: expected report or clean-one-time-use, got "both"/,
    );
    expect(
      await bad({
        placementUrl: 'http://x',
        placementAuth: 'noauth',
        placementMode: 'clean-one-time-use',
        placementCreateRoots: true,
      }),
    ).toMatch(/create_roots: only in mode report/);
    await writeFile(join(dir, 'typo.yaml'), 'url: http://x\npoll_intervall: 3\nauth: {type: noauth}\n');
    expect(await bad({ placementConfig: join(dir, 'typo.yaml') })).toMatch(/poll_intervall: unknown key/);
    await writeFile(join(dir, 'drift.yaml'), 'url: http://x\ndrift_interval: 0\nauth: {type: noauth}\n');
    expect(await bad({ placementConfig: join(dir, 'drift.yaml') })).toMatch(
      /drift_interval: expected a number of seconds in \[0\.1, 3600\], got 0/,
    );
  });
});
