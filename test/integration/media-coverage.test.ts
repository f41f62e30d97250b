/**
 * Coverage is the judge's, not the driver's (docs/decisions.md 40, and 41's
 * cleanup side), through a real agent's CleanupDevice stream on simulated
 * hosts, with inputs the simulator does not produce by itself:
 *
 * - a namespace the tenant created and left detached;
 * - the blocks of a namespace the tenant created and deleted, which
 *   `create-ns` hands to the next tenant (decision 18);
 * - commands that exit 0 and do nothing (a format, a delete-ns);
 * - a driver whose target list is short, and the vendor example as it
 *   shipped (formats and reads back only what sysfs shows);
 * - a dual-port drive: two controllers (two PCI functions) of one NVM
 *   subsystem, cleaned through the second.
 *
 * Every verdict is judged from the media — the simulator's backing files —
 * not from what Berth reports: a refused cleanup must leave the tenant's
 * bytes findable, an accepted one none anywhere a next tenant could read.
 */
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { credentials } from '@grpc/grpc-js';
import { afterEach, describe, expect, it } from 'vitest';
import {
  AgentServiceClient,
  type CleanupDeviceResponse,
  type CleanupEvent,
  CleanupPhase,
} from '../../src/gen/berth/agent/v1/agent.js';
import { NamespaceManagement } from '../../src/gen/berth/agent/v1/cleanup_proof.js';
import { ExecRunner } from '../../src/plugins/exec-runner.js';
import { Agent } from '../../src/server/agent/agent.js';
import { parseAgentConfig } from '../../src/server/agent/config.js';
import {
  buildSimHost,
  QEMU_NS_MANAGEMENT_FAULTS,
  type SimHost,
  type SimHostDefinition,
  type SimNvmeController,
} from '../../src/sim/host.js';
import { SimKernelRunner, syncNvmeNamespaces } from '../../src/sim/kernel.js';
import { readableTenantData, readNvmeSimState, TENANT_MARK } from '../../src/sim/nvme-cli/index.js';
import { tempDir } from '../helpers/agent.js';
import { collect } from '../helpers/grpc.js';

const run = promisify(execFile);
const MIB = 1024 * 1024;
const NVME0 = '0000:3d:00.0';
const NVME1 = '0000:3e:00.0';
const FIXTURES = join(process.cwd(), 'test/fixtures/drivers');

function host(controllers: Partial<SimNvmeController>[]): SimHostDefinition {
  return {
    host: 'coverage-host',
    pci: {},
    nvme: controllers.map((c, i) => ({
      address: i === 0 ? NVME0 : NVME1,
      vendorId: '144d',
      productId: 'a824',
      controller: `nvme${i}`,
      model: 'Coverage NVMe',
      serial: 'COVERAGE0',
      caps: {},
      namespaces: [],
      ...c,
    })),
    pciDeviceSpec: [],
    nvmeDeviceSpec: [{ vendor_id: '144d' }],
  };
}

describe("a cleanup is judged against the agent's census of the media", () => {
  const stops: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const s of stops.splice(0).reverse()) await s();
  });

  /** A simulated host and a real agent on it, whose NVMe devices the named driver manages. */
  async function start(def: SimHostDefinition, driver = 'nvme') {
    const dir = await tempDir('berth-coverage-');
    stops.push(dir.cleanup);
    const sim = await buildSimHost(join(dir.path, 'host'), def);
    const { nvme, ...base } = sim.agentConfig;
    const entry = driver.startsWith('fixture:') ? join(FIXTURES, `${driver.slice(8)}.ts`) : driver;
    const section = driver.startsWith('fixture:') ? driver.slice(8) : driver;
    const agent = await Agent.start({
      config: parseAgentConfig(
        { ...base, listen: '127.0.0.1:0', enabled_drivers: ['pci', entry], [section]: nvme },
        {},
        dir.path,
      ),
      bootIdFile: sim.bootIdFile,
      // The kernel's part: after ns-rescan, sysfs shows what the controllers have attached.
      runner: new SimKernelRunner(new ExecRunner(), sim.sysfs, sim.nvmeStatePath, sim.nvmeCli),
    });
    const client = new AgentServiceClient(agent.address, credentials.createInsecure());
    stops.push(async () => {
      client.close();
      await agent.stop();
    });
    return { sim, agent, client };
  }

  async function clean(client: AgentServiceClient, address: string, jobId: string): Promise<CleanupEvent> {
    const msgs = await collect<CleanupDeviceResponse>(
      client.cleanupDevice({ address, jobId, previousCertificate: undefined }),
      () => false,
      120_000,
    );
    return msgs.at(-1)!.event!;
  }

  /** What a tenant does through nvme-cli on the host (its guest owns the controller while it does). */
  const tenant = (sim: SimHost, ...args: string[]) =>
    run(sim.nvmeCli, args, { env: { ...process.env, LC_ALL: 'C' } });

  /** The tenant's recognisable bytes over the whole of a namespace's backing file. */
  async function fill(sim: SimHost, nsid: number): Promise<string> {
    const state = await readNvmeSimState(sim.nvmeStatePath);
    const ns = state.controllers[0]!.namespaces.find((n) => n.nsid === nsid)!;
    const data = Buffer.from(TENANT_MARK.repeat(Math.ceil(ns.sizeBytes / TENANT_MARK.length))).subarray(
      0,
      ns.sizeBytes,
    );
    const { writeFile } = await import('node:fs/promises');
    await writeFile(ns.devPath, data);
    return ns.devPath;
  }

  /** The tenant creates a namespace and writes it full; it stays detached (allocated, inactive). */
  async function createDetached(sim: SimHost, sizeBytes: number): Promise<{ nsid: number; path: string }> {
    const blocks = String(sizeBytes / 512);
    const out = await tenant(
      sim,
      'create-ns',
      join(sim.devRoot, 'nvme0'),
      '--nsze',
      blocks,
      '--ncap',
      blocks,
      '--flbas',
      '0',
    );
    const nsid = Number(/created nsid:(\d+)/.exec(out.stdout)![1]);
    return { nsid, path: await fill(sim, nsid) };
  }

  /** The tenant creates a namespace, writes it full and deletes it: its bytes stay on the media. */
  async function createWriteDelete(sim: SimHost, sizeBytes: number): Promise<void> {
    const { nsid } = await createDetached(sim, sizeBytes);
    await tenant(sim, 'delete-ns', join(sim.devRoot, 'nvme0'), '-n', String(nsid));
  }

  const nsMgmt = { nsManagement: true, wzs: true } as const;

  it('the vendor example as it shipped is refused: the detached namespace the tenant created keeps its bytes', async () => {
    const { sim, client } = await start(
      host([{ caps: nsMgmt, tnvmcapBytes: 2 * MIB, namespaces: [{ nsid: 1, sizeBytes: MIB }] }]),
      'fixture:vendor-example-v1',
    );
    await fill(sim, 1);
    const detached = await createDetached(sim, MIB);
    const last = await clean(client, NVME0, 'v1-detached');
    expect(last.phase).toBe(CleanupPhase.CLEANUP_PHASE_FAILED);
    expect(last.message).toBe(
      `the proof covers less than the media: namespace ${detached.nsid} (detached, 1 MiB) was not covered`,
    );
    expect(last.proof).toBeUndefined();
    // From the media: the namespace it formatted is clean, the detached one still holds every byte.
    expect(await readableTenantData(sim.nvmeStatePath, 'nvme0')).toEqual([`${detached.path}@0`]);
  });

  it('the vendor example as it shipped is refused over stale blocks, which create-ns hands to the next tenant', async () => {
    const { sim, client } = await start(
      host([{ caps: nsMgmt, tnvmcapBytes: 4 * MIB, namespaces: [{ nsid: 1, sizeBytes: MIB }] }]),
      'fixture:vendor-example-v1',
    );
    await createWriteDelete(sim, 2 * MIB);
    const last = await clean(client, NVME0, 'v1-stale');
    expect(last.phase).toBe(CleanupPhase.CLEANUP_PHASE_FAILED);
    expect(last.message).toMatch(
      /^the proof covers less than the media: 3 MiB of unallocated capacity \(UNVMCAP of TNVMCAP 4194304 bytes\) was not covered/,
    );
    // The next tenant creates a namespace and reads the previous tenant's bytes in it (decision 18).
    const out = await tenant(
      sim,
      'create-ns',
      join(sim.devRoot, 'nvme0'),
      '--nsze',
      '6144',
      '--ncap',
      '6144',
      '--flbas',
      '0',
    );
    const nsid = Number(/created nsid:(\d+)/.exec(out.stdout)![1]);
    const created = (await readNvmeSimState(sim.nvmeStatePath)).controllers[0]!.namespaces.find(
      (n) => n.nsid === nsid,
    )!;
    expect((await readFile(created.devPath)).includes(TENANT_MARK)).toBe(true);
  });

  it('the vendor example covers both: consolidated over the capacity, formatted, read back; nothing readable left', async () => {
    const { sim, client } = await start(
      host([{ caps: nsMgmt, tnvmcapBytes: 4 * MIB, namespaces: [{ nsid: 1, sizeBytes: MIB }] }]),
      'nvme-vendor-example',
    );
    await fill(sim, 1);
    await createDetached(sim, MIB);
    await createWriteDelete(sim, MIB);
    expect((await readableTenantData(sim.nvmeStatePath, 'nvme0')).length).toBeGreaterThanOrEqual(3);
    const last = await clean(client, NVME0, 'vendor-all');
    expect(last.message).toMatch(/^device is clean: /);
    expect(last.phase).toBe(CleanupPhase.CLEANUP_PHASE_SUCCEEDED);
    expect(last.proof?.census).toMatchObject({
      controller: 'nvme0',
      totalCapacityBytes: 4 * MIB,
      unallocatedCapacityBytes: 0,
      namespaces: [{ nsid: 1, sizeBytes: 4 * MIB, coveredBy: 'read-back' }],
      namespacesBefore: [
        { nsid: 1, sizeBytes: MIB, attached: true },
        { nsid: 2, sizeBytes: MIB, attached: false },
      ],
    });
    expect(await readableTenantData(sim.nvmeStatePath, 'nvme0')).toEqual([]);
  });

  it('a format that exits 0 and erases nothing is refused, and the bytes are still there', async () => {
    const { sim, client } = await start(
      host([
        {
          caps: { wzs: true },
          namespaces: [{ nsid: 1, sizeBytes: MIB }],
          faults: { format: { mode: 'noop' } },
        },
      ]),
      'nvme-vendor-example',
    );
    const path = await fill(sim, 1);
    const last = await clean(client, NVME0, 'noop-format');
    expect(last.phase).toBe(CleanupPhase.CLEANUP_PHASE_FAILED);
    expect(last.message).toBe('read-back not accepted: the read-back of nvme0n1 found data at byte 0');
    expect(await readableTenantData(sim.nvmeStatePath, 'nvme0')).toEqual([`${path}@0`]);
  });

  it('a delete-ns that exits 0 and deletes nothing fails the consolidation; nothing is lost or claimed', async () => {
    const { sim, client } = await start(
      host([
        {
          caps: nsMgmt,
          tnvmcapBytes: 2 * MIB,
          namespaces: [{ nsid: 1, sizeBytes: MIB }],
          faults: { 'delete-ns': { mode: 'noop' } },
        },
      ]),
    );
    await fill(sim, 1);
    const detached = await createDetached(sim, MIB);
    const last = await clean(client, NVME0, 'noop-delete');
    expect(last.phase).toBe(CleanupPhase.CLEANUP_PHASE_FAILED);
    expect(last.message).toMatch(/every namespace of nvme0 was deleted but create-ns failed/);
    const found = await readableTenantData(sim.nvmeStatePath, 'nvme0');
    expect(found).toContain(`${detached.path}@0`);
    expect(found).toContain(`${join(sim.devRoot, 'nvme0n1')}@0`);
  });

  it('a driver whose target list is short is refused, naming the namespace it left out', async () => {
    const { sim, client } = await start(
      host([
        {
          caps: { wzs: true },
          namespaces: [
            { nsid: 1, sizeBytes: MIB },
            { nsid: 2, sizeBytes: 2 * MIB },
          ],
        },
      ]),
      'fixture:short-targets',
    );
    await fill(sim, 1);
    const second = await fill(sim, 2);
    const last = await clean(client, NVME0, 'short');
    expect(last.phase).toBe(CleanupPhase.CLEANUP_PHASE_FAILED);
    expect(last.message).toBe(
      'the proof covers less than the media: namespace 2 (nvme0n2, 2 MiB) was not covered',
    );
    // The one it named is zero; the one it left out is not.
    expect(await readableTenantData(sim.nvmeStatePath, 'nvme0')).toEqual([`${second}@0`]);
  });

  it('a dual-port drive: both controllers share one NQN and one media; a cleanup through the second covers the subsystem', async () => {
    const shared = {
      subsystem: 0,
      caps: { wzs: true, nsManagement: true },
      reportCapacity: false,
      faults: QEMU_NS_MANAGEMENT_FAULTS,
    };
    const { sim, agent, client } = await start(
      host([
        {
          ...shared,
          cntlid: 1,
          namespaces: [
            { nsid: 1, sizeBytes: 2 * MIB },
            // Attached to the first controller only: the second reaches it only by attaching it.
            { nsid: 2, sizeBytes: MIB, attachedTo: [1] },
            { nsid: 3, sizeBytes: MIB, attachedTo: [] },
          ],
        },
        { ...shared, cntlid: 2, faults: undefined },
      ]),
    );
    // The agent offers two devices; sysfs gives both the subsystem's NQN and the shared namespace.
    const devices = [agent.inventory.get(NVME0)!, agent.inventory.get(NVME1)!];
    expect(devices.map((d) => [d.attributes.nvme_controller, d.attributes.namespaces])).toEqual([
      ['nvme0', 'nvme0n1,nvme0n2'],
      ['nvme1', 'nvme0n1'],
    ]);
    const nqn = (c: string) => readFile(join(sim.sysfsRoot, 'class/nvme', c, 'subsysnqn'), 'utf8');
    expect(await nqn('nvme1')).toBe(await nqn('nvme0'));
    for (const n of [1, 2, 3]) await fill(sim, n);

    const last = await clean(client, NVME1, 'through-nvme1');
    expect(last.message).toMatch(/^device is clean: /);
    expect(last.phase).toBe(CleanupPhase.CLEANUP_PHASE_SUCCEEDED);
    expect(last.proof?.census).toMatchObject({
      controller: 'nvme1',
      namespaces: [
        { nsid: 1, coveredBy: 'read-back' },
        { nsid: 2, coveredBy: 'read-back' },
        { nsid: 3, coveredBy: 'read-back' },
      ],
      namespacesBefore: [
        { nsid: 1, attached: true },
        { nsid: 2, attached: false },
        { nsid: 3, attached: false },
      ],
      namespaceManagement: NamespaceManagement.NAMESPACE_MANAGEMENT_REFUSED,
    });
    expect(last.proof?.census?.totalCapacityBytes).toBeUndefined();
    // From the media: nothing readable through either controller.
    expect(await readableTenantData(sim.nvmeStatePath, 'nvme0')).toEqual([]);
    expect(await readableTenantData(sim.nvmeStatePath, 'nvme1')).toEqual([]);
    // And sysfs (the kernel's view) now shows nvme1 reaching all three.
    await syncNvmeNamespaces(sim.sysfs, sim.nvmeStatePath);
    const { readNvmeController } = await import('../../src/plugins/nvme/sysfs-nvme.js');
    expect((await readNvmeController(sim.sysfsRoot, 'nvme1'))?.namespaces.map((n) => n.nsid)).toEqual([
      1, 2, 3,
    ]);
  });
});
