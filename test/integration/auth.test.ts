/**
 * The auth matrix over the wire: every RPC the scheduler serves × every role ×
 * every way a credential can be wrong, checked against METHOD_ROLES. Then the
 * two directions between a real agent and the scheduler, each with its own
 * credential.
 */
import { generateKeyPairSync } from 'node:crypto';
import { Client, credentials } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentClient, type BerthClientError } from '../../src/client/sdk.js';
import { createLogger } from '../../src/logging.js';
import {
  allowedRoles,
  isOpenMethod,
  METHOD_ROLES,
  ROLES,
  type Role,
} from '../../src/server/grpc/auth/policy.js';
import { generateStaticToken, signHs256Token } from '../../src/server/grpc/auth/tokens.js';
import { Scheduler } from '../../src/server/scheduler/scheduler.js';
import { demoHostDefinition } from '../../src/sim/host.js';
import { startCluster } from '../helpers/cluster.js';
import { generatedServiceDefinitions } from '../helpers/grpc-services.js';
import { metadataWith, rawCall } from '../helpers/raw-call.js';
import { eventually } from '../helpers/wait.js';

const SECRET = 's'.repeat(48);
const quiet = () => createLogger({ level: process.env.BERTH_LOG_LEVEL ?? 'silent' });

const allMethods = new Map(
  generatedServiceDefinitions().flatMap((d) =>
    Object.values(d.definition).map(
      (m) => [m.path, m] as [string, { path: string; responseStream: boolean }],
    ),
  ),
);

describe('auth matrix: every scheduler RPC × every credential', () => {
  let scheduler: Scheduler;
  let client: Client;
  const staticTokens = Object.fromEntries(ROLES.map((r) => [r, generateStaticToken()])) as Record<
    Role,
    string
  >;
  const jwt: Partial<Record<Role, string>> = {};
  let expired = '';
  let wrongSignature = '';

  beforeAll(async () => {
    scheduler = await Scheduler.start({
      listen: '127.0.0.1:0',
      logger: quiet(),
      auth: {
        mode: 'token',
        jwt: { hs256Secret: SECRET },
        staticTokens: ROLES.map((r) => ({ token: staticTokens[r], roles: [r] })),
      },
    });
    client = new Client(scheduler.address, credentials.createInsecure());
    for (const r of ROLES) jwt[r] = await signHs256Token(SECRET, { sub: `jwt-${r}`, roles: [r] });
    expired = await signHs256Token(SECRET, { sub: 'old', roles: ['admin'], expiresInSeconds: -600 });
    wrongSignature = await signHs256Token('w'.repeat(48), { sub: 'evil', roles: ['admin'] });
  });
  afterAll(async () => {
    client?.close();
    await scheduler?.stop();
  });

  const served = () => scheduler.server.methodPaths().filter((p) => !isOpenMethod(p));

  it('serves only methods that have a table entry', () => {
    const paths = served();
    expect(paths.length).toBeGreaterThanOrEqual(20);
    expect(paths.filter((p) => !allowedRoles(p))).toEqual([]);
    for (const p of paths) expect(allMethods.has(p), p).toBe(true);
  });

  it('refuses every RPC without a valid credential with UNAUTHENTICATED', async () => {
    const bad: [string, string | undefined][] = [
      ['no token', undefined],
      ['malformed header', 'Token abc'],
      ['empty bearer', 'Bearer '],
      ['unknown token', `Bearer ${generateStaticToken()}`],
      ['expired', `Bearer ${expired}`],
      ['wrong signature', `Bearer ${wrongSignature}`],
    ];
    const failures: string[] = [];
    for (const path of served()) {
      for (const [what, header] of bad) {
        const st = await rawCall(client, allMethods.get(path)!, Buffer.alloc(0), metadataWith(header));
        if (st.codeName !== 'UNAUTHENTICATED') failures.push(`${path} ${what}: ${st.codeName} ${st.message}`);
      }
    }
    expect(failures).toEqual([]);
  });

  it('lets exactly the table roles through (static tokens and JWTs alike)', async () => {
    const failures: string[] = [];
    for (const path of served()) {
      const allowed = allowedRoles(path)!;
      for (const role of ROLES) {
        for (const [kind, token] of [
          ['static', staticTokens[role]],
          ['jwt', jwt[role]!],
        ] as const) {
          const st = await rawCall(
            client,
            allMethods.get(path)!,
            Buffer.alloc(0),
            metadataWith(`Bearer ${token}`),
          );
          const denied = st.codeName === 'PERMISSION_DENIED' || st.codeName === 'UNAUTHENTICATED';
          if (allowed.includes(role) && denied)
            failures.push(`${path} ${role}/${kind}: refused (${st.message})`);
          if (!allowed.includes(role) && st.codeName !== 'PERMISSION_DENIED') {
            failures.push(`${path} ${role}/${kind}: expected PERMISSION_DENIED, got ${st.codeName}`);
          }
          if (st.codeName === 'INTERNAL' || st.codeName === 'UNKNOWN') {
            failures.push(`${path} ${role}/${kind}: ${st.codeName} ${st.message}`);
          }
        }
      }
    }
    expect(failures).toEqual([]);
  });

  it('keeps health open', async () => {
    const st = await rawCall(
      client,
      { path: '/grpc.health.v1.Health/Check', responseStream: false },
      Buffer.alloc(0),
      metadataWith(),
    );
    expect(st.codeName).toBe('OK');
  });

  it('covers every scheduler entry of the table (the matrix is not vacuous)', () => {
    const schedulerEntries = Object.keys(METHOD_ROLES).filter((k) => k.startsWith('berth.scheduler.v1.'));
    const servedKeys = new Set(served().map((p) => p.slice(1)));
    // Services other modules add later (instances, migrations) may not be served yet.
    const notServed = schedulerEntries.filter((k) => !servedKeys.has(k));
    for (const k of notServed) expect(k).toMatch(/InstanceService|MigrationService/);
  });
});

describe('agent ↔ scheduler, each with its own credential', () => {
  const agentToken = generateStaticToken();
  const schedulerToken = generateStaticToken();
  const adminToken = generateStaticToken();
  const serviceToken = generateStaticToken();
  const readerToken = generateStaticToken();

  it('registers, is followed, and refuses callers without the scheduler or admin role', async () => {
    // The scheduler reaches the agent with a credential for this host only (invariant 10).
    const signing = generateKeyPairSync('ed25519', {
      privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
      publicKeyEncoding: { type: 'spki', format: 'pem' },
    });
    const c = await startCluster([demoHostDefinition('auth-host')], {
      scheduler: {
        logger: quiet(),
        auth: {
          mode: 'token',
          staticTokens: [
            { token: agentToken, roles: ['agent'], subject: 'auth-host' },
            { token: adminToken, roles: ['admin'] },
          ],
        },
        agentSigningKey: signing.privateKey,
      },
      agent: {
        logger: quiet(),
        schedulerToken: agentToken,
        auth: {
          mode: 'token',
          schedulerKey: { publicKey: signing.publicKey, audience: 'auth-host' },
          staticTokens: [
            { token: schedulerToken, roles: ['scheduler'] },
            { token: adminToken, roles: ['admin'] },
            { token: serviceToken, roles: ['service'] },
            { token: readerToken, roles: ['reader'] },
          ],
        },
      },
    });
    try {
      // The scheduler followed the agent's inventory with its own token.
      await eventually(
        () => c.scheduler.useCases.listHosts().then((p) => p.hosts),
        (hs) => hs.some((h) => h.name === 'auth-host' && h.connected),
        15_000,
      );
      const agentAddress = c.host('auth-host').agent!.address;
      const call = async (token?: string) => {
        const a = new AgentClient({ endpoint: agentAddress, ...(token ? { token } : {}), retries: 1 });
        try {
          return await a.agent.listDevices({}).then(
            () => 'OK',
            (e: BerthClientError) => e.codeName,
          );
        } finally {
          a.close();
        }
      };
      expect(await call()).toBe('UNAUTHENTICATED');
      expect(await call(agentToken)).toBe('UNAUTHENTICATED');
      expect(await call(serviceToken)).toBe('PERMISSION_DENIED');
      expect(await call(adminToken)).toBe('OK');
      expect(await call(schedulerToken)).toBe('OK');

      // Every agent RPC x every role the agent knows, against the table. Empty
      // requests: CleanupDevice/PrepareMigration/RecordBinding/ReleaseDevice fail validation, never start work.
      const raw = new Client(agentAddress, credentials.createInsecure());
      try {
        const tokens: [Role, string][] = [
          ['scheduler', schedulerToken],
          ['admin', adminToken],
          ['service', serviceToken],
          ['reader', readerToken],
        ];
        const failures: string[] = [];
        const agentMethods = [...allMethods.values()].filter((m) => m.path.startsWith('/berth.agent.v1.'));
        expect(agentMethods).toHaveLength(8);
        for (const m of agentMethods) {
          for (const [role, token] of tokens) {
            const st = await rawCall(raw, m, Buffer.alloc(0), metadataWith(`Bearer ${token}`));
            const allowed = allowedRoles(m.path)!.includes(role);
            const refused = st.codeName === 'PERMISSION_DENIED' || st.codeName === 'UNAUTHENTICATED';
            if (allowed === refused) failures.push(`${m.path} ${role}: ${st.codeName} ${st.message}`);
          }
          const none = await rawCall(raw, m, Buffer.alloc(0), metadataWith());
          if (none.codeName !== 'UNAUTHENTICATED') failures.push(`${m.path} no token: ${none.codeName}`);
        }
        expect(failures).toEqual([]);
      } finally {
        raw.close();
      }
    } finally {
      await c.stop();
    }
  }, 60_000);
});
