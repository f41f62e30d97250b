import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { facts, hostName, hostRegistration, instanceId } from '../domain/fixtures.support.js';
import { validateProfile } from '../domain/profile.js';
import { AgentDirectory } from '../runtime/agent-directory.js';
import { RemoteAgent } from '../runtime/agent-link.js';
import type { AgentLinks } from '../runtime/agent-links.js';
import { rejection } from '../store/store-contract.support.js';
import { storageOutage, UnitWatch } from '../store/unit-watch.support.js';
import { type UseCases, useCasesOver } from '../usecases/use-cases.js';
import { BINDING_FEATURE } from './agent-port.js';
import { Binding } from './binding.js';

const H1 = hostName('h1');

describe('a bind judges its gate in its unit without effects, and each of its use cases is one unit', () => {
  let dir: string;
  let db: UnitWatch;
  let useCases: UseCases;
  let agents: AgentDirectory;
  let binding: Binding;
  /**
   * What the agent directory did, and whether a unit was running then. `view`
   * is the pure judge's look (allowed in a unit); the others act or read.
   */
  let effects: { what: string; inUnit: boolean }[];
  /** What happened inside a unit other than the pure look at the links and the record. */
  const effectsInUnit = () => effects.filter((e) => e.inUnit && e.what !== 'view');

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'berth-binding-'));
    db = new UnitWatch(join(dir, 's.db'));
    useCases = useCasesOver(db);
    effects = [];
    const seen = (what: string) => effects.push({ what, inUnit: db.inUnit });
    // No agent is followed here: h1's is another scheduler's, as on a shared database.
    const links = { get: () => undefined, has: () => false } as unknown as AgentLinks;
    agents = new AgentDirectory(links, useCases, () => {
      seen('create');
      return {};
    });
    for (const method of ['observe', 'refresh', 'get', 'view'] as const) {
      const original = agents[method].bind(agents) as (...args: unknown[]) => unknown;
      vi.spyOn(agents, method).mockImplementation(((...args: unknown[]) => {
        seen(method);
        return original(...args);
      }) as never);
    }
    vi.spyOn(RemoteAgent.prototype, 'close').mockImplementation(() => void seen('close'));
    // RecordBinding answers: this test is about what happens around the units, not on the wire.
    vi.spyOn(RemoteAgent.prototype, 'recordBinding').mockImplementation(
      async () => void seen('recordBinding'),
    );
    binding = new Binding({
      useCases,
      agents,
      judge: { self: 'grpc', alone: false },
      logger: pino({ level: 'silent' }),
    });

    await useCases.registerHost({ ...hostRegistration('h1'), features: ['cleanup.v1', BINDING_FEATURE] });
    await useCases.setHostConnected(H1, true);
    await useCases.upsertInventory(H1, { kind: 'snapshot', revision: 1, devices: [facts({ index: 0 })] });
    await useCases.createProfile(
      validateProfile({ name: 'nvme', groups: [{ resourceClass: 'CUSTOM_NVME_144D_A808' }] }),
    );
  });
  afterEach(async () => {
    vi.restoreAllMocks();
    agents.close();
    await useCases.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('the bind unit, run twice by the backend, judges the host it locked and has no effect on the agent directory', async () => {
    const [arq] = await useCases.createArqs({ profileName: 'nvme' });
    const before = { ...db.writes };
    effects.length = 0;
    const [bound] = await binding.bind([{ arqUuid: arq!.uuid, instanceUuid: instanceId('i1'), host: H1 }]);
    expect(bound!.state).toBe('bound');
    // The backend ran the bind's unit (a cleaned device: the gate was consulted) twice.
    expect(db.writes.units - before.units).toBe(1);
    expect(db.writes.attempts - before.attempts).toBe(2);
    // Each attempt judged the gate inside the unit, by the pure look only.
    expect(effects.filter((e) => e.what === 'view')).toEqual([
      { what: 'view', inUnit: true },
      { what: 'view', inUnit: true },
    ]);
    expect(effectsInUnit()).toEqual([]);
    // After it: no read of the host (the unit's row is used), one client made, never closed, and it recorded the binding.
    expect(effects.filter((e) => e.what !== 'view')).toEqual([
      { what: 'observe', inUnit: false },
      { what: 'create', inUnit: false },
      { what: 'recordBinding', inUnit: false },
    ]);
  });

  it('a host the gate refuses: UNAVAILABLE before anything is allocated, nothing done inside a unit', async () => {
    await useCases.setHostConnected(H1, false);
    const [arq] = await useCases.createArqs({ profileName: 'nvme' });
    effects.length = 0;
    const e = await rejection(
      binding.bind([{ arqUuid: arq!.uuid, instanceUuid: instanceId('i1'), host: H1 }]),
    );
    expect([e.code, e.reason]).toEqual(['UNAVAILABLE', 'AGENT_UNAVAILABLE']);
    expect(e.message).toMatch(/agent of host h1 is not connected/);
    expect(effects.some((x) => x.what === 'view' && x.inUnit)).toBe(true);
    expect(effectsInUnit()).toEqual([]);
    expect(effects.filter((x) => x.what === 'create')).toEqual([]);
    expect((await useCases.getArq(arq!.uuid)).state).toBe('initial');
    expect((await useCases.listDevices({ host: H1 })).devices[0]!.deviceState).toBe('available');
  });

  it('a host whose agent no one vouches for (not followed here, database not shared) is refused, never let through', async () => {
    // The record says connected, but without leases only this scheduler's links speak for an agent.
    const alone = new AgentDirectory(
      { get: () => undefined, has: () => false } as unknown as AgentLinks,
      { ...useCases, leases: undefined },
      () => {
        effects.push({ what: 'create', inUnit: db.inUnit });
        return {};
      },
    );
    const solo = new Binding({
      useCases,
      agents: alone,
      judge: { self: 'grpc', alone: true },
      logger: pino({ level: 'silent' }),
    });
    const [arq] = await useCases.createArqs({ profileName: 'nvme' });
    const e = await rejection(solo.bind([{ arqUuid: arq!.uuid, instanceUuid: instanceId('i1'), host: H1 }]));
    expect([e.code, e.reason]).toEqual(['UNAVAILABLE', 'AGENT_UNAVAILABLE']);
    expect((await useCases.listDevices({ host: H1 })).devices[0]!.deviceState).toBe('available');
    expect(effects.filter((x) => x.what === 'create')).toEqual([]);
    alone.close();
  });

  it("the instance's owner is the bind's own unit: a failed bind leaves no owner and no device, a bind leaves it in its commit", async () => {
    const [arq] = await useCases.createArqs({ profileName: 'nvme' });
    const b = { arqUuid: arq!.uuid, instanceUuid: instanceId('i1'), host: H1 };
    // Refused by the gate (agent away): nothing allocated, and no principal owns the instance.
    await useCases.setHostConnected(H1, false);
    let units = db.writes.units;
    const e = await rejection(binding.bind([b], 'svc-squatter'));
    expect(e.reason).toBe('AGENT_UNAVAILABLE');
    expect(db.writes.units - units).toBe(1);
    expect(await useCases.instanceOwner(b.instanceUuid)).toBeNull();
    expect((await useCases.listDevices({ host: H1 })).devices[0]!.deviceState).toBe('available');
    expect(await useCases.listCertificates({ instanceUuid: b.instanceUuid })).toEqual([]);
    // Another principal binds it: one unit, which holds the device and records its owner.
    await useCases.setHostConnected(H1, true);
    units = db.writes.units;
    const [bound] = await binding.bind([b], 'svc-tenant');
    expect(bound!.state).toBe('bound');
    expect(db.writes.units - units).toBe(1);
    expect(await useCases.instanceOwner(b.instanceUuid)).toBe('svc-tenant');
    // The first principal stays the owner: a retried bind by another changes nothing.
    await binding.bind([b], 'svc-other');
    expect(await useCases.instanceOwner(b.instanceUuid)).toBe('svc-tenant');
    // Kept after the ARQs are gone (the certificates of the instance's cleanups are read later).
    await useCases.deleteArqs({ uuids: [arq!.uuid] });
    expect(await useCases.instanceOwner(b.instanceUuid)).toBe('svc-tenant');
  });

  it('a database that does not answer fails the bind with its own error, not as an unknown host', async () => {
    const [arq] = await useCases.createArqs({ profileName: 'nvme' });
    effects.length = 0;
    db.failWrites = storageOutage(db.path);
    const e = await rejection(
      binding.bind([{ arqUuid: arq!.uuid, instanceUuid: instanceId('i1'), host: H1 }]),
    );
    db.failWrites = null;
    expect([e.code, e.reason]).toEqual(['UNAVAILABLE', 'STORE_IO_ERROR']);
    expect(effects.filter((x) => x.what === 'create' || x.what === 'close')).toEqual([]);
    expect((await useCases.getArq(arq!.uuid)).state).toBe('initial');
  });

  it('a retried bind (its unit locked no host) reads the host for RecordBinding, outside any unit', async () => {
    const [arq] = await useCases.createArqs({ profileName: 'nvme' });
    const b = { arqUuid: arq!.uuid, instanceUuid: instanceId('i1'), host: H1 };
    await binding.bind([b]);
    agents.close();
    effects.length = 0;
    const [again] = await binding.bind([b]);
    expect(again!.state).toBe('bound');
    expect(effectsInUnit()).toEqual([]);
    expect(effects.filter((x) => x.what !== 'view' && x.what !== 'get')).toEqual([
      { what: 'refresh', inUnit: false },
      { what: 'observe', inUnit: false },
      { what: 'create', inUnit: false },
      { what: 'recordBinding', inUnit: false },
    ]);
  });

  it('a failed bind is one unit; the workflow records the failure in a unit of its own (Nova told)', async () => {
    const [a, b] = [
      (await useCases.createArqs({ profileName: 'nvme' }))[0]!,
      (await useCases.createArqs({ profileName: 'nvme' }))[0]!,
    ];
    await binding.bind([{ arqUuid: a.uuid, instanceUuid: instanceId('i1'), host: H1 }]);
    // The use case alone: one unit, and the ARQ left as it was.
    const units = db.writes.units;
    const alone = await rejection(
      useCases.bindArqs([{ arqUuid: b.uuid, instanceUuid: instanceId('i2'), host: H1 }]),
    );
    expect(alone.reason).toBe('NO_ALLOCATABLE_DEVICE');
    expect(db.writes.units - units).toBe(1);
    expect((await useCases.getArq(b.uuid)).state).toBe('initial');
    // The workflow: the bind's unit, then the failure's.
    const failed = await rejection(
      binding.bind([
        {
          arqUuid: b.uuid,
          instanceUuid: instanceId('i2'),
          host: H1,
          notifyNova: { holder: 's1', holdMs: 60_000 },
        },
      ]),
    );
    expect(failed.reason).toBe('NO_ALLOCATABLE_DEVICE');
    expect(db.writes.units - units).toBe(3);
    expect(await useCases.getArq(b.uuid)).toMatchObject({
      state: 'bind_failed',
      error: failed.message,
      novaEvent: { instanceUuid: instanceId('i2'), status: 'failed' },
    });
    expect(effectsInUnit()).toEqual([]);
  });
});
