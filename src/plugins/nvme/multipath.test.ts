/**
 * A controller whose namespaces are shared (native NVMe multipath: dual-port
 * drives, QEMU's nvme-subsys) has no namespace directories of its own, only
 * hidden path nodes; its block devices belong to the subsystem. Seen on a real
 * 6.1 kernel in test/vm; here on the simulated layout.
 */
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { NvmeDriver } from './nvme-driver.js';
import { isAllZero, makeTestHost, type TestHost, writeTenantData } from './test-host.js';

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
    const driver = new NvmeDriver({
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
