import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ConfigError } from '../../errors.js';
import { NvmeDriver } from '../nvme/index.js';
import {
  cleanAndJudge,
  holdsTenantData,
  isAllZero,
  makeTestHost,
  type TestHost,
  writeTenantData,
} from '../nvme/test-host.js';
import VendorDefault, { VendorExampleNvmeDriver } from './index.js';

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

  async function setup(controller: Record<string, unknown> = {}) {
    host = await makeTestHost({ namespaces, controller: { oacs: 0x1e, ...controller } });
    const driver = new VendorExampleNvmeDriver({
      config: { device_spec: [{ vendor_id: '144d' }], nvme_cli: host.nvmeCli, poll_interval: 0.05 },
    });
    const { devices } = await driver.discover(host.ctx);
    expect(devices).toHaveLength(1);
    for (const ns of namespaces) await writeTenantData(join(host.devRoot, `nvme0n${ns.nsid}`), ns.sizeBytes);
    return { h: host, driver, device: devices[0]! };
  }

  it('is an NvmeDriver with its own name, exported as default and by name', () => {
    expect(VendorDefault).toBe(VendorExampleNvmeDriver);
    const d = new VendorExampleNvmeDriver({ config: {} });
    expect(d).toBeInstanceOf(NvmeDriver);
    expect(d.name).toBe('nvme-vendor-example');
    expect(d.supportsCleaning).toBe(true);
    // Only cleanup is overridden.
    expect(Object.getOwnPropertyNames(VendorExampleNvmeDriver.prototype).sort()).toEqual([
      'cleanup',
      'constructor',
    ]);
  });

  it('names its own section in configuration errors', () => {
    expect(() => new VendorExampleNvmeDriver({ config: { cleanup_timeot: 5 } })).toThrow(ConfigError);
    expect(() => new VendorExampleNvmeDriver({ config: { cleanup_timeot: 5 } })).toThrow(
      /nvme-vendor-example\.cleanup_timeot/,
    );
  });

  it('formats every namespace with SES=1 in one broadcast format and proves it by read-back', async () => {
    const { h, driver, device } = await setup();
    const ctx = h.cleanupCtx();
    const { evidence, verdict } = await cleanAndJudge(driver, device, ctx);
    expect(verdict).toMatchObject({ ok: true, proof: { method: 'read-back', readBack: 'full' } });
    expect(evidence.action).toBe('vendor-format-ses1');
    expect(evidence.readBack.map((r) => [r.target, r.bytesRead])).toEqual([
      ['nvme0n1', 1 << 20],
      ['nvme0n2', 2 << 20],
    ]);
    for (const ns of namespaces) expect(await isAllZero(join(h.devRoot, `nvme0n${ns.nsid}`))).toBe(true);
    const formats = (await h.invocations()).filter((i) => i.argv[0] === 'format').map((i) => i.argv.slice(1));
    expect(formats).toEqual([
      [join(h.devRoot, 'nvme0'), '-n', '0xffffffff', '-s', '1', '--force', '-t', '3600000'],
    ]);
    expect(ctx.events.filter((e) => e.phase === 'verifying' && e.percent === 100)).toHaveLength(2);
  });

  it('formats namespace by namespace when FNA bit 3 forbids the broadcast nsid', async () => {
    const { h, driver, device } = await setup({ fna: 0x8 });
    expect((await cleanAndJudge(driver, device, h.cleanupCtx())).verdict.ok).toBe(true);
    const formats = (await h.invocations()).filter((i) => i.argv[0] === 'format').map((i) => i.argv[3]);
    expect(formats).toEqual(['1', '2']);
    for (const ns of namespaces)
      expect(await holdsTenantData(join(h.devRoot, `nvme0n${ns.nsid}`))).toBe(false);
  });

  it('fails closed when format exits 0 but erases nothing', async () => {
    const { h, driver, device } = await setup({ faults: { format: { mode: 'noop' } } });
    const { verdict } = await cleanAndJudge(driver, device, h.cleanupCtx());
    expect(verdict).toMatchObject({
      ok: false,
      reason: expect.stringMatching(
        /^read-back not accepted: the read-back of nvme0n1 found data at byte 0$/,
      ),
    });
  });

  it('refuses a controller without Format NVM', async () => {
    const { h, driver, device } = await setup({ oacs: 0x8 });
    await expect(driver.cleanup(device, h.cleanupCtx())).rejects.toThrow(/does not support Format NVM/);
  });
});
