/**
 * The auth table and the credential checks, without a network: every generated
 * service method has a table entry, and each way a credential can be wrong maps
 * to the right status.
 */
import { generateKeyPairSync } from 'node:crypto';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Metadata } from '@grpc/grpc-js';
import { exportJWK, SignJWT } from 'jose';
import { describe, expect, it } from 'vitest';
import { generatedServiceDefinitions } from '../../../../test/helpers/grpc-services.js';
import { ConfigError } from '../../../errors.js';
import { Authenticator, type AuthRefusal, isAuthRefusal } from './authenticator.js';
import { parseStaticTokens } from './configuration.js';
import { logAuthMode } from './interceptor.js';
import { allowedRoles, isOpenMethod, METHOD_ROLES, ROLES } from './policy.js';
import { generateStaticToken, signHs256Token, writeStaticTokenFile } from './tokens.js';

const SECRET = 'x'.repeat(40);

const bearer = (t: string) => {
  const md = new Metadata();
  md.set('authorization', `Bearer ${t}`);
  return md;
};

async function failure(p: Promise<unknown>): Promise<AuthRefusal> {
  const e = await p.then(
    () => null,
    (err: unknown) => err,
  );
  expect(isAuthRefusal(e), String(e)).toBe(true);
  return e as AuthRefusal;
}

describe('the method → roles table', () => {
  it('has an entry for every method of every generated service (a new RPC without one fails here)', () => {
    const defs = generatedServiceDefinitions();
    expect(defs.map((d) => d.name).sort()).toEqual([
      'AcceleratorRequestServiceService',
      'AgentServiceService',
      'CertificateServiceService',
      'DeviceServiceService',
      'HostServiceService',
      'InstanceServiceService',
      'MigrationServiceService',
      'PlacementServiceService',
      'ProfileServiceService',
      'RegistrationServiceService',
    ]);
    const missing: string[] = [];
    const paths = new Set<string>();
    for (const d of defs) {
      for (const m of Object.values(d.definition)) {
        paths.add(m.path.slice(1));
        if (!allowedRoles(m.path)) missing.push(m.path);
      }
    }
    expect(missing).toEqual([]);
    // And no stale entries for RPCs that no longer exist.
    expect(Object.keys(METHOD_ROLES).filter((k) => !paths.has(k))).toEqual([]);
  });

  it('keeps the operator actions admin-only and agents to Register', () => {
    for (const m of [
      'DeviceService/CleanDevice',
      'DeviceService/ReleaseDevice',
      'DeviceService/SetDeviceStatus',
      'DeviceService/ForgetMedia',
      'ProfileService/CreateProfile',
      'ProfileService/DeleteProfile',
    ]) {
      expect(allowedRoles(`/berth.scheduler.v1.${m}`)).toEqual(['admin']);
    }
    const agentMethods = Object.entries(METHOD_ROLES)
      .filter(([, r]) => r.includes('agent'))
      .map(([k]) => k);
    expect(agentMethods).toEqual(['berth.scheduler.v1.RegistrationService/Register']);
    for (const roles of Object.values(METHOD_ROLES)) expect(roles).toContain('admin');
  });

  it('gives host-client exactly the calls the kubelet plugins make, no profile write (decision 90)', () => {
    const hostClient = Object.entries(METHOD_ROLES)
      .filter(([, r]) => r.includes('host-client'))
      .map(([k]) => k)
      .sort();
    expect(hostClient).toEqual(
      [
        'AcceleratorRequestService/BindAcceleratorRequests',
        'AcceleratorRequestService/CreateAcceleratorRequests',
        'AcceleratorRequestService/DeleteAcceleratorRequests',
        'DeviceService/GetDevice',
        'ProfileService/GetProfile',
      ].map((m) => `berth.scheduler.v1.${m}`),
    );
    expect(ROLES).toContain('host-client');
  });

  it('opens health and reflection only', () => {
    expect(isOpenMethod('/grpc.health.v1.Health/Check')).toBe(true);
    expect(isOpenMethod('/grpc.reflection.v1.ServerReflection/ServerReflectionInfo')).toBe(true);
    expect(isOpenMethod('/grpc.health.v1.HealthX/Check')).toBe(false);
    expect(isOpenMethod('/berth.scheduler.v1.DeviceService/ListDevices')).toBe(false);
  });
});

describe('Authenticator', () => {
  const admin = generateStaticToken();
  const reader = generateStaticToken();
  const auth = new Authenticator({
    mode: 'token',
    jwt: { hs256Secret: SECRET },
    staticTokens: [
      { token: admin, roles: ['admin'], subject: 'ops' },
      { token: reader, roles: ['reader'] },
    ],
  });
  const clean = '/berth.scheduler.v1.DeviceService/CleanDevice';
  const list = '/berth.scheduler.v1.DeviceService/ListDevices';

  it('accepts static tokens with their roles and refuses the wrong role', async () => {
    expect((await auth.authorize(clean, bearer(admin))).subject).toBe('ops');
    expect((await auth.authorize(list, bearer(reader))).roles).toEqual(['reader']);
    const refused = await failure(auth.authorize(clean, bearer(reader)));
    expect([refused.code, refused.reason]).toEqual(['PERMISSION_DENIED', 'ROLE_NOT_ALLOWED']);
  });

  it('accepts an HS256 JWT (role or roles claim) and refuses expired, forged and malformed ones', async () => {
    const ok = await signHs256Token(SECRET, { sub: 'nova', roles: ['service'] });
    expect(await auth.authorize(list, bearer(ok))).toMatchObject({ subject: 'nova', via: 'jwt' });
    const single = await new SignJWT({ role: 'admin' })
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('a')
      .setExpirationTime('1h')
      .sign(new TextEncoder().encode(SECRET));
    expect((await auth.authorize(clean, bearer(single))).roles).toEqual(['admin']);

    const expired = await signHs256Token(SECRET, { sub: 'x', roles: ['admin'], expiresInSeconds: -3600 });
    const forged = await signHs256Token('y'.repeat(40), { sub: 'x', roles: ['admin'] });
    const noExp = await new SignJWT({ roles: ['admin'] })
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('x')
      .sign(new TextEncoder().encode(SECRET));
    const [h, p] = ok.split('.');
    const algNone = `${Buffer.from('{"alg":"none"}').toString('base64url')}.${p}.`;
    const tampered = `${h}.${Buffer.from(JSON.stringify({ sub: 'nova', roles: ['admin'], exp: 9e9 })).toString('base64url')}.${ok.split('.')[2]}`;
    for (const [t, why] of [
      [expired, /expired/],
      [forged, /signature/],
      [noExp, /exp/],
      [algNone, /algorithm/],
      [tampered, /signature/],
      ['not-a-token-at-all-really', /invalid/],
    ] as const) {
      const e = await failure(auth.authorize(list, bearer(t)));
      expect(e.code, t).toBe('UNAUTHENTICATED');
      expect(e.message).toMatch(why);
    }
    const noRole = await signHs256Token(SECRET, { sub: 'x', roles: [] });
    expect((await failure(auth.authorize(list, bearer(noRole)))).code).toBe('PERMISSION_DENIED');
  });

  it('refuses a JWT whose role claims are ambiguous instead of granting the most powerful reading', async () => {
    const claims = async (c: Record<string, unknown>) =>
      new SignJWT(c)
        .setProtectedHeader({ alg: 'HS256' })
        .setSubject('x')
        .setExpirationTime('1h')
        .sign(new TextEncoder().encode(SECRET));
    for (const [c, why] of [
      [{ role: 'reader', roles: ['admin'] }, /both "role" and "roles"/],
      [{ roles: 'admin' }, /"roles" must be a list/],
      [{ role: ['admin'] }, /"role" must be one role/],
      [{ roles: ['reader', 'root'] }, /unknown role "root"/],
      [{ roles: ['admin', 7] }, /unknown role 7/],
    ] as const) {
      const e = await failure(auth.authorize(list, bearer(await claims(c))));
      expect([e.code, e.message], JSON.stringify(c)).toEqual([
        'PERMISSION_DENIED',
        expect.stringMatching(why),
      ]);
    }
    // A plain list of known roles still works.
    expect((await auth.authorize(clean, bearer(await claims({ roles: ['reader', 'admin'] })))).roles).toEqual(
      ['reader', 'admin'],
    );
  });

  it('refuses missing and malformed authorization headers', async () => {
    const missing = await failure(auth.authorize(list, new Metadata()));
    expect([missing.code, missing.reason]).toEqual(['UNAUTHENTICATED', 'CREDENTIALS_MISSING']);
    expect(missing.message).toMatch(/missing/);
    const md = new Metadata();
    md.set('authorization', `Basic ${admin}`);
    expect((await failure(auth.authorize(list, md))).code).toBe('UNAUTHENTICATED');
    const two = bearer(admin);
    two.add('authorization', `Bearer ${admin}`);
    const twice = await failure(auth.authorize(list, two));
    expect([twice.code, twice.reason]).toEqual(['UNAUTHENTICATED', 'CREDENTIALS_INVALID']);
  });

  it('refuses a method that has no table entry, even to admin', async () => {
    const e = await failure(auth.authorize('/berth.scheduler.v1.DeviceService/Nuke', bearer(admin)));
    expect(e.code).toBe('PERMISSION_DENIED');
  });

  it('verifies RS256 with a PEM public key and ES256 through a JWKS, never HS256 with a public key', async () => {
    const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const jwk = { ...(await exportJWK(ec.publicKey)), kid: 'k1', alg: 'ES256' };
    const pki = new Authenticator({
      mode: 'token',
      jwt: {
        publicKey: rsa.publicKey.export({ type: 'spki', format: 'pem' }).toString(),
        jwks: { keys: [jwk] },
        issuer: 'idp',
      },
    });
    const rs = await new SignJWT({ roles: ['reader'] })
      .setProtectedHeader({ alg: 'RS256' })
      .setSubject('r')
      .setIssuer('idp')
      .setExpirationTime('5m')
      .sign(rsa.privateKey);
    expect((await pki.authorize(list, bearer(rs))).subject).toBe('r');
    const es = await new SignJWT({ roles: ['reader'] })
      .setProtectedHeader({ alg: 'ES256', kid: 'k1' })
      .setSubject('e')
      .setIssuer('idp')
      .setExpirationTime('5m')
      .sign(ec.privateKey);
    expect((await pki.authorize(list, bearer(es))).subject).toBe('e');
    const wrongIss = await new SignJWT({ roles: ['reader'] })
      .setProtectedHeader({ alg: 'RS256' })
      .setSubject('r')
      .setIssuer('other')
      .setExpirationTime('5m')
      .sign(rsa.privateKey);
    expect((await failure(pki.authorize(list, bearer(wrongIss)))).message).toMatch(/iss/);
    // Algorithm confusion: the public key's PEM used as an HMAC secret.
    const pem = rsa.publicKey.export({ type: 'spki', format: 'pem' }).toString();
    const confused = await signHs256Token(pem, { sub: 'x', roles: ['admin'] });
    expect((await failure(pki.authorize(list, bearer(confused)))).code).toBe('UNAUTHENTICATED');
  });

  it('maps a verified client certificate CN to a role only when no token is sent', async () => {
    const m = new Authenticator({ mode: 'token', certRoles: { 'berth-scheduler': 'scheduler' } });
    const ctx = (cn: string) =>
      ({ sslPeerCertificate: { subject: { CN: cn } } }) as unknown as Parameters<
        Authenticator['authorize']
      >[2];
    const info = '/berth.agent.v1.AgentService/CleanupDevice';
    expect((await m.authorize(info, new Metadata(), ctx('berth-scheduler'))).via).toBe('mtls');
    expect((await failure(m.authorize(info, new Metadata(), ctx('someone')))).code).toBe('UNAUTHENTICATED');
    expect((await failure(m.authorize(info, new Metadata(), undefined))).code).toBe('UNAUTHENTICATED');
  });

  it('logs a warning when auth is off, and only then', () => {
    const lines: [string, unknown][] = [];
    const logger = {
      warn: (o: unknown, m: string) => lines.push([`warn ${m}`, o]),
      info: (o: unknown, m: string) => lines.push([`info ${m}`, o]),
    } as unknown as Parameters<typeof logAuthMode>[1];
    logAuthMode(new Authenticator({ mode: 'none' }), logger, 'scheduler');
    logAuthMode(auth, logger, 'agent');
    expect(lines[0]![0]).toMatch(/^warn AUTHENTICATION IS OFF/);
    expect(lines[1]![0]).toMatch(/^info authentication on/);
  });

  it('mode none lets everything through; token mode without any credential source is a config error', async () => {
    const off = new Authenticator({ mode: 'none' });
    expect(off.enabled).toBe(false);
    expect((await off.authorize(clean, new Metadata())).roles).toEqual([...ROLES]);
    expect(() => new Authenticator({ mode: 'token' })).toThrow(/at least one/);
    expect(() => new Authenticator({ mode: 'token', jwt: { hs256Secret: 'short' } })).toThrow(/32 bytes/);
  });

  it('refuses a JWKS whose keys are not JSON objects when it is configured, not at the first token', () => {
    // jose, which builds the key set, loads with the first token (decision 54): the
    // shape it requires is checked here, at start, as a configuration error.
    for (const keys of [[1], ['k'], [null], [[]]]) {
      const bad = () =>
        new Authenticator({
          mode: 'token',
          jwt: { jwks: { keys } as unknown as { keys: Record<string, unknown>[] } },
        });
      expect(bad).toThrow(ConfigError);
      expect(bad).toThrow(/jwks: expected \{"keys": \[\.\.\.\]\} of JSON objects/);
    }
  });
});

describe('static token files', () => {
  it('parses token: role lines, role lists and subjects, and refuses weak or unknown entries', () => {
    const a = 'a'.repeat(20);
    const b = 'b'.repeat(20);
    const c = 'c'.repeat(20);
    expect(
      parseStaticTokens(`# ops\n${a}: admin\n${b}: [reader, service]\n${c}: {role: agent, subject: host1}\n`),
    ).toEqual([
      { token: a, roles: ['admin'] },
      { token: b, roles: ['reader', 'service'] },
      { token: c, roles: ['agent'], subject: 'host1' },
    ]);
    expect(() => parseStaticTokens('short: admin')).toThrow(/16 characters/);
    expect(() => parseStaticTokens(`${a}: root`)).toThrow(/expected a role/);
    expect(() => parseStaticTokens('- a list')).toThrow(/token: role/);
    expect(parseStaticTokens('')).toEqual([]);
  });

  it('writes a 0600 file that reads back', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'berth-auth-'));
    try {
      const file = join(dir, 'tokens.yaml');
      const t = generateStaticToken();
      expect(t).toMatch(/^berth_[A-Za-z0-9_-]{43}$/);
      await writeStaticTokenFile(file, [
        { token: t, roles: ['admin'], subject: 'berth-up' },
        { token: generateStaticToken(), roles: ['agent'] },
      ]);
      expect((await stat(file)).mode & 0o777).toBe(0o600);
      const back = parseStaticTokens(await readFile(file, 'utf8'));
      expect(back[0]).toEqual({ token: t, roles: ['admin'], subject: 'berth-up' });
      expect(back[1]!.roles).toEqual(['agent']);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
