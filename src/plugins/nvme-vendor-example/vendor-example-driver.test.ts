import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import VendorExampleV1Driver from '../../../test/fixtures/drivers/vendor-example-v1.js';
import {
  cleanAndJudge,
  holdsTenantData,
  isAllZero,
  makeTestHost,
  type TestHost,
  writeTenantData,
} from '../../../test/helpers/nvme-host.js';
import { ConfigError } from '../../errors.js';
import { QEMU_NS_MANAGEMENT_FAULTS } from '../../sim/host.js';
import { plantTenantData, readableTenantData } from '../../sim/nvme-cli/index.js';
import { DRIVER_API_VERSION, type Driver, instantiateDriver } from '../driver.js';
import type { GenericDriver } from '../driver-v2.js';
import VendorDefault, { vendorExampleDriver } from './index.js';

describe('VendorExampleNvmeDriver', () => {
  let host: TestHost | undefined;
  afterEach(async () => {
    await host?.dispose();
    host = undefined;
  });

  const namespaces = [
    { nsid: 1, sizeBytes: 1 << 20 },
    { nsid: 2, sizeBytes: 2 << 20 },
  ];

  async function setup(
    controller: Record<string, unknown> = {},
    nss: { nsid: number; sizeBytes: number; attached?: boolean }[] = namespaces,
    make: (config: Record<string, unknown>) => Driver | GenericDriver = (config) =>
      instantiateDriver(vendorExampleDriver, config),
  ) {
    host = await makeTestHost({ namespaces: nss, controller: { oacs: 0x1e, ...controller } });
    const driver = make({
      device_spec: [{ vendor_id: '144d' }],
      nvme_cli: host.nvmeCli,
      poll_interval: 0.05,
    });
    const { devices } = await driver.discover(host.ctx);
    expect(devices).toHaveLength(1);
    for (const ns of nss) await writeTenantData(join(host.devRoot, `nvme0n${ns.nsid}`), ns.sizeBytes);
    return { h: host, driver, device: devices[0]! };
  }

  it('is a driver API 3 definition, exported as default and by name, whose driver has the cleanup capability', () => {
    expect(VendorDefault).toBe(vendorExampleDriver);
    expect(vendorExampleDriver.apiVersion).toBe(DRIVER_API_VERSION);
    const d = instantiateDriver(vendorExampleDriver, {});
    expect(d.name).toBe('nvme-vendor-example');
    expect(typeof d.cleanup).toBe('function');
    // A plain object of the contract's members: nothing inherited.
    expect(Object.getPrototypeOf(d)).toBe(Object.prototype);
    expect(Object.keys(d).sort()).toEqual(['cleanup', 'discover', 'discoverAt', 'initHost', 'name']);
  });

  it('gets its section parsed and typed, and names the section it was read under in errors', () => {
    expect(() => instantiateDriver(vendorExampleDriver, { cleanup_timeot: 5 })).toThrow(ConfigError);
    expect(() => instantiateDriver(vendorExampleDriver, { cleanup_timeot: 5 })).toThrow(
      /nvme-vendor-example\.cleanup_timeot/,
    );
    expect(() => instantiateDriver(vendorExampleDriver, { cleanup_timeout: 0 }, 'acme')).toThrow(
      /^acme\.cleanup_timeout: 0 is not a whole number of seconds/,
    );
    // The typed value's defaults: what the kit runs with.
    expect(vendorExampleDriver.config('x').parse({ cleanup_timeout: 60 })).toMatchObject({
      cleanupTimeoutMs: 60_000,
      nvmeCli: 'nvme',
      verify: 'full',
      entries: [],
    });
  });

  it('where namespace management works: consolidates the subsystem into one namespace, formats it, reads it back', async () => {
    const { h, driver, device } = await setup({ tnvmcapBytes: 6 << 20 }, [
      ...namespaces,
      { nsid: 3, sizeBytes: 1 << 20, attached: false },
    ]);
    // The tenant's bytes everywhere: both namespaces, the detached one, and what a deleted one left.
    const placed = await plantTenantData(h.statePath, 'nvme0', [
      { where: 'unallocated', at: 0.5, length: 4096 },
    ]);
    expect(placed).toHaveLength(1);
    const ctx = h.cleanupCtx();
    const { evidence, verdict } = await cleanAndJudge(driver, device, ctx, h.nvmeCli);
    expect(verdict).toMatchObject({
      ok: true,
      proof: {
        method: 'read-back',
        readBack: 'full',
        census: { namespaces: [{ nsid: 1, sizeBytes: 6 << 20 }] },
      },
    });
    expect(evidence.action).toBe('vendor-format-ses1');
    expect(evidence.readBack.map((r) => [r.target, r.bytesRead])).toEqual([['nvme0n1', 6 << 20]]);
    expect(evidence.notes.join('\n')).toMatch(/namespaces consolidated into nvme0n1/);
    expect(await readableTenantData(h.statePath, 'nvme0')).toEqual([]);
    const formats = (await h.invocations()).filter((i) => i.argv[0] === 'format').map((i) => i.argv.slice(1));
    expect(formats).toEqual([
      [join(h.devRoot, 'nvme0'), '-n', '0xffffffff', '-s', '1', '--force', '-t', '3600000'],
    ]);
  });

  it('where namespace management is refused (QEMU): attaches the detached namespace, one broadcast format, every namespace read back', async () => {
    const { h, driver, device } = await setup({ faults: QEMU_NS_MANAGEMENT_FAULTS, reportCapacity: false }, [
      ...namespaces,
      { nsid: 3, sizeBytes: 1 << 20, attached: false },
    ]);
    const ctx = h.cleanupCtx();
    const { evidence, verdict } = await cleanAndJudge(driver, device, ctx, h.nvmeCli);
    expect(verdict).toMatchObject({ ok: true, proof: { method: 'read-back', readBack: 'full' } });
    expect(evidence.readBack.map((r) => [r.target, r.bytesRead])).toEqual([
      ['nvme0n1', 1 << 20],
      ['nvme0n2', 2 << 20],
      ['nvme0n3', 1 << 20],
    ]);
    for (const n of [1, 2, 3]) expect(await isAllZero(join(h.devRoot, `nvme0n${n}`))).toBe(true);
    const calls = (await h.invocations()).map((i) => i.argv[0]);
    expect(calls.filter((c) => c === 'format')).toHaveLength(1);
    expect(calls).toContain('attach-ns');
    expect(ctx.events.filter((e) => e.phase === 'verifying' && e.percent === 100)).toHaveLength(3);
  });

  it('formats namespace by namespace when FNA bit 3 forbids the broadcast nsid', async () => {
    const { h, driver, device } = await setup({ fna: 0x8, faults: QEMU_NS_MANAGEMENT_FAULTS });
    expect((await cleanAndJudge(driver, device, h.cleanupCtx(), h.nvmeCli)).verdict.ok).toBe(true);
    const formats = (await h.invocations()).filter((i) => i.argv[0] === 'format').map((i) => i.argv[3]);
    expect(formats).toEqual(['1', '2']);
    for (const ns of namespaces)
      expect(await holdsTenantData(join(h.devRoot, `nvme0n${ns.nsid}`))).toBe(false);
  });

  it('fails closed when format exits 0 but erases nothing', async () => {
    const { h, driver, device } = await setup({
      faults: { ...QEMU_NS_MANAGEMENT_FAULTS, format: { mode: 'noop' } },
    });
    const { verdict } = await cleanAndJudge(driver, device, h.cleanupCtx(), h.nvmeCli);
    expect(verdict).toMatchObject({
      ok: false,
      reason: expect.stringMatching(
        /^read-back not accepted: the read-back of nvme0n1 found data at byte 0$/,
      ),
    });
  });

  it('refuses a controller without Format NVM', async () => {
    const { h, driver, device } = await setup({ oacs: 0x8 });
    await expect(driver.cleanup!(device, h.cleanupCtx())).rejects.toThrow(/does not support Format NVM/);
  });

  it("the template's old cleanup (only what sysfs shows) is refused by the judge, and the detached namespace keeps the data", async () => {
    const { h, driver, device } = await setup(
      { faults: QEMU_NS_MANAGEMENT_FAULTS },
      [...namespaces, { nsid: 3, sizeBytes: 1 << 20, attached: false }],
      (config) => new VendorExampleV1Driver({ config }),
    );
    const { evidence, verdict } = await cleanAndJudge(driver, device, h.cleanupCtx(), h.nvmeCli);
    // Its own evidence is consistent: every target it named was read back as zero.
    expect(evidence.readBack.every((r) => r.nonZeroAt === null)).toBe(true);
    expect(verdict).toEqual({
      ok: false,
      reason: 'the proof covers less than the media: namespace 3 (detached, 1 MiB) was not covered',
    });
    expect(await holdsTenantData(join(h.devRoot, 'nvme0n3'))).toBe(true);
  });
});
