/**
 * Invariant 10: a principal acts only for its own host, and what the scheduler
 * presents to an agent is valid on that agent only (decision 31; the attacks,
 * and two principals racing for a host's first registration, each through the
 * real servers). Two real agents on simulated hosts; the scheduler
 * reaches host-a's agent through a proxy that captures the credential it sends.
 */
import { generateKeyPairSync } from 'node:crypto';
import { join } from 'node:path';
import { Client, credentials, type Metadata } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentClient, SchedulerClient } from '../../src/client/sdk.js';
import type { RegisterRequest } from '../../src/gen/berth/scheduler/v1/registration.js';
import { Agent } from '../../src/server/agent/agent.js';
import { parseAgentConfig } from '../../src/server/agent/config.js';
import { allowedRoles } from '../../src/server/grpc/auth/policy.js';
import { generateStaticToken, signHs256Token } from '../../src/server/grpc/auth/tokens.js';
import { Scheduler } from '../../src/server/scheduler/scheduler.js';
import { buildSimHost, demoHostDefinition } from '../../src/sim/host.js';
import { tempDir } from '../helpers/agent.js';
import { type AgentProxy, startAgentProxy } from '../helpers/agent-proxy.js';
import { berth, cliEnv } from '../helpers/berth-cli.js';
import { expectCode } from '../helpers/errors.js';
import { generatedMethods } from '../helpers/grpc-services.js';
import { freePort } from '../helpers/processes.js';
import { metadataWith, rawCall } from '../helpers/raw-call.js';
import { eventually } from '../helpers/wait.js';

const JWT_SECRET = 'an-hs256-secret-of-at-least-32-bytes!';

describe('no host can speak for another', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let scheduler: Scheduler;
  let proxy: AgentProxy;
  const agents = new Map<string, Agent>();
  const tokens = { a: generateStaticToken(), b: generateStaticToken(), mapped: generateStaticToken() };
  /** Hosts registered at once by two principals each: its name's token and its certificate name's. */
  const racers = Array.from({ length: 10 }, (_, i) => ({
    host: `race-${i}`,
    byName: generateStaticToken(),
    byCert: generateStaticToken(),
  }));
  const admin = generateStaticToken();
  /** What the scheduler sent to host-a's agent, as a captured credential. */
  const captured: string[] = [];

  beforeAll(async () => {
    dir = await tempDir('berth-identity-');
    const signing = generateKeyPairSync('ed25519', {
      privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
      publicKeyEncoding: { type: 'spki', format: 'pem' },
    });
    scheduler = await Scheduler.start({
      listen: '127.0.0.1:0',
      heartbeatSeconds: 1,
      auth: {
        mode: 'token',
        jwt: { hs256Secret: JWT_SECRET },
        staticTokens: [
          { token: tokens.a, roles: ['agent'], subject: 'host-a' },
          { token: tokens.b, roles: ['agent'], subject: 'host-b' },
          // An operator-written mapping: this principal speaks for host-a.
          { token: tokens.mapped, roles: ['agent'], subject: 'ops-agent-7' },
          { token: admin, roles: ['admin'], subject: 'ops' },
          ...racers.flatMap((r) => [
            { token: r.byName, roles: ['agent' as const], subject: r.host },
            { token: r.byCert, roles: ['agent' as const], subject: `cert:${r.host}` },
          ]),
        ],
      },
      agentSigningKey: signing.privateKey,
      hostPrincipals: { 'ops-agent-7': 'host-a' },
    });
    for (const [host, token, bus] of [
      ['host-a', tokens.a, 0x3b],
      ['host-b', tokens.b, 0x5b],
    ] as const) {
      const sim = await buildSimHost(join(dir.path, host), demoHostDefinition(host, bus));
      const port = await freePort();
      let advertise: string | undefined;
      if (host === 'host-a') {
        proxy = await startAgentProxy(`127.0.0.1:${port}`, undefined, (_m: string, md: Metadata) => {
          const v = md.get('authorization')[0];
          if (typeof v === 'string') captured.push(v.replace(/^Bearer /, ''));
        });
        advertise = proxy.address;
      }
      const config = parseAgentConfig(
        {
          ...sim.agentConfig,
          listen: `127.0.0.1:${port}`,
          ...(advertise ? { advertise } : {}),
          scheduler: scheduler.address,
          register_interval: 0.5,
          discovery_interval: 3600,
        },
        {},
        dir.path,
      );
      const agent = await Agent.start({
        config,
        bootIdFile: sim.bootIdFile,
        schedulerToken: token,
        auth: {
          mode: 'token',
          schedulerKey: { publicKey: signing.publicKey, audience: host },
          staticTokens: [{ token: admin, roles: ['admin'], subject: 'ops' }],
        },
      });
      agents.set(host, agent);
      await agent.registered;
    }
    const client = new SchedulerClient({ endpoint: scheduler.address, token: admin });
    try {
      for (const h of ['host-a', 'host-b']) {
        await eventually(
          () => client.hosts.getHost({ name: h }),
          (r) => r.host?.connected === true,
          15_000,
        );
      }
    } finally {
      client.close();
    }
  }, 90_000);

  afterAll(async () => {
    for (const a of agents.values()) await a.stop();
    await proxy?.stop();
    await scheduler?.stop();
    await dir?.cleanup();
  });

  const registration = (host: string, endpoint = '127.0.0.1:1'): RegisterRequest => ({
    host,
    endpoint,
    bootId: 'boot-1',
    epoch: 'epoch-attacker',
    agentVersion: '0.0.0',
    features: ['inventory.v1', 'cleanup.v1'],
    drivers: ['nvme'],
    heldDevices: [],
    mediaRecords: [],
    signingKey: '',
    certificates: [],
    retiredSigningKeys: [],
  });

  async function registerAs(token: string, req: RegisterRequest) {
    const c = new SchedulerClient({ endpoint: scheduler.address, token, retries: 1 });
    try {
      return await c.registration.register(req);
    } finally {
      c.close();
    }
  }

  async function endpointOf(host: string): Promise<string> {
    const c = new SchedulerClient({ endpoint: scheduler.address, token: admin });
    try {
      return (await c.hosts.getHost({ name: host })).host!.endpoint;
    } finally {
      c.close();
    }
  }

  it("host-a's static token and host-a's JWT cannot register host-b", async () => {
    const before = await endpointOf('host-b');
    const jwt = await signHs256Token(JWT_SECRET, { sub: 'host-a', roles: ['agent'] });
    for (const token of [tokens.a, jwt]) {
      const err = await expectCode(
        registerAs(token, registration('host-b')),
        'PERMISSION_DENIED',
        'PRINCIPAL_NOT_FOR_HOST',
      );
      expect(err.message).toContain('host-a');
      expect(err.message).toContain('host-b');
    }
    // Nothing changed: the scheduler still follows host-b's own agent.
    expect(await endpointOf('host-b')).toBe(before);
  });

  it('phantom hosts: an agent token registers no host but its own', async () => {
    await expectCode(
      registerAs(tokens.b, registration('phantom-1')),
      'PERMISSION_DENIED',
      'PRINCIPAL_NOT_FOR_HOST',
    );
    const c = new SchedulerClient({ endpoint: scheduler.address, token: admin });
    try {
      expect((await c.hosts.listHosts({})).hosts.map((h) => h.name).sort()).toEqual(['host-a', 'host-b']);
    } finally {
      c.close();
    }
  });

  it('a host is pinned to its first principal: another one mapped to it is refused', async () => {
    const err = await expectCode(
      registerAs(tokens.mapped, registration('host-a')),
      'PERMISSION_DENIED',
      'HOST_PINNED_TO_ANOTHER_PRINCIPAL',
    );
    expect(err.message).toContain('ops-agent-7');
  });

  it('refuses endpoints that are not host:port with a port 1-65535', async () => {
    for (const endpoint of ['127.0.0.1:0', '127.0.0.1:99999', 'no-port', 'bad host:80']) {
      const err = await expectCode(
        registerAs(tokens.a, registration('host-a', endpoint)),
        'INVALID_ARGUMENT',
      );
      expect(err.fieldViolations[0]?.field).toBe('endpoint');
    }
  });

  it("the scheduler's credential for host-a is refused by host-b's agent", async () => {
    expect(captured.length).toBeGreaterThan(0);
    const credential = captured.at(-1)!;
    const onAgent = async (host: string) => {
      const c = new AgentClient({ endpoint: agents.get(host)!.address, token: credential, retries: 1 });
      try {
        return await c.agent.listDevices({}).then(
          () => 'OK',
          (e: { codeName: string }) => e.codeName,
        );
      } finally {
        c.close();
      }
    };
    expect(await onAgent('host-a')).toBe('OK');
    expect(await onAgent('host-b')).toBe('UNAUTHENTICATED');
    // Nor can it start a cleanup there.
    const c = new AgentClient({ endpoint: agents.get('host-b')!.address, token: credential, retries: 1 });
    try {
      const d = agents
        .get('host-b')!
        .inventory.list()
        .find((x) => x.supportsCleaning)!;
      const outcome = await (async () => {
        try {
          for await (const _ of c.cleanupDevice({ address: d.address, jobId: 'replayed' })) return 'STARTED';
          return 'ENDED';
        } catch (e) {
          return (e as { codeName: string }).codeName;
        }
      })();
      expect(outcome).toBe('UNAUTHENTICATED');
    } finally {
      c.close();
    }
  });

  it("the auth matrix's wrong-host column: every agent RPC with host-a's scheduler credential on host-b; every scheduler RPC an agent may call, for another host", async () => {
    const credential = captured.at(-1)!;
    expect(credential).toBeTruthy();
    const failures: string[] = [];
    const methods = generatedMethods();
    // Agent side: the scheduler's credential for host-a is worth nothing on host-b, on every method.
    const onB = new Client(agents.get('host-b')!.address, credentials.createInsecure());
    try {
      for (const m of methods.filter((x) => x.service === 'berth.agent.v1.AgentService')) {
        const st = await rawCall(onB, m, Buffer.alloc(0), metadataWith(`Bearer ${credential}`));
        if (st.codeName !== 'UNAUTHENTICATED') failures.push(`agent ${m.path}: ${st.codeName} ${st.message}`);
      }
    } finally {
      onB.close();
    }
    // Scheduler side: every method an agent principal may call, for a host that is not its own.
    const onScheduler = new Client(scheduler.address, credentials.createInsecure());
    try {
      const agentMethods = methods.filter((m) => allowedRoles(m.path)?.includes('agent'));
      expect(agentMethods.map((m) => m.name)).toEqual(['Register']);
      for (const m of agentMethods) {
        const body = Buffer.from(m.request.encode(m.request.fromPartial(registration('host-b'))).finish());
        const st = await rawCall(onScheduler, m, body, metadataWith(`Bearer ${tokens.a}`));
        if (st.codeName !== 'PERMISSION_DENIED' || st.reason !== 'PRINCIPAL_NOT_FOR_HOST') {
          failures.push(`scheduler ${m.path}: ${st.codeName}/${st.reason} ${st.message}`);
        }
      }
    } finally {
      onScheduler.close();
    }
    expect(failures).toEqual([]);
  });

  it('two principals of one host register it first at the same moment: exactly one is pinned, the other refused', async () => {
    const outcomes = await Promise.all(
      racers.map((r) =>
        Promise.allSettled([
          registerAs(r.byName, registration(r.host)),
          registerAs(r.byCert, { ...registration(r.host), epoch: 'epoch-other' }),
        ]),
      ),
    );
    const c = new SchedulerClient({ endpoint: scheduler.address, token: admin });
    try {
      for (const [i, pair] of outcomes.entries()) {
        expect(pair.filter((o) => o.status === 'fulfilled')).toHaveLength(1);
        const refused = pair.flatMap((o) => (o.status === 'rejected' ? [o.reason as unknown] : []));
        expect(refused).toHaveLength(1);
        await expectCode(Promise.reject(refused[0]), 'PERMISSION_DENIED', 'HOST_PINNED_TO_ANOTHER_PRINCIPAL');
        // The winner registers again; the loser still may not.
        const won = pair[0]!.status === 'fulfilled' ? racers[i]!.byName : racers[i]!.byCert;
        const lost = won === racers[i]!.byName ? racers[i]!.byCert : racers[i]!.byName;
        await registerAs(won, registration(racers[i]!.host));
        await expectCode(
          registerAs(lost, registration(racers[i]!.host)),
          'PERMISSION_DENIED',
          'HOST_PINNED_TO_ANOTHER_PRINCIPAL',
        );
      }
      for (const r of racers) await c.hosts.deleteHost({ name: r.host }).catch(() => {});
    } finally {
      c.close();
    }
  });

  // Last: it stops host-a's agent.
  it('berth host delete: refused while the agent is connected; then the host, its devices and its pinned principal go', async () => {
    const env = cliEnv(join(dir.path, 'client.yaml'), {
      BERTH_ENDPOINT: scheduler.address,
      BERTH_TOKEN: admin,
    });
    const refused = await berth(['host', 'delete', 'host-a'], env);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/^berth: FAILED_PRECONDITION: host host-a is connected/m);
    // Only an operator may delete a host; an agent token may not, even its own.
    const own = new SchedulerClient({ endpoint: scheduler.address, token: tokens.a, retries: 1 });
    try {
      await expectCode(own.hosts.deleteHost({ name: 'host-a' }), 'PERMISSION_DENIED');
    } finally {
      own.close();
    }
    await agents.get('host-a')!.stop();
    agents.delete('host-a');
    const c = new SchedulerClient({ endpoint: scheduler.address, token: admin });
    try {
      await eventually(
        () => c.hosts.getHost({ name: 'host-a' }),
        (r) => r.host?.connected === false,
        15_000,
      );
      const count = (await c.hosts.getHost({ name: 'host-a' })).host!.deviceCount;
      expect(count).toBeGreaterThan(0);
      const deleted = await berth(['host', 'delete', 'host-a', '-o', 'json'], env);
      expect(deleted.code, deleted.stderr).toBe(0);
      expect(
        (JSON.parse(deleted.stdout) as { removed_device_uuids: string[] }).removed_device_uuids,
      ).toHaveLength(count);
      await expectCode(c.hosts.getHost({ name: 'host-a' }), 'NOT_FOUND');
      const left = await c.devices.listDevices({
        filter: { host: 'host-a', type: 0, state: 0, resourceClass: '' },
        pageSize: 0,
        pageToken: '',
      });
      expect(left.devices).toEqual([]);
      // The pin went with the host: the operator's mapped principal (a reinstalled host) may now register it.
      await registerAs(tokens.mapped, registration('host-a'));
      expect((await c.hosts.getHost({ name: 'host-a' })).host?.name).toBe('host-a');
    } finally {
      c.close();
    }
  }, 60_000);
});
