import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, open, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { attachLoop, detachLoop, loopAvailable } from '../../../test/helpers/loop.js';
import {
  ADDRESS,
  cleanAndJudge,
  holdsTenantData,
  isAllZero,
  makeTestHost,
  newNvmeDriver,
  type TestHost,
  type TestHostOptions,
  writeTenantData,
} from '../../../test/helpers/nvme-host.js';
import { judgeEvidence } from '../../server/agent/cleanup-judge.js';
import { readNvmeSimState } from '../../sim/nvme-cli/index.js';
import { withStateLock } from '../../sim/nvme-cli/state.js';
import type { CleanupProgress, DiscoveredDevice } from '../types.js';
import type { NvmeKitDriver } from './nvme-driver.js';

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
  ): Promise<{ host: TestHost; driver: NvmeKitDriver }> {
    host = await makeTestHost(opts);
    const driver = newNvmeDriver({
      config: {
        device_spec: [{ vendor_id: '144d', ...opts.spec }],
        nvme_cli: host.nvmeCli,
        poll_interval: 0.05,
        ...opts.config,
      },
    });
    return { host, driver };
  }

  async function discoverOne(driver: NvmeKitDriver, h: TestHost): Promise<DiscoveredDevice> {
    const result = await driver.discover(h.ctx);
    expect(result.excluded).toEqual([]);
    expect(result.devices).toHaveLength(1);
    return result.devices[0]!;
  }

  const nsPath = (h: TestHost, nsid: number) => join(h.devRoot, `nvme0n${nsid}`);

  /** Cleans and expects the agent's judge to accept the evidence; returns both. */
  async function cleanProven(driver: NvmeKitDriver, d: DiscoveredDevice, ctx = host!.cleanupCtx()) {
    const r = await cleanAndJudge(driver, d, ctx);
    if (!r.verdict.ok) throw new Error(`expected proof, got: ${r.verdict.reason}`);
    return { ...r, proof: r.verdict.proof };
  }

  /** Cleans and expects the judge to refuse; returns the reason. */
  async function cleanRefused(driver: NvmeKitDriver, d: DiscoveredDevice, ctx = host!.cleanupCtx()) {
    const r = await cleanAndJudge(driver, d, ctx);
    if (r.verdict.ok) throw new Error(`expected a refusal, got proof: ${JSON.stringify(r.verdict.proof)}`);
    return r.verdict.reason;
  }

  describe('write counters at discovery', () => {
    const smart = {
      dataUnitsRead: '0',
      dataUnitsWritten: '123',
      hostReadCommands: '0',
      hostWriteCommands: '45',
      powerCycles: '6',
      powerOnHours: '789',
      unsafeShutdowns: '0',
    };

    it("reports each controller's SMART write counters with its device (one smart-log per pass)", async () => {
      const { host: h, driver } = await setup({ controller: { smart } });
      const d = await discoverOne(driver, h);
      expect(d.writeCounters).toMatchObject({
        controller: 'nvme0',
        cntlid: 1,
        dataUnitsWritten: '123',
        hostWriteCommands: '45',
        powerCycles: '6',
        powerOnHours: '789',
      });
      expect((await h.invocations()).filter((i) => i.argv[0] === 'smart-log')).toHaveLength(1);
    });

    it('a log it cannot read leaves the counters out, never the device', async () => {
      const { host: h, driver } = await setup({
        controller: { smart, faults: { 'smart-log': { mode: 'error', status: 0x4002 } } },
      });
      const d = await discoverOne(driver, h);
      expect(d.writeCounters).toBeUndefined();
      expect(d.cleanupAction).not.toBeNull();
    });
  });

  describe('initHost', () => {
    it('accepts an nvme-cli that reports a version', async () => {
      const { host: h, driver } = await setup();
      await driver.initHost(h.ctx);
      expect(driver.kit.tool.version).toBe('2.3');
    });

    it('throws a clear error when nvme-cli is missing', async () => {
      const { host: h } = await setup();
      const driver = newNvmeDriver({ config: { nvme_cli: join(h.root, 'no-nvme') } });
      await expect(driver.initHost(h.ctx)).rejects.toThrow(
        /nvme-cli not usable: '.*no-nvme' cannot be run \(ENOENT\)/,
      );
    });

    it('throws when the program prints no version', async () => {
      const { host: h } = await setup();
      const driver = newNvmeDriver({ config: { nvme_cli: '/bin/false' } });
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
        spec: { traits: 'fast' },
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
        liveMigratable: false,
      });
      expect(d.traits).toEqual(
        ['CUSTOM_FAST', 'HW_NVME_BES', 'HW_NVME_CES', 'HW_NVME_WZS', 'OWNER_BERTH'].sort(),
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
      const restarted = newNvmeDriver({
        config: { device_spec: [{ vendor_id: '144d' }], nvme_cli: h.nvmeCli },
      });
      expect(await discoverOne(restarted, h)).toMatchObject({
        health: 'healthy',
        cleanupAction: 'sanitize-crypto',
      });
      // Nothing kept (a new state dir): unknown, so unhealthy and without an action.
      const empty = await mkdtemp(join(tmpdir(), 'berth-nvme-state-'));
      const fresh = newNvmeDriver({ config: { device_spec: [{ vendor_id: '144d' }], nvme_cli: h.nvmeCli } });
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
      const { evidence, proof } = await cleanProven(driver, d, ctx);
      expect(proof).toMatchObject({ method: 'sanitize', readBack: 'none', bytesTotal: 1 << 20 });
      // Armed (the canary cleared Global Data Erased), then seen running, then completed with GDE set.
      expect(evidence.sanitize).toMatchObject({
        sanact: 4,
        commandSent: true,
        armed: { globalErased: false },
        canaries: [{ target: 'nvme0n1', unchangedAfter: false }],
      });
      expect(evidence.sanitize!.after.map((x) => [x.status, x.globalErased])).toEqual([
        [2, false],
        [1, true],
      ]);
      expect(evidence.sanitize!.after.at(-1)!.scdw10).toBe(4);
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
      await cleanProven(driver, d);
      expect(await isAllZero(nsPath(h, 1))).toBe(true);
      const sanitizes = (await h.invocations()).filter((i) => i.argv[0] === 'sanitize');
      expect(sanitizes.map((i) => i.argv.slice(2))).toEqual([['-a', '2']]);
    });

    it('polls a sanitize that is already running instead of starting another', async () => {
      // The preset sanitize does not end by the clock: it runs until the cleanup has said it
      // saw it running, and only then does the test end it. A fixed window (it was 5 s) ran out
      // on a loaded machine before the cleanup looked, and the sanitize ended unseen.
      const { host: h, driver } = await setup({
        controller: {
          sanitize: { sstat: 2, sprog: 0, startedAt: Date.now(), durationMs: 3_600_000, action: 4, cdw10: 4 },
        },
      });
      const d = await discoverOne(driver, h);
      await writeTenantData(nsPath(h, 1), 1 << 20);
      const ctx = h.cleanupCtx();
      const cleaning = cleanProven(driver, d, ctx);
      await vi.waitFor(
        () => expect(ctx.events.some((e) => /already running/.test(e.message ?? ''))).toBe(true),
        { timeout: 60_000, interval: 50 },
      );
      await withStateLock(h.statePath, (st) => {
        st.controllers[0]!.sanitize!.startedAt = Date.now() - 3_600_000;
        return { changed: true, result: undefined };
      });
      const { evidence } = await cleaning;
      expect(evidence.sanitize).toMatchObject({ commandSent: false, before: { status: 2 }, canaries: [] });
      const argv = (await h.invocations()).map((i) => i.argv[0]);
      expect(argv.filter((a) => a === 'sanitize')).toHaveLength(0);
      expect(argv.filter((a) => a === 'sanitize-log').length).toBeGreaterThan(1);
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

    it('a no-op sanitize after a previous one proves nothing: the log was already "completed"', async () => {
      const { host: h, driver } = await setup({ controller: { sanitize: { durationMs: 300 } } });
      const d = await discoverOne(driver, h);
      await cleanProven(driver, d);
      // The next tenant writes one block, away from any place a sample would look; the controller drops the sanitize.
      const fh = await open(nsPath(h, 1), 'r+');
      await fh.write(Buffer.alloc(512, 0x42), 0, 512, 40960);
      await fh.close();
      await withStateLock(h.statePath, (st) => {
        st.controllers[0]!.faults = { sanitize: { mode: 'noop' } };
        return { changed: true, result: undefined };
      });
      const { evidence, verdict } = await cleanAndJudge(driver, d, h.cleanupCtx());
      expect(verdict.ok).toBe(false);
      expect(!verdict.ok && verdict.reason).toMatch(/no sign that this sanitize ran/);
      // The log: "completed" before and after, GDE cleared by the tenant's write and never set again.
      expect(evidence.sanitize).toMatchObject({
        before: { status: 1, globalErased: false },
        after: [{ status: 1, globalErased: false }],
        canaries: [{ unchangedAfter: true }],
      });
    });

    it('a sanitize that completes before the first poll is proven by Global Data Erased going 0 → 1', async () => {
      const { host: h, driver } = await setup({ controller: { sanitize: { durationMs: 0, sstat: 0x101 } } });
      const d = await discoverOne(driver, h);
      await writeTenantData(nsPath(h, 1), 1 << 20);
      const { evidence, proof } = await cleanProven(driver, d);
      expect(evidence.sanitize!.after.some((x) => x.status === 2)).toBe(false);
      expect(evidence.sanitize).toMatchObject({
        armed: { globalErased: false },
        after: [{ globalErased: true }],
      });
      expect(proof.findings[0]).toMatch(/setting Global Data Erased/);
      expect(await holdsTenantData(nsPath(h, 1))).toBe(false);
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
      const { evidence, proof } = await cleanProven(driver, d, ctx);
      expect(proof).toMatchObject({
        method: 'read-back',
        readBack: 'full',
        bytesRead: 40 << 20,
        bytesTotal: 40 << 20,
      });
      expect(evidence.writes).toEqual([
        { target: 'nvme0n1', method: 'nvme-write-zeroes', ranges: [[0, 40 << 20]], bytes: 40 << 20 },
      ]);
      expect(evidence.notes[0]).toMatch(/consolidated into nvme0n1/);

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
      expect(await cleanRefused(driver, d)).toBe(
        'read-back not accepted: the read-back of nvme0n1 found data at byte 0',
      );
    });

    it('write-zeroes that skips a range is caught wherever the range is', async () => {
      const skipAt = (5 << 20) + 4096;
      const { host: h, driver } = await setup({
        namespaces: [{ nsid: 1, sizeBytes: 8 << 20 }],
        controller: {
          sanicap: 0,
          faults: { 'write-zeroes': { mode: 'skip-range', offset: skipAt, length: 512 } },
        },
      });
      const d = await discoverOne(driver, h);
      const fh = await open(nsPath(h, 1), 'r+');
      await fh.write(Buffer.alloc(8 << 20, 0x33), 0, 8 << 20, 0);
      await fh.close();
      expect(await cleanRefused(driver, d)).toBe(
        `read-back not accepted: the read-back of nvme0n1 found data at byte ${skipAt}`,
      );
    });

    it('shred: zeroes the namespace host-side with the direct writer, then reads it back', async () => {
      const { host: h, driver } = await setup({ controller: { sanicap: 0, oncs: 0x57 } });
      const d = await discoverOne(driver, h);
      expect(d.cleanupAction).toBe('shred');
      await writeTenantData(nsPath(h, 1), 1 << 20);
      const ctx = h.cleanupCtx();
      const { evidence } = await cleanProven(driver, d, ctx);
      expect(evidence.writes).toEqual([
        { target: 'nvme0n1', method: 'direct-write', ranges: [[0, 1 << 20]], bytes: 1 << 20 },
      ]);
      expect(await isAllZero(nsPath(h, 1))).toBe(true);
      expectOrderedProgress(ctx.events);
      expect(ctx.events.filter((e) => e.step === 'direct-write').at(-1)).toMatchObject({ percent: 100 });
    });

    it('QEMU: namespace management refused (0x4001) although OACS says yes, capacity "0", no sanitize log: zeroes every namespace in place', async () => {
      const { host: h, driver } = await setup({
        subsystem: 0,
        namespaces: [
          { nsid: 1, sizeBytes: 2 << 20 },
          { nsid: 2, sizeBytes: 1 << 20, lbaSize: 4096 },
          { nsid: 3, sizeBytes: 1 << 20, attached: false },
        ],
        controller: {
          sanicap: 0,
          oacs: 0x10a,
          oncs: 0x15d,
          reportCapacity: false,
          faults: {
            'create-ns': { mode: 'error', status: 0x4001 },
            'delete-ns': { mode: 'error', status: 0x4001 },
          },
        },
      });
      const d = await discoverOne(driver, h);
      expect(d.cleanupAction).toBe('write-zeroes');
      // Capacity "0" is unknown: discovery reports what the namespaces hold.
      expect(d.attributes).toMatchObject({
        capacity_bytes: String(3 << 20),
        capacity_source: 'namespaces (the controller reports 0)',
      });
      // The kernel names them on the subsystem: nvme0n1, nvme0n2 (heads); nsid 3 is detached (the tenant did that).
      for (const n of [1, 2, 3]) await writeTenantData(nsPath(h, n), n === 1 ? 2 << 20 : 1 << 20);
      const ctx = h.cleanupCtx();
      const { evidence, proof } = await cleanProven(driver, d, ctx);
      expect(evidence.targets.map((t) => [t.name, t.nsid, t.sizeBytes])).toEqual([
        ['nvme0n1', 1, 2 << 20],
        ['nvme0n2', 2, 1 << 20],
        ['nvme0n3', 3, 1 << 20],
      ]);
      expect(proof).toMatchObject({ readBack: 'full', bytesRead: 4 << 20, bytesTotal: 4 << 20 });
      expect(evidence.notes.join('\n')).toMatch(
        /namespace management refused \(delete-ns answered Invalid Command Opcode.*\(0x4001\)\)/,
      );
      expect(evidence.notes.join('\n')).toMatch(
        /namespace\(s\) 3, not attached to nvme0, attached to it to be erased in place/,
      );
      expect(evidence.notes.join('\n')).toMatch(/capacity as 0/);
      for (const n of [1, 2, 3]) expect(await holdsTenantData(nsPath(h, n))).toBe(false);
      const calls = (await h.invocations()).map((i) => i.argv[0]);
      expect(calls).not.toContain('sanitize-log');
      expect(calls).not.toContain('create-ns');
      expect(ctx.events.some((e) => e.phase === 'namespace_reset' && /refused/.test(e.message ?? ''))).toBe(
        true,
      );
    });

    it('capacity "0" with working namespace management fails closed, having changed nothing', async () => {
      const { host: h, driver } = await setup({
        controller: { sanicap: 0, oacs: 0x1e, tnvmcapBytes: 8 << 20, reportCapacity: false },
      });
      const d = await discoverOne(driver, h);
      await expect(driver.cleanup(d, h.cleanupCtx())).rejects.toThrow(
        /has working namespace management but reports its capacity as 0: capacity outside its namespaces cannot be found/,
      );
      // Only the probe (an nsid above NN, which cannot exist) was sent; the namespace is still there.
      const mgmt = (await h.invocations())
        .filter((i) => i.argv[0] === 'delete-ns')
        .map((i) => i.argv.slice(2));
      expect(mgmt).toEqual([['-n', '33']]);
      expect((await readNvmeSimState(h.statePath)).controllers[0]!.namespaces).toHaveLength(1);
    });

    it('consolidation covers the unallocated capacity, where a deleted namespace left tenant data', async () => {
      const { host: h, driver } = await setup({
        namespaces: [{ nsid: 1, sizeBytes: 4 << 20 }],
        controller: { sanicap: 0, oacs: 0x1e, tnvmcapBytes: 12 << 20 },
      });
      const d = await discoverOne(driver, h);
      // What a tenant left by creating a namespace, writing, deleting it: bytes on unallocated media.
      const state = await readNvmeSimState(h.statePath);
      const media = state.controllers[0]!.mediaPath!;
      const fh = await open(media, 'r+');
      await fh.write(Buffer.from('TENANT-SECRET-'.repeat(40)), 0, 560, 9 << 20);
      await fh.close();
      const { evidence } = await cleanProven(driver, d);
      expect(evidence.targets).toEqual([{ name: 'nvme0n1', nsid: 1, sizeBytes: 12 << 20, blockSize: 512 }]);
      expect(await holdsTenantData(nsPath(h, 1))).toBe(false);
    });

    it('fails closed when sysfs still shows the old namespace after the rescan (it would hide the rest)', async () => {
      const { host: h, driver } = await setup({
        namespaces: [{ nsid: 1, sizeBytes: 4 << 20 }],
        controller: { sanicap: 0, oacs: 0x1e, tnvmcapBytes: 12 << 20 },
        kernelRescan: false,
      });
      const d = await discoverOne(driver, h);
      await expect(driver.cleanup(d, h.cleanupCtx())).rejects.toThrow(
        /the new namespace nvme0n1 shows 4194304 bytes in sysfs, not the 12582912 created/,
      );
    });

    it('verify: sample reads a stratified sample of a big namespace, and only that policy accepts it', async () => {
      const { host: h, driver } = await setup({
        namespaces: [{ nsid: 1, sizeBytes: 256 << 20, lbaSize: 4096 }],
        controller: { sanicap: 0, oncs: 0x57 },
      });
      const d = await discoverOne(driver, h);
      const sample = { verify: 'sample' as const };
      const { evidence, proof } = await cleanProven(driver, d, h.cleanupCtx(undefined, sample));
      expect(proof.readBack).toBe('sample');
      const rb = evidence.readBack[0]!;
      expect(rb).toMatchObject({ mode: 'sample', strata: 64 });
      expect(rb.bytesRead).toBeGreaterThanOrEqual((256 << 20) * 0.01);
      expect(rb.bytesRead).toBeLessThan(256 << 20);
      expect(proof.findings.join(' ')).toMatch(/64-region sample of \d+ of 268435456 bytes/);
      // The same evidence under the default policy: refused.
      expect(judgeEvidence(evidence, 'shred', { verify: 'full' }, null)).toMatchObject({
        ok: false,
        reason: expect.stringMatching(/only sampled .* policy is verify: full/),
      });
    });

    it('refuses a controller whose multipath node names a namespace the subsystem does not show', async () => {
      const { host: h, driver } = await setup({ subsystem: 0 });
      const d = await discoverOne(driver, h);
      await rm(join(h.sysfsRoot, 'devices/virtual/nvme-subsystem/nvme-subsys0/nvme0n1'), { recursive: true });
      await expect(driver.cleanup(d, h.cleanupCtx())).rejects.toThrow(
        /nvme0 reaches namespaces through nvme0c0n1, which nvme-subsys0 does not show/,
      );
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
      expect(driver.kit.config.cleanupTimeoutMs).toBe(1000);
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
      await cleanProven(driver, d);
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

/** The zero path on a real block device: a loop device holding a pattern, zeroed by the direct writer. */
describe('host-side zero path on a loop device', () => {
  it.skipIf(!loopAvailable('the zero path on a loop device'))(
    'zeroes a real block device end to end',
    async (t) => {
      // The simulator's namespace has the loop device's size: the agent's census asks it (id-ns).
      const host = await makeTestHost({
        controller: { sanicap: 0, oncs: 0x57 },
        namespaces: [{ nsid: 1, sizeBytes: 4 << 20 }],
      });
      const backing = join(host.root, 'loop.img');
      await writeFile(backing, Buffer.alloc(4 << 20, 0));
      await writeTenantData(backing, 4 << 20);
      const { dev: loop, reason } = attachLoop(backing);
      if (!loop) {
        await host.dispose();
        t.skip(reason);
        return;
      }
      try {
        const driver = newNvmeDriver({
          config: { device_spec: [{ vendor_id: '144d' }], nvme_cli: host.nvmeCli },
        });
        const [d] = (await driver.discover(host.ctx)).devices;
        expect(d?.cleanupAction).toBe('shred');
        // Point the namespace's device node at the loop device.
        const { rm, symlink } = await import('node:fs/promises');
        await rm(join(host.devRoot, 'nvme0n1'));
        await symlink(loop, join(host.devRoot, 'nvme0n1'));
        const { verdict } = await cleanAndJudge(driver, d!, host.cleanupCtx());
        expect(verdict).toMatchObject({ ok: true, proof: { readBack: 'full', bytesRead: 4 << 20 } });
        const data = execFileSync('dd', [`if=${loop}`, 'bs=1M', 'status=none'], { maxBuffer: 8 << 20 });
        expect(data.length).toBe(4 << 20);
        expect(data.every((b) => b === 0)).toBe(true);
        expect(await readFile(backing).then((b) => b.includes('TENANT-SECRET-'))).toBe(false);
      } finally {
        detachLoop(loop);
        await host.dispose();
      }
    },
  );
});
