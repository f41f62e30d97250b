/**
 * Reports bound to their host (issue 38 #4, DESIGN invariant 15,
 * docs/media-identity.md): one host's credential cannot write the scheduler's
 * media table. Real scheduler (token authentication) and a real agent on a
 * simulated host; the attacker is host-a's agent credential, calling Register
 * itself with records the simulator would never produce — another host's GPU
 * named by its media key as burned, and floods of fresh burned records. The
 * verdicts are what a tenant can bind and what the database holds, and the
 * operator's `berth media forget` runs through the real CLI.
 */
import { statSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SchedulerClient } from '../../src/client/sdk.js';
import { MediaCondition, type MediaRecord } from '../../src/gen/berth/agent/v1/device.js';
import {
  MediaRecordRefusal,
  type RegisterRequest,
  type RegisterResponse,
} from '../../src/gen/berth/scheduler/v1/registration.js';
import { Agent } from '../../src/server/agent/agent.js';
import { parseAgentConfig } from '../../src/server/agent/config.js';
import { generateStaticToken } from '../../src/server/grpc/auth/tokens.js';
import { MEDIA_RECORD_LIMITS } from '../../src/server/scheduler/domain/media-reports.js';
import { Scheduler } from '../../src/server/scheduler/scheduler.js';
import { buildSimHost } from '../../src/sim/host.js';
import { tempDir } from '../helpers/agent.js';
import { berth, cliEnv } from '../helpers/berth-cli.js';
import { expectCode } from '../helpers/errors.js';
import { createAndBind, createClassProfile, getDevice } from '../helpers/invariants.js';
import { type CapturedLogs, captureLogs } from '../helpers/logs.js';
import { eventually } from '../helpers/wait.js';

const GPU_CLASS = 'CUSTOM_PCI_10DE_25B6';
const GPU = '0000:65:00.0';

describe("one host's credential cannot write the scheduler's media records", () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let scheduler: Scheduler;
  let agentB: Agent;
  let admin: SchedulerClient;
  let logs: CapturedLogs;
  let victimKey: string;
  const tokens = { a: generateStaticToken(), b: generateStaticToken(), admin: generateStaticToken() };
  const db = () => join(dir.path, 'scheduler.db');

  beforeAll(async () => {
    dir = await tempDir('berth-media-reports-');
    logs = captureLogs('info');
    scheduler = await Scheduler.start({
      db: db(),
      listen: '127.0.0.1:0',
      heartbeatSeconds: 1,
      logger: logs.logger,
      auth: {
        mode: 'token',
        staticTokens: [
          { token: tokens.a, roles: ['agent'], subject: 'host-a' },
          { token: tokens.b, roles: ['agent'], subject: 'host-b' },
          { token: tokens.admin, roles: ['admin'], subject: 'ops-alice' },
        ],
      },
    });
    // host-b: a one-time-use GPU with a PCIe serial number (its media key follows the card).
    const sim = await buildSimHost(join(dir.path, 'host-b'), {
      host: 'host-b',
      pci: {
        functions: [
          {
            address: GPU,
            vendorId: '10de',
            productId: '25b6',
            classCode: '030200',
            driver: 'vfio-pci',
            deviceSerialNumber: 'b0-b1-c2-d3-e4-f5-06-17',
          },
        ],
      },
      nvme: [],
      // Unused when the test starts (custody holds a one-time-use device first seen with no record).
      pciDeviceSpec: [
        { vendor_id: '10de', product_id: '25b6', managed: false, one_time_use: true, assume_clean: true },
      ],
      nvmeDeviceSpec: [],
    });
    const config = parseAgentConfig(
      { ...sim.agentConfig, scheduler: scheduler.address, register_interval: 0.5, discovery_interval: 3600 },
      {},
      dir.path,
    );
    agentB = await Agent.start({ config, bootIdFile: sim.bootIdFile, schedulerToken: tokens.b });
    await agentB.registered;
    admin = new SchedulerClient({ endpoint: scheduler.address, token: tokens.admin, timeoutMs: 15_000 });
    const gpu = await eventually(
      () => getDevice(admin, 'host-b', GPU).catch(() => null),
      (d) => d?.allocatable === true && (d.media?.key ?? '') !== '',
      15_000,
    );
    victimKey = gpu!.media!.key;
    expect(victimKey).toMatch(/^pci-dsn:10de:/);
  }, 60_000);

  afterAll(async () => {
    admin?.close();
    await agentB?.stop();
    await scheduler?.stop();
    await dir?.cleanup();
  });

  /** host-a's credential, registering host-a (its own name: invariant 10 lets it) with `records`. */
  const registration = (records: MediaRecord[]): RegisterRequest => ({
    host: 'host-a',
    endpoint: '127.0.0.1:1',
    bootId: 'boot-a',
    epoch: 'epoch-a',
    agentVersion: '0.0.0',
    features: ['inventory.v1', 'media.v1'],
    drivers: ['pci'],
    heldDevices: [],
    mediaRecords: records,
    signingKey: '',
    certificates: [],
    retiredSigningKeys: [],
  });

  async function registerAsA(records: MediaRecord[]): Promise<RegisterResponse> {
    const c = new SchedulerClient({
      endpoint: scheduler.address,
      token: tokens.a,
      retries: 1,
      timeoutMs: 60_000,
    });
    try {
      return await c.registration.register(registration(records));
    } finally {
      c.close();
    }
  }

  const burned = (key: string, since = new Date()): MediaRecord => ({
    key,
    condition: MediaCondition.MEDIA_CONDITION_NOT_CLEANABLE,
    burned: true,
    since,
    lastAddress: '0000:21:00.0',
    arqUuid: '',
    instanceUuid: '',
    reason: '',
    writeCounters: undefined,
  });
  const fake = (batch: number, i: number) =>
    `pci-dsn:10de:fa-ce-${batch.toString(16).padStart(2, '0')}-00-00-${(i >> 8).toString(16).padStart(2, '0')}-${(i & 0xff).toString(16).padStart(2, '0')}-00:00.0`;
  const batch = (n: number, size: number = MEDIA_RECORD_LIMITS.perRegistration) =>
    Array.from({ length: size }, (_, i) => burned(fake(n, i)));

  const refusedMetric = async (host: string, reason: string) => {
    const text = await scheduler.metrics.registry.metrics();
    const line = text
      .split('\n')
      .find(
        (l) =>
          l.startsWith('berth_media_records_refused_total{') &&
          l.includes(`host="${host}"`) &&
          l.includes(`reason="${reason}"`),
      );
    return line ? Number(line.split(' ').at(-1)) : 0;
  };

  /** What the database holds, read from its file (not through Berth). */
  function stored(): { rows: number; burnedKeys: Set<string> } {
    const d = new Database(db(), { readonly: true });
    try {
      const rows = d.prepare('SELECT key, record FROM media').all() as { key: string; record: string }[];
      return {
        rows: rows.length,
        burnedKeys: new Set(
          rows.filter((r) => (JSON.parse(r.record) as { burned: boolean }).burned).map((r) => r.key),
        ),
      };
    } finally {
      d.close();
    }
  }

  const size = () => {
    let n = 0;
    for (const suffix of ['', '-wal']) {
      try {
        n += statSync(`${db()}${suffix}`).size;
      } catch {}
    }
    return n;
  };

  it("another host's GPU reported burned by its media key: refused, named in the answer, counted, logged; the GPU stays in the pool", async () => {
    const res = await registerAsA([burned(victimKey)]);
    expect(res.refusedMediaRecords).toEqual([
      { mediaKey: victimKey, reason: MediaRecordRefusal.MEDIA_RECORD_REFUSAL_OTHER_HOST_PRESENTS },
    ]);
    expect(await refusedMetric('host-a', 'other_host_presents')).toBe(1);
    const [line] = await logs.waitFor(
      (l) =>
        l.level === 40 && l['host'] === 'host-a' && JSON.stringify(l['refused'] ?? '').includes(victimKey),
      { what: 'the refusal logged' },
    );
    expect(JSON.stringify(line!['refused'])).toContain('"holder":"host-b"');
    // Sent again (a journal keeps its record): refused and counted again, logged once (the log is
    // written before the answer, so the answer is the signal that no second line came).
    const again = await registerAsA([burned(victimKey)]);
    expect(again.refusedMediaRecords).toEqual(res.refusedMediaRecords);
    expect(await refusedMetric('host-a', 'other_host_presents')).toBe(2);
    expect(
      logs.matching((l) => l['host'] === 'host-a' && JSON.stringify(l['refused'] ?? '').includes(victimKey)),
    ).toHaveLength(1);
    expect(stored().burnedKeys.has(victimKey)).toBe(false);
    const gpu = await getDevice(admin, 'host-b', GPU);
    expect([gpu.burned, gpu.allocatable, gpu.unallocatableReason]).toEqual([false, true, '']);
  });

  it('fresh burned records: a registration past 4,096 is refused, and a host keeps at most 16,384 that only it reported; nothing stored is lost', async () => {
    const before = stored().rows;
    const sizeBefore = size();
    const over = await expectCode(
      registerAsA(batch(90, MEDIA_RECORD_LIMITS.perRegistration + 1)),
      'RESOURCE_EXHAUSTED',
      'MEDIA_RECORDS_OVER_LIMIT',
    );
    expect(over.message).toContain(
      `${MEDIA_RECORD_LIMITS.perRegistration + 1} records, more than the limit of ${MEDIA_RECORD_LIMITS.perRegistration}`,
    );
    expect(stored().rows).toBe(before);

    // Four full registrations fill the host's bound…
    const fills = MEDIA_RECORD_LIMITS.perHost / MEDIA_RECORD_LIMITS.perRegistration;
    for (let n = 0; n < fills; n++) {
      const res = await registerAsA(batch(n));
      expect(res.refusedMediaRecords).toEqual([]);
    }
    const full = stored();
    expect(full.rows).toBe(before + MEDIA_RECORD_LIMITS.perHost);
    // …and every registration that would add more is refused whole, naming the count and the limit.
    for (let n = fills; n < fills + 4; n++) {
      const err = await expectCode(registerAsA(batch(n)), 'RESOURCE_EXHAUSTED', 'MEDIA_RECORDS_OVER_LIMIT');
      expect(err.message).toContain(
        `host host-a would have ${MEDIA_RECORD_LIMITS.perHost + MEDIA_RECORD_LIMITS.perRegistration} media records kept that only it reported`,
      );
      expect(err.message).toContain(`the limit of ${MEDIA_RECORD_LIMITS.perHost}`);
    }
    // One new record among known ones is refused too: nothing of that registration is written.
    await expectCode(
      registerAsA([...batch(0).slice(0, 10), burned(fake(99, 1))]),
      'RESOURCE_EXHAUSTED',
      'MEDIA_RECORDS_OVER_LIMIT',
    );
    const after = stored();
    expect(after.rows).toBe(full.rows);
    expect(after.burnedKeys.has(fake(fills, 0))).toBe(false);
    expect(after.burnedKeys.has(fake(99, 1))).toBe(false);
    for (let n = 0; n < fills; n++) expect(after.burnedKeys.has(fake(n, 4095))).toBe(true);
    expect(await refusedMetric('host-a', 'per_host_limit')).toBe(
      4 * MEDIA_RECORD_LIMITS.perRegistration + 11,
    );
    expect(await refusedMetric('host-a', 'per_registration_limit')).toBe(
      MEDIA_RECORD_LIMITS.perRegistration + 1,
    );
    // 16,384 rows and the refusals: a few MB, where 12 registrations of 8,192 once added 54 MB.
    expect(size() - sizeBefore).toBeLessThan(16 << 20);
    // A host within its bound is not hurt by host-a's: host-b's agent still registers and its GPU binds.
    const gpu = await getDevice(admin, 'host-b', GPU);
    expect(gpu.allocatable).toBe(true);
  }, 240_000);

  it('berth media forget: refused for media a host presents, unknown or malformed keys; forgets one that will never come back, logged with who', async () => {
    const env = cliEnv(join(dir.path, 'client.yaml'), {
      BERTH_ENDPOINT: scheduler.address,
      BERTH_TOKEN: tokens.admin,
    });
    const present = await berth(['media', 'forget', victimKey, '--reason', 'test'], env);
    expect(present.code).not.toBe(0);
    expect(present.stderr).toMatch(
      /FAILED_PRECONDITION: media pci-dsn:10de:\S+ is not forgotten: host-b 0000:65:00\.0/,
    );
    const unknown = await berth(['media', 'forget', 'nvme:nqn.never-seen', '--reason', 'test'], env);
    expect(unknown.code).not.toBe(0);
    expect(unknown.stderr).toMatch(/NOT_FOUND: media "nvme:nqn.never-seen" not found/);
    const malformed = await berth(['media', 'forget', 'not a key', '--reason', 'test'], env);
    expect(malformed.code).not.toBe(0);
    expect(malformed.stderr).toMatch(/INVALID_ARGUMENT: media_key: "not a key" is not a media key/);
    // Only an operator forgets: an agent's credential may not.
    const asAgent = new SchedulerClient({ endpoint: scheduler.address, token: tokens.a, retries: 1 });
    try {
      await expectCode(
        asAgent.devices.forgetMedia({ mediaKey: fake(0, 1), reason: '' }),
        'PERMISSION_DENIED',
      );
    } finally {
      asAgent.close();
    }

    const gone = fake(0, 1);
    const forgot = await berth(
      ['media', 'forget', gone, '--reason', 'destroyed, ticket 7', '-o', 'json'],
      env,
    );
    expect(forgot.code, forgot.stderr).toBe(0);
    expect(JSON.parse(forgot.stdout)).toMatchObject({
      media_key: gone,
      burned: true,
      already_forgotten: false,
    });
    const [line] = await logs.waitFor((l) => l['media'] === gone && l['by'] === 'ops-alice', {
      what: 'the forget logged with its caller',
    });
    expect(line!['reason']).toBe('destroyed, ticket 7');
    const again = await berth(['media', 'forget', gone, '--reason', 'again'], env);
    expect([again.code, again.stdout.trim()]).toEqual([0, `media ${gone} was forgotten already`]);

    // It no longer counts against host-a's bound: one new record fits again; and host-a's journal
    // record of the forgotten media (now saying it holds a tenant's data) is refused, by name.
    const held = { ...burned(gone), condition: MediaCondition.MEDIA_CONDITION_HELD };
    const res = await registerAsA([held, burned(fake(98, 1))]);
    expect(res.refusedMediaRecords).toEqual([
      { mediaKey: gone, reason: MediaRecordRefusal.MEDIA_RECORD_REFUSAL_FORGOTTEN },
    ]);
    expect(stored().burnedKeys.has(fake(98, 1))).toBe(true);

    // Last: a tenant binds host-b's GPU; once bound, its media is held and cannot be forgotten.
    await createClassProfile(admin, 'gpu', GPU_CLASS);
    await createAndBind(admin, 'gpu', 'tenant-1', 'host-b');
    expect((await getDevice(admin, 'host-b', GPU)).burned).toBe(true);
    await expectCode(
      admin.devices.forgetMedia({ mediaKey: victimKey, reason: 'x' }),
      'FAILED_PRECONDITION',
      'MEDIA_PRESENT',
    );
  }, 240_000);
});
