/**
 * A controller whose namespaces are shared (native NVMe multipath: dual-port
 * drives, QEMU's nvme-subsys) has no namespace directories of its own, only
 * hidden path nodes; its block devices belong to the subsystem. Seen on a real
 * 6.1 kernel in test/vm; here on the simulated layout.
 */
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  cleanAndJudge,
  holdsTenantData,
  isAllZero,
  makeTestHost,
  newNvmeDriver,
  type TestHost,
  writeTenantData,
} from '../../../test/helpers/nvme-host.js';
import { QEMU_NS_MANAGEMENT_FAULTS } from '../../sim/host.js';
import { plantTenantData, readableTenantData } from '../../sim/nvme-cli/index.js';

describe('NvmeDriver on a controller of a multipath NVM subsystem', () => {
  let host: TestHost | undefined;
  afterEach(async () => {
    await host?.dispose();
    host = undefined;
  });

  it('discovers the subsystem block device and zeroes it, not a hidden path node', async () => {
    // Controller nvme0 in subsystem 3: the namespace is /dev/nvme3n1, its path nvme3c0n1.
    const h = await makeTestHost({
      subsystem: 3,
      namespaces: [{ nsid: 1, sizeBytes: 2 << 20 }],
      controller: { sanicap: 0, oncs: 0x5f },
    });
    host = h;
    const driver = newNvmeDriver({
      config: { device_spec: [{ vendor_id: '144d' }], nvme_cli: h.nvmeCli },
    });
    const { devices, excluded } = await driver.discover(h.ctx);
    expect(excluded).toEqual([]);
    const d = devices[0]!;
    expect(d.cleanupAction).toBe('write-zeroes');
    expect(d.attributes.namespaces).toBe('nvme3n1');

    const dev = join(h.devRoot, 'nvme3n1');
    await writeTenantData(dev, 2 << 20);
    await driver.cleanup(d, h.cleanupCtx());
    expect(await isAllZero(dev)).toBe(true);
    const wz = (await h.invocations()).filter((i) => i.argv[0] === 'write-zeroes');
    expect(wz.map((i) => i.argv[1])).toEqual([dev]);
  });
});

describe('NvmeDriver on one controller of a two-controller NVM subsystem (dual-port drive)', () => {
  let host: TestHost | undefined;
  afterEach(async () => {
    await host?.dispose();
    host = undefined;
  });

  // nsid 1 reached through both controllers, 2 through nvme0 only, 3 allocated and detached from both.
  const namespaces = [
    { nsid: 1, sizeBytes: 2 << 20 },
    { nsid: 2, sizeBytes: 1 << 20, attachedTo: [1] },
    { nsid: 3, sizeBytes: 1 << 20, attachedTo: [] },
  ];

  async function setup(controller: Record<string, unknown>) {
    const h = await makeTestHost({ subsystem: 0, peers: 1, namespaces, controller });
    host = h;
    for (const n of namespaces) await writeTenantData(join(h.devRoot, `nvme0n${n.nsid}`), n.sizeBytes);
    const driver = newNvmeDriver({
      config: { device_spec: [{ vendor_id: '144d' }], nvme_cli: h.nvmeCli, poll_interval: 0.02 },
    });
    const { devices } = await driver.discover(h.ctx);
    expect(devices.map((d) => [d.address, d.attributes.namespaces])).toEqual([
      ['0000:01:00.0', 'nvme0n1,nvme0n2'],
      ['0000:02:00.0', 'nvme0n1'],
    ]);
    return { h, driver, second: devices[1]! };
  }

  const everywhere = async (h: TestHost) =>
    Promise.all(namespaces.map((n) => holdsTenantData(join(h.devRoot, `nvme0n${n.nsid}`))));

  it('zeroes in place through nvme1 every namespace of the subsystem when namespace management is refused', async () => {
    const { h, driver, second } = await setup({ sanicap: 0, faults: QEMU_NS_MANAGEMENT_FAULTS });
    expect(second.cleanupAction).toBe('write-zeroes');
    const { evidence, verdict } = await cleanAndJudge(driver, second, h.cleanupCtx());
    expect(verdict).toMatchObject({
      ok: true,
      proof: {
        census: {
          controller: 'nvme1',
          namespaces: [{ nsid: 1 }, { nsid: 2 }, { nsid: 3 }],
          namespacesBefore: [
            { nsid: 1, attached: true },
            { nsid: 2, attached: false },
            { nsid: 3, attached: false },
          ],
        },
      },
    });
    expect(evidence.targets.map((t) => t.nsid)).toEqual([1, 2, 3]);
    // nvme1 attached the two it did not have, with its own controller id.
    const attaches = (await h.invocations())
      .filter((i) => i.argv[0] === 'attach-ns')
      .map((i) => i.argv.slice(1));
    expect(attaches).toEqual([
      [join(h.devRoot, 'nvme1'), '-n', '2', '-c', '2'],
      [join(h.devRoot, 'nvme1'), '-n', '3', '-c', '2'],
    ]);
    expect(await everywhere(h)).toEqual([false, false, false]);
  });

  it('consolidates through nvme1 when namespace management works: one namespace over the whole capacity', async () => {
    const { h, driver, second } = await setup({ sanicap: 0, tnvmcapBytes: 6 << 20 });
    const placed = await plantTenantData(h.statePath, 'nvme1', [
      { where: 'unallocated', at: 0.3, length: 4096 },
    ]);
    expect(placed).toHaveLength(1);
    const { verdict } = await cleanAndJudge(driver, second, h.cleanupCtx());
    expect(verdict).toMatchObject({
      ok: true,
      proof: { census: { namespaces: [{ nsid: 1, sizeBytes: 6 << 20, attached: true, name: 'nvme0n1' }] } },
    });
    expect(await readableTenantData(h.statePath, 'nvme0')).toEqual([]);
  });

  it('a sanitize through nvme1 names every namespace of the subsystem and erases them all', async () => {
    const { h, driver, second } = await setup({ sanicap: 0x2, sanitize: { durationMs: 50 } });
    expect(second.cleanupAction).toBe('sanitize-block');
    const { evidence, verdict } = await cleanAndJudge(driver, second, h.cleanupCtx());
    expect(verdict).toMatchObject({ ok: true, proof: { method: 'sanitize' } });
    expect(evidence.targets.map((t) => [t.name, t.nsid])).toEqual([
      ['nvme0n1', 1],
      ['nvme1:nsid2', 2],
      ['nvme1:nsid3', 3],
    ]);
    expect(await everywhere(h)).toEqual([false, false, false]);
  });
});
