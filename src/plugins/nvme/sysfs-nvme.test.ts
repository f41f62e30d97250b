/**
 * The NVMe reader on simulated trees: native multipath (a controller in an
 * nvme-subsys), where a controller's namespaces are the subsystem's heads,
 * matched by nsid. The single-controller layouts are read in
 * src/plugins/pci/sysfs-reader.test.ts, beside the PCI functions they hang off.
 */
import { readdirSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { buildSysfs } from '../../sim/sysfs/index.js';
import { readNvmeController } from './sysfs-nvme.js';

let root: string;
beforeEach(async () => {
  root = await mkdtemp(path.join(os.tmpdir(), 'berth-sysfs-nvme-'));
});
afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

describe('NVMe namespaces under native multipath (nvme-subsys)', () => {
  it('maps the controller hidden path nodes to the subsystem heads by nsid', async () => {
    const b = await buildSysfs(root, {
      nvme: [
        {
          address: '0000:00:04.0',
          vendorId: '1b36',
          productId: '0010',
          controller: 'nvme2',
          subsystem: 1,
          namespaces: [
            { nsid: 1, sizeBytes: 512 * 2048 },
            { nsid: 3, sizeBytes: 4096 * 256, lbaSize: 4096 },
          ],
        },
      ],
    });
    // The kernel's names: heads nvme1n1/nvme1n3 on the subsystem, hidden nvme1c2nY under nvme2.
    expect(
      readdirSync(path.join(root, 'class/nvme/nvme2'))
        .filter((n) => /c\dn/.test(n))
        .sort(),
    ).toEqual(['nvme1c2n1', 'nvme1c2n3']);
    const info = await readNvmeController(root, 'nvme2');
    expect(info).toMatchObject({ subsystem: 'nvme-subsys1', unresolvedPaths: [] });
    expect(info?.namespaces).toEqual([
      { name: 'nvme1n1', nsid: 1, sizeBytes: 512 * 2048, lbaSize: 512, writeZeroesMaxBytes: 0 },
      { name: 'nvme1n3', nsid: 3, sizeBytes: 4096 * 256, lbaSize: 4096, writeZeroesMaxBytes: 0 },
    ]);
    await b.setNvmeNamespaces('nvme2', [{ nsid: 2, sizeBytes: 512 * 8 }]);
    expect((await readNvmeController(root, 'nvme2'))?.namespaces.map((n) => n.name)).toEqual(['nvme1n2']);
  });

  it('reports a path node whose namespace the subsystem does not show, instead of dropping it', async () => {
    await buildSysfs(root, {
      nvme: [
        {
          address: '0000:00:04.0',
          vendorId: '1b36',
          productId: '0010',
          controller: 'nvme0',
          subsystem: 0,
          namespaces: [{ nsid: 1, sizeBytes: 512 * 2048 }],
        },
      ],
    });
    await rm(path.join(root, 'devices/virtual/nvme-subsystem/nvme-subsys0/nvme0n1'), { recursive: true });
    const info = await readNvmeController(root, 'nvme0');
    expect(info?.namespaces).toEqual([]);
    expect(info?.unresolvedPaths).toEqual(['nvme0c0n1']);
  });
});
