/**
 * The Cyborg API's callers: noauth, and tokens validated at Keystone — here a
 * stand-in that answers GET /v3/auth/tokens as Keystone does (200 with the
 * token document, 404 for a token it does not know, 401 for a caller whose
 * own token is not valid). The same against a real Keystone, with real
 * users, roles, service users, expiry, revocation and Keystone down:
 * test/integration/keystone.test.ts.
 */
import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Authenticator } from '../../grpc/auth/authenticator.js';
import type { TokenSource } from '../placement/keystone.js';
import {
  authorize,
  BerthTokenIdentity,
  type CyborgCaller,
  KeystoneIdentity,
  NoAuthIdentity,
} from './identity.js';
import { CyborgHttpError } from './shapes.js';

const statusOf = async (p: Promise<unknown> | (() => unknown)): Promise<number> => {
  try {
    await (typeof p === 'function' ? p() : p);
  } catch (err) {
    if (err instanceof CyborgHttpError) return err.status;
    throw err;
  }
  return 0;
};

describe('noauth', () => {
  it('reads user[:project]; admin is an admin; a service token is Nova', async () => {
    const id = new NoAuthIdentity();
    expect(await id.caller({})).toBeNull();
    expect(await id.caller({ authToken: 'alice:p1' })).toEqual({
      user: 'alice',
      project: 'p1',
      admin: false,
      service: false,
      readOnly: false,
    });
    expect(await id.caller({ authToken: 'admin', serviceToken: 'x' })).toEqual({
      user: 'admin',
      project: 'admin',
      admin: true,
      service: true,
      readOnly: false,
    });
    expect(await statusOf(id.caller({ authToken: 'a b' }))).toBe(401);
  });
});

describe("Berth's own tokens", () => {
  it('checks them with the gRPC Authenticator: the subject is the project, admin and service by role', async () => {
    const auth = new Authenticator({
      mode: 'token',
      staticTokens: [
        { token: 'tenant-token-0123456789', roles: ['service'], subject: 'proj-a' },
        { token: 'viewer-token-0123456789', roles: ['reader'], subject: 'proj-v' },
        { token: 'agent-token-01234567890', roles: ['agent'], subject: 'host-1' },
        { token: 'admin-token-0123456789', roles: ['admin'], subject: 'ops' },
        { token: 'nova-token-01234567890', roles: ['service'], subject: 'nova' },
      ],
    });
    const id = new BerthTokenIdentity(auth);
    expect(
      await id.caller({ authToken: 'tenant-token-0123456789', serviceToken: 'nova-token-01234567890' }),
    ).toEqual({
      user: 'proj-a',
      project: 'proj-a',
      admin: false,
      service: true,
      readOnly: false,
    });
    // A reader reads; an agent's credential is refused, as over gRPC.
    const viewer = await id.caller({ authToken: 'viewer-token-0123456789' });
    expect(viewer?.readOnly).toBe(true);
    expect(await statusOf(() => authorize('arq:get', viewer))).toBe(0);
    expect(await statusOf(() => authorize('arq:create', viewer))).toBe(403);
    expect(await statusOf(id.caller({ authToken: 'agent-token-01234567890' }))).toBe(403);
    expect(
      (await id.caller({ authToken: 'tenant-token-0123456789', serviceToken: 'admin-token-0123456789' }))
        ?.service,
    ).toBe(false);
    expect((await id.caller({ authToken: 'admin-token-0123456789' }))?.admin).toBe(true);
    expect(await statusOf(id.caller({ authToken: 'forged-token-0123456789' }))).toBe(401);
    expect(await statusOf(id.caller({ authToken: 'tenant-token-0123456789', serviceToken: 'x' }))).toBe(401);
  });
});

describe('the table', () => {
  const user: CyborgCaller = { user: 'u', project: 'p', admin: false, service: false, readOnly: false };
  it('401 without a caller, 403 without the role or the service token', async () => {
    expect(await statusOf(() => authorize('arq:create', null))).toBe(401);
    expect(await statusOf(() => authorize('versions:get', null))).toBe(0);
    expect(await statusOf(() => authorize('arq:create', user))).toBe(0);
    expect(await statusOf(() => authorize('device_profile:create', user))).toBe(403);
    expect(await statusOf(() => authorize('arq:bind', user))).toBe(403);
    // The operator's `openstack accelerator arq bind` sends no service token: an admin may.
    expect(await statusOf(() => authorize('arq:bind', { ...user, admin: true }))).toBe(0);
    expect(await statusOf(() => authorize('arq:bind', { ...user, admin: true, readOnly: true }))).toBe(0);
    expect(await statusOf(() => authorize('arq:bind', { ...user, service: true }))).toBe(0);
    expect(await statusOf(() => authorize('arq:delete_by_instance', user))).toBe(403);
  });
});

describe('keystone', () => {
  let server: Server;
  let url = '';
  let ownToken = 'berth-1';
  const calls: string[] = [];
  const tokens: Record<string, { user: string; project: string; roles: string[] }> = {
    'user-token': { user: 'u1', project: 'p1', roles: ['member', 'reader'] },
    'admin-token': { user: 'u0', project: 'p0', roles: ['admin'] },
    'reader-token': { user: 'u2', project: 'p1', roles: ['reader'] },
    'nova-token': { user: 'nova', project: 'service', roles: ['service'] },
  };
  beforeAll(async () => {
    server = createServer((req, res) => {
      const subject = String(req.headers['x-subject-token']);
      calls.push(subject);
      if (req.url !== '/v3/auth/tokens' || req.headers['x-auth-token'] !== ownToken)
        return res.writeHead(401).end();
      const t = tokens[subject];
      if (!t) return res.writeHead(404).end('{"error": {"code": 404}}');
      res.writeHead(200, { 'Content-Type': 'application/json', 'X-Subject-Token': subject }).end(
        JSON.stringify({
          token: {
            user: { id: t.user },
            project: { id: t.project },
            roles: t.roles.map((name) => ({ name })),
            expires_at: new Date(Date.now() + 3_600_000).toISOString(),
          },
        }),
      );
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const a = server.address();
    url = `http://127.0.0.1:${typeof a === 'object' && a ? a.port : 0}/v3`;
  });
  afterAll(() => server.close());

  const credentials = (): TokenSource & { invalidated: number } => {
    const c = {
      describe: 'test',
      invalidated: 0,
      token: async () => ownToken,
      invalidate() {
        c.invalidated++;
      },
    };
    return c;
  };

  it("validates a user's token and Nova's service token; an unknown token is 401; results are kept", async () => {
    const id = new KeystoneIdentity({ authUrl: url, credentials: credentials(), timeoutMs: 2000 });
    expect(await id.caller({ authToken: 'user-token', serviceToken: 'nova-token' })).toEqual({
      user: 'u1',
      project: 'p1',
      admin: false,
      service: true,
      readOnly: false,
    });
    expect((await id.caller({ authToken: 'reader-token' }))?.readOnly).toBe(true);
    // A service token without the service role is not Nova's.
    expect((await id.caller({ authToken: 'user-token', serviceToken: 'admin-token' }))?.service).toBe(false);
    expect((await id.caller({ authToken: 'admin-token' }))?.admin).toBe(true);
    expect(await statusOf(id.caller({ authToken: 'forged' }))).toBe(401);
    const before = calls.length;
    await id.caller({ authToken: 'user-token', serviceToken: 'nova-token' });
    expect(calls.length).toBe(before);
  });

  it('renews its own token once on a 401, and says 503 when Keystone is away', async () => {
    ownToken = 'berth-2';
    const c = credentials();
    ownToken = 'berth-2';
    const id = new KeystoneIdentity({
      authUrl: url,
      credentials: { ...c, token: async () => (c.invalidated > 0 ? 'berth-2' : 'expired') },
      timeoutMs: 2000,
    });
    expect((await id.caller({ authToken: 'user-token' }))?.project).toBe('p1');
    const away = new KeystoneIdentity({ authUrl: 'http://127.0.0.1:9/v3', credentials: c, timeoutMs: 2000 });
    expect(await statusOf(away.caller({ authToken: 'user-token' }))).toBe(503);
  });
});
