/**
 * `berth scheduler serve --db postgres://…` through the real servers
 * (docs/decisions.md 36, 37): a scheduler on PostgreSQL follows a simulated host, binds, releases and
 * has the NVMe controller cleaned with its proof, and keeps it all across a
 * restart; two and three schedulers on one database answer binds racing for
 * the same devices without ever binding one twice, and a watch on one sees a
 * release made through another. Link leases and kill -9 of a replica:
 * scheduler-replicas.test.ts.
 */
import { createHash } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SchedulerClient } from '../../src/client/sdk.js';
import { CleanupOutcome } from '../../src/gen/berth/scheduler/v1/device.js';
import { Scheduler } from '../../src/server/scheduler/scheduler.js';
import { demoHostDefinition } from '../../src/sim/host.js';
import { plantTenantData, readableTenantData, spreadTenantWrites } from '../../src/sim/nvme-cli/index.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import {
  createAndBind,
  createClassProfile,
  createNvmeProfile,
  listChecked,
  settledDevice,
  stateName,
  VF_CLASS,
  vfHostDefinition,
} from '../helpers/invariants.js';
import { type PostgresServer, startPostgres } from '../helpers/postgres.js';
import { available, postgresServer } from '../helpers/prerequisites.js';
import { eventually } from '../helpers/wait.js';

const usable = available(postgresServer(), 'the scheduler on PostgreSQL');

describe.skipIf(!usable)('the scheduler on PostgreSQL', () => {
  let server: PostgresServer;
  const database = (name: string) =>
    server.createDatabase(`berth_${createHash('sha256').update(name).digest('hex').slice(0, 12)}`);

  beforeAll(async () => {
    server = await startPostgres();
  }, 120_000);
  afterAll(async () => {
    await server?.stop();
  });

  describe('one scheduler', () => {
    let c: Cluster;
    const HOST = 'pg-host';
    beforeAll(async () => {
      c = await startCluster([demoHostDefinition(HOST)], { scheduler: { db: await database('one') } });
      await c.waitForDevices(HOST, 9);
    }, 60_000);
    afterAll(async () => {
      await c?.stop();
    });

    it('binds, cleans a released NVMe controller with its proof, and keeps it all across a restart', async () => {
      const profile = await createNvmeProfile(c.client, 'nvme0');
      const arq = await createAndBind(c.client, profile, 'vm-pg', HOST);
      const sim = c.host(HOST).sim;
      expect(await plantTenantData(sim.nvmeStatePath, 'nvme0', spreadTenantWrites(1))).not.toEqual([]);
      await c.client.arqs.deleteAcceleratorRequests({ uuids: [arq.uuid], instanceUuid: '' });
      const d = await settledDevice(c.client, HOST, arq.deviceAddress);
      expect(stateName(d.deviceState), d.errorReason).toBe('DEVICE_STATE_AVAILABLE');
      expect(d.lastCleanup?.outcome).toBe(CleanupOutcome.CLEANUP_OUTCOME_SUCCEEDED);
      expect(d.lastCleanup?.proof?.method).toBeTruthy();
      expect(await readableTenantData(sim.nvmeStatePath, 'nvme0')).toEqual([]);
      const before = await listChecked(c.client, HOST);
      await c.restartScheduler();
      await c.waitForDevices(HOST, 9);
      const after = await listChecked(c.client, HOST);
      expect(after.map((x) => [x.uuid, x.deviceState, x.lastCleanup?.jobId])).toEqual(
        before.map((x) => [x.uuid, x.deviceState, x.lastCleanup?.jobId]),
      );
      expect((await c.client.profiles.getProfile({ name: profile })).profile?.name).toBe(profile);
    }, 90_000);
  });

  describe('two and three schedulers on one database', () => {
    let c: Cluster;
    let second: Scheduler;
    let third: Scheduler;
    let secondClient: SchedulerClient;
    let thirdClient: SchedulerClient;
    const HOST = 'pg-vf-host';
    beforeAll(async () => {
      const url = await database('two');
      c = await startCluster([vfHostDefinition(HOST, 10)], { scheduler: { db: url } });
      await c.waitForDevices(HOST, 10);
      second = await Scheduler.start({ db: url, listen: '127.0.0.1:0', auth: { mode: 'none' } });
      third = await Scheduler.start({ db: url, listen: '127.0.0.1:0', auth: { mode: 'none' } });
      secondClient = new SchedulerClient({ endpoint: second.address, timeoutMs: 30_000 });
      thirdClient = new SchedulerClient({ endpoint: third.address, timeoutMs: 30_000 });
      await createClassProfile(c.client, 'vf', VF_CLASS);
    }, 60_000);
    afterAll(async () => {
      secondClient?.close();
      thirdClient?.close();
      await second?.stop();
      await third?.stop();
      await c?.stop();
    });

    for (const replicas of [2, 3]) {
      it(`64 binds spread over ${replicas} race for 10 devices: exactly 10 bound, none twice`, async () => {
        const clients = [c.client, secondClient, thirdClient].slice(0, replicas);
        // Every scheduler sees the same profiles; the devices start free (a VF needs no cleanup).
        for (const cl of clients)
          expect((await cl.profiles.getProfile({ name: 'vf' })).profile?.name).toBe('vf');
        const held = (await c.client.arqs.listAcceleratorRequests({ instanceUuid: '' })).acceleratorRequests;
        if (held.length > 0) {
          await c.client.arqs.deleteAcceleratorRequests({ uuids: held.map((a) => a.uuid), instanceUuid: '' });
        }
        const results = await Promise.allSettled(
          Array.from({ length: 64 }, (_, i) =>
            createAndBind(clients[i % replicas]!, 'vf', `race-${replicas}-${i}`, HOST),
          ),
        );
        const won = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
        const lost = results.flatMap((r) =>
          r.status === 'rejected' ? [r.reason as { codeName?: string }] : [],
        );
        expect(won).toHaveLength(10);
        expect(new Set(won.map((a) => a.deviceUuid)).size).toBe(10);
        expect(lost.every((e) => e.codeName === 'FAILED_PRECONDITION')).toBe(true);
        const devices = await listChecked(clients[replicas - 1]!, HOST);
        expect(devices.filter((d) => d.arqUuid !== '')).toHaveLength(10);
        expect(new Set(devices.map((d) => d.arqUuid).filter((u) => u !== '')).size).toBe(10);
      }, 90_000);
    }

    it('a watch on one scheduler sees a release made through the other', async () => {
      // One of the race's bindings, or a new one when this test runs alone.
      const bound =
        (await c.client.arqs.listAcceleratorRequests({ instanceUuid: '' })).acceleratorRequests.find(
          (a) => a.deviceUuid !== '',
        ) ?? (await createAndBind(c.client, 'vf', 'watched-vm', HOST));
      const watch = secondClient.watchDevices({ filter: undefined, fromRevision: 0 });
      // The initial state, up to `synced` (next(), not for-await: breaking out would end the stream).
      for (let m = await watch.next(); !m.done && !m.value.synced; m = await watch.next()) {}
      const released = (async () => {
        for (let m = await watch.next(); !m.done; m = await watch.next()) {
          if (m.value.device?.uuid === bound.deviceUuid && m.value.device.arqUuid === '')
            return m.value.device;
        }
        return null;
      })();
      // Released through the first scheduler. The second one has no writer of its own:
      // only PostgreSQL's notification can wake its watch before its 30 s safety poll.
      await c.client.arqs.deleteAcceleratorRequests({ uuids: [bound.uuid], instanceUuid: '' });
      const seen = await Promise.race([
        released,
        new Promise<'late'>((r) => setTimeout(() => r('late'), 10_000)),
      ]);
      await watch.return(undefined);
      expect(seen).not.toBe('late');
      expect(seen).toMatchObject({ uuid: bound.deviceUuid, arqUuid: '' });
    }, 60_000);
  });

  describe('a scheduler that stalls past its lease', () => {
    let c: Cluster;
    let other: Scheduler;
    let url: string;
    const HOST = 'pg-stall-host';
    const leaseTiming = { intervalMs: 200, ttlMs: 1_500 };
    beforeAll(async () => {
      url = await database('stall');
      c = await startCluster([vfHostDefinition(HOST, 4)], {
        scheduler: { db: url, linkLeases: leaseTiming },
      });
      await c.waitForDevices(HOST, 4);
      other = await Scheduler.start({
        db: url,
        listen: '127.0.0.1:0',
        auth: { mode: 'none' },
        linkLeases: leaseTiming,
      });
    }, 60_000);
    afterAll(async () => {
      await other?.stop();
      await c?.stop();
    });

    it('finds at its next look that another took the host and closes its link; the host is followed again', async () => {
      expect(c.scheduler.links.has(HOST)).toBe(true);
      // As if it stalled past its lease (a long GC pause, a frozen VM) and the
      // other scheduler took the host meanwhile, holding it for 2 s.
      const db = new pg.Client({ connectionString: url });
      await db.connect();
      try {
        await db.query(
          "UPDATE link_leases SET owner = $2, expires_at = now() + interval '2 seconds' WHERE host = $1",
          [HOST, other.id],
        );
      } finally {
        await db.end();
      }
      // Its next renewal does not return the host: the link is closed, the host's state left alone.
      await eventually(
        () => c.scheduler.links.has(HOST),
        (has) => !has,
        10_000,
      );
      // The taker held it without following it; once that lease runs out one of the two adopts it.
      const host = await eventually(
        () => c.client.hosts.getHost({ name: HOST }),
        (r) =>
          r.host?.connected === true &&
          [c.scheduler.id, other.id].includes(r.host.followedBy) &&
          (c.scheduler.links.has(HOST) || other.links.has(HOST)),
        15_000,
      );
      expect(host.host?.deviceCount).toBe(4);
    }, 60_000);
  });

  describe('an agent given both schedulers of one database', () => {
    let c: Cluster;
    let standby: Scheduler;
    let standbyClient: SchedulerClient;
    const HOST = 'pg-failover-host';
    beforeAll(async () => {
      const url = await database('failover');
      standby = await Scheduler.start({
        db: url,
        listen: '127.0.0.1:0',
        heartbeatSeconds: 1,
        auth: { mode: 'none' },
      });
      standbyClient = new SchedulerClient({ endpoint: standby.address, timeoutMs: 15_000 });
      c = await startCluster([demoHostDefinition(HOST)], {
        scheduler: { db: url },
        // The cluster's scheduler first, the standby second.
        agentConfig: (raw) => ({ ...raw, scheduler: [raw.scheduler, standby.address] }),
      });
      await c.waitForDevices(HOST, 9);
    }, 60_000);
    afterAll(async () => {
      standbyClient?.close();
      await standby?.stop();
      await c?.stop();
    });

    it('registers with the first; when it dies, with the other, which then cleans a released device', async () => {
      expect(c.host(HOST).agent!.config.schedulers).toEqual([c.scheduler.address, standby.address]);
      await c.scheduler.stop();
      // The agent's next heartbeats fail and it moves to the standby, which follows it.
      await eventually(
        () => standbyClient.hosts.getHost({ name: HOST }),
        (r) => r.host?.connected === true,
        30_000,
      );
      const profile = await createNvmeProfile(standbyClient, 'nvme1');
      const arq = await createAndBind(standbyClient, profile, 'vm-failover', HOST);
      const sim = c.host(HOST).sim;
      expect(await plantTenantData(sim.nvmeStatePath, 'nvme1', spreadTenantWrites(1))).not.toEqual([]);
      await standbyClient.arqs.deleteAcceleratorRequests({ uuids: [arq.uuid], instanceUuid: '' });
      const d = await settledDevice(standbyClient, HOST, arq.deviceAddress);
      expect(stateName(d.deviceState), d.errorReason).toBe('DEVICE_STATE_AVAILABLE');
      expect(d.lastCleanup?.proof?.method).toBeTruthy();
      expect(await readableTenantData(sim.nvmeStatePath, 'nvme1')).toEqual([]);
    }, 90_000);
  });
});
