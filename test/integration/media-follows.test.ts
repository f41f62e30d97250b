/**
 * Tenant data is followed by the media's identity (DESIGN invariants 11 and
 * 13, docs/media-identity.md), on the agent's side: real agents on simulated
 * hosts, served on 127.0.0.1:0, registering with a scheduler that records
 * what they send. The media is judged from outside Berth: the tenant's bytes
 * are read from the namespace backing files.
 *
 * - a drive held by a tenant, put back in another slot while the agent was
 *   down, comes up held at its new address (its bytes are still there) and no
 *   one else can bind it; a drive carried to another host stays held in its
 *   first host's journal and is of unknown provenance on the second;
 * - a drive Berth never cleaned is dirty until it is cleaned, unless its
 *   device_spec entry declares it clean (logged once);
 * - a one-time-use device's burn survives the agent, is reported at every
 *   registration, and only ReleaseDevice clears it, durably;
 * - two controllers that reach one media are one: a binding through one
 *   refuses the other, and one cleanup of the media at a time;
 * - a journal that recorded holds by address keeps every hold.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { credentials, type ServiceError } from '@grpc/grpc-js';
import Database from 'better-sqlite3';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import {
  AgentServiceClient,
  type CleanupDeviceResponse,
  CleanupPhase,
  type WatchInventoryResponse,
} from '../../src/gen/berth/agent/v1/agent.js';
import { type Device, MediaCondition } from '../../src/gen/berth/agent/v1/device.js';
import type { RegisterRequest } from '../../src/gen/berth/scheduler/v1/registration.js';
import { Agent } from '../../src/server/agent/agent.js';
import { parseAgentConfig } from '../../src/server/agent/config.js';
import { buildSimHost, type SimHost, type SimHostDefinition } from '../../src/sim/host.js';
import {
  plantTenantData,
  readableTenantData,
  spreadTenantWrites,
  withStateLock,
} from '../../src/sim/nvme-cli/index.js';
import { decodeServiceError } from '../../src/transport/status.js';
import { tempDir } from '../helpers/agent.js';
import { call, callError, collect } from '../helpers/grpc.js';
import { type RecordingScheduler, startRecordingScheduler } from '../helpers/recording-scheduler.js';
import { eventually } from '../helpers/wait.js';

const NVME_A = '0000:01:00.0';
const NVME_B = '0000:06:00.0';
const NVME_C = '0000:02:00.0';
const GPU = '0000:65:00.0';
const GPU_DSN = 'a0-b1-c2-d3-e4-f5-06-17';
const MIB = 1 << 20;

function hostDef(name: string, opts: { assumeClean?: boolean; dualPort?: boolean } = {}): SimHostDefinition {
  const ctrl = (controller: string, address: string, serial: string) => ({
    address,
    vendorId: '144d',
    productId: 'a824',
    controller,
    serial,
    model: 'PM1733 (simulated)',
    caps: { ces: true },
    namespaces: [{ nsid: 1, sizeBytes: MIB }],
    sanitizeMs: 300,
    ...(opts.dualPort ? { subsysnqn: 'nqn.2019-08.org.example:dual-port' } : {}),
  });
  return {
    host: name,
    pci: {
      functions: [
        {
          address: GPU,
          vendorId: '10de',
          productId: '25b6',
          classCode: '030200',
          driver: 'vfio-pci',
          deviceSerialNumber: GPU_DSN,
        },
        { address: '0000:66:00.0', vendorId: '8086', productId: '10fb', driver: 'ixgbe' },
      ],
    },
    nvme: [ctrl('nvme0', NVME_A, 'SER-A'), ...(opts.dualPort ? [ctrl('nvme1', NVME_C, 'SER-A')] : [])],
    pciDeviceSpec: [
      { vendor_id: '10de', product_id: '25b6', managed: false, one_time_use: true, assume_clean: true },
      { vendor_id: '8086', product_id: '10fb' },
    ],
    nvmeDeviceSpec: [{ vendor_id: '144d', ...(opts.assumeClean ? { assume_clean: true } : {}) }],
  };
}

interface Running {
  agent: Agent;
  client: AgentServiceClient;
  logs: { msg: string; [k: string]: unknown }[];
  stop(): Promise<void>;
}

describe('tenant data follows the media', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
  });

  let scheduler: RecordingScheduler;

  async function simHost(def: SimHostDefinition): Promise<SimHost> {
    const dir = await tempDir('berth-media-');
    cleanups.push(dir.cleanup);
    if (!scheduler) {
      scheduler = await startRecordingScheduler();
    }
    return buildSimHost(join(dir.path, def.host), def);
  }

  async function start(sim: SimHost, logs: Running['logs'] = []): Promise<Running> {
    const logger = pino({ level: 'info' }, { write: (l: string) => void logs.push(JSON.parse(l)) });
    const config = parseAgentConfig(
      { ...sim.agentConfig, scheduler: scheduler.address, register_interval: 0.5, discovery_interval: 3600 },
      {},
      sim.root,
    );
    const agent = await Agent.start({ config, logger, bootIdFile: sim.bootIdFile });
    const client = new AgentServiceClient(agent.address, credentials.createInsecure());
    let stopped = false;
    const stop = async () => {
      if (stopped) return;
      stopped = true;
      client.close();
      await agent.stop();
    };
    cleanups.push(stop);
    return { agent, client, logs, stop };
  }

  const devices = async (r: Running) =>
    new Map((await call(r.client, r.client.listDevices, {})).devices.map((d) => [d.address, d]));
  const device = async (r: Running, address: string): Promise<Device> => {
    const d = (await devices(r)).get(address);
    if (!d) throw new Error(`no device at ${address}`);
    return d;
  };
  const bind = (r: Running, address: string, arq: string) =>
    call(r.client, r.client.recordBinding, {
      address,
      arqUuid: arq,
      instanceUuid: `vm-${arq}`,
      projectId: '',
    });
  const bindError = (r: Running, address: string, arq: string) =>
    callError(r.client, r.client.recordBinding, {
      address,
      arqUuid: arq,
      instanceUuid: `vm-${arq}`,
      projectId: '',
    });
  async function clean(r: Running, address: string, jobId: string): Promise<CleanupDeviceResponse[]> {
    return collect<CleanupDeviceResponse>(
      r.client.cleanupDevice({ address, jobId, previousCertificate: undefined }),
      (msgs) => {
        const p = msgs.at(-1)?.event?.phase;
        return p === CleanupPhase.CLEANUP_PHASE_SUCCEEDED || p === CleanupPhase.CLEANUP_PHASE_FAILED;
      },
      60_000,
    );
  }
  const registrationOf = (host: string, accept: (r: RegisterRequest) => boolean) =>
    scheduler.next((r) => r.host === host && accept(r));

  it('a held drive put back in another slot while the agent was down: held at its new address, its bytes still there, bound to no one else', async () => {
    const sim = await simHost(hostDef('moved-host', { assumeClean: true }));
    let a = await start(sim);
    const key = (await device(a, NVME_A)).media!.key;
    expect(key).toBe(`nvme:nqn.2014.08.org.nvmexpress:144d144d${'SER-A'.padEnd(20)}PM1733 (simulated)`);
    await bind(a, NVME_A, 'arq-1');
    expect(await plantTenantData(sim.nvmeStatePath, 'nvme0', spreadTenantWrites(1))).not.toEqual([]);
    await a.stop();

    await sim.moveNvme('nvme0', NVME_B);
    a = await start(sim);
    const all = await devices(a);
    expect(all.has(NVME_A)).toBe(false);
    const moved = all.get(NVME_B)!;
    expect(moved.media).toMatchObject({ key, serial: 'SER-A' });
    expect(moved.mediaRecord).toMatchObject({
      key,
      condition: MediaCondition.MEDIA_CONDITION_HELD,
      arqUuid: 'arq-1',
      lastAddress: NVME_B,
    });
    // Judged from the media: the first tenant's bytes are on it.
    expect(await readableTenantData(sim.nvmeStatePath, 'nvme0')).not.toEqual([]);
    const refused = await bindError(a, NVME_B, 'arq-2');
    expect([refused.codeName, refused.reason]).toEqual(['FAILED_PRECONDITION', 'DEVICE_HOLDS_TENANT_DATA']);
    expect(refused.message).toContain('arq-1');
    expect(
      a.logs.some((l) => l.msg === `media ${key}, last seen at ${NVME_A}, is now at ${NVME_B} (held)`),
    ).toBe(true);
    // Its registration says so too: held at the new address, by its media key.
    const reg = await registrationOf('moved-host', (r) => r.heldDevices.some((h) => h.address === NVME_B));
    expect(reg.heldDevices).toEqual([
      expect.objectContaining({ address: NVME_B, arqUuid: 'arq-1', mediaKey: key }),
    ]);
    expect(reg.mediaRecords).toContainEqual(
      expect.objectContaining({ key, condition: MediaCondition.MEDIA_CONDITION_HELD, lastAddress: NVME_B }),
    );

    // Cleaned (proven), it is clean; the next tenant may have it.
    const events = await clean(a, NVME_B, 'job-moved');
    expect(events.at(-1)?.event?.phase).toBe(CleanupPhase.CLEANUP_PHASE_SUCCEEDED);
    expect(await readableTenantData(sim.nvmeStatePath, 'nvme0')).toEqual([]);
    expect((await device(a, NVME_B)).mediaRecord?.condition).toBe(MediaCondition.MEDIA_CONDITION_CLEAN);
    await bind(a, NVME_B, 'arq-2');
  }, 60_000);

  it('a held drive carried to another host: still held in its first host’s journal; of unknown provenance on the second', async () => {
    const first = await simHost(hostDef('carry-from', { assumeClean: true }));
    // The second host has a drive of its own (another serial) where the first had this one.
    const toDef = hostDef('carry-to');
    toDef.nvme[0]!.serial = 'SER-Z';
    const second = await simHost(toDef);
    let a = await start(first);
    const key = (await device(a, NVME_A)).media!.key;
    await bind(a, NVME_A, 'arq-1');
    await plantTenantData(first.nvmeStatePath, 'nvme0', [{ where: 0, at: 0.5, length: 4096 }]);
    await a.stop();
    const drive = await first.detachNvme('nvme0');
    await second.insertNvme(drive, { address: '0000:30:00.0', controller: 'nvme3' });

    a = await start(first);
    expect((await devices(a)).has(NVME_A)).toBe(false);
    const reg = await registrationOf('carry-from', (r) => r.mediaRecords.some((m) => m.key === key));
    // Not at an address of this host any more: a media record, not a held device.
    expect(reg.heldDevices).toEqual([]);
    expect(reg.mediaRecords).toContainEqual(
      expect.objectContaining({
        key,
        condition: MediaCondition.MEDIA_CONDITION_HELD,
        arqUuid: 'arq-1',
        lastAddress: NVME_A,
      }),
    );

    const b = await start(second);
    const there = await device(b, '0000:30:00.0');
    expect(there.media?.key).toBe(key);
    expect(there.mediaRecord?.condition).toBe(MediaCondition.MEDIA_CONDITION_DIRTY);
    expect(await readableTenantData(second.nvmeStatePath, 'nvme3')).not.toEqual([]);
    const refused = await bindError(b, '0000:30:00.0', 'arq-2');
    expect([refused.codeName, refused.reason]).toEqual(['FAILED_PRECONDITION', 'MEDIA_NOT_CLEAN']);
  }, 60_000);

  it('unknown provenance: dirty until cleaned; assume_clean declares it clean, logged once per media', async () => {
    const sim = await simHost(hostDef('fresh-host'));
    const a = await start(sim);
    const d = await device(a, NVME_A);
    expect(d.mediaRecord?.condition).toBe(MediaCondition.MEDIA_CONDITION_DIRTY);
    expect(a.logs).toContainEqual(
      expect.objectContaining({
        media: d.media!.key,
        msg: expect.stringMatching(
          /seen for the first time .*never cleaned by Berth, it is cleaned before its first offer/,
        ),
      }),
    );
    const refused = await bindError(a, NVME_A, 'arq-1');
    expect([refused.codeName, refused.reason]).toEqual(['FAILED_PRECONDITION', 'MEDIA_NOT_CLEAN']);
    expect(refused.message).toMatch(/never cleaned by Berth/);
    const reg = await registrationOf('fresh-host', (r) => r.mediaRecords.length > 0);
    expect(reg.mediaRecords).toContainEqual(
      expect.objectContaining({ key: d.media!.key, condition: MediaCondition.MEDIA_CONDITION_DIRTY }),
    );
    expect((await clean(a, NVME_A, 'job-first')).at(-1)?.event?.phase).toBe(
      CleanupPhase.CLEANUP_PHASE_SUCCEEDED,
    );
    expect((await device(a, NVME_A)).mediaRecord?.condition).toBe(MediaCondition.MEDIA_CONDITION_CLEAN);
    await bind(a, NVME_A, 'arq-1');

    const declaredSim = await simHost(hostDef('declared-host', { assumeClean: true }));
    const logs: Running['logs'] = [];
    let b = await start(declaredSim, logs);
    const declared = await device(b, NVME_A);
    expect(declared.mediaRecord?.condition).toBe(MediaCondition.MEDIA_CONDITION_DECLARED_CLEAN);
    await call(b.client, b.client.rediscover, {});
    await b.stop();
    b = await start(declaredSim, logs);
    const lines = logs.filter((l) => /declared clean by device_spec entry/.test(l.msg));
    expect(lines.map((l) => [l.level, l.msg])).toEqual([
      [
        30,
        `media ${declared.media!.key} at ${NVME_A} declared clean by device_spec entry nvme.device_spec[0] (assume_clean), not cleaned before its first offer`,
      ],
    ]);
    await bind(b, NVME_A, 'arq-9');
  }, 60_000);

  it('a cleanup that failed, or was cut short by the agent stopping, leaves the media dirty', async () => {
    const sim = await simHost(hostDef('failing-host', { assumeClean: true }));
    let a = await start(sim);
    await bind(a, NVME_A, 'arq-1');
    await sim.setFault('nvme0', 'sanitize', { mode: 'sanitize-fails' });
    expect((await clean(a, NVME_A, 'job-fails')).at(-1)?.event?.phase).toBe(
      CleanupPhase.CLEANUP_PHASE_FAILED,
    );
    expect((await device(a, NVME_A)).mediaRecord).toMatchObject({
      condition: MediaCondition.MEDIA_CONDITION_DIRTY,
      arqUuid: '',
    });
    const refused = await bindError(a, NVME_A, 'arq-2');
    expect([refused.reason, refused.message]).toEqual([
      'MEDIA_NOT_CLEAN',
      expect.stringMatching(/its cleanup failed/),
    ]);

    await sim.setFault('nvme0', 'sanitize', null);
    await withStateLock(sim.nvmeStatePath, (st) => {
      st.controllers[0]!.sanitize.durationMs = 30_000;
      return { changed: true, result: undefined };
    });
    void clean(a, NVME_A, 'job-cut').catch(() => {});
    await eventually(
      async () => a.agent.cleanups.isRunning(NVME_A),
      (running) => running,
      10_000,
    );
    await a.stop();
    a = await start(sim);
    const after = await bindError(a, NVME_A, 'arq-2');
    expect([after.reason, after.message]).toEqual(['MEDIA_NOT_CLEAN', expect.stringMatching(/interrupted/)]);
    expect((await device(a, NVME_A)).mediaRecord?.condition).toBe(MediaCondition.MEDIA_CONDITION_DIRTY);
  }, 60_000);

  it('a one-time-use device’s burn survives the agent and is reported at registration; only ReleaseDevice clears it, durably', async () => {
    const sim = await simHost(hostDef('burn-host'));
    let a = await start(sim);
    const gpu = await device(a, GPU);
    expect(gpu.media).toMatchObject({ key: `pci-dsn:10de:${GPU_DSN}:00.0`, deviceSerialNumber: GPU_DSN });
    expect(gpu.mediaRecord).toMatchObject({
      condition: MediaCondition.MEDIA_CONDITION_NOT_CLEANABLE,
      burned: false,
    });
    const key = gpu.media!.key;
    // The burn is a change of the inventory: watchers see it.
    const watch = a.client.watchInventory({ epoch: '', fromRevision: 0 });
    const seen = collect<WatchInventoryResponse>(watch, (msgs) =>
      msgs.some((m) => m.event?.$case === 'changed' && m.event.value.mediaRecord?.burned === true),
    );
    await bind(a, GPU, 'arq-gpu');
    await seen;
    // A device neither cleaned nor one-time-use records nothing.
    const nic = await bindError(a, '0000:66:00.0', 'arq-nic');
    expect([nic.codeName, nic.reason]).toEqual(['FAILED_PRECONDITION', 'CLEANING_NOT_SUPPORTED']);
    await a.stop();

    a = await start(sim);
    expect((await device(a, GPU)).mediaRecord).toMatchObject({ burned: true, arqUuid: 'arq-gpu' });
    const reg = await registrationOf('burn-host', (r) => r.mediaRecords.some((m) => m.key === key));
    expect(reg.mediaRecords).toContainEqual(expect.objectContaining({ key, burned: true }));
    expect(reg.features).toContain('media.v1');
    const again = await bindError(a, GPU, 'arq-next');
    expect([again.codeName, again.reason]).toEqual(['FAILED_PRECONDITION', 'DEVICE_BURNED']);
    // The same binding again is the same record (a retried bind).
    await bind(a, GPU, 'arq-gpu');

    const release = (address: string, mediaKey: string) =>
      call(a.client, a.client.releaseDevice, { address, mediaKey });
    const releaseError = (address: string, mediaKey: string) =>
      callError(a.client, a.client.releaseDevice, { address, mediaKey });
    expect(await releaseError('65:00.0', key)).toMatchObject({ codeName: 'INVALID_ARGUMENT' });
    expect(await releaseError(GPU, '')).toMatchObject({ codeName: 'INVALID_ARGUMENT' });
    expect(await releaseError('0000:99:00.0', key)).toMatchObject({ codeName: 'NOT_FOUND' });
    const changed = await releaseError(GPU, 'pci-dsn:10de:00-00-00-00-00-00-00-01:00.0');
    expect([changed.codeName, changed.reason]).toEqual(['FAILED_PRECONDITION', 'MEDIA_CHANGED']);
    expect(changed.message).toContain(key);
    expect((await device(a, GPU)).mediaRecord?.burned).toBe(true);
    const released = await release(GPU, key);
    expect(released.mediaRecord).toMatchObject({ key, burned: false });
    expect((await release(GPU, key)).mediaRecord).toMatchObject({ key, burned: false });
    await a.stop();
    a = await start(sim);
    expect((await device(a, GPU)).mediaRecord?.burned).toBe(false);
    await bind(a, GPU, 'arq-next');
  }, 60_000);

  it('two controllers reaching one media: a binding through one refuses the other; one cleanup of the media at a time', async () => {
    const sim = await simHost(hostDef('dual-host', { assumeClean: true, dualPort: true }));
    const a = await start(sim);
    const [x, y] = [await device(a, NVME_A), await device(a, NVME_C)];
    expect(x.media!.key).toBe('nvme:nqn.2019-08.org.example:dual-port');
    expect(y.media!.key).toBe(x.media!.key);
    await bind(a, NVME_A, 'arq-1');
    expect((await device(a, NVME_C)).mediaRecord).toMatchObject({
      condition: MediaCondition.MEDIA_CONDITION_HELD,
      arqUuid: 'arq-1',
    });
    const refused = await bindError(a, NVME_C, 'arq-2');
    expect([refused.codeName, refused.reason]).toEqual(['FAILED_PRECONDITION', 'DEVICE_HOLDS_TENANT_DATA']);
    expect(refused.message).toContain(`through ${NVME_A}`);

    // A slow sanitize through the first controller: the other cannot start one meanwhile.
    await withStateLock(sim.nvmeStatePath, (st) => {
      for (const c of st.controllers) c.sanitize.durationMs = 4_000;
      return { changed: true, result: undefined };
    });
    const first = clean(a, NVME_A, 'job-x');
    await eventually(
      async () => a.agent.cleanups.isRunning(NVME_A),
      (running) => running,
      10_000,
    );
    const second = await collect<CleanupDeviceResponse>(
      a.client.cleanupDevice({ address: NVME_C, jobId: 'job-y', previousCertificate: undefined }),
      () => false,
    ).then(
      () => null,
      (e: ServiceError) => decodeServiceError(e),
    );
    expect([second?.codeName, second?.reason]).toEqual(['FAILED_PRECONDITION', 'CLEANUP_IN_PROGRESS']);
    expect(second?.message).toContain(`being cleaned through ${NVME_A}`);
    const during = await bindError(a, NVME_C, 'arq-3');
    expect([during.codeName, during.reason]).toEqual(['FAILED_PRECONDITION', 'CLEANUP_IN_PROGRESS']);
    expect((await first).at(-1)?.event?.phase).toBe(CleanupPhase.CLEANUP_PHASE_SUCCEEDED);
    // Both controllers say the media is clean now.
    for (const address of [NVME_A, NVME_C]) {
      expect((await device(a, address)).mediaRecord?.condition).toBe(MediaCondition.MEDIA_CONDITION_CLEAN);
    }
  }, 60_000);

  it('upgrade: a journal that recorded holds by address keeps every hold, now by the media found there', async () => {
    const sim = await simHost(hostDef('upgrade-host', { assumeClean: true }));
    // The journal of an agent from before media identities (schema version 2).
    const db = new Database(join(sim.stateDir, 'agent-journal.db'));
    db.exec(`CREATE TABLE cleanup_jobs (job_id TEXT PRIMARY KEY, address TEXT NOT NULL, action TEXT NOT NULL,
      state TEXT NOT NULL CHECK (state IN ('running','succeeded','failed','interrupted')), started_at INTEGER NOT NULL, finished_at INTEGER);
      CREATE INDEX cleanup_jobs_address ON cleanup_jobs(address, started_at);
      CREATE TABLE cleanup_events (job_id TEXT NOT NULL REFERENCES cleanup_jobs(job_id) ON DELETE CASCADE, sequence INTEGER NOT NULL, event TEXT NOT NULL, PRIMARY KEY (job_id, sequence));
      CREATE TABLE held_devices (address TEXT PRIMARY KEY, arq_uuid TEXT NOT NULL, instance_uuid TEXT NOT NULL, since INTEGER NOT NULL);
      INSERT INTO held_devices VALUES ('${NVME_A}', 'arq-old', 'vm-old', 1700000000000), ('0000:0a:00.0', 'arq-away', 'vm-away', 1700000000001);`);
    db.pragma('user_version = 2');
    db.close();
    writeFileSync(join(sim.stateDir, 'nvme-identities.json'), '{}');
    const a = await start(sim);
    const d = await device(a, NVME_A);
    expect(d.mediaRecord).toMatchObject({
      condition: MediaCondition.MEDIA_CONDITION_HELD,
      arqUuid: 'arq-old',
      instanceUuid: 'vm-old',
      since: new Date(1700000000000),
    });
    expect(a.logs.some((l) => /recorded by address, now follows its media/.test(l.msg))).toBe(true);
    const refused = await bindError(a, NVME_A, 'arq-new');
    expect(refused.reason).toBe('DEVICE_HOLDS_TENANT_DATA');
    const reg = await registrationOf('upgrade-host', (r) => r.heldDevices.length > 0);
    expect(reg.heldDevices).toEqual([
      expect.objectContaining({ address: NVME_A, arqUuid: 'arq-old', mediaKey: d.media!.key }),
      // Its device is not on the host now: the hold stays, by address, until it is.
      expect.objectContaining({ address: '0000:0a:00.0', arqUuid: 'arq-away', mediaKey: '' }),
    ]);
  }, 60_000);
});
