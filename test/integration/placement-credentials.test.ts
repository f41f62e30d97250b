/**
 * How the scheduler authenticates to Placement, and what stops it from
 * starting, with faults a real Keystone is not made to show on demand (a
 * catalog without Placement, a token refused mid-life, Keystone's answers
 * counted); test/integration/keystone.test.ts runs the same credentials
 * against a real Keystone and a real keystonemiddleware. Here a small fake
 * speaks Keystone's documented v3 API (POST /v3/auth/tokens with the application_credential
 * method: the token in X-Subject-Token, its end in token.expires_at, the
 * catalog with the placement endpoint), and an authenticating proxy in front
 * of the real placement-api plays keystonemiddleware: it accepts only tokens
 * the fake issued and has not revoked or seen expire, and forwards them as
 * noauth2's admin.
 */
import { randomUUID } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SchedulerClient } from '../../src/client/sdk.js';
import {
  type PlacementOptions,
  placementOptionsFromFlags,
} from '../../src/server/scheduler/placement/config.js';
import { Scheduler } from '../../src/server/scheduler/scheduler.js';
import { tempDir } from '../helpers/agent.js';
import { type PlacementServer, startPlacementServer, testPlacementOptions } from '../helpers/placement.js';
import { available, placementApi } from '../helpers/prerequisites.js';
import { freePort } from '../helpers/processes.js';
import { eventually } from '../helpers/wait.js';

const have = available(placementApi(), "Berth's Placement credentials");
const CRED_ID = 'a0b1c2d3e4f5';
const SECRET = 'shh-its-a-secret';

function listen(
  handler: (req: IncomingMessage, res: ServerResponse) => void,
): Promise<{ server: Server; url: string }> {
  return new Promise((resolve) => {
    const server = createServer(handler);
    server.listen(0, '127.0.0.1', () =>
      resolve({ server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` }),
    );
  });
}

const body = (req: IncomingMessage) =>
  new Promise<string>((resolve) => {
    let s = '';
    req.on('data', (c: Buffer) => {
      s += c.toString();
    });
    req.on('end', () => resolve(s));
  });

describe.skipIf(!have)('Berth authenticates to Placement', () => {
  let placement: PlacementServer;
  let keystone: { server: Server; url: string };
  let proxy: { server: Server; url: string };
  let dir: Awaited<ReturnType<typeof tempDir>>;
  /** Tokens the fake Keystone issued, with when they expire (ms). */
  const tokens = new Map<string, number>();
  const issued: string[] = [];
  let lifetimeMs = 60_000;
  let catalogHasPlacement = true;
  let proxied401 = 0;
  let proxiedOk = 0;

  beforeAll(async () => {
    dir = await tempDir('berth-placement-auth-');
    placement = await startPlacementServer();
    proxy = await listen(async (req, res) => {
      const token = String(req.headers['x-auth-token'] ?? '');
      const until = tokens.get(token);
      const data = await body(req);
      if (until === undefined || until < Date.now()) {
        proxied401++;
        res.writeHead(401, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            error: {
              code: 401,
              title: 'Unauthorized',
              message: 'The request you have made requires authentication.',
            },
          }),
        );
        return;
      }
      proxiedOk++;
      const headers: Record<string, string> = { 'x-auth-token': 'admin' };
      for (const h of ['openstack-api-version', 'content-type', 'accept']) {
        const v = req.headers[h];
        if (typeof v === 'string') headers[h] = v;
      }
      const up = await fetch(`${placement.url}${req.url}`, {
        method: req.method,
        headers,
        ...(data ? { body: data } : {}),
      });
      res.writeHead(up.status, { 'content-type': up.headers.get('content-type') ?? 'application/json' });
      res.end(await up.text());
    });
    keystone = await listen(async (req, res) => {
      const doc = JSON.parse((await body(req)) || '{}');
      const identity = doc?.auth?.identity;
      const cred = identity?.application_credential;
      if (
        req.method !== 'POST' ||
        req.url !== '/v3/auth/tokens' ||
        JSON.stringify(identity?.methods) !== '["application_credential"]' ||
        cred?.id !== CRED_ID ||
        cred?.secret !== SECRET
      ) {
        res.writeHead(401, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            error: { code: 401, title: 'Unauthorized', message: 'Invalid application credential.' },
          }),
        );
        return;
      }
      const token = `gAAAA${randomUUID()}`;
      const expires = Date.now() + lifetimeMs;
      tokens.set(token, expires);
      issued.push(token);
      res.writeHead(201, { 'content-type': 'application/json', 'x-subject-token': token });
      res.end(
        JSON.stringify({
          token: {
            methods: ['application_credential'],
            expires_at: new Date(expires).toISOString(),
            catalog: [
              {
                type: 'compute',
                endpoints: [{ interface: 'internal', region: 'RegionOne', url: 'http://nova.invalid' }],
              },
              {
                type: catalogHasPlacement ? 'placement' : 'image',
                name: 'placement',
                endpoints: [
                  { interface: 'public', region: 'RegionOne', url: 'http://public.invalid' },
                  { interface: 'internal', region: 'RegionOne', url: proxy.url },
                ],
              },
            ],
          },
        }),
      );
    });
  }, 60_000);

  afterAll(async () => {
    keystone?.server.close();
    proxy?.server.close();
    await placement?.stop();
    await dir?.cleanup();
  });

  const base = (over: Partial<PlacementOptions>): PlacementOptions => testPlacementOptions(null, over);

  const start = (placementOptions: PlacementOptions) =>
    Scheduler.start({
      db: ':memory:',
      listen: '127.0.0.1:0',
      auth: { mode: 'none' },
      placement: placementOptions,
    });

  it('app-credential: a token from Keystone, Placement from its catalog, renewed before it expires and after a 401', async () => {
    const secretFile = join(dir.path, 'secret');
    await writeFile(secretFile, `${SECRET}\n`);
    // The operator's flags, as `berth scheduler serve` reads them.
    const options = await placementOptionsFromFlags({
      placementAuth: 'app-credential',
      placementAuthUrl: `${keystone.url}/v3`,
      placementAppCredentialId: CRED_ID,
      placementAppCredentialSecretFile: secretFile,
      placementCreateRoots: true,
    });
    expect(options?.url).toBeNull();
    lifetimeMs = 60_000;
    const s = await start({ ...options!, pollSeconds: 0.2 });
    const client = new SchedulerClient({ endpoint: s.address, timeoutMs: 15_000 });
    try {
      const st = (await client.placement.getPlacementStatus({})).status!;
      expect(st.reachable).toBe(true);
      expect(st.url).toBe(proxy.url);
      expect(st.credentials).toMatch(new RegExp(`Keystone application credential ${CRED_ID}`));
      expect(JSON.stringify(st)).not.toContain(SECRET);
      expect(issued.length).toBe(1);
      // Berth's owner trait, created through the proxy with Keystone's token.
      expect(
        (await placement.ok<{ traits: string[] }>('GET', '/traits?name=in:CUSTOM_OWNER_BERTH')).traits,
      ).toEqual(['CUSTOM_OWNER_BERTH']);

      // Revoked (Placement answers 401): Berth asks Keystone again, once, and goes on.
      lifetimeMs = 2_000;
      for (const t of tokens.keys()) tokens.delete(t);
      const before401 = proxied401;
      const okBefore = proxiedOk;
      await client.placement.syncPlacement({ dryRun: false });
      expect(proxied401).toBe(before401 + 1);
      expect(proxiedOk).toBeGreaterThan(okBefore);
      expect(issued.length).toBe(2);

      // That token lives 2 s: Berth (asking Placement every poll) renews it past
      // half its life, before it expires — Placement never sees it refused.
      const renewed = await eventually(
        () => issued.length,
        (n) => n > 2,
        15_000,
      );
      expect(renewed).toBe(3);
      expect(proxied401).toBe(before401 + 1);
      await client.placement.syncPlacement({ dryRun: false });
      expect(proxied401).toBe(before401 + 1);
    } finally {
      client.close();
      await s.stop();
    }
  }, 60_000);

  it('a secret Keystone refuses stops the scheduler from starting, with Keystone’s answer', async () => {
    const err = await start(
      base({ auth: { type: 'app-credential', authUrl: keystone.url, id: CRED_ID, secret: 'wrong' } }),
    ).catch((e: Error) => e);
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).message).toMatch(
      /placement: .*Keystone at .* refused .*401 Invalid application credential/,
    );
  });

  it('a Keystone catalog without Placement, and no URL, stops the start', async () => {
    catalogHasPlacement = false;
    try {
      const err = await start(
        base({ auth: { type: 'app-credential', authUrl: keystone.url, id: CRED_ID, secret: SECRET } }),
      ).catch((e: Error) => e);
      expect((err as Error).message).toMatch(
        /^placement: Keystone's catalog has no "placement" endpoint \(Keystone application credential .*\); give the URL \(--placement-url\)$/,
      );
    } finally {
      catalogHasPlacement = true;
    }
  });

  it('a token: sent as it is; once expired, Placement is out of reach with the reason, and Berth keeps serving', async () => {
    const token = `gAAAA${randomUUID()}`;
    tokens.set(token, Date.now() + 60_000);
    const s = await start(base({ url: proxy.url, auth: { type: 'token', token } }));
    const client = new SchedulerClient({ endpoint: s.address, timeoutMs: 15_000 });
    try {
      expect((await client.placement.getPlacementStatus({})).status!.reachable).toBe(true);
      tokens.delete(token);
      const e = await client.placement
        .syncPlacement({ dryRun: false })
        .catch((x: Error & { reason?: string }) => x);
      expect((e as { reason?: string }).reason).toBe('PLACEMENT_UNREACHABLE');
      expect((e as Error).message).toMatch(
        /answered 401.*credentials: a Keystone token given by the operator/,
      );
      expect((await client.hosts.listHosts({})).hosts).toEqual([]);
    } finally {
      client.close();
      await s.stop();
    }
  });

  it('a Placement older than the pinned microversion stops the start; one that does not answer does not', async () => {
    const old = await listen((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          versions: [{ id: 'v1.0', min_version: '1.0', max_version: '1.17', status: 'CURRENT' }],
        }),
      );
    });
    try {
      const err = await start(base({ url: old.url })).catch((e: Error) => e);
      expect((err as Error).message).toMatch(/serves microversions 1\.0 to 1\.17; Berth needs 1\.26/);
    } finally {
      old.server.close();
    }
    const port = await freePort();
    const s = await start(base({ url: `http://127.0.0.1:${port}` }));
    const client = new SchedulerClient({ endpoint: s.address, timeoutMs: 15_000 });
    try {
      const st = (await client.placement.getPlacementStatus({})).status!;
      expect(st.reachable).toBe(false);
      expect(st.lastError).toMatch(/does not answer \(ECONNREFUSED\)/);
    } finally {
      client.close();
      await s.stop();
    }
  });

  it('clean-one-time-use on a Placement that does not know HW_PCI_ONE_TIME_USE stops the start', async () => {
    const err = await start(
      base({ url: placement.url, mode: 'clean-one-time-use', createRoots: false }),
    ).catch((e: Error) => e);
    expect((err as Error).message).toMatch(/does not know the trait HW_PCI_ONE_TIME_USE/);
  });

  it('PlacementService on a scheduler without Placement: FAILED_PRECONDITION PLACEMENT_NOT_CONFIGURED', async () => {
    const s = await Scheduler.start({ db: ':memory:', listen: '127.0.0.1:0', auth: { mode: 'none' } });
    const client = new SchedulerClient({ endpoint: s.address, timeoutMs: 15_000 });
    try {
      const e = await client.placement.getPlacementStatus({}).catch((x: Error) => x);
      expect((e as { reason?: string }).reason).toBe('PLACEMENT_NOT_CONFIGURED');
      expect((e as { codeName?: string }).codeName).toBe('FAILED_PRECONDITION');
    } finally {
      client.close();
      await s.stop();
    }
  });
});
