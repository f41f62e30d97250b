import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BerthError } from '../../../errors.js';
import { instanceIdOf, newUuid, type Uuid } from '../../../identifiers.js';
import type { ClaimJudge } from '../domain/arq.js';
import { facts, hostName, hostRegistration } from '../domain/fixtures.support.js';
import type { HostRecord } from '../domain/host.js';
import { validateProfile } from '../domain/profile.js';
import { openSqliteStore, type SqliteStore } from '../stores.js';
import { type UseCases, useCasesOver } from '../usecases/use-cases.js';
import { type AgentHandle, type AgentPort, BINDING_FEATURE } from './agent-port.js';
import { Binding } from './binding.js';
import { type CyborgBindPatch, CyborgBinds } from './cyborg-binds.js';

const H1 = hostName('h1');
const RP = newUuid();
const PROJECT = { project: 'p1', admin: false };

/** h1's agent, connected; RecordBinding waits for `open` and counts what it recorded. */
class HeldAgents implements AgentPort {
  recorded: string[] = [];
  private release: () => void = () => {};
  private open: Promise<void> = Promise.resolve();
  /** RecordBinding waits from now on, until `let()`. */
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
      host: hostName(host),
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

describe("the Cyborg API's bind workflow: its ARQs are claimed in the database", () => {
  let dir: string;
  let useCases: SqliteStore;
  let agents: HeldAgents;
  let binding: Binding;
  /** h1's two devices, both of provider RP (as a PF's VFs are). */
  let devices: Uuid[];
  /** The Cyborg workflow of one scheduler of the database (`alone`: SQLite's, nobody else on it). */
  const replica = (self: string, alone = false, claimTtlMs?: number, over: UseCases = useCases) =>
    new CyborgBinds({
      useCases: over,
      binding,
      placement: {
        devicesOfProvider: async (rp) =>
          rp === RP ? devices.map((deviceUuid) => ({ deviceUuid, host: H1, address: facts().address })) : [],
      },
      nodename: (h) => `${h}.nova`,
      judge: { self, alone } satisfies ClaimJudge,
      nova: null,
      logger: pino({ level: 'silent' }),
      ...(claimTtlMs !== undefined ? { claimTtlMs } : {}),
    });
  const patch = (arqUuid: Uuid, instanceUuid: Uuid, o: Partial<CyborgBindPatch> = {}): CyborgBindPatch => ({
    arqUuid,
    hostname: 'h1',
    deviceRpUuid: RP,
    instanceUuid,
    projectId: null,
    ...o,
  });
  const newArq = async (project = 'p1') =>
    (await useCases.createArqs({ profileName: 'nvme', project }))[0]!.uuid;
  const refusal = (p: Promise<unknown>) =>
    p.then(
      () => null,
      (err: unknown) => {
        expect(err).toBeInstanceOf(BerthError);
        const e = err as BerthError;
        return { code: e.code, reason: e.reason, message: e.message };
      },
    );

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'berth-cyborg-binds-'));
    useCases = await openSqliteStore(join(dir, 's.db'));
    agents = new HeldAgents();
    // BindAcceleratorRequests' bind (gRPC), on a scheduler of the database that runs no Cyborg bind.
    binding = new Binding({
      useCases,
      agents,
      judge: { self: 'grpc', alone: false },
      logger: pino({ level: 'silent' }),
    });
    await useCases.registerHost({ ...hostRegistration('h1'), features: ['cleanup.v1', BINDING_FEATURE] });
    await useCases.setHostConnected(H1, true);
    await useCases.upsertInventory(H1, {
      kind: 'snapshot',
      revision: 1,
      devices: [facts({ index: 0 }), facts({ index: 1 })],
    });
    devices = (await useCases.listDevices({})).devices.map((d) => d.uuid);
    await useCases.createProfile(
      validateProfile({ name: 'nvme', groups: [{ resourceClass: 'CUSTOM_NVME_144D_A808' }] }),
    );
  });
  afterEach(async () => {
    await useCases.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('two binds of one ARQ started together on two schedulers of one database: one runs, the other is refused', async () => {
    const arq = await newArq();
    const [a, b] = [replica('A'), replica('B')];
    const instances = [newUuid(), newUuid()];
    agents.hold();
    const outcomes = await Promise.all([
      refusal(a.bind(PROJECT, [patch(arq, instances[0]!)])),
      refusal(b.bind(PROJECT, [patch(arq, instances[1]!)])),
    ]);
    expect(outcomes.filter((o) => o === null)).toHaveLength(1);
    expect(outcomes.find((o) => o !== null)).toEqual({
      code: 'FAILED_PRECONDITION',
      reason: 'ARQ_BIND_RUNNING',
      message: `${arq}: a bind of ARQ ${arq} is running`,
    });
    // While it runs, the same bind again is refused on either, and so is an unbind.
    const instance = instances[outcomes.indexOf(null)]!;
    for (const r of [a, b]) {
      expect((await refusal(r.bind(PROJECT, [patch(arq, instance)])))?.reason).toBe('ARQ_BIND_RUNNING');
      expect((await refusal(r.unbind(PROJECT, [arq])))?.reason).toBe('ARQ_BIND_RUNNING');
    }
    agents.let();
    await Promise.all([a.settled(), b.settled()]);
    // One bind: one RecordBinding, the ARQ bound to the winner's instance, the claim let go.
    expect(agents.recorded).toEqual([arq]);
    const bound = await useCases.getArq(arq);
    expect(bound).toMatchObject({
      state: 'bound',
      instanceUuid: instance,
      deviceUuid: devices[0],
      bindClaim: null,
    });
    // Nova retrying the same bind now is a retry (accepted); to another instance, refused.
    await b.bind(PROJECT, [patch(arq, instance)]);
    await b.settled();
    expect((await useCases.getArq(arq)).state).toBe('bound');
    expect(await refusal(a.bind(PROJECT, [patch(arq, newUuid())]))).toMatchObject({
      reason: 'ARQ_ALREADY_BOUND',
      message: `${arq}: ARQ ${arq} is already bound to instance ${instance}`,
    });
    await a.unbind(PROJECT, [arq]);
    expect((await useCases.getArq(arq)).state).toBe('initial');
  });

  it("a claim left by a scheduler that died: taken over once it expires, or at once by SQLite's next run", async () => {
    const arq = await newArq();
    const instance = newUuid();
    /** Scheduler `self` claimed the ARQ for a bind, then died. */
    const died = (self: string, ttlMs: number) =>
      useCases.claimBinds({
        bindings: [{ arqUuid: arq, instanceUuid: instance }],
        judge: { self, alone: false },
        ttlMs,
        viewer: PROJECT,
      });
    await died('dead', 60_000);
    // A replica sharing the database waits for the claim to expire.
    expect((await refusal(replica('B').bind(PROJECT, [patch(arq, instance)])))?.reason).toBe(
      'ARQ_BIND_RUNNING',
    );
    // Alone on its file (SQLite's instance lock), another holder's claim is an earlier run's.
    const next = replica('next', true);
    await next.bind(PROJECT, [patch(arq, instance)]);
    await next.settled();
    expect(await useCases.getArq(arq)).toMatchObject({ state: 'bound', bindClaim: null });
    await next.unbind(PROJECT, [arq]);
    // Sharing the database, an expired claim binds nothing either.
    await died('gone', 1);
    const until = Date.parse((await useCases.getArq(arq)).bindClaim!.expires);
    while (Date.now() <= until) await new Promise((r) => setImmediate(r));
    const c = replica('C');
    await c.bind(PROJECT, [patch(arq, instance)]);
    await c.settled();
    expect(await useCases.getArq(arq)).toMatchObject({ state: 'bound', bindClaim: null });
    expect(agents.recorded).toEqual([arq, arq]);
  });

  it('refuses what Cyborg refuses, before anything is claimed', async () => {
    const arq = await newArq();
    const r = replica('A');
    const cases: Array<[CyborgBindPatch[], { code: string; says: string }]> = [
      [
        [patch(arq, newUuid(), { deviceRpUuid: newUuid() })],
        { code: 'INVALID_ARGUMENT', says: 'device_rp_uuid' },
      ],
      [
        [patch(arq, newUuid(), { hostname: 'elsewhere' })],
        { code: 'INVALID_ARGUMENT', says: 'elsewhere is not the host' },
      ],
      [[patch(newUuid(), newUuid())], { code: 'NOT_FOUND', says: 'could not be found' }],
    ];
    for (const [patches, { code, says }] of cases) {
      const e = await refusal(r.bind(PROJECT, patches));
      expect(e?.code).toBe(code);
      expect(e?.message).toContain(says);
    }
    // Another project's ARQ is not found, as one that does not exist.
    const theirs = await newArq('p2');
    expect((await refusal(r.bind(PROJECT, [patch(theirs, newUuid())])))?.code).toBe('NOT_FOUND');
    // Nova's compute node name is the host's too.
    const instance = newUuid();
    await r.bind(PROJECT, [patch(arq, instance, { hostname: 'h1.nova' })]);
    await r.settled();
    // No hot add: the instance has an ARQ, another is not bound to it (its uuid told to its own project).
    const more = await newArq();
    const hot = await refusal(r.bind(PROJECT, [patch(more, instance)]));
    expect(hot?.code).toBe('INVALID_ARGUMENT');
    expect(hot?.message).toContain(`already has accelerator requests (${arq})`);
    expect((await useCases.getArq(more)).bindClaim ?? null).toBeNull();
  });

  /** The use cases of a scheduler of this database whose clock is `skewMs` off. */
  const skewed = (skewMs: number) => useCasesOver(useCases.db, { now: () => new Date(Date.now() + skewMs) });
  const HOUR = 3_600_000;
  /** Waits until the database's time is past `iso` (a claim expired by it). */
  const pastInDatabase = async (iso: string) => {
    while (Date.parse(await useCases.databaseNow()) <= Date.parse(iso))
      await new Promise((r) => setImmediate(r));
  };

  it("claims are written and judged by the database's time: a clock far off neither ends a live claim nor keeps a dead one", async () => {
    const arq = await newArq();
    const instance = newUuid();
    agents.hold();
    const a = replica('A');
    await a.bind(PROJECT, [patch(arq, instance)]);
    // An hour ahead: A's claim (120 s) would look expired by this clock; it is not.
    const ahead = replica('ahead', false, undefined, skewed(HOUR));
    expect((await refusal(ahead.bind(PROJECT, [patch(arq, instance)])))?.reason).toBe('ARQ_BIND_RUNNING');
    expect((await refusal(ahead.unbind(PROJECT, [arq])))?.reason).toBe('ARQ_BIND_RUNNING');
    agents.let();
    await a.settled();
    await useCases.unbindArqs([arq]);
    // A holder that died, its claim expired by the database's time.
    const claim = await useCases.claimBinds({
      bindings: [{ arqUuid: arq, instanceUuid: instance }],
      judge: { self: 'dead', alone: false },
      ttlMs: 1,
      viewer: PROJECT,
    });
    expect(claim).toHaveLength(1);
    await pastInDatabase((await useCases.getArq(arq)).bindClaim!.expires);
    // An hour behind, the dead claim would still look live by this clock; it is taken.
    const behindUseCases = skewed(-HOUR);
    const behind = replica('behind', false, undefined, behindUseCases);
    agents.hold();
    const before = Date.parse(await useCases.databaseNow());
    await behind.bind(PROJECT, [patch(arq, instance)]);
    // Its own claim runs from the database's now, not from its clock's (an hour early).
    const expires = Date.parse((await useCases.getArq(arq)).bindClaim!.expires);
    expect(expires).toBeGreaterThanOrEqual(before + 120_000);
    expect(expires).toBeLessThan(Date.parse(await useCases.databaseNow()) + 120_000 + 1);
    agents.let();
    await behind.settled();
    expect(await useCases.getArq(arq)).toMatchObject({
      state: 'bound',
      instanceUuid: instance,
      bindClaim: null,
    });
  });

  it('a bind of other ARQs to an instance another bind has claimed is a hot add, before that bind commits', async () => {
    // A third device of provider RP: this test binds three ARQs.
    await useCases.upsertInventory(H1, {
      kind: 'snapshot',
      revision: 2,
      devices: [facts({ index: 0 }), facts({ index: 1 }), facts({ index: 2 })],
    });
    devices = (await useCases.listDevices({})).devices.map((d) => d.uuid);
    const [first, second] = [await newArq(), await newArq()];
    const instance = newUuid();
    // Scheduler A claimed `first` for the instance; its bind has not committed (the ARQ names no instance yet).
    await useCases.claimBinds({
      bindings: [{ arqUuid: first, instanceUuid: instance }],
      judge: { self: 'A', alone: false },
      ttlMs: 60_000,
      viewer: PROJECT,
    });
    expect(await useCases.getArq(first)).toMatchObject({ state: 'initial', instanceUuid: null });
    const hot = await refusal(replica('B').bind(PROJECT, [patch(second, instance)]));
    expect(hot).toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect(hot?.message).toBe(
      `instance_uuid: Instance ${instance} already has accelerator requests (${first}). Cannot bind additional ARQs.`,
    );
    // Another project's caller is not told the uuid.
    const theirs = await newArq('p2');
    const hidden = await refusal(
      replica('B').bind({ project: 'p2', admin: false }, [patch(theirs, instance)]),
    );
    expect(hidden?.message).toBe(
      `instance_uuid: Instance ${instance} already has accelerator requests. Cannot bind additional ARQs.`,
    );
    expect((await useCases.getArq(second)).bindClaim ?? null).toBeNull();
    // Both of the instance's ARQs in one PATCH are one bind, not a hot add (once A's claim is gone).
    await useCases.releaseBindClaims([first], 'A');
    const both = replica('B');
    await both.bind(PROJECT, [patch(first, instance), patch(second, instance)]);
    await both.settled();
    expect((await useCases.listArqs(instance)).map((a) => a.state)).toEqual(['bound', 'bound']);
    // A claim that expired (its holder died) does not make a hot add.
    const later = await newArq();
    const other = newUuid();
    await useCases.claimBinds({
      bindings: [{ arqUuid: later, instanceUuid: other }],
      judge: { self: 'dead', alone: false },
      ttlMs: 1,
      viewer: PROJECT,
    });
    await pastInDatabase((await useCases.getArq(later)).bindClaim!.expires);
    const third = await newArq();
    await both.bind(PROJECT, [patch(third, other)]);
    await both.settled();
    expect((await useCases.getArq(third)).state).toBe('bound');
  });

  it('BindAcceleratorRequests (gRPC) of an ARQ whose Cyborg bind runs is refused ARQ_BIND_RUNNING, and leaves the ARQ as it was', async () => {
    const arq = await newArq();
    const instance = newUuid();
    agents.hold();
    const cyborg = replica('A');
    await cyborg.bind(PROJECT, [patch(arq, instance)]);
    // As arq-service.ts builds it: the same instance (a retry would pass) and another.
    for (const to of [instance, newUuid()]) {
      const e = await refusal(
        binding.bind([{ arqUuid: arq, instanceUuid: instanceIdOf(to), host: H1 }], 'svc'),
      );
      expect(e).toEqual({
        code: 'FAILED_PRECONDITION',
        reason: 'ARQ_BIND_RUNNING',
        message: `${arq}: a bind of ARQ ${arq} is running`,
      });
    }
    // Not recorded as a failure on the ARQ: the Cyborg bind goes on, and is the one bind.
    expect((await useCases.getArq(arq)).state).not.toBe('bind_failed');
    agents.let();
    await cyborg.settled();
    expect(await useCases.getArq(arq)).toMatchObject({
      state: 'bound',
      instanceUuid: instance,
      bindClaim: null,
    });
    expect(agents.recorded).toEqual([arq]);
    // Once it ended, gRPC's retry of the same binding is one (the claim is gone).
    const again = await binding.bind(
      [{ arqUuid: arq, instanceUuid: instanceIdOf(instance), host: H1 }],
      'svc',
    );
    expect(again.map((a) => a.uuid)).toEqual([arq]);
  });
});
