/**
 * The real lspci (pciutils) as an oracle: pointed at a simulated tree with
 * `-A linux-sysfs -O sysfs.path=<root>/bus/pci`, it must see what our reader
 * sees. If the builder drifted from the kernel's layout (a missing config
 * space, a wrong link), lspci would fail or disagree.
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { available, lspci as lspciTool } from '../../../test/helpers/prerequisites.js';
import { readPciFunctions } from '../../plugins/pci/sysfs-reader.js';
import type { PciFunction } from '../../plugins/types.js';
import { buildSysfs, largeHostSpec, type SysfsBuilder } from './index.js';

const haveLspci = available(lspciTool(), 'the lspci oracle tests on simulated trees');

function lspci(root: string, ...args: string[]): string {
  return execFileSync(
    'lspci',
    ['-A', 'linux-sysfs', '-O', `sysfs.path=${root}/bus/pci`, '-D', '-n', ...args],
    {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
      maxBuffer: 64 << 20,
    },
  );
}

/** `0000:3b:00.0 0200: 8086:1572 (rev 02)` */
const LINE_RE =
  /^([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) ([0-9a-f]{4}): ([0-9a-f]{4}):([0-9a-f]{4})(?: \(rev ([0-9a-f]{2})\))?$/;

function parseShort(out: string) {
  return out
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => {
      const m = LINE_RE.exec(l);
      if (!m) throw new Error(`unexpected lspci line: ${JSON.stringify(l)}`);
      return { address: m[1]!, klass: m[2]!, vendorId: m[3]!, productId: m[4]!, rev: m[5] ?? '00' };
    });
}

/** `-vmm` records: blank-line separated `Key:\tvalue` lines. */
function parseVmm(out: string): Record<string, string>[] {
  return out
    .split('\n\n')
    .filter((r) => r.trim() !== '')
    .map((r) => Object.fromEntries(r.split('\n').map((l) => l.split(':\t') as [string, string])));
}

/** What lspci's machine-readable form shows for one of our functions. */
function expectedVmm(f: PciFunction): Record<string, string> {
  const rec: Record<string, string> = {
    Slot: f.address,
    Class: f.classCode.slice(0, 4),
    Vendor: f.vendorId,
    Device: f.productId,
    ProgIf: f.classCode.slice(4),
  };
  if (f.kernelDriver !== null) rec['Driver'] = f.kernelDriver;
  if (f.numaNode >= 0) rec['NUMANode'] = String(f.numaNode);
  if (f.iommuGroup !== null) rec['IOMMUGroup'] = String(f.iommuGroup);
  return rec;
}

describe.skipIf(!haveLspci)('lspci agrees with readPciFunctions on simulated trees', () => {
  let root: string;
  let b: SysfsBuilder;
  beforeAll(async () => {
    root = await mkdtemp(path.join(os.tmpdir(), 'berth-lspci-oracle-'));
    b = await buildSysfs(root, {
      functions: [
        {
          address: '0000:65:00.0',
          vendorId: '10de',
          productId: '25b6',
          classCode: '030200',
          iommuGroup: 9,
          revision: 'a1',
        },
        {
          address: '0000:65:00.1',
          vendorId: '10de',
          productId: '228b',
          classCode: '040300',
          iommuGroup: 9,
          numaNode: 1,
        },
        {
          address: '0001:00:02.0',
          vendorId: '15b3',
          productId: '101d',
          driver: 'mlx5_core',
          iommuGroup: null,
        },
      ],
      pfs: [
        {
          address: '0000:3b:00.0',
          vendorId: '8086',
          productId: '1572',
          revision: '02',
          driver: 'i40e',
          numaNode: 0,
          subsystemVendorId: '8086',
          subsystemProductId: '0001',
          totalVfs: 16,
          numVfs: 10,
          vf: { productId: '154c', driver: 'vfio-pci' },
        },
      ],
      nvme: [
        {
          address: '0000:b1:00.0',
          vendorId: '144d',
          productId: 'a808',
          controller: 'nvme0',
          namespaces: [{ nsid: 1, sizeBytes: 1 << 30 }],
        },
      ],
    });
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('short form: same addresses, vendor:device, class and revision', async () => {
    const fns = await readPciFunctions(root);
    const seen = parseShort(lspci(root));
    expect(seen.map((l) => l.address)).toEqual(fns.map((f) => f.address));
    expect(seen.map((l) => `${l.vendorId}:${l.productId}`)).toEqual(
      fns.map((f) => `${f.vendorId}:${f.productId}`),
    );
    expect(seen.map((l) => l.klass)).toEqual(fns.map((f) => f.classCode.slice(0, 4)));
    expect(seen.find((l) => l.address === '0000:65:00.0')?.rev).toBe('a1');
    expect(seen.find((l) => l.address === '0000:3b:02.3')?.rev).toBe('02');
  });

  it('-vmm -k: same driver, NUMA node, IOMMU group and subsystem ids', async () => {
    const fns = await readPciFunctions(root);
    const recs = parseVmm(lspci(root, '-vmm', '-k'));
    expect(recs).toHaveLength(fns.length);
    fns.forEach((f, i) => {
      expect(recs[i]).toMatchObject(expectedVmm(f));
      // Without a driver bound lspci must not invent one, and so on.
      if (f.kernelDriver === null) expect(recs[i]).not.toHaveProperty('Driver');
      if (f.iommuGroup === null) expect(recs[i]).not.toHaveProperty('IOMMUGroup');
    });
    const pf = recs.find((r) => r['Slot'] === '0000:3b:00.0')!;
    expect(pf).toMatchObject({ SVendor: '8086', SDevice: '0001', Rev: '02' });
  });

  it('follows hotplug and driver changes the same way', async () => {
    await b.setNumVfs('0000:3b:00.0', 3);
    await b.removeFunction('0000:65:00.1');
    await b.setDriver('0000:b1:00.0', 'vfio-pci');
    const fns = await readPciFunctions(root);
    const recs = parseVmm(lspci(root, '-vmm', '-k'));
    expect(recs.map((r) => r['Slot'])).toEqual(fns.map((f) => f.address));
    for (const [i, f] of fns.entries()) expect(recs[i]).toMatchObject(expectedVmm(f));
    expect(recs.find((r) => r['Slot'] === '0000:b1:00.0')?.['Driver']).toBe('vfio-pci');
  });

  it('agrees on a large generated host', async () => {
    const big = await mkdtemp(path.join(os.tmpdir(), 'berth-lspci-large-'));
    try {
      await buildSysfs(big, largeHostSpec({ pfs: 2, vfsPerPf: 128, nvme: 40 }));
      const fns = await readPciFunctions(big);
      expect(fns).toHaveLength(2 + 256 + 40);
      const seen = parseShort(lspci(big));
      expect(seen.map((l) => `${l.address} ${l.klass} ${l.vendorId}:${l.productId}`)).toEqual(
        fns.map((f) => `${f.address} ${f.classCode.slice(0, 4)} ${f.vendorId}:${f.productId}`),
      );
    } finally {
      await rm(big, { recursive: true, force: true });
    }
  });
});
