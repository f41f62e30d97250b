/**
 * Invariant 9: the agent's journal is a second, independent record of which
 * devices hold tenant data. The scheduler tells the agent of every bind before
 * it acknowledges it (RecordBinding); a judged cleanup clears the record; the
 * agent reports what it holds at every registration. Losing the scheduler's
 * database — all of it, or the last commits (a restored copy, a lost WAL) —
 * never hands out a device that still holds the previous tenant's data. The
 * media is read from outside Berth to check.
 */
import { copyFile, rm } from 'node:fs/promises';
import { credentials } from '@grpc/grpc-js';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AgentServiceClient } from '../../src/gen/berth/agent/v1/agent.js';
import { CleanupOutcome, DeviceState } from '../../src/gen/berth/scheduler/v1/device.js';
import { parseAgentConfig } from '../../src/server/agent/config.js';
import { demoHostDefinition } from '../../src/sim/host.js';
import {
  plantTenantData,
  readableTenantData,
  spreadTenantWrites,
  withStateLock,
} from '../../src/sim/nvme-cli/index.js';
import { decodeServiceError } from '../../src/transport/status.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import {
  createAndBind,
  createNvmeProfile,
  getDevice,
  type NvmeName,
  settledDevice,
  stateName,
} from '../helpers/invariants.js';
import { eventually } from '../helpers/wait.js';
import { prng } from '../soak/cleanup-kill-driver.support.js';

const HOST = 'record-host';
const DB_FILES = ['', '-wal', '-shm'];

describe("the agent's record of devices that hold tenant data", () => {
  let c: Cluster;
  const sim = () => c.host(HOST).sim;
  const addressOf = (ctrl: NvmeName) => sim().definition.nvme.find((n) => n.controller === ctrl)!.address;
  const agent = () => c.host(HOST).agent!;
  const held = () => agent().cleanups.heldDevices();
  const tenantDataOn = (ctrl: NvmeName) => readableTenantData(sim().nvmeStatePath, ctrl);

  beforeEach(async () => {
    c = await startCluster([demoHostDefinition(HOST)]);
    await c.waitForDevices(HOST, 9);
  }, 60_000);
  afterEach(async () => {
    await c?.stop();
  });

  /** Binds `ctrl` to `instance` and writes the tenant's data onto it. */
  async function useDevice(ctrl: NvmeName, instance: string) {
    const profile = await createNvmeProfile(c.client, ctrl);
    const arq = await createAndBind(c.client, profile, instance, HOST);
    expect(arq.deviceAddress).toBe(addressOf(ctrl));
    expect(await plantTenantData(sim().nvmeStatePath, ctrl, spreadTenantWrites(1))).not.toEqual([]);
    expect(await tenantDataOn(ctrl)).not.toEqual([]);
    return arq;
  }

  /** The scheduler's database as it is now, to be restored later (the last commits lost). */
  async function snapshotDatabase(): Promise<() => Promise<void>> {
    await c.restartScheduler(); // a clean stop checkpoints the WAL into the main file
    for (const f of DB_FILES) await copyFile(`${c.dbPath}${f}`, `${c.dbPath}${f}.saved`).catch(() => {});
    return async () => {
      for (const f of DB_FILES) {
        await rm(`${c.dbPath}${f}`, { force: true });
        await copyFile(`${c.dbPath}${f}.saved`, `${c.dbPath}${f}`).catch(() => {});
      }
    };
  }

  it('records every bind of a device that is cleaned before it is acknowledged; a judged cleanup clears it', async () => {
    const arq = await useDevice('nvme0', 'vm-recorded');
    expect(held()).toEqual([
      expect.objectContaining({
        address: addressOf('nvme0'),
        arqUuid: arq.uuid,
        instanceUuid: 'vm-recorded',
      }),
    ]);
    // The agent refuses the device to any other binding while it holds the tenant's data.
    const raw = new AgentServiceClient(agent().address, credentials.createInsecure());
    try {
      const err = await new Promise<Error | null>((resolve) =>
        raw.recordBinding(
          { address: addressOf('nvme0'), arqUuid: 'another-arq', instanceUuid: 'vm-other', projectId: '' },
          (e) => resolve(e),
        ),
      );
      const decoded = decodeServiceError(err as never);
      expect([decoded.codeName, decoded.reason]).toEqual(['FAILED_PRECONDITION', 'DEVICE_HOLDS_TENANT_DATA']);
      expect(decoded.message).toContain(arq.uuid);
      // A project the journal could not keep as it is, refused naming the field.
      const bad = await new Promise<Error | null>((resolve) =>
        raw.recordBinding(
          { address: addressOf('nvme0'), arqUuid: arq.uuid, instanceUuid: 'vm-recorded', projectId: 'a b' },
          (e) => resolve(e),
        ),
      );
      const refused = decodeServiceError(bad as never);
      expect(refused.codeName).toBe('INVALID_ARGUMENT');
      expect(refused.message).toContain('project_id');
    } finally {
      raw.close();
    }
    await c.client.arqs.deleteAcceleratorRequests({ uuids: [arq.uuid], instanceUuid: '' });
    const d = await settledDevice(c.client, HOST, addressOf('nvme0'));
    expect(d.deviceState).toBe(DeviceState.DEVICE_STATE_AVAILABLE);
    expect(held()).toEqual([]);
    expect(await tenantDataOn('nvme0')).toEqual([]);
  }, 60_000);

  it("a whole database lost: the agent's inventory carries its record of the dirty media, which is cleaned before it is offered", async () => {
    await useDevice('nvme2', 'vm-first-tenant');
    // The scheduler's database is lost; the agent restarts too, and then stays quiet (no
    // heartbeat for an hour): what it holds reaches the new database only with its inventory.
    await c.host(HOST).stop();
    await c.scheduler.stop();
    for (const f of DB_FILES) await rm(`${c.dbPath}${f}`, { force: true });
    await c.restartScheduler();
    const h = c.host(HOST);
    await h.start({
      config: parseAgentConfig(
        {
          ...h.sim.agentConfig,
          scheduler: c.scheduler.address,
          register_interval: 3600,
          discovery_interval: 3600,
        },
        {},
        c.root,
      ),
    });
    await c.waitForDevices(HOST, 9);
    // The new database knows nothing of the bind, but each device of the inventory carries the
    // journal's record of its media (held for the first tenant): the same unit that stores the
    // device queues its cleanup, so it is never offered as clean. (Before decision 42 the window
    // stayed open until the next registration, and the agent's refusal of the bind closed it.)
    const seen = await getDevice(c.client, HOST, addressOf('nvme2'));
    expect(['DEVICE_STATE_PENDING_CLEANING', 'DEVICE_STATE_CLEANING']).toContain(stateName(seen.deviceState));
    // Nothing is bound; the device is cleaned (with proof) before anyone gets it.
    const d = await settledDevice(c.client, HOST, addressOf('nvme2'));
    expect(d.deviceState).toBe(DeviceState.DEVICE_STATE_AVAILABLE);
    expect(d.lastCleanup?.outcome).toBe(CleanupOutcome.CLEANUP_OUTCOME_SUCCEEDED);
    expect(d.lastCleanup?.proof?.method).toBeTruthy();
    expect(await tenantDataOn('nvme2')).toEqual([]);
    expect(held()).toEqual([]);
    // And now it is offered.
    const profile = await createNvmeProfile(c.client, 'nvme2');
    const next = await createAndBind(c.client, profile, 'vm-next-tenant', HOST);
    expect(next.deviceAddress).toBe(addressOf('nvme2'));
  }, 90_000);

  it('the last commits lost (an older copy of the database): the agent reports the device at registration and it is cleaned', async () => {
    const restore = await snapshotDatabase();
    await useDevice('nvme1', 'vm-lost-commit');
    await c.scheduler.stop();
    await restore();
    await c.restartScheduler();
    // The restored database says available; the agent's next heartbeat says otherwise.
    const d = await eventually(
      () => getDevice(c.client, HOST, addressOf('nvme1')),
      (x) => x.lastCleanup?.outcome === CleanupOutcome.CLEANUP_OUTCOME_SUCCEEDED,
      60_000,
    );
    expect(d.deviceState).toBe(DeviceState.DEVICE_STATE_AVAILABLE);
    expect(d.lastCleanup?.proof?.method).toBeTruthy();
    expect(await tenantDataOn('nvme1')).toEqual([]);
    expect(held()).toEqual([]);
  }, 90_000);

  it('an older copy restored while the agent still cleans a device: the new job follows that cleanup to its outcome', async () => {
    const restore = await snapshotDatabase();
    // A slow sanitize, so the agent is still cleaning when the restored scheduler asks again.
    await withStateLock(sim().nvmeStatePath, (state) => {
      state.controllers.find((x) => x.name === 'nvme0')!.sanitize.durationMs = 8_000;
      return { changed: true, result: undefined };
    });
    const arq = await useDevice('nvme0', 'vm-cleaning');
    await c.client.arqs.deleteAcceleratorRequests({ uuids: [arq.uuid], instanceUuid: '' });
    await eventually(
      () => getDevice(c.client, HOST, addressOf('nvme0')),
      (d) => d.deviceState === DeviceState.DEVICE_STATE_CLEANING,
      20_000,
    );
    await c.scheduler.stop();
    await restore();
    await c.restartScheduler();
    // The restored database knows neither the bind nor the job; the agent's record brings the
    // device back to cleaning, and the agent answers with the cleanup it is already running.
    const d = await eventually(
      () => getDevice(c.client, HOST, addressOf('nvme0')),
      (x) =>
        x.lastCleanup !== undefined &&
        x.deviceState !== DeviceState.DEVICE_STATE_CLEANING &&
        x.deviceState !== DeviceState.DEVICE_STATE_PENDING_CLEANING,
      60_000,
    );
    expect(stateName(d.deviceState), d.errorReason).toBe('DEVICE_STATE_AVAILABLE');
    expect(d.lastCleanup?.outcome).toBe(CleanupOutcome.CLEANUP_OUTCOME_SUCCEEDED);
    expect(await tenantDataOn('nvme0')).toEqual([]);
    expect(held()).toEqual([]);
  }, 90_000);

  it('seeded: the database lost (all of it, or its last commits) at a random point; no next tenant gets a device holding data', async () => {
    const seed = Number(process.env.SOAK_SEED) || Math.floor(Math.random() * 2 ** 31);
    console.log(`dirty-record soak: seed ${seed} (replay with SOAK_SEED=${seed})`);
    const rand = prng(seed);
    const why = (what: string) => `${what} (seed ${seed})`;
    const ctrls: NvmeName[] = ['nvme0', 'nvme1', 'nvme2', 'nvme3'];
    const profiles = async () => {
      for (const ctrl of ctrls) {
        await createNvmeProfile(c.client, ctrl).catch((e: { codeName?: string }) => {
          if (e.codeName !== 'ALREADY_EXISTS') throw e;
        });
      }
    };
    await profiles();
    const bound = new Map<NvmeName, string>();
    const rounds = 4;
    const wholeLoss = rand.chance(0.5);
    const copyAt = rand.int(rounds);
    const copy = `${c.dbPath}.online-copy`;
    let tenant = 0;
    for (let r = 0; r < rounds; r++) {
      if (!wholeLoss && r === copyAt) {
        // A consistent copy taken while the scheduler serves (a backup, or what survives a lost WAL).
        const db = new Database(c.dbPath, { readonly: true });
        try {
          await db.backup(copy);
        } finally {
          db.close();
        }
      }
      for (const ctrl of ctrls) {
        const arq = bound.get(ctrl);
        if (arq && rand.chance(0.5)) {
          await c.client.arqs.deleteAcceleratorRequests({ uuids: [arq], instanceUuid: '' });
          bound.delete(ctrl);
        } else if (
          !arq &&
          rand.chance(0.7) &&
          (await getDevice(c.client, HOST, addressOf(ctrl))).deviceState ===
            DeviceState.DEVICE_STATE_AVAILABLE
        ) {
          bound.set(ctrl, (await useDevice(ctrl, `vm-${++tenant}`)).uuid);
        }
      }
    }
    // The loss, with the agent still up (its journal intact).
    await c.scheduler.stop();
    for (const f of DB_FILES) await rm(`${c.dbPath}${f}`, { force: true });
    if (!wholeLoss) await copyFile(copy, c.dbPath);
    await c.restartScheduler();
    await c.waitForDevices(HOST, 9);
    await profiles();
    // At once, before or after the agent's next heartbeat: whatever a next tenant is given holds no data.
    for (const ctrl of ctrls) {
      const next = await createAndBind(c.client, `pick-${ctrl}`, `vm-next-${ctrl}`, HOST).catch(
        (e: { codeName?: string; reason?: string }) => e,
      );
      if ('uuid' in next) {
        expect(await tenantDataOn(ctrl), why(`${ctrl} handed to a next tenant`)).toEqual([]);
      } else {
        expect(['FAILED_PRECONDITION', 'UNAVAILABLE'], why(`${ctrl}: ${JSON.stringify(next)}`)).toContain(
          next.codeName,
        );
      }
    }
    // Everything released and settled: every device offered as available is clean on the media.
    await c.client.arqs.deleteAcceleratorRequests({
      uuids: (await c.client.arqs.listAcceleratorRequests({ instanceUuid: '' })).acceleratorRequests.map(
        (a) => a.uuid,
      ),
      instanceUuid: '',
    });
    await eventually(
      async () => held(),
      (h) => h.length === 0,
      60_000,
    );
    for (const ctrl of ctrls) {
      const d = await settledDevice(c.client, HOST, addressOf(ctrl));
      expect(stateName(d.deviceState), why(`${ctrl}: ${d.errorReason}`)).toBe('DEVICE_STATE_AVAILABLE');
      expect(await tenantDataOn(ctrl), why(`${ctrl} offered as available`)).toEqual([]);
    }
  }, 120_000);
});
