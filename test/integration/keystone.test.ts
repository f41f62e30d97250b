/**
 * Berth against a real Keystone (Keystone 22, test/helpers/keystone.ts), as a
 * cloud has it: projects, users with the default roles (reader < member <
 * admin), `service`, service users, application credentials, fernet tokens
 * that expire after EXPIRY seconds.
 *
 * - Placement: a real placement-api with `auth_strategy = keystone`
 *   (keystonemiddleware, validating at this Keystone with Placement's own
 *   service user). Berth's reporter authenticates with an application
 *   credential of its service user, and its token source gets, keeps and
 *   renews real tokens; a wrong secret and Keystone down fail clearly.
 * - The Cyborg API validates real tokens at this Keystone with the same
 *   application credential: a member of project P creates and reads P's
 *   ARQs, a reader only reads, another project sees none, an admin writes
 *   device profiles, Nova's service user's token (X-Service-Token) binds;
 *   an expired or revoked token is 401; Keystone down is 503 (as
 *   keystonemiddleware answers), and the API comes back with Keystone.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CyborgOptions } from '../../src/server/scheduler/cyborg/config.js';
import { KeystoneIdentity } from '../../src/server/scheduler/cyborg/identity.js';
import { CyborgHttpError } from '../../src/server/scheduler/cyborg/shapes.js';
import type { PlacementAuth } from '../../src/server/scheduler/placement/config.js';
import {
  AppCredential,
  KeystoneRefused,
  KeystoneUnavailable,
  StaticToken,
} from '../../src/server/scheduler/placement/keystone.js';
import { demoHostDefinition } from '../../src/sim/host.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import { type KeystoneServer, type KeystoneUser, startKeystoneServer } from '../helpers/keystone.js';
import {
  type PlacementServer,
  providerView,
  startPlacementServer,
  testPlacementOptions,
} from '../helpers/placement.js';
import { available, keystoneServer, placementApi } from '../helpers/prerequisites.js';
import { eventually, sleep } from '../helpers/wait.js';

const have =
  available(keystoneServer(), 'Berth against a real Keystone') &&
  available(placementApi(), 'Berth against a real Keystone');

const HOST = 'sim-host-1';
const NVME0 = '0000:3d:00.0';
const RC = 'CUSTOM_PCI_144D_A824';
const PROFILE = 'nvme-for-nova';
/** keystone.conf [token] expiration: every token of this file lives this long. */
const EXPIRY = 30;

describe.skipIf(!have)('Berth against a real Keystone', () => {
  let ks: KeystoneServer;
  let placement: PlacementServer;
  let c: Cluster;
  let nova: Server;
  let novaUrl = '';
  let cyborgUrl = '';
  let service = '';
  let p = '';
  let q = '';
  const users: Record<'admin' | 'alice' | 'rita' | 'bob' | 'nova' | 'berth', KeystoneUser> = {} as never;
  let cred: { id: string; name: string; secret: string };
  const berthAuth = (): PlacementAuth => ({
    type: 'app-credential',
    authUrl: ks.url,
    id: cred.id,
    secret: cred.secret,
  });

  const projectOf = (who: keyof typeof users) =>
    who === 'nova' || who === 'berth' ? service : who === 'bob' ? q : p;
  /**
   * A token of `who` on its project, reused while it has 10 s left: Keystone's
   * test server answers one request at a time, and each token costs a password check.
   */
  const held = new Map<string, { token: string; expiresAt: number }>();
  const tokenOf = async (who: keyof typeof users) => {
    const known = held.get(who);
    if (known && known.expiresAt - Date.now() > 10_000) return known.token;
    const t = await ks.issue(users[who], projectOf(who));
    held.set(who, t);
    return t.token;
  };

  /** One call to Berth's Cyborg API with `token` (and `serviceToken` as Nova sends it). */
  async function cyborg(
    method: string,
    path: string,
    token: string | undefined,
    o: { serviceToken?: string; body?: unknown } = {},
  ): Promise<{ status: number; body: Record<string, unknown>; fault: string }> {
    const headers: Record<string, string> = {};
    if (token) headers['X-Auth-Token'] = token;
    if (o.serviceToken) headers['X-Service-Token'] = o.serviceToken;
    if (o.body !== undefined) headers['Content-Type'] = 'application/json';
    const res = await fetch(`${cyborgUrl}${path}`, {
      method,
      headers,
      ...(o.body !== undefined ? { body: JSON.stringify(o.body) } : {}),
    });
    const text = await res.text();
    const body = (text ? JSON.parse(text) : {}) as Record<string, unknown>;
    const fault =
      typeof body.error_message === 'string' ? String(JSON.parse(body.error_message).faultstring) : '';
    return { status: res.status, body, fault };
  }

  /** What Berth's Cyborg identity makes of `authToken` when it validates with `own` as its credential. */
  const identityWith = (own: string, authToken: string) =>
    new KeystoneIdentity({ authUrl: ks.url, credentials: new StaticToken(own), timeoutMs: 10_000 })
      .caller({ authToken })
      .catch((e: unknown) => {
        if (e instanceof CyborgHttpError) return { status: e.status, message: e.message };
        throw e;
      });

  /** Keystone's own answer for `token` (validated with the admin's token): 200, or 404 once it is gone. */
  const keystoneSays = async (token: string) =>
    (await ks.call('GET', '/auth/tokens', undefined, undefined, { 'X-Subject-Token': token })).status;

  beforeAll(async () => {
    ks = await startKeystoneServer({ tokenExpirationSeconds: EXPIRY });
    service = await ks.createProject('service');
    p = await ks.createProject('project-p');
    q = await ks.createProject('project-q');
    users.admin = await ks.createUser('ops', p, ['admin']);
    users.alice = await ks.createUser('alice', p, ['member']);
    users.rita = await ks.createUser('rita', p, ['reader']);
    users.bob = await ks.createUser('bob', q, ['member']);
    // Service users as a cloud has them: admin and service in project `service`.
    users.nova = await ks.createUser('nova', service, ['admin', 'service']);
    users.berth = await ks.createUser('berth', service, ['admin', 'service']);
    await ks.createUser('placement', service, ['admin', 'service']);
    cred = await ks.createAppCredential(users.berth, service, 'berth-scheduler');

    placement = await startPlacementServer({
      keystone: {
        authUrl: ks.url,
        username: 'placement',
        password: 'placement-password',
        project: 'service',
        token: () => tokenOf('admin'),
      },
    });
    nova = createServer((req, res) => {
      let text = '';
      req.on('data', (b) => (text += b));
      req.on('end', () => {
        const events = req.url?.endsWith('/os-server-external-events') ? JSON.parse(text).events : [];
        res
          .writeHead(200, { 'Content-Type': 'application/json' })
          .end(JSON.stringify({ events: events.map((e: object) => ({ ...e, code: 200 })) }));
      });
    });
    await new Promise<void>((r) => nova.listen(0, '127.0.0.1', r));
    const a = nova.address();
    novaUrl = `http://127.0.0.1:${typeof a === 'object' && a ? a.port : 0}/v2.1`;
    const cyborgOptions: CyborgOptions = {
      listen: '127.0.0.1:0',
      auth: { type: 'keystone', authUrl: ks.url, credentials: berthAuth() },
      nova: { url: novaUrl, auth: { type: 'noauth', user: 'admin' }, claimTtlSeconds: 120 },
      timeoutSeconds: 30,
      retryMaxSeconds: 0.5,
    };
    c = await startCluster([demoHostDefinition(HOST)], {
      scheduler: {
        placement: testPlacementOptions(placement.url, {
          auth: berthAuth(),
          timeoutSeconds: 30,
          pollSeconds: 1,
        }),
        cyborg: cyborgOptions,
      },
    });
    await c.waitForDevices(HOST, 9);
    cyborgUrl = `http://${c.scheduler.cyborg!.address}`;
  }, 420_000);

  afterAll(async () => {
    await c?.stop();
    await new Promise((r) => (nova ? nova.close(r) : r(null)));
    await placement?.stop();
    await ks?.stop();
  });

  it("Placement refuses a request without a Keystone token; Berth's reporter, with an application credential, writes its providers", async () => {
    const anonymous = await fetch(`${placement.url}/resource_providers`, {
      headers: { 'OpenStack-API-Version': 'placement 1.39' },
    });
    expect(anonymous.status).toBe(401);
    const forged = await fetch(`${placement.url}/resource_providers`, {
      headers: { 'OpenStack-API-Version': 'placement 1.39', 'X-Auth-Token': 'admin' },
    });
    expect(forged.status).toBe(401);
    const view = await eventually(
      () => providerView(placement, `${HOST}_${NVME0.toUpperCase()}`),
      (v) => v?.inventories[RC]?.reserved === 0,
      180_000,
    ).catch((e: Error) => {
      throw new Error(`${e.message}\nplacement-api:\n${placement.log().slice(-3000)}`);
    });
    expect(view?.inventories[RC]?.total).toBe(1);
  }, 300_000);

  it("Berth's token source gets a real token, keeps it, renews it before it expires, and says why it fails", async () => {
    const source = new AppCredential({
      authUrl: ks.url,
      id: cred.id,
      secret: cred.secret,
      timeoutMs: 10_000,
    });
    const first = await source.token();
    expect(await keystoneSays(first)).toBe(200);
    expect(await source.token()).toBe(first);
    // Renewed at half its life (EXPIRY / 2), before Keystone forgets it.
    const renewed = await eventually(
      async () => {
        await sleep(500);
        return source.token();
      },
      (t) => t !== first,
      EXPIRY * 1000,
    );
    expect(await keystoneSays(renewed)).toBe(200);
    // By name with its user, as the configuration also allows.
    const byName = new AppCredential({
      authUrl: `${ks.url.replace(/\/v3$/, '')}/`,
      name: cred.name,
      userName: 'berth',
      userDomainId: 'default',
      secret: cred.secret,
    });
    expect(await keystoneSays(await byName.token())).toBe(200);
    // A wrong secret: refused (a configuration error), naming the credential and Keystone's answer.
    const wrong = new AppCredential({ authUrl: ks.url, id: cred.id, secret: 'not-the-secret' });
    const refused = await wrong.token().catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(KeystoneRefused);
    expect((refused as Error).message).toContain(cred.id);
    expect((refused as Error).message).toContain('401');
  }, 120_000);

  it('Cyborg API: a member of P creates and reads P’s ARQs, a reader only reads, another project sees none, an admin writes profiles', async () => {
    const admin = await tokenOf('admin');
    const alice = await tokenOf('alice');
    const rita = await tokenOf('rita');
    const bob = await tokenOf('bob');
    const profile = { name: PROFILE, groups: [{ [`resources:${RC}`]: '1' }] };
    const memberWrites = await cyborg('POST', '/v2/device_profiles', alice, { body: [profile] });
    expect(memberWrites.status, memberWrites.fault).toBe(403);
    const made = await cyborg('POST', '/v2/device_profiles', admin, { body: [profile] });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    expect((await cyborg('GET', '/v2/device_profiles', rita)).status).toBe(200);

    const created = await cyborg('POST', '/v2/accelerator_requests', alice, {
      body: { device_profile_name: PROFILE },
    });
    expect(created.status, created.fault).toBe(201);
    const arq = (created.body.arqs as Array<{ uuid: string }>)[0]!.uuid;
    expect((await cyborg('GET', `/v2/accelerator_requests/${arq}`, alice)).status).toBe(200);
    // The reader of P reads P's ARQs and may not create one.
    expect((await cyborg('GET', `/v2/accelerator_requests/${arq}`, rita)).status).toBe(200);
    const readerCreates = await cyborg('POST', '/v2/accelerator_requests', rita, {
      body: { device_profile_name: PROFILE },
    });
    expect(readerCreates.status).toBe(403);
    expect(readerCreates.fault).toContain('may only read');
    // Another project's member sees nothing of P.
    expect((await cyborg('GET', `/v2/accelerator_requests/${arq}`, bob)).status).toBe(404);
    expect((await cyborg('GET', '/v2/accelerator_requests', bob)).body.arqs).toEqual([]);
    // The admin sees it.
    expect((await cyborg('GET', `/v2/accelerator_requests/${arq}`, admin)).status).toBe(200);
    // No token, or one Keystone never issued: 401.
    expect((await cyborg('GET', '/v2/accelerator_requests', undefined)).status).toBe(401);
    expect((await cyborg('GET', '/v2/accelerator_requests', `${alice.slice(0, -4)}AAAA`)).status).toBe(401);
    // Validating with a credential Keystone does not let validate others' tokens (a member's): 503, saying so.
    expect(await identityWith(alice, bob)).toEqual({
      status: 503,
      message: expect.stringContaining('may not validate tokens'),
    });
  }, 120_000);

  it("binds only with the token of Nova's service user (X-Service-Token), as Nova sends it", async () => {
    const alice = await tokenOf('alice');
    const arq = (
      (await cyborg('POST', '/v2/accelerator_requests', alice, { body: { device_profile_name: PROFILE } }))
        .body.arqs as Array<{ uuid: string }>
    )[0]!.uuid;
    const rp = (await providerView(placement, `${HOST}_${NVME0.toUpperCase()}`))!.uuid;
    const instance = randomUUID();
    const bind = (serviceToken?: string) =>
      cyborg('PATCH', '/v2/accelerator_requests', alice, {
        ...(serviceToken ? { serviceToken } : {}),
        body: {
          [arq]: [
            { path: '/hostname', op: 'add', value: HOST },
            { path: '/device_rp_uuid', op: 'add', value: rp },
            { path: '/instance_uuid', op: 'add', value: instance },
          ],
        },
      });
    // No service token, or one of a user without the service role (alice's own, bob's): 403.
    for (const st of [undefined, alice, await tokenOf('bob')]) {
      const r = await bind(st);
      expect(r.status).toBe(403);
      expect(r.fault).toContain('service token');
    }
    // A service token that is not valid: 401.
    expect((await bind('gAAAAA-not-a-token')).status).toBe(401);
    const bound = await bind(await tokenOf('nova'));
    expect(bound.status, JSON.stringify(bound.body)).toBe(202);
    const nt = await tokenOf('nova');
    await eventually(
      async () => (await cyborg('GET', `/v2/accelerator_requests/${arq}`, alice)).body.state,
      (s) => s === 'Bound',
      60_000,
    );
    // Deleting by instance is Nova's.
    expect((await cyborg('DELETE', `/v2/accelerator_requests?instance=${instance}`, alice)).status).toBe(403);
    expect(
      (await cyborg('DELETE', `/v2/accelerator_requests?instance=${instance}`, alice, { serviceToken: nt }))
        .status,
    ).toBe(204);
  }, 120_000);

  it('refuses a token once Keystone has revoked it, and one that expired, with 401', async () => {
    const alice = (await ks.issue(users.alice, p)).token;
    await ks.revoke(alice);
    const revoked = await cyborg('GET', '/v2/accelerator_requests', alice);
    expect(revoked.status, revoked.fault).toBe(401);
    expect(revoked.fault).toContain('requires authentication');

    const old = await ks.issue(users.alice, p);
    expect((await cyborg('GET', '/v2/accelerator_requests', old.token)).status).toBe(200);
    // An operator's token as the scheduler's own credential: it works until it expires.
    const berthToken = (await ks.issue(users.berth, service)).token;
    expect(await identityWith(berthToken, await tokenOf('alice'))).toMatchObject({ project: p });
    // Wait for Keystone itself to refuse it (EXPIRY seconds after it was issued).
    await eventually(
      async () => {
        await sleep(1000);
        return keystoneSays(old.token);
      },
      (s) => s === 404,
      (EXPIRY + 30) * 1000,
    );
    const expired = await cyborg('GET', '/v2/accelerator_requests', old.token);
    expect(expired.status).toBe(401);
    expect(expired.fault).toContain('requires authentication');
    // The operator's token expired too: no caller can be served, and the answer says why.
    await eventually(
      async () => {
        await sleep(1000);
        return keystoneSays(berthToken);
      },
      (s) => s === 404,
      (EXPIRY + 30) * 1000,
    );
    expect(await identityWith(berthToken, await tokenOf('alice'))).toEqual({
      status: 503,
      message: expect.stringContaining('not valid (an expired token?'),
    });
    // Berth's own token (from the application credential) was renewed meanwhile: a fresh token works.
    expect((await cyborg('GET', '/v2/accelerator_requests', await tokenOf('alice'))).status).toBe(200);
  }, 180_000);

  it('answers 503 naming Keystone while Keystone is down, and serves again when it is back', async () => {
    const waiting = (await ks.issue(users.alice, p)).token;
    await ks.down();
    try {
      const down = await cyborg('GET', '/v2/accelerator_requests', waiting);
      expect(down.status).toBe(503);
      expect(down.fault).toContain(ks.url.replace(/\/v3$/, ''));
      // Berth's token source: Keystone unavailable, not a refused credential.
      const source = new AppCredential({
        authUrl: ks.url,
        id: cred.id,
        secret: cred.secret,
        timeoutMs: 5_000,
      });
      const err = await source.token().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(KeystoneUnavailable);
      expect((err as Error).message).toContain(ks.url);
    } finally {
      await ks.up();
    }
    expect((await cyborg('GET', '/v2/accelerator_requests', await tokenOf('alice'))).status).toBe(200);
  }, 240_000);
});
