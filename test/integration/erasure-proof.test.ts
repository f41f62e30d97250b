/**
 * The three ways a cleanup used to report success with tenant data still on
 * the media (docs/decisions.md 14-16), each driven through the agent's CleanupDevice stream on
 * a simulated host with inputs the simulator does not produce by itself:
 *
 * 1. a sanitize log that already said "completed" and a sanitize that exits 0
 *    and does nothing, with tenant data where no fingerprint looks;
 * 2. a zeroing that writes nothing on a namespace over 256 MiB, with one tenant
 *    block in the middle (the read-back used to sample ~1 MiB);
 * 3. a driver that says it cleans but never implemented `cleanup`.
 */
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { credentials } from '@grpc/grpc-js';
import { afterEach, describe, expect, it } from 'vitest';
import {
  AgentServiceClient,
  type CleanupDeviceResponse,
  type CleanupEvent,
  CleanupPhase,
} from '../../src/gen/berth/agent/v1/agent.js';
import { Agent } from '../../src/server/agent/agent.js';
import { parseAgentConfig } from '../../src/server/agent/config.js';
import { buildSimHost, type SimHost, type SimNvmeController } from '../../src/sim/host.js';
import { startSimAgent, tempDir } from '../helpers/agent.js';
import { collect } from '../helpers/grpc.js';

const ADDRESS = '0000:3d:00.0';
const MIB = 1024 * 1024;
const SECRET = Buffer.from('TENANT-SECRET-'.repeat(292).slice(0, 4096));

async function plant(path: string, offset: number): Promise<void> {
  const fh = await open(path, 'r+');
  try {
    await fh.write(SECRET, 0, SECRET.length, offset);
  } finally {
    await fh.close();
  }
}

async function holdsSecretAt(path: string, offset: number): Promise<boolean> {
  const fh = await open(path, 'r');
  try {
    const buf = Buffer.alloc(SECRET.length);
    await fh.read(buf, 0, buf.length, offset);
    return buf.equals(SECRET);
  } finally {
    await fh.close();
  }
}

function nvmeHost(ctrl: Partial<SimNvmeController>) {
  return {
    host: 'proof-host',
    pci: {},
    nvme: [
      {
        address: ADDRESS,
        vendorId: '144d',
        productId: 'a824',
        controller: 'nvme0',
        model: 'Proof NVMe',
        serial: 'PROOF0',
        caps: {},
        namespaces: [{ nsid: 1, sizeBytes: MIB }],
        ...ctrl,
      },
    ],
    pciDeviceSpec: [],
    nvmeDeviceSpec: [{ vendor_id: '144d' }],
  };
}

describe('a cleanup succeeds only on proof of erasure', () => {
  const stops: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const s of stops.splice(0).reverse()) await s();
  });

  async function agentOn(sim: SimHost, root: string): Promise<AgentServiceClient> {
    const agent = await Agent.start({
      config: parseAgentConfig({ ...sim.agentConfig, listen: '127.0.0.1:0' }, {}, root),
      bootIdFile: sim.bootIdFile,
    });
    const client = new AgentServiceClient(agent.address, credentials.createInsecure());
    stops.push(async () => {
      client.close();
      await agent.stop();
    });
    return client;
  }

  async function clean(client: AgentServiceClient, address: string, jobId: string): Promise<CleanupEvent> {
    const msgs = await collect<CleanupDeviceResponse>(
      client.cleanupDevice({ address, jobId, previousCertificate: undefined }),
      () => false,
      120_000,
    );
    return msgs.at(-1)!.event!;
  }

  it('fails a no-op sanitize when the log already said "completed" before the command', async () => {
    const dir = await tempDir('berth-proof-');
    stops.push(dir.cleanup);
    const sim = await buildSimHost(
      join(dir.path, 'host'),
      nvmeHost({ caps: { ces: true }, sanitizeMs: 300 }),
    );
    const ns = join(sim.devRoot, 'nvme0n1');
    const client = await agentOn(sim, dir.path);
    // The previous tenant's cleanup: a real sanitize, which leaves "completed" in the log.
    expect((await clean(client, ADDRESS, 'previous')).phase).toBe(CleanupPhase.CLEANUP_PHASE_SUCCEEDED);
    // The next tenant writes where no fingerprint ever looked; then the controller drops the sanitize.
    await plant(ns, 40960);
    await sim.setFault('nvme0', 'sanitize', { mode: 'noop' });
    const last = await clean(client, ADDRESS, 'stale-log');
    expect(last.phase).toBe(CleanupPhase.CLEANUP_PHASE_FAILED);
    expect(last.message).toMatch(
      /sanitize not proven: .*before the command it said \(1\) completed.* never in progress, and Global Data Erased did not go from 0 to 1/,
    );
    expect(last.proof).toBeUndefined();
    expect(await holdsSecretAt(ns, 40960)).toBe(true);
  });

  it('fails a zeroing that wrote nothing on a 512 MiB namespace with one tenant block in the middle', async () => {
    const dir = await tempDir('berth-proof-');
    stops.push(dir.cleanup);
    const sim = await buildSimHost(
      join(dir.path, 'host'),
      nvmeHost({
        caps: { wzs: true },
        namespaces: [{ nsid: 1, sizeBytes: 512 * MIB, lbaSize: 4096 }],
        faults: { 'write-zeroes': { mode: 'noop' } },
      }),
    );
    const ns = join(sim.devRoot, 'nvme0n1');
    const middle = 300 * MIB + 8192;
    await plant(ns, middle);
    const client = await agentOn(sim, dir.path);
    const last = await clean(client, ADDRESS, 'noop-zero');
    expect(last.phase).toBe(CleanupPhase.CLEANUP_PHASE_FAILED);
    expect(last.message).toBe(
      `read-back not accepted: the read-back of nvme0n1 found data at byte ${middle}`,
    );
    expect(await holdsSecretAt(ns, middle)).toBe(true);
  });

  it('fails the cleanup of a driver that says it cleans but never implemented cleanup()', async () => {
    const sim = await startSimAgent(
      { functions: [{ address: '0000:5e:00.0', vendorId: '8086', productId: '10fb', driver: 'ixgbe' }] },
      {
        enabled_drivers: [join(process.cwd(), 'test/fixtures/drivers/forgetful.ts')],
        forgetful: { device_spec: [{ vendor_id: '8086' }] },
      },
    );
    stops.push(sim.stop);
    expect(sim.agent.inventory.get('0000:5e:00.0')?.cleanupAction).toBe('vendor-wipe');
    const client = new AgentServiceClient(sim.agent.address, credentials.createInsecure());
    stops.push(async () => client.close());
    const last = await clean(client, '0000:5e:00.0', 'forgetful-1');
    expect(last.phase).toBe(CleanupPhase.CLEANUP_PHASE_FAILED);
    expect(last.message).toMatch(
      /driver "forgetful" says it cleans 0000:5e:00.0 but does not implement cleanup\(\)/,
    );
  });
});
