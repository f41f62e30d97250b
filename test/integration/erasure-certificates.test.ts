/**
 * Erasure certificates (docs/erasure-certificates.md), through a real
 * scheduler and a real agent on a simulated host, both on loopback; the
 * agent is reached through a proxy that can rewrite the certificate on its
 * way (test/helpers/agent-proxy.ts), as a forger on the path would. The
 * media is judged from outside Berth: the tenant's marks are read from the
 * namespace backing files.
 *
 * - every action (sanitize-crypto on a subsystem with two namespaces,
 *   sanitize-block, write-zeroes, shred) makes a certificate that verifies
 *   against the scheduler's published key, names the media, the tenant and
 *   the NIST SP 800-88 category, and chains per media;
 * - Python's `cryptography` (not Berth's code) verifies one, running the
 *   example of the docs exactly;
 * - a missing, forged, edited, out-of-order or foreign-key certificate
 *   leaves the device held back (error, with the reason), never available;
 *   the genuine one, kept by the agent, is re-supplied at registration;
 * - a rotated agent key is refused until an admin pins it; certificates of
 *   the old key stay verifiable;
 * - after the scheduler's database is lost, the agent re-supplies its
 *   certificates and the chains continue.
 */
import { execFileSync } from 'node:child_process';
import { createPrivateKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SchedulerClient } from '../../src/client/sdk.js';
import {
  certificateHash,
  decodeCertificate,
  type ErasureClaims,
  jwkThumbprint,
  NIST_800_88,
  publicJwkOf,
  signCertificate,
} from '../../src/erasure/certificate.js';
import { parseKeySet, publishedKeySet, verifyOffline } from '../../src/erasure/verify.js';
import type { CleanupDeviceResponse } from '../../src/gen/berth/agent/v1/agent.js';
import { type Device, DeviceState } from '../../src/gen/berth/scheduler/v1/device.js';
import { Agent } from '../../src/server/agent/agent.js';
import { parseAgentConfig } from '../../src/server/agent/config.js';
import { rotateSigningKey, SIGNING_KEY_FILE } from '../../src/server/agent/signing-key.js';
import { Scheduler } from '../../src/server/scheduler/scheduler.js';
import { buildSimHost, demoHostDefinition, type SimHost } from '../../src/sim/host.js';
import { plantTenantData, readableTenantData, spreadTenantWrites } from '../../src/sim/nvme-cli/index.js';
import { tempDir } from '../helpers/agent.js';
import { type AgentProxy, startAgentProxy } from '../helpers/agent-proxy.js';
import { berth, cliEnv } from '../helpers/berth-cli.js';
import {
  createAndBind,
  createNvmeProfile,
  getDevice,
  type NvmeName,
  settledDevice,
  stateName,
  uuidRef,
} from '../helpers/invariants.js';
import { type CapturedLogs, captureLogs } from '../helpers/logs.js';
import { available, PYTHON, pythonCryptography } from '../helpers/prerequisites.js';
import { freePort } from '../helpers/processes.js';
import { eventually } from '../helpers/wait.js';

const HOST = 'cert-host';
const MIB = 1 << 20;
const CTRLS: NvmeName[] = ['nvme0', 'nvme1', 'nvme2', 'nvme3'];
const ACTIONS: Record<NvmeName, string> = {
  nvme0: 'sanitize-crypto',
  nvme1: 'sanitize-block',
  nvme2: 'write-zeroes',
  nvme3: 'shred',
};

describe('erasure certificates', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let sim: SimHost;
  let schedulerAddress: string;
  let dbPath: string;
  let scheduler: Scheduler;
  let schedulerLogs: CapturedLogs;
  let client: SchedulerClient;
  let agent: Agent | null = null;
  let proxy: AgentProxy;
  let agentPort: number;
  /** Rewrites the certificate of a cleanup's success on its way to the scheduler (null: passes). */
  let tamper: ((jws: string) => string) | null = null;
  /** The genuine certificates the agent sent, by job id. */
  const genuine = new Map<string, string>();
  /** The devices' addresses by controller. */
  const address = new Map<NvmeName, string>();
  const instances = new Map<NvmeName, string>();

  async function startScheduler(): Promise<void> {
    schedulerLogs = captureLogs('info');
    scheduler = await Scheduler.start({
      db: dbPath,
      listen: schedulerAddress,
      heartbeatSeconds: 1,
      auth: { mode: 'none' },
      logger: schedulerLogs.logger,
    });
    client = new SchedulerClient({ endpoint: scheduler.address, timeoutMs: 15_000 });
  }

  async function startAgent(opts: { waitRegistered?: boolean; share?: number } = {}): Promise<void> {
    const config = parseAgentConfig(
      {
        ...sim.agentConfig,
        listen: `127.0.0.1:${agentPort}`,
        advertise: proxy.address,
        scheduler: schedulerAddress,
        register_interval: 0.5,
        discovery_interval: 3600,
      },
      {},
      dir.path,
    );
    agent = await Agent.start({
      config,
      bootIdFile: sim.bootIdFile,
      ...(opts.share ? { certificateBytesPerRegistration: opts.share } : {}),
    });
    if (opts.waitRegistered !== false) {
      await agent.registered;
      await connected();
    }
  }

  const connected = () =>
    eventually(
      // Not found until the agent's first registration with a new database.
      () => client.hosts.getHost({ name: HOST }).catch(() => null),
      (r) => r?.host?.connected === true,
      15_000,
    );

  beforeAll(async () => {
    dir = await tempDir('berth-certificates-');
    dbPath = join(dir.path, 'scheduler.db');
    schedulerAddress = `127.0.0.1:${await freePort()}`;
    await startScheduler();
    const def = demoHostDefinition(HOST);
    // A subsystem with several namespaces: nvme0's sanitize must name both.
    def.nvme![0]!.namespaces = [
      { nsid: 1, sizeBytes: 16 * MIB },
      { nsid: 2, sizeBytes: 8 * MIB },
    ];
    for (const c of def.nvme!) c.sanitizeMs = 200;
    sim = await buildSimHost(join(dir.path, HOST), def);
    agentPort = await freePort();
    proxy = await startAgentProxy(`127.0.0.1:${agentPort}`, (method, message) => {
      const r = message as CleanupDeviceResponse;
      if (method !== 'cleanupDevice' || !r.event?.certificate) return r;
      genuine.set(r.event.jobId, r.event.certificate);
      return tamper ? { event: { ...r.event, certificate: tamper(r.event.certificate) } } : r;
    });
    await startAgent();
    for (const c of CTRLS) await createNvmeProfile(client, c);
    await eventually(
      () =>
        client.devices.listDevices({
          filter: { host: HOST, type: 0, state: 0, resourceClass: '' },
          pageSize: 0,
          pageToken: '',
        }),
      (r) => r.devices.filter((d) => d.media?.key.startsWith('nvme:')).length === 4,
      15_000,
    );
  }, 60_000);

  afterAll(async () => {
    client?.close();
    await agent?.stop();
    await proxy?.stop();
    await scheduler?.stop();
    await dir?.cleanup();
  });

  /** Bind the controller's device to `instance`, write tenant data on it, release it; the device once settled. */
  async function useAndRelease(ctrl: NvmeName, instance: string): Promise<Device> {
    const bound = await createAndBind(client, `pick-${ctrl}`, instance, HOST);
    const device = (await client.devices.getDevice({ device: uuidRef(bound.deviceUuid) })).device!;
    address.set(ctrl, device.address);
    instances.set(ctrl, instance);
    const namespaces = ctrl === 'nvme0' ? 2 : 1;
    expect(await plantTenantData(sim.nvmeStatePath, ctrl, spreadTenantWrites(namespaces))).not.toEqual([]);
    await client.arqs.deleteAcceleratorRequests({ uuids: [bound.uuid], instanceUuid: '' });
    return settledDevice(client, HOST, device.address, 60_000);
  }

  const certificatesOf = async (of: { device?: string; jobId?: string; instanceUuid?: string }) =>
    (
      await client.certificates.listErasureCertificates({
        of: of.device
          ? { $case: 'device', value: uuidRef(of.device) }
          : of.jobId
            ? { $case: 'jobId', value: of.jobId }
            : { $case: 'instanceUuid', value: of.instanceUuid! },
      })
    ).certificates;

  const publishedKeys = async () =>
    parseKeySet(publishedKeySet((await client.certificates.listAgentKeys({ host: HOST })).keys));

  const agentKey = (): KeyObject =>
    createPrivateKey(readFileSync(join(agent!.config.stateDir, SIGNING_KEY_FILE)));

  it('every action makes a certificate that verifies, names the media, the tenant and the NIST 800-88 category', async () => {
    for (const ctrl of CTRLS) {
      const instance = `vm-cert-${ctrl}`;
      const d = await useAndRelease(ctrl, instance);
      expect(stateName(d.deviceState), d.errorReason).toBe('DEVICE_STATE_AVAILABLE');
      // Judged from the media: no tenant mark is readable.
      expect(await readableTenantData(sim.nvmeStatePath, ctrl)).toEqual([]);
      const certs = await certificatesOf({ device: d.uuid });
      expect(certs).toHaveLength(1);
      const cert = certs[0]!;
      const v = verifyOffline(cert.jws, await publishedKeys(), { host: HOST, mediaKey: d.media!.key });
      const c = v.certificate.claims;
      expect(c.action).toBe(ACTIONS[ctrl]);
      expect(c.nist_800_88).toEqual(NIST_800_88[ACTIONS[ctrl]]);
      expect(c.nist_800_88?.category).toBe(ctrl === 'nvme0' || ctrl === 'nvme1' ? 'Purge' : 'Clear');
      expect(c.tenant?.instance_uuid).toBe(instance);
      expect(c.tenant?.arq_uuid).toBeTruthy();
      expect(c.address).toBe(d.address);
      expect(c.media.serial).toBe(d.media!.serial);
      expect(c.job_id).toBe(d.lastCleanup!.jobId);
      expect(c.proof.method).toBe(d.lastCleanup!.proof!.method);
      expect(Date.parse(c.ended_at)).toBeGreaterThanOrEqual(Date.parse(c.started_at));
      if (ctrl === 'nvme0' || ctrl === 'nvme1') {
        expect(c.proof.sanitize?.sanact).toBe(ctrl === 'nvme0' ? 4 : 2);
        expect(c.proof.sanitize?.after?.status).toBeOneOf([1, 4]);
      } else {
        expect(c.proof.bytes_read).toBe(c.proof.bytes_total);
      }
      if (ctrl === 'nvme0') {
        expect(c.media.namespaces.map((n) => n.nsid)).toEqual([1, 2]);
        expect((c.proof.census as { namespaces: { nsid: number }[] }).namespaces.map((n) => n.nsid)).toEqual([
          1, 2,
        ]);
      }
      // Its chain: the first certificate of this media here.
      expect(c.seq).toBe(1);
      expect(c.prev).toBeNull();
      expect((await certificatesOf({ jobId: c.job_id })).map((x) => x.hash)).toEqual([cert.hash]);
      expect((await certificatesOf({ instanceUuid: instance })).map((x) => x.hash)).toEqual([cert.hash]);
    }
    // A second tenant of nvme0: the next link of its chain.
    const d = await useAndRelease('nvme0', 'vm-cert-nvme0-second');
    expect(stateName(d.deviceState), d.errorReason).toBe('DEVICE_STATE_AVAILABLE');
    const [first, second] = await certificatesOf({ device: d.uuid });
    expect(second).toBeDefined();
    verifyOffline(second!.jws, await publishedKeys(), { previous: first!.jws });
  }, 180_000);

  it('Python (cryptography), running the example of docs/erasure-certificates.md, verifies one and refuses an edited one', async (ctx) => {
    if (!available(pythonCryptography(), 'the Python verification example')) return ctx.skip();
    const doc = readFileSync(join(__dirname, '../../docs/erasure-certificates.md'), 'utf8');
    const example = /```python\n([\s\S]*?)```/.exec(doc)?.[1];
    expect(example, 'docs/erasure-certificates.md has a python block').toBeDefined();
    // The doc's example is the shipped script, unchanged.
    expect(example).toBe(
      readFileSync(join(__dirname, '../../examples/verify-erasure-certificate.py'), 'utf8'),
    );
    const script = join(dir.path, 'verify.py');
    writeFileSync(script, example!);
    const first = (await certificatesOf({ instanceUuid: 'vm-cert-nvme0' }))[0]!;
    const second = (await certificatesOf({ instanceUuid: 'vm-cert-nvme0-second' }))[0]!;
    const keys = join(dir.path, 'keys.json');
    writeFileSync(keys, publishedKeySet((await client.certificates.listAgentKeys({ host: HOST })).keys));
    const certFile = join(dir.path, 'second.jws');
    const prevFile = join(dir.path, 'first.jws');
    writeFileSync(certFile, `${second.jws}\n`);
    writeFileSync(prevFile, `${first.jws}\n`);
    const out = JSON.parse(execFileSync(PYTHON, [script, certFile, keys, prevFile], { encoding: 'utf8' }));
    expect(out).toMatchObject({
      valid: true,
      hash: second.hash,
      host: HOST,
      media: second.mediaKey,
      action: 'sanitize-crypto',
      nist_800_88: 'Purge',
      seq: 2,
      prev: first.hash,
    });
    expect(out.tenant.instance_uuid).toBe('vm-cert-nvme0-second');
    // Edited: the tenant changed, the signature kept.
    const [h, p, s] = second.jws.split('.');
    const claims = JSON.parse(Buffer.from(p!, 'base64url').toString());
    claims.tenant.instance_uuid = 'someone-else';
    writeFileSync(certFile, `${h}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.${s}\n`);
    let err: { status: number; stderr: string } | null = null;
    try {
      execFileSync(PYTHON, [script, certFile, keys], { encoding: 'utf8', stdio: 'pipe' });
    } catch (e) {
      err = e as { status: number; stderr: string };
    }
    expect(err?.status).toBe(1);
    expect(err?.stderr).toContain('the signature does not verify');
    // Out of order: the first is not the link after the second.
    writeFileSync(certFile, `${first.jws}\n`);
    writeFileSync(prevFile, `${second.jws}\n`);
    err = null;
    try {
      execFileSync(PYTHON, [script, certFile, keys, prevFile], { encoding: 'utf8', stdio: 'pipe' });
    } catch (e) {
      err = e as { status: number; stderr: string };
    }
    expect(err?.stderr).toContain('chain broken');
  }, 60_000);

  it('berth cleanup certificate saves one, berth host keys saves the keys, berth cleanup verify checks it offline', async () => {
    const env = cliEnv(join(dir.path, 'cli-config.yaml'), { BERTH_ENDPOINT: schedulerAddress });
    const certFile = join(dir.path, 'cli-cert.jws');
    const prevFile = join(dir.path, 'cli-prev.jws');
    const keysFile = join(dir.path, 'cli-keys.json');
    const device = (await certificatesOf({ instanceUuid: 'vm-cert-nvme0-second' }))[0]!.deviceUuid;
    const saved = await berth(
      ['cleanup', 'certificate', '--device', device, '--save', certFile, '-o', 'json'],
      env,
    );
    expect(saved.code, saved.stderr).toBe(0);
    const listed = JSON.parse(saved.stdout) as { hash: string; seq: number; jws: string }[];
    expect(listed.map((c) => c.seq)).toEqual([1, 2]);
    writeFileSync(prevFile, `${listed[0]!.jws}\n`);
    const keys = await berth(['host', 'keys', HOST, '--save', keysFile], env);
    expect(keys.code, keys.stderr).toBe(0);
    const ok = await berth(
      ['cleanup', 'verify', certFile, '--keys', keysFile, '--previous', prevFile, '-o', 'json'],
      env,
    );
    expect(ok.code, ok.stderr).toBe(0);
    expect(JSON.parse(ok.stdout)).toMatchObject({
      valid: true,
      action: 'sanitize-crypto',
      nist_800_88: 'Purge',
      seq: 2,
    });
    // Offline: the scheduler is not asked (an endpoint nobody serves).
    const offline = await berth(['cleanup', 'verify', certFile, '--keys', keysFile], {
      ...env,
      BERTH_ENDPOINT: '127.0.0.1:1',
    });
    expect(offline.code, offline.stderr).toBe(0);
    const fromScheduler = await berth(['cleanup', 'verify', certFile, '--from-scheduler'], env);
    expect(fromScheduler.code, fromScheduler.stderr).toBe(0);
    // The chain the other way round, and an edited copy: refused with the reason.
    const wrongWay = await berth(
      ['cleanup', 'verify', prevFile, '--keys', keysFile, '--previous', certFile],
      env,
    );
    expect(wrongWay.code).toBe(1);
    expect(wrongWay.stderr).toContain('not the link after the previous certificate');
    const [h, p, sig] = listed[1]!.jws.split('.');
    const c = JSON.parse(Buffer.from(p!, 'base64url').toString());
    c.action = 'shred';
    writeFileSync(certFile, `${h}.${Buffer.from(JSON.stringify(c)).toString('base64url')}.${sig}\n`);
    const edited = await berth(['cleanup', 'verify', certFile, '--keys', keysFile], env);
    expect(edited.code).toBe(1);
    expect(edited.stderr).toContain('signature that does not verify');
    const usage = await berth(['cleanup', 'verify', certFile], env);
    expect(usage.code).toBe(2);
  }, 180_000);

  /** Re-signs claims with `key` (the agent's own, or another's). */
  function resign(jws: string, key: KeyObject, edit: (c: ErasureClaims) => void = () => {}): string {
    const claims = structuredClone(decodeCertificate(jws).claims);
    const kid = jwkThumbprint(publicJwkOf(key));
    claims.kid = kid;
    edit(claims);
    return signCertificate(claims, key, kid);
  }

  const TAMPERING: { name: string; tamper: () => (jws: string) => string; reason: RegExp }[] = [
    { name: 'missing (stripped)', tamper: () => () => '', reason: /is missing/ },
    {
      name: 'forged (signature bytes changed)',
      tamper: () => (jws) => {
        const [h, p, s] = jws.split('.');
        const sig = Buffer.from(s!, 'base64url');
        sig[10] = sig[10]! ^ 0xff;
        return `${h}.${p}.${sig.toString('base64url')}`;
      },
      reason: /signature that does not verify/,
    },
    {
      name: 'edited (another tenant, the signature kept)',
      tamper: () => (jws) => {
        const [h, p, s] = jws.split('.');
        const c = JSON.parse(Buffer.from(p!, 'base64url').toString());
        c.tenant = { arq_uuid: 'x', instance_uuid: 'someone-else', project_id: '' };
        return `${h}.${Buffer.from(JSON.stringify(c)).toString('base64url')}.${s}`;
      },
      reason: /signature that does not verify/,
    },
    {
      name: "out of order (a link skipped, signed with the agent's own key)",
      tamper: () => (jws) =>
        resign(jws, agentKey(), (c) => {
          c.seq += 1;
          c.prev = `sha256:${'f'.repeat(64)}`;
        }),
      reason: /out of order, or a link is missing/,
    },
    {
      name: "signed with another host's key",
      tamper: () => {
        const other = generateKeyPairSync('ed25519').privateKey;
        return (jws) => resign(jws, other);
      },
      reason: /not a key of host cert-host/,
    },
  ];

  it('a missing, forged, edited, out-of-order or foreign-key certificate holds the device back; the agent re-supplies the genuine one', async () => {
    // nvme2 (write-zeroes) is released with tenant data under each kind of tampering in turn.
    let d = await getDevice(client, HOST, address.get('nvme2')!);
    for (const [i, t] of TAMPERING.entries()) {
      tamper = t.tamper();
      try {
        if (i === 0) {
          d = await useAndRelease('nvme2', 'vm-tampered');
        } else {
          await client.devices.cleanDevice({ device: uuidRef(d.uuid), requestId: '' });
          d = await eventually(
            () => getDevice(client, HOST, d.address),
            (x) =>
              x.lastCleanup?.jobId !== undefined &&
              genuine.has(x.lastCleanup.jobId) &&
              x.deviceState === DeviceState.DEVICE_STATE_ERROR,
            60_000,
          );
        }
      } finally {
        tamper = null;
      }
      expect(stateName(d.deviceState), t.name).toBe('DEVICE_STATE_ERROR');
      expect(d.errorReason, t.name).toMatch(t.reason);
      expect(d.errorReason).toContain('held back');
      expect(d.allocatable).toBe(false);
      // Erased all the same (judged from the media); only its certificate is missing here.
      expect(await readableTenantData(sim.nvmeStatePath, 'nvme2')).toEqual([]);
      // The agent keeps the genuine certificate until a scheduler stores it: its next registration brings it.
      const job = d.lastCleanup!.jobId;
      const stored = await eventually(
        () => certificatesOf({ jobId: job }),
        (c) => c.length === 1,
        15_000,
      );
      expect(stored[0]!.jws).toBe(genuine.get(job));
    }
    // Untampered, the next cleanup chains on: available.
    await client.devices.cleanDevice({ device: uuidRef(d.uuid), requestId: '' });
    d = await eventually(
      () => getDevice(client, HOST, d.address),
      (x) => x.deviceState === DeviceState.DEVICE_STATE_AVAILABLE,
      60_000,
    );
    const chain = await certificatesOf({ device: d.uuid });
    expect(chain.map((c) => Number(c.seq))).toEqual([1, 2, 3, 4, 5, 6, 7]);
    for (let i = 1; i < chain.length; i++)
      verifyOffline(chain[i]!.jws, await publishedKeys(), { previous: chain[i - 1]!.jws });
  }, 240_000);

  it("rotation: the agent's new key is refused until an admin pins it; the old key's certificates stay verifiable", async () => {
    const before = await certificatesOf({ instanceUuid: 'vm-cert-nvme3' });
    const oldKid = decodeCertificate(before[0]!.jws).header.kid;
    await agent!.stop();
    const { key } = rotateSigningKey(agent!.config.stateDir);
    await startAgent({ waitRegistered: false });
    const refused = await schedulerLogs.waitFor(
      (l) => l.msg.startsWith('registration refused: the agent signs with another key'),
      {
        what: 'the refused registration',
      },
    );
    expect(refused[0]!['keyId']).toBe(key.kid);
    expect(refused[0]!['pinned']).toBe(oldKid);
    // Refused: an admin's bad key is named.
    await expect(
      client.certificates.rotateAgentKey({ host: HOST, publicKey: '{"kty":"RSA"}' }),
    ).rejects.toThrow(/public_key/);
    const r = await client.certificates.rotateAgentKey({
      host: HOST,
      publicKey: JSON.stringify(key.publicJwk),
    });
    expect(r.key?.keyId).toBe(key.kid);
    expect(r.retired?.keyId).toBe(oldKid);
    await agent!.registered;
    await connected();
    const d = await useAndRelease('nvme3', 'vm-after-rotation');
    expect(stateName(d.deviceState), d.errorReason).toBe('DEVICE_STATE_AVAILABLE');
    const [old, fresh] = await certificatesOf({ device: d.uuid });
    expect(decodeCertificate(fresh!.jws).header.kid).toBe(key.kid);
    const keys = await publishedKeys();
    verifyOffline(old!.jws, keys);
    verifyOffline(fresh!.jws, keys, { previous: old!.jws });
    const listed = (await client.certificates.listAgentKeys({ host: HOST })).keys;
    expect(listed.map((k) => [k.keyId, k.retiredAt !== undefined])).toEqual([
      [oldKid, true],
      [key.kid, false],
    ]);
  }, 120_000);

  it("after the scheduler's database is lost, the agent re-supplies its certificates and the chains continue", async () => {
    const held = await certificatesOf({ instanceUuid: 'vm-cert-nvme0-second' });
    // The agent re-supplies in shares of about one certificate per registration (the default is 1.5 MB).
    await agent!.stop();
    await startAgent({ share: 1 });
    client.close();
    await scheduler.stop();
    for (const f of [dbPath, `${dbPath}-wal`, `${dbPath}-shm`]) rmSync(f, { force: true });
    await startScheduler();
    await connected();
    // The agent's key is pinned afresh (its first registration here) and every certificate comes back.
    await eventually(
      () => certificatesOf({ instanceUuid: 'vm-cert-nvme0-second' }),
      (c) => c.length === 1,
      20_000,
    );
    expect((await certificatesOf({ instanceUuid: 'vm-cert-nvme0-second' }))[0]!.hash).toBe(held[0]!.hash);
    // In shares: one registration each.
    expect(
      schedulerLogs.matching((l) => l.msg === 'erasure certificates re-supplied by the agent stored').length,
    ).toBeGreaterThan(1);
    // Every share arrives (the last one after the others): each first tenant's certificate is back.
    for (const ctrl of CTRLS) {
      await eventually(
        () => certificatesOf({ instanceUuid: `vm-cert-${ctrl}` }),
        (c) => c.length === 1,
        20_000,
      );
    }
    expect(
      schedulerLogs.matching((l) => l.msg.startsWith('erasure certificates the agent supplied were refused')),
    ).toEqual([]);
    await eventually(
      () => getDevice(client, HOST, address.get('nvme0')!),
      (x) => x.deviceState === DeviceState.DEVICE_STATE_AVAILABLE,
      20_000,
    );
    for (const ctrl of CTRLS) await createNvmeProfile(client, ctrl);
    const d = await useAndRelease('nvme0', 'vm-after-loss');
    expect(stateName(d.deviceState), d.errorReason).toBe('DEVICE_STATE_AVAILABLE');
    const [cert] = await certificatesOf({ instanceUuid: 'vm-after-loss' });
    const c = decodeCertificate(cert!.jws).claims;
    expect(c.seq).toBe(3);
    expect(c.prev).toBe(held[0]!.hash);
    expect(certificateHash(held[0]!.jws)).toBe(held[0]!.hash);
  }, 120_000);
});
