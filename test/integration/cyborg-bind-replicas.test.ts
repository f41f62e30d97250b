/**
 * Two binds of one ARQ through two Cyborg APIs on one PostgreSQL database
 * (issue 41 item 6, docs/decisions.md 81): exactly one runs. Each "replica"
 * is what `berth scheduler serve` composes for PATCH — its own pool on the
 * database, the use cases, the bind workflow (app/binding.ts), the Cyborg
 * workflow (app/cyborg-binds.ts) and the REST server on 127.0.0.1:0 — with
 * the agents and Placement's providers as plain ports: the agent's
 * RecordBinding is held until both PATCHes were answered, so the first bind
 * is still running when the second arrives, whichever that is. (Child
 * processes cannot race here: only the replica that follows a host knows its
 * Placement providers, decision 77, so Nova's binds of one host reach one.)
 *
 * Before decision 81 the running binds were a set in each process: both
 * replicas answered 202, and the loser's bind, run after the winner's unit,
 * passed for a retry of it (same instance) or failed with no event (another).
 */
import { createHash, randomUUID } from 'node:crypto';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type HostName, newUuid, type Uuid } from '../../src/identifiers.js';
import type { AgentHandle, AgentPort } from '../../src/server/scheduler/app/agent-port.js';
import { BINDING_FEATURE } from '../../src/server/scheduler/app/agent-port.js';
import { Binding } from '../../src/server/scheduler/app/binding.js';
import { Certificates } from '../../src/server/scheduler/app/certificates.js';
import { CyborgBinds } from '../../src/server/scheduler/app/cyborg-binds.js';
import { NoAuthIdentity } from '../../src/server/scheduler/cyborg/identity.js';
import { CyborgApi } from '../../src/server/scheduler/cyborg/server.js';
import { facts, hostName, hostRegistration } from '../../src/server/scheduler/domain/fixtures.support.js';
import type { HostRecord } from '../../src/server/scheduler/domain/host.js';
import { validateProfile } from '../../src/server/scheduler/domain/profile.js';
import type { PlacementPort } from '../../src/server/scheduler/placement/port.js';
import { openPgStore, type PgStore } from '../../src/server/scheduler/stores.js';
import { type PostgresServer, startPostgres } from '../helpers/postgres.js';
import { available, postgresServer } from '../helpers/prerequisites.js';
import { eventually } from '../helpers/wait.js';

const usable = available(postgresServer(), 'Cyborg binds through two replicas on PostgreSQL');

const HOST = hostName('bind-race-host');
const ROUNDS = 6;
const silent = pino({ level: 'silent' });

/** The host's agent as both replicas reach it: RecordBinding waits while held, and counts what it recorded. */
class HeldAgent implements AgentPort {
  readonly recorded: string[] = [];
  private open: Promise<void> = Promise.resolve();
  private release: () => void = () => {};
  hold(): void {
    this.open = new Promise((r) => {
      this.release = r;
    });
  }
  let(): void {
    this.release();
  }
  async refresh(): Promise<void> {}
  get(host: string): AgentHandle {
    return {
      host: host as HostName,
      isConnected: true,
      has: (f) => f === BINDING_FEATURE,
      recordBinding: async (_address, arqUuid) => {
        await this.open;
        this.recorded.push(arqUuid);
      },
      releaseDevice: async () => {},
      prepareMigration: async () => [],
    };
  }
  view(h: HostRecord): AgentHandle {
    return this.get(h.name);
  }
  observe(h: HostRecord): AgentHandle {
    return this.get(h.name);
  }
  failure(err: unknown) {
    return { unreachable: false, unimplemented: false, reason: '', message: (err as Error).message };
  }
}

describe.skipIf(!usable)('binds racing through two Cyborg APIs on one PostgreSQL database', () => {
  let pgServer: PostgresServer;
  const stores: PgStore[] = [];
  const apis: CyborgApi[] = [];
  const agent = new HeldAgent();
  /** Placement's one provider of the host, standing for all its devices (as a PF for its VFs). */
  const provider = newUuid();
  let devices: Uuid[] = [];

  async function http(api: CyborgApi, method: string, path: string, body?: unknown) {
    const res = await fetch(`${api.url}${path}`, {
      method,
      headers: {
        'X-Auth-Token': 'alice:proj-a',
        'X-Service-Token': 'nova',
        ...(body !== undefined ? { 'Content-Type': 'application/json' } : {}),
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    return { status: res.status, body: (text ? JSON.parse(text) : {}) as Record<string, unknown> };
  }
  const fault = (body: Record<string, unknown>): string =>
    JSON.parse(body.error_message as string).faultstring as string;
  const newArq = async (api: CyborgApi): Promise<string> => {
    const made = await http(api, 'POST', '/accelerator_requests', { device_profile_name: 'nvme' });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    return (made.body.arqs as Array<{ uuid: string }>)[0]!.uuid;
  };
  const bindBody = (arq: string, instance: string) => ({
    [arq]: [
      { path: '/hostname', op: 'add', value: HOST },
      { path: '/device_rp_uuid', op: 'add', value: provider },
      { path: '/instance_uuid', op: 'add', value: instance },
    ],
  });

  beforeAll(async () => {
    pgServer = await startPostgres();
    const url = await pgServer.createDatabase(
      `berth_${createHash('sha256').update('cyborg-bind-replicas').digest('hex').slice(0, 12)}`,
    );
    for (const name of ['A', 'B']) {
      // Each replica its own pool, as each process has.
      const useCases = await openPgStore(url);
      stores.push(useCases);
      const placement = {
        devicesOfProvider: async (rp: string) =>
          rp === provider ? devices.map((deviceUuid) => ({ deviceUuid, host: HOST, address: '' })) : [],
        deviceProvider: () => ({ providerUuid: provider }),
      } as unknown as PlacementPort;
      const judge = { self: `replica-${name}`, alone: false };
      const binding = new Binding({ useCases, agents: agent, judge, logger: silent });
      const api = new CyborgApi({
        useCases,
        binds: new CyborgBinds({
          useCases,
          binding,
          placement,
          nodename: (h) => h,
          judge,
          nova: null,
          logger: silent,
        }),
        certificates: new Certificates({ useCases, logger: silent }),
        placement,
        identity: new NoAuthIdentity(),
        events: null,
        logger: silent,
      });
      await api.listen('127.0.0.1:0');
      apis.push(api);
    }
    const [a] = stores;
    await a!.registerHost({ ...hostRegistration(HOST), features: ['cleanup.v1', BINDING_FEATURE] });
    await a!.setHostConnected(HOST, true);
    await a!.upsertInventory(HOST, {
      kind: 'snapshot',
      revision: 1,
      // One device a round of each test: each round binds one ARQ.
      devices: Array.from({ length: 2 * ROUNDS }, (_, index) => facts({ index })),
    });
    devices = (await a!.listDevices({})).devices.map((d) => d.uuid);
    await a!.createProfile(
      validateProfile({ name: 'nvme', groups: [{ resourceClass: 'CUSTOM_NVME_144D_A808' }] }),
    );
  }, 120_000);

  afterAll(async () => {
    agent.let();
    for (const api of apis) await api.stop();
    for (const s of stores) await s.close();
    await pgServer?.stop();
  });

  it('each of several ARQs, patched at once through both: one 202 and one 409, one bind, and no claim left', async () => {
    const [a, b] = apis as [CyborgApi, CyborgApi];
    for (let round = 0; round < ROUNDS; round++) {
      const made = await http(a, 'POST', '/accelerator_requests', { device_profile_name: 'nvme' });
      expect(made.status, JSON.stringify(made.body)).toBe(201);
      const arq = (made.body.arqs as Array<{ uuid: string }>)[0]!.uuid;
      const instances = [randomUUID(), randomUUID()];
      agent.hold();
      const answers = await Promise.all([
        http(a, 'PATCH', '/accelerator_requests', bindBody(arq, instances[0]!)),
        http(b, 'PATCH', `/accelerator_requests/${arq}`, bindBody(arq, instances[1]!)),
      ]);
      expect(answers.map((r) => r.status).sort()).toEqual([202, 409]);
      const lost = answers.find((r) => r.status === 409)!;
      expect(fault(lost.body)).toBe(`${arq}: a bind of ARQ ${arq} is running`);
      const winner = instances[answers.findIndex((r) => r.status === 202)]!;
      // While the winner's bind runs, Nova's unbind is refused through either replica too.
      const unbind = { [arq]: [{ path: '/hostname', op: 'remove' }] };
      for (const api of apis)
        expect((await http(api, 'PATCH', '/accelerator_requests', unbind)).status).toBe(409);
      agent.let();
      // The winner's bind ends: bound to its instance, recorded once, its claim let go.
      const store = stores[0]!;
      const bound = await eventually(
        () => store.getArq(arq as Uuid),
        (now) => now.state === 'bound' && !now.bindClaim,
        30_000,
      );
      expect(bound.instanceUuid).toBe(winner);
      expect(agent.recorded.filter((u) => u === arq)).toHaveLength(1);
      const held = (await store.listDevices({})).devices.filter((d) => d.arqUuid === arq);
      expect(held.map((d) => d.uuid)).toEqual([bound.deviceUuid]);
    }
    expect(agent.recorded).toHaveLength(ROUNDS);
  }, 120_000);

  it('two ARQs bound to one new instance by two PATCHes at once, one through each: one 202, one hot add (400), one bind', async () => {
    const [a, b] = apis as [CyborgApi, CyborgApi];
    const store = stores[0]!;
    const recorded = agent.recorded.length;
    for (let round = 0; round < ROUNDS; round++) {
      const arqs = [await newArq(a), await newArq(b)];
      const instance = randomUUID();
      agent.hold();
      // Nova binds an instance's ARQs in one PATCH; two PATCHes for one instance are a hot add.
      const answers = await Promise.all([
        http(a, 'PATCH', '/accelerator_requests', bindBody(arqs[0]!, instance)),
        http(b, 'PATCH', '/accelerator_requests', bindBody(arqs[1]!, instance)),
      ]);
      expect(answers.map((r) => r.status).sort(), JSON.stringify(answers.map((r) => r.body))).toEqual([
        202, 400,
      ]);
      const won = arqs[answers.findIndex((r) => r.status === 202)]!;
      const lost = arqs[answers.findIndex((r) => r.status === 400)]!;
      expect(fault(answers.find((r) => r.status === 400)!.body)).toBe(
        `instance_uuid: Instance ${instance} already has accelerator requests (${won}). Cannot bind additional ARQs.`,
      );
      agent.let();
      const bound = await eventually(
        () => store.getArq(won as Uuid),
        (now) => now.state === 'bound' && !now.bindClaim,
        30_000,
      );
      expect(bound.instanceUuid).toBe(instance);
      // The loser was never claimed nor bound: the instance has the winner's ARQ alone.
      const loser = await store.getArq(lost as Uuid);
      expect([loser.state, loser.bindClaim ?? null]).toEqual(['initial', null]);
      expect((await store.listArqs(instance)).map((x) => x.uuid)).toEqual([won]);
    }
    expect(agent.recorded.length - recorded).toBe(ROUNDS);
  }, 120_000);
});
