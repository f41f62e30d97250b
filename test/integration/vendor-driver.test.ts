/**
 * The vendor driver template loads by name like the built-in drivers, takes the
 * devices moved into its own section, and scrubs them through the agent's
 * CleanupDevice stream: tenant data written before, none left after. A vendor
 * package written for driver API 2 (test/fixtures/driver-package-v2) still
 * loads and scrubs the same way, with one deprecation line (decision 82).
 */
import { join } from 'node:path';
import { credentials } from '@grpc/grpc-js';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { verifyCertificate } from '../../src/erasure/certificate.js';
import {
  AgentServiceClient,
  type CleanupDeviceResponse,
  CleanupPhase,
} from '../../src/gen/berth/agent/v1/agent.js';
import { Agent } from '../../src/server/agent/agent.js';
import { parseAgentConfig } from '../../src/server/agent/config.js';
import { buildSimHost, demoHostDefinition, type SimHost } from '../../src/sim/host.js';
import { tempDir } from '../helpers/agent.js';
import { collect } from '../helpers/grpc.js';
import { holdsTenantData, isAllZero, writeTenantData } from '../helpers/nvme-host.js';

const NVME0 = '0000:3d:00.0';

describe('the vendor example driver, loaded by name', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let sim: SimHost;
  let agent: Agent;
  let client: AgentServiceClient;

  beforeAll(async () => {
    dir = await tempDir('berth-vendor-');
    sim = await buildSimHost(join(dir.path, 'host'), demoHostDefinition('vendor-host'));
    const nvme = sim.agentConfig.nvme as Record<string, unknown>;
    agent = await Agent.start({
      config: parseAgentConfig(
        {
          ...sim.agentConfig,
          listen: '127.0.0.1:0',
          enabled_drivers: ['pci', 'nvme', 'nvme-vendor-example'],
          // nvme0 moves to the vendor driver; the generic driver keeps the others.
          nvme: {
            ...nvme,
            device_spec: [
              { vendor_id: '144d', address: '*:3e:00.0' },
              { address: '*:3f:00.0' },
              { address: '*:40:00.0' },
            ],
          },
          'nvme-vendor-example': { ...nvme, device_spec: [{ address: NVME0 }] },
        },
        {},
        dir.path,
      ),
    });
    client = new AgentServiceClient(agent.address, credentials.createInsecure());
  });
  afterAll(async () => {
    client?.close();
    await agent?.stop();
    await dir?.cleanup();
  });

  it('reports the devices of its section under its own name, next to the generic driver', async () => {
    const info = await new Promise<{ drivers: { name: string; source: string }[] }>((resolve, reject) =>
      client.getAgentInfo({}, (e, r) => (e ? reject(e) : resolve(r))),
    );
    expect(info.drivers.map((d) => [d.name, d.source])).toEqual([
      ['pci', 'builtin'],
      ['nvme', 'builtin'],
      ['nvme-vendor-example', 'builtin'],
    ]);
    const owners = Object.fromEntries(agent.inventory.list().map((d) => [d.address, d.driver]));
    expect(owners[NVME0]).toBe('nvme-vendor-example');
    // The locked-in action says what the vendor driver really runs.
    expect(agent.inventory.get(NVME0)?.cleanupAction).toBe('vendor-format-ses1');
    expect(agent.inventory.get('0000:3e:00.0')?.cleanupAction).toBe('sanitize-block');
    expect(owners['0000:3e:00.0']).toBe('nvme');
  });

  it('scrubs through CleanupDevice: tenant data gone, the stream ends in success', async () => {
    const ns = join(sim.devRoot, 'nvme0n1');
    await writeTenantData(ns, 16 * 1024 * 1024);
    expect(await holdsTenantData(ns)).toBe(true);
    const msgs = await collect<CleanupDeviceResponse>(
      client.cleanupDevice({ address: NVME0, jobId: 'vendor-1', previousCertificate: undefined }),
      () => false,
      60_000,
    );
    expect(msgs.at(-1)!.event!.phase).toBe(CleanupPhase.CLEANUP_PHASE_SUCCEEDED);
    expect(msgs.every((m) => m.event!.action === 'vendor-format-ses1')).toBe(true);
    expect(await holdsTenantData(ns)).toBe(false);
    expect(await isAllZero(ns)).toBe(true);
    // Its erasure certificate: signed by the agent's key, the format's NIST 800-88 category, the namespace read back whole.
    const { kid, publicJwk } = agent.signingKey;
    const c = verifyCertificate(msgs.at(-1)!.event!.certificate, [{ kid, jwk: publicJwk }]).claims;
    expect(c).toMatchObject({ action: 'vendor-format-ses1', address: NVME0, job_id: 'vendor-1', seq: 1 });
    expect(c.nist_800_88?.category).toBe('Purge');
    expect(c.proof).toMatchObject({
      read_back: 'full',
      bytes_read: 16 * 1024 * 1024,
      bytes_total: 16 * 1024 * 1024,
    });
  });
});

describe('a vendor driver package written for driver API 2', () => {
  const entry = join(process.cwd(), 'test/fixtures/driver-package-v2/index.ts');
  const lines: { level: number; msg: string; driver?: string; entry?: string; apiVersion?: string }[] = [];
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let sim: SimHost;
  let agent: Agent;
  let client: AgentServiceClient;

  beforeAll(async () => {
    dir = await tempDir('berth-vendor-v2-');
    sim = await buildSimHost(join(dir.path, 'host'), demoHostDefinition('vendor-v2-host'));
    const nvme = sim.agentConfig.nvme as Record<string, unknown>;
    const logger = pino({ level: 'info' }, { write: (line: string) => lines.push(JSON.parse(line)) });
    agent = await Agent.start({
      logger,
      config: parseAgentConfig(
        {
          ...sim.agentConfig,
          listen: '127.0.0.1:0',
          enabled_drivers: ['pci', 'nvme', entry],
          nvme: { ...nvme, device_spec: [{ vendor_id: '144d', address: '*:3e:00.0' }] },
          // The section is keyed by the module's file name.
          index: { ...nvme, device_spec: [{ address: NVME0 }] },
        },
        {},
        dir.path,
      ),
    });
    client = new AgentServiceClient(agent.address, credentials.createInsecure());
  });
  afterAll(async () => {
    client?.close();
    await agent?.stop();
    await dir?.cleanup();
  });

  it('loads, says once that it is deprecated, naming the package and the version, and reports its API', async () => {
    const deprecations = lines.filter((l) => /deprecated/.test(l.msg));
    expect(deprecations).toHaveLength(1);
    expect(deprecations[0]).toMatchObject({ level: 40, driver: 'acme-v2', entry, apiVersion: '2' });
    expect(deprecations[0]!.msg).toBe(
      `driver package ${JSON.stringify(entry)} uses driver API version 2, deprecated: it loads until version 4; ` +
        'rewrite it as a defineDriver definition (API 3, docs/drivers.md)',
    );
    const info = await new Promise<{
      drivers: { name: string; apiVersion: string; supportsCleaning: boolean }[];
    }>((resolve, reject) => client.getAgentInfo({}, (e, r) => (e ? reject(e) : resolve(r))));
    expect(info.drivers.map((d) => [d.name, d.apiVersion, d.supportsCleaning])).toEqual([
      ['pci', '3', false],
      ['nvme', '3', true],
      ['acme-v2', '2', true],
    ]);
    expect(agent.inventory.get(NVME0)).toMatchObject({
      driver: 'acme-v2',
      cleanupAction: 'acme-format-ses1',
    });
  });

  it('scrubs through CleanupDevice, judged like any driver: tenant data gone, success', async () => {
    const ns = join(sim.devRoot, 'nvme0n1');
    await writeTenantData(ns, 16 * 1024 * 1024);
    const msgs = await collect<CleanupDeviceResponse>(
      client.cleanupDevice({ address: NVME0, jobId: 'vendor-v2-1', previousCertificate: undefined }),
      () => false,
      60_000,
    );
    expect(msgs.at(-1)!.event!.phase).toBe(CleanupPhase.CLEANUP_PHASE_SUCCEEDED);
    expect(msgs.every((m) => m.event!.action === 'acme-format-ses1')).toBe(true);
    expect(await holdsTenantData(ns)).toBe(false);
    expect(await isAllZero(ns)).toBe(true);
    // Discovery passes and a cleanup add none: one line per load.
    expect(lines.filter((l) => /deprecated/.test(l.msg))).toHaveLength(1);
  });
});
