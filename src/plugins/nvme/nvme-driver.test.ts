import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { available, losetup, root } from '../../../test/helpers/prerequisites.js';
import { readNvmeSimState } from '../../sim/nvme-cli/index.js';
import type { CleanupProgress, DiscoveredDevice } from '../types.js';
import { NvmeDriver } from './nvme-driver.js';
import {
  ADDRESS,
  holdsTenantData,
  isAllZero,
  makeTestHost,
  type TestHost,
  type TestHostOptions,
  writeTenantData,
} from './test-host.js';

const PHASES: CleanupProgress['phase'][] = [
  'preparing',
  'sanitizing',
  'namespace_reset',
  'zeroing',
  'verifying',
];

/** Phases never go back, and within a phase the percent never decreases. */
function expectOrderedProgress(events: CleanupProgress[]): void {
  let phase = 0;
  let percent = -1;
  for (const e of events) {
    const i = PHASES.indexOf(e.phase);
    expect(i, `phase ${e.phase} after ${PHASES[phase]}`).toBeGreaterThanOrEqual(phase);
    if (i > phase) percent = -1;
    phase = i;
    if (e.percent !== undefined && e.step !== 'read-back') {
      expect(e.percent).toBeGreaterThanOrEqual(percent);
      percent = e.percent;
    }
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

describe('NvmeDriver on the simulator', () => {
  let host: TestHost | undefined;
  afterEach(async () => {
    await host?.dispose();
    host = undefined;
  });

  async function setup(
    opts: TestHostOptions & { spec?: Record<string, unknown>; config?: Record<string, unknown> } = {},
  ): Promise<{ host: TestHost; driver: NvmeDriver }> {
    host = await makeTestHost(opts);
    const driver = new NvmeDriver({
      config: {
        device_spec: [{ vendor_id: '144d', ...opts.spec }],
        nvme_cli: host.nvmeCli,
        poll_interval: 0.05,
        ...opts.config,
      },
    });
    return { host, driver };
  }

  async function discoverOne(driver: NvmeDriver, h: TestHost): Promise<DiscoveredDevice> {
    const result = await driver.discover(h.ctx);
    expect(result.excluded).toEqual([]);
    expect(result.devices).toHaveLength(1);
    return result.devices[0]!;
  }

  const nsPath = (h: TestHost, nsid: number) => join(h.devRoot, `nvme0n${nsid}`);

  describe('initHost', () => {
    it('accepts an nvme-cli that reports a version', async () => {
      const { host: h, driver } = await setup();
      await driver.initHost(h.ctx);
      expect(driver.nvmeCliVersion).toBe('2.3');
    });

    it('throws a clear error when nvme-cli is missing', async () => {
      const { host: h } = await setup();
      const driver = new NvmeDriver({ config: { nvme_cli: join(h.root, 'no-nvme') } });
      await expect(driver.initHost(h.ctx)).rejects.toThrow(
        /nvme-cli not usable: '.*no-nvme' cannot be run \(ENOENT\)/,
      );
    });

    it('throws when the program prints no version', async () => {
      const { host: h } = await setup();
      const driver = new NvmeDriver({ config: { nvme_cli: '/bin/false' } });
      await expect(driver.initHost(h.ctx)).rejects.toThrow(
        /nvme-cli not usable: '\/bin\/false' 'version' exited 1/,
      );
    });
  });

  describe('discover', () => {
    it('identifies the controller and reports traits, class, attributes and the locked-in action', async () => {
      // 0xa0000003: NODMMAS=10b, CES, BES — printed by 2.3 as a negative int32.
      const { host: h, driver } = await setup({
        controller: { sanicap: 0xa0000003, oncs: 0x5f, oacs: 0x1e, tnvmcapBytes: 1_000_000_000_000 },
        spec: { traits: 'fast', live_migratable: true },
      });
      const d = await discoverOne(driver, h);
      expect(d).toMatchObject({
        address: ADDRESS,
        type: 'NVME',
        driver: 'nvme',
        resourceClass: 'CUSTOM_NVME_144D_A808',
        supportsCleaning: true,
        cleanupAction: 'sanitize-crypto',
        health: 'healthy',
        liveMigratable: true,
      });
      expect(d.traits).toEqual(
        [
          'CUSTOM_FAST',
          'HW_NVME_BES',
          'HW_NVME_CES',
          'HW_NVME_WZS',
          'HW_PCI_LIVE_MIGRATABLE',
          'OWNER_BERTH',
        ].sort(),
      );
      expect(d.attributes).toMatchObject({
        nvme_controller: 'nvme0',
        model: 'Berth Simulated NVMe',
        capacity_bytes: '1000000000000',
        sanicap: '0xa0000003',
        oncs: '0x5f',
        oacs: '0x1e',
        ns_management: 'true',
        namespaces: 'nvme0n1',
      });
    });

    it('honours a resource_class override and picks write-zeroes for zero/auto', async () => {
      const { host: h, driver } = await setup({
        spec: { clear_action: 'zero', resource_class: 'fast_nvme' },
      });
      const d = await discoverOne(driver, h);
      expect(d.resourceClass).toBe('CUSTOM_FAST_NVME');
      expect(d.cleanupAction).toBe('write-zeroes');
    });

    it('excludes a device whose hardware cannot satisfy the policy, with the reason', async () => {
      const { host: h, driver } = await setup({
        controller: { sanicap: 0 },
        spec: { clear_action: 'sanitize' },
      });
      const r = await driver.discover(h.ctx);
      expect(r.devices).toEqual([]);
      expect(r.excluded).toEqual([
        {
          address: ADDRESS,
          driver: 'nvme',
          reason: expect.stringMatching(/clear_action=sanitize.*does not report/),
        },
      ]);
    });

    it('excludes a device whose id-ctrl fails, with the NVMe status text and hex', async () => {
      const { host: h, driver } = await setup({
        controller: { faults: { 'id-ctrl': { mode: 'error', status: 0x4002 } } },
      });
      const r = await driver.discover(h.ctx);
      expect(r.devices).toEqual([]);
      expect(r.excluded[0]?.reason).toMatch(/id-ctrl failed: .*Invalid Field in Command.*\(0x4002\)/);
    });

    it('ignores devices the device_spec does not match', async () => {
      const { host: h, driver } = await setup({ spec: { vendor_id: '8086' } });
      expect(await driver.discover(h.ctx)).toEqual({ devices: [], excluded: [] });
    });

    it('keeps a device handed to a guest (vfio-pci, no controller) with its last identity', async () => {
      const { host: h, driver } = await setup();
      await discoverOne(driver, h);
      await h.builder.setDriver(ADDRESS, 'vfio-pci');
      const d = await discoverOne(driver, h);
      expect(d).toMatchObject({
        health: 'healthy',
        cleanupAction: 'sanitize-crypto',
        kernelDriver: 'vfio-pci',
      });
      // An agent restart while the guest holds it: the identity kept in the state dir answers.
      const restarted = new NvmeDriver({
        config: { device_spec: [{ vendor_id: '144d' }], nvme_cli: h.nvmeCli },
      });
      expect(await discoverOne(restarted, h)).toMatchObject({
        health: 'healthy',
        cleanupAction: 'sanitize-crypto',
      });
      // Nothing kept (a new state dir): unknown, so unhealthy and without an action.
      const empty = await mkdtemp(join(tmpdir(), 'berth-nvme-state-'));
      const fresh = new NvmeDriver({ config: { device_spec: [{ vendor_id: '144d' }], nvme_cli: h.nvmeCli } });
      const unknown = (await fresh.discover({ ...h.ctx, stateDir: empty })).devices[0];
      expect(unknown).toMatchObject({ health: 'unhealthy', cleanupAction: null });
      await rm(empty, { recursive: true, force: true });
    });
  });

  describe('cleanup', () => {
    it('sanitize-crypto: starts one crypto sanitize, follows the log, tenant data is gone', async () => {
      // Each simulator run costs a node start-up (~0.5 s): 4 s leaves room for several polls in progress.
      const { host: h, driver } = await setup({ controller: { sanitize: { durationMs: 4000 } } });
      const d = await discoverOne(driver, h);
      expect(d.cleanupAction).toBe('sanitize-crypto');
      await writeTenantData(nsPath(h, 1), 1 << 20);
      const ctx = h.cleanupCtx();
      await driver.cleanup(d, ctx);
      expect(await holdsTenantData(nsPath(h, 1))).toBe(false);
      const sanitizes = (await h.invocations()).filter((i) => i.argv[0] === 'sanitize');
      expect(sanitizes.map((i) => i.argv)).toEqual([['sanitize', join(h.devRoot, 'nvme0'), '-a', '4']]);
      expectOrderedProgress(ctx.events);
      const sanitizing = ctx.events.filter((e) => e.phase === 'sanitizing' && e.percent !== undefined);
      expect(sanitizing.at(-1)?.percent).toBe(100);
      expect(sanitizing.some((e) => e.step === 'sanitize-log' && e.percent! > 0 && e.percent! < 100)).toBe(
        true,
      );
    });

    it('sanitize-block: block erase (-a 2) leaves zeros', async () => {
      const { host: h, driver } = await setup({
        controller: { sanicap: 0x2, sanitize: { durationMs: 300 } },
      });
      const d = await discoverOne(driver, h);
      expect(d.cleanupAction).toBe('sanitize-block');
      await writeTenantData(nsPath(h, 1), 1 << 20);
      await driver.cleanup(d, h.cleanupCtx());
      expect(await isAllZero(nsPath(h, 1))).toBe(true);
      const sanitizes = (await h.invocations()).filter((i) => i.argv[0] === 'sanitize');
      expect(sanitizes.map((i) => i.argv.slice(2))).toEqual([['-a', '2']]);
    });

    it('polls a sanitize that is already running instead of starting another', async () => {
      const { host: h, driver } = await setup({
        controller: {
          sanitize: { sstat: 2, sprog: 0, startedAt: Date.now(), durationMs: 5000, action: 4, cdw10: 4 },
        },
      });
      const d = await discoverOne(driver, h);
      await writeTenantData(nsPath(h, 1), 1 << 20);
      const ctx = h.cleanupCtx();
      await driver.cleanup(d, ctx);
      const argv = (await h.invocations()).map((i) => i.argv[0]);
      expect(argv.filter((a) => a === 'sanitize')).toHaveLength(0);
      expect(argv.filter((a) => a === 'sanitize-log').length).toBeGreaterThan(1);
      expect(ctx.events.some((e) => /already running/.test(e.message ?? ''))).toBe(true);
      expect(await holdsTenantData(nsPath(h, 1))).toBe(false);
    });

    it('throws with the NVMe status when the sanitize command fails', async () => {
      const { host: h, driver } = await setup({
        controller: { faults: { sanitize: { mode: 'error', status: 0x4002 } } },
      });
      const d = await discoverOne(driver, h);
      await expect(driver.cleanup(d, h.cleanupCtx())).rejects.toThrow(
        /sanitize .*Invalid Field in Command.*\(0x4002\)/,
      );
    });

    it('throws when the sanitize log reports the operation failed', async () => {
      const { host: h, driver } = await setup({
        controller: { faults: { sanitize: { mode: 'sanitize-fails' } }, sanitize: { durationMs: 200 } },
      });
      const d = await discoverOne(driver, h);
      await writeTenantData(nsPath(h, 1), 1 << 20);
      await expect(driver.cleanup(d, h.cleanupCtx())).rejects.toThrow(/sanitize failed .*\(3\)/);
      expect(await holdsTenantData(nsPath(h, 1))).toBe(true);
    });

    it('throws when a sanitize exits 0 but erased nothing', async () => {
      // The previous sanitize completed, so the log says "completed"; the noop sanitize changes nothing.
      const { host: h, driver } = await setup({
        controller: { faults: { sanitize: { mode: 'noop' } }, sanitize: { sstat: 1 } },
      });
      const d = await discoverOne(driver, h);
      await writeTenantData(nsPath(h, 1), 1 << 20);
      await expect(driver.cleanup(d, h.cleanupCtx())).rejects.toThrow(/nothing was erased/);
    });

    it('write-zeroes: consolidates several namespaces into one, zeroes it in chunks and reads it back', async () => {
      const { host: h, driver } = await setup({
        namespaces: [
          { nsid: 1, sizeBytes: 8 << 20 },
          { nsid: 2, sizeBytes: 8 << 20 },
        ],
        controller: { sanicap: 0, oncs: 0x5f, oacs: 0x1e, tnvmcapBytes: 40 << 20 },
      });
      const d = await discoverOne(driver, h);
      expect(d.cleanupAction).toBe('write-zeroes');
      await writeTenantData(nsPath(h, 1), 8 << 20);
      await writeTenantData(nsPath(h, 2), 8 << 20);
      const ctx = h.cleanupCtx();
      await driver.cleanup(d, ctx);

      const state = await readNvmeSimState(h.statePath);
      const ns = state.controllers[0]!.namespaces;
      expect(ns.map((n) => [n.nsid, n.sizeBytes, n.attached])).toEqual([[1, 40 << 20, true]]);
      expect(await isAllZero(nsPath(h, 1))).toBe(true);
      expect(existsSync(nsPath(h, 2)) && (await holdsTenantData(nsPath(h, 2)))).toBe(false);

      const calls = (await h.invocations()).map((i) => i.argv);
      const ctrl = join(h.devRoot, 'nvme0');
      const mgmt = calls.filter((a) => ['delete-ns', 'create-ns', 'attach-ns', 'ns-rescan'].includes(a[0]!));
      expect(mgmt).toEqual([
        ['delete-ns', ctrl, '-n', '0xFFFFFFFF'],
        [
          'create-ns',
          ctrl,
          '--nsze',
          String((40 << 20) / 512),
          '--ncap',
          String((40 << 20) / 512),
          '--flbas',
          '0',
        ],
        ['attach-ns', ctrl, '-n', '1', '-c', '1'],
        ['ns-rescan', ctrl],
      ]);
      const wz = calls.filter((a) => a[0] === 'write-zeroes').map((a) => a.slice(1));
      expect(wz).toEqual([
        [nsPath(h, 1), '-n', '1', '-s', '0', '-c', '65535'],
        [nsPath(h, 1), '-n', '1', '-s', '65536', '-c', '16383'],
      ]);
      expectOrderedProgress(ctx.events);
      expect(ctx.events.map((e) => e.phase)).toEqual(
        expect.arrayContaining(['namespace_reset', 'zeroing', 'verifying']),
      );
      const zeroing = ctx.events.filter((e) => e.phase === 'zeroing');
      expect(zeroing.at(-1)).toMatchObject({ bytesDone: 40 << 20, bytesTotal: 40 << 20, percent: 100 });
    });

    it('write-zeroes that exits 0 but writes nothing (noop) is caught by the read-back', async () => {
      const { host: h, driver } = await setup({
        controller: { sanicap: 0, faults: { 'write-zeroes': { mode: 'noop' } } },
      });
      const d = await discoverOne(driver, h);
      expect(d.cleanupAction).toBe('write-zeroes');
      await writeTenantData(nsPath(h, 1), 1 << 20);
      await expect(driver.cleanup(d, h.cleanupCtx())).rejects.toThrow(/left data on nvme0n1: read-back/);
    });

    it('shred: zeroes the namespace host-side when there is no Write Zeroes, then reads it back', async () => {
      const { host: h, driver } = await setup({ controller: { sanicap: 0, oncs: 0x57 } });
      const d = await discoverOne(driver, h);
      expect(d.cleanupAction).toBe('shred');
      await writeTenantData(nsPath(h, 1), 1 << 20);
      const ctx = h.cleanupCtx();
      await driver.cleanup(d, ctx);
      expect(await isAllZero(nsPath(h, 1))).toBe(true);
      expectOrderedProgress(ctx.events);
      expect(ctx.events.filter((e) => e.step === 'shred').at(-1)).toMatchObject({ percent: 100 });
    });

    it('a hung nvme command is ended by the abort signal, and its process is gone', async () => {
      const { host: h, driver } = await setup({ controller: { faults: { sanitize: { mode: 'hang' } } } });
      const d = await discoverOne(driver, h);
      const ac = new AbortController();
      // Abort once the hanging sanitize is running (machine load varies; a fixed delay would race).
      const poll = setInterval(async () => {
        if ((await h.invocations()).some((i) => i.argv[0] === 'sanitize')) {
          clearInterval(poll);
          setTimeout(() => ac.abort(new Error('agent stopping')), 300);
        }
      }, 50);
      await expect(driver.cleanup(d, h.cleanupCtx(ac.signal))).rejects.toThrow(/aborted: agent stopping/);
      clearInterval(poll);
      const hung = (await h.invocations()).find((i) => i.argv[0] === 'sanitize');
      expect(hung).toBeDefined();
      expect(isAlive(hung!.pid)).toBe(false);
    });

    it('enforces cleanup_timeout itself and reports "timed out"', async () => {
      const { host: h, driver } = await setup({
        controller: { faults: { 'sanitize-log': { mode: 'hang' } } },
        config: { cleanup_timeout: 1 },
      });
      expect(driver.cleanupTimeoutMs).toBe(1000);
      const d = await discoverOne(driver, h);
      await expect(driver.cleanup(d, h.cleanupCtx())).rejects.toMatchObject({
        code: 'DEADLINE_EXCEEDED',
        message: expect.stringMatching(/timed out after 1 s/),
      });
      // Whatever step the timeout caught (id-ctrl on a loaded machine, else the hanging sanitize-log), no child survives.
      for (const i of await h.invocations()) expect(isAlive(i.pid), i.argv.join(' ')).toBe(false);
    });

    it('refuses a second concurrent cleanup of the same device', async () => {
      const { host: h, driver } = await setup({ controller: { sanitize: { durationMs: 800 } } });
      const d = await discoverOne(driver, h);
      const first = driver.cleanup(d, h.cleanupCtx());
      await expect(driver.cleanup(d, h.cleanupCtx())).rejects.toMatchObject({
        reason: 'CLEANUP_IN_PROGRESS',
      });
      await first;
      // The lock is released afterwards.
      await driver.cleanup(d, h.cleanupCtx());
    });

    it('refuses to clean when the function at the address is now another device', async () => {
      const { host: h, driver } = await setup();
      const d = await discoverOne(driver, h);
      await expect(driver.cleanup({ ...d, productId: 'ffff' }, h.cleanupCtx())).rejects.toThrow(
        /refusing to erase/,
      );
    });
  });
});

/** The zero path on a real block device: a loop device holding a pattern, zeroed by shred. */
const loopTest = 'the shred test on a loop device';
const canLoop = available(root(), loopTest) && available(losetup(), loopTest);

describe('shred path on a loop device', () => {
  it.skipIf(!canLoop)('zeroes a real block device end to end', async (t) => {
    const host = await makeTestHost({ controller: { sanicap: 0, oncs: 0x57 } });
    const backing = join(host.root, 'loop.img');
    await writeFile(backing, Buffer.alloc(4 << 20, 0));
    await writeTenantData(backing, 4 << 20);
    let loop: string;
    try {
      loop = execFileSync('losetup', ['-f', '--show', backing], { encoding: 'utf8' }).trim();
    } catch (e) {
      await host.dispose();
      t.skip(`losetup -f failed: ${(e as Error).message.split('\n')[0]}`);
      return;
    }
    try {
      const driver = new NvmeDriver({
        config: { device_spec: [{ vendor_id: '144d' }], nvme_cli: host.nvmeCli },
      });
      const [d] = (await driver.discover(host.ctx)).devices;
      expect(d?.cleanupAction).toBe('shred');
      // Point the namespace's device node at the loop device, and its size at the loop device's.
      const { rm, symlink } = await import('node:fs/promises');
      await rm(join(host.devRoot, 'nvme0n1'));
      await symlink(loop, join(host.devRoot, 'nvme0n1'));
      await host.builder.setNvmeNamespaces('nvme0', [{ nsid: 1, sizeBytes: 4 << 20 }]);
      await driver.cleanup(d!, host.cleanupCtx());
      const data = execFileSync('dd', [`if=${loop}`, 'bs=1M', 'status=none'], { maxBuffer: 8 << 20 });
      expect(data.length).toBe(4 << 20);
      expect(data.every((b) => b === 0)).toBe(true);
      expect(await readFile(backing).then((b) => b.includes('TENANT-SECRET-'))).toBe(false);
    } finally {
      execFileSync('losetup', ['-d', loop]);
      await host.dispose();
    }
  });
});
