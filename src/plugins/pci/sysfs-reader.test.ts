import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, rename, rm, symlink, unlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { available, lspci, realPciDevices } from '../../../test/helpers/prerequisites.js';
import { isPciAddress, parsePciAddress } from '../../identifiers.js';
import { buildSysfs, type SimFunctionSpec, type SysfsBuilder } from '../../sim/sysfs/index.js';
import { readNvmeController } from '../nvme/sysfs-nvme.js';
import type { PciFunction } from '../types.js';
import { parsePciUevent, readPciFunction, readPciFunctions, resolveNetdevAddress } from './sysfs-reader.js';

let root: string;
beforeEach(async () => {
  root = await mkdtemp(path.join(os.tmpdir(), 'berth-sysfs-reader-'));
});
afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

/** readPciFunction of an address the test writes as text. */
const readParsed = (sysfsRoot: string, address: string) =>
  readPciFunction(sysfsRoot, parsePciAddress('address', address));

const byAddress = (fns: PciFunction[]) => new Map(fns.map((f) => [f.address, f]));

/** The two read paths (whole-tree scan, single function) must agree on every function. */
async function expectPathsAgree(sysfsRoot: string, fns: PciFunction[]): Promise<void> {
  for (const f of fns) expect(await readParsed(sysfsRoot, f.address)).toEqual(f);
}

describe('the address a path is built from', () => {
  it('is a parsed PciAddress: a plain string does not type-check (tsc -p . holds this)', () => {
    // @ts-expect-error: '../../etc' skipped parsePciAddress, so it cannot reach a sysfs path
    const unparsed = () => readPciFunction(root, '../../etc');
    expect(unparsed).toBeTypeOf('function');
  });
});

describe('reading a simulated host', () => {
  let b: SysfsBuilder;
  beforeEach(async () => {
    b = await buildSysfs(root, {
      functions: [
        // Two functions sharing one IOMMU group (a GPU and its audio function).
        { address: '0000:65:00.0', vendorId: '10de', productId: '25b6', classCode: '030200', iommuGroup: 40 },
        {
          address: '0000:65:00.1',
          vendorId: '10de',
          productId: '228b',
          classCode: '040300',
          iommuGroup: 40,
          driver: 'snd_hda_intel',
          numaNode: 1,
        },
        {
          address: '0000:00:1f.0',
          vendorId: '8086',
          productId: 'a1c1',
          classCode: '060100',
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
          totalVfs: 8,
          numVfs: 3,
          vf: { productId: '154c', driver: 'iavf' },
        },
      ],
      nvme: [
        {
          address: '0000:b1:00.0',
          vendorId: '144d',
          productId: 'a808',
          controller: 'nvme0',
          model: 'Samsung SSD 970 EVO Plus 1TB',
          serial: 'S4EWNX0R123456',
          firmware: '2B2QEXM7',
          cntlid: 4,
          numaNode: 1,
          writeZeroesMaxBytes: 131072,
          namespaces: [
            { nsid: 2, sizeBytes: 4096 * 1000, lbaSize: 4096 },
            { nsid: 1, sizeBytes: 512 * 2048 },
          ],
        },
      ],
      netdevs: [{ address: '0000:3b:00.0', ifname: 'ens1f0' }],
    });
  });

  it('reads every function, sorted, with ids, class, drivers, NUMA and groups', async () => {
    const fns = await readPciFunctions(root);
    expect(fns.map((f) => f.address)).toEqual([
      '0000:00:1f.0',
      '0000:3b:00.0',
      '0000:3b:02.0',
      '0000:3b:02.1',
      '0000:3b:02.2',
      '0000:65:00.0',
      '0000:65:00.1',
      '0000:b1:00.0',
    ]);
    const m = byAddress(fns);
    expect(m.get('0000:65:00.0')).toEqual({
      address: '0000:65:00.0',
      vendorId: '10de',
      productId: '25b6',
      classCode: '030200',
      subsystemVendorId: '10de',
      subsystemProductId: '25b6',
      kernelDriver: null,
      physfn: null,
      virtfns: [],
      sriovTotalVfs: 0,
      sriovNumVfs: 0,
      iommuGroup: 40,
      numaNode: -1,
      netdevs: [],
      nvmeControllers: [],
    });
    expect(m.get('0000:65:00.1')).toMatchObject({
      kernelDriver: 'snd_hda_intel',
      iommuGroup: 40,
      numaNode: 1,
    });
    expect(m.get('0000:00:1f.0')?.iommuGroup).toBeNull();
    await expectPathsAgree(root, fns);
  });

  it('links PF and VFs both ways, VFs inheriting NUMA and getting their own groups', async () => {
    const m = byAddress(await readPciFunctions(root));
    const pf = m.get('0000:3b:00.0')!;
    expect(pf).toMatchObject({
      kernelDriver: 'i40e',
      physfn: null,
      virtfns: ['0000:3b:02.0', '0000:3b:02.1', '0000:3b:02.2'],
      sriovTotalVfs: 8,
      sriovNumVfs: 3,
      numaNode: 0,
      netdevs: ['ens1f0'],
    });
    const groups = new Set<number | null>([pf.iommuGroup]);
    for (const vf of pf.virtfns) {
      const f = m.get(vf)!;
      expect(f).toMatchObject({
        vendorId: '8086',
        productId: '154c',
        classCode: '020000',
        kernelDriver: 'iavf',
        physfn: '0000:3b:00.0',
        virtfns: [],
        sriovTotalVfs: 0,
        numaNode: 0,
      });
      groups.add(f.iommuGroup);
    }
    expect(groups.size).toBe(4);
    expect(groups.has(40)).toBe(false); // fresh groups skip the explicit one
  });

  it('reads the NVMe controller and its namespaces', async () => {
    const m = byAddress(await readPciFunctions(root));
    expect(m.get('0000:b1:00.0')).toMatchObject({
      classCode: '010802',
      kernelDriver: 'nvme',
      nvmeControllers: ['nvme0'],
    });
    expect(await readNvmeController(root, 'nvme0')).toEqual({
      name: 'nvme0',
      address: '0000:b1:00.0',
      transport: 'pcie',
      state: 'live',
      model: 'Samsung SSD 970 EVO Plus 1TB',
      serial: 'S4EWNX0R123456',
      firmware: '2B2QEXM7',
      cntlid: 4,
      namespaces: [
        { name: 'nvme0n1', nsid: 1, sizeBytes: 512 * 2048, lbaSize: 512, writeZeroesMaxBytes: 131072 },
        { name: 'nvme0n2', nsid: 2, sizeBytes: 4096 * 1000, lbaSize: 4096, writeZeroesMaxBytes: 131072 },
      ],
      subsystem: '',
      unresolvedPaths: [],
    });
    await b.setNvmeNamespaces('nvme0', [{ nsid: 1, sizeBytes: 512 * 4096 }]);
    expect((await readNvmeController(root, 'nvme0'))?.namespaces).toEqual([
      { name: 'nvme0n1', nsid: 1, sizeBytes: 512 * 4096, lbaSize: 512, writeZeroesMaxBytes: 131072 },
    ]);
  });

  it('rejects bad controller names and returns null for unknown ones', async () => {
    await expect(readNvmeController(root, '../nvme0')).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(readNvmeController(root, 'nvme0n1')).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect(await readNvmeController(root, 'nvme7')).toBeNull();
  });

  it('resolves netdevs to PCI addresses and validates interface names', async () => {
    expect(await resolveNetdevAddress(root, 'ens1f0')).toBe('0000:3b:00.0');
    expect(await resolveNetdevAddress(root, 'nope0')).toBeNull();
    for (const bad of ['', '.', '..', '../x', 'a/b', 'eth:0', 'a b', 'x'.repeat(16)]) {
      await expect(resolveNetdevAddress(root, bad)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    }
  });

  it('resolves a netdev that hangs below a child device (virtio-net) to the PCI function', async () => {
    const net = path.join(root, 'devices/pci0000:00/0000:65:00.0/virtio3/net/eth9');
    await mkdir(net, { recursive: true });
    await symlink(
      '../../devices/pci0000:00/0000:65:00.0/virtio3/net/eth9',
      path.join(root, 'class/net/eth9'),
    );
    await symlink('../../../virtio3', path.join(net, 'device'));
    expect(await resolveNetdevAddress(root, 'eth9')).toBe('0000:65:00.0');
    // ... but it is not one of the function's own net/ children.
    expect((await readParsed(root, '0000:65:00.0'))?.netdevs).toEqual([]);
    expect(byAddress(await readPciFunctions(root)).get('0000:65:00.0')?.netdevs).toEqual([]);
  });

  it('returns null for interfaces without a PCI function, even under an address-named root', async () => {
    const sys = path.join(root, '0000:00:01.0', 'sys');
    await buildSysfs(sys, { functions: [{ address: '0000:02:00.0', vendorId: '8086', productId: '1234' }] });
    const virt = path.join(sys, 'devices/virtual/net/dummy0');
    await mkdir(path.join(sys, 'devices/virtual/misc'), { recursive: true });
    await mkdir(virt, { recursive: true });
    await mkdir(path.join(sys, 'class/net'), { recursive: true });
    await symlink('../../devices/virtual/net/dummy0', path.join(sys, 'class/net/dummy0'));
    await symlink('../../misc', path.join(virt, 'device'));
    await symlink('../../devices/virtual/net/lo', path.join(sys, 'class/net/lo'));
    expect(await resolveNetdevAddress(sys, 'dummy0')).toBeNull();
    expect(await resolveNetdevAddress(sys, 'lo')).toBeNull();
  });

  it('follows hotplug: VFs added and removed through sriov_numvfs', async () => {
    expect(await b.setNumVfs('0000:3b:00.0', 5)).toEqual([
      '0000:3b:02.0',
      '0000:3b:02.1',
      '0000:3b:02.2',
      '0000:3b:02.3',
      '0000:3b:02.4',
    ]);
    let fns = await readPciFunctions(root);
    let pf = byAddress(fns).get('0000:3b:00.0')!;
    expect(pf.sriovNumVfs).toBe(5);
    expect(pf.virtfns).toHaveLength(5);
    expect(byAddress(fns).get('0000:3b:02.4')?.physfn).toBe('0000:3b:00.0');
    await expectPathsAgree(root, fns);

    expect(await b.setNumVfs('0000:3b:00.0', 1)).toEqual(['0000:3b:02.0']);
    fns = await readPciFunctions(root);
    pf = byAddress(fns).get('0000:3b:00.0')!;
    expect(pf).toMatchObject({ sriovNumVfs: 1, virtfns: ['0000:3b:02.0'] });
    expect(fns.filter((f) => f.physfn !== null).map((f) => f.address)).toEqual(['0000:3b:02.0']);
    expect(await readParsed(root, '0000:3b:02.3')).toBeNull();
    await expectPathsAgree(root, fns);
  });

  it('follows hot-unplug of a function and of a PF with its VFs', async () => {
    await b.removeFunction('0000:65:00.1');
    let m = byAddress(await readPciFunctions(root));
    expect(m.has('0000:65:00.1')).toBe(false);
    expect(m.get('0000:65:00.0')?.iommuGroup).toBe(40);
    expect(await readParsed(root, '0000:65:00.1')).toBeNull();

    await b.removeFunction('0000:3b:00.0');
    m = byAddress(await readPciFunctions(root));
    expect([...m.keys()].filter((a) => a.startsWith('0000:3b:'))).toEqual([]);
    expect(await resolveNetdevAddress(root, 'ens1f0')).toBeNull();
  });

  it('takes ids, class and driver from uevent; the attributes only when uevent does not say them', async () => {
    const dev = path.join(root, 'devices/pci0000:00/0000:65:00.1');
    const uevent = path.join(dev, 'uevent');
    // The scan trusts uevent: the attributes it no longer opens can say anything.
    await writeFile(path.join(dev, 'vendor'), '0xdead\n');
    await writeFile(path.join(dev, 'class'), 'garbage\n');
    await unlink(path.join(dev, 'driver'));
    const read = async () => byAddress(await readPciFunctions(root)).get('0000:65:00.1');
    const identity = (kernelDriver: string) => ({
      vendorId: '10de',
      productId: '228b',
      classCode: '040300',
      kernelDriver,
    });
    expect(await read()).toMatchObject(identity('snd_hda_intel'));
    // A uevent without the ids, of another function, or absent: the attributes decide.
    await writeFile(path.join(dev, 'vendor'), '0x10de\n');
    await writeFile(path.join(dev, 'class'), '0x040300\n');
    await symlink('../../../bus/pci/drivers/vfio-pci', path.join(dev, 'driver'));
    for (const text of [
      'DRIVER=snd_hda_intel\nPCI_SLOT_NAME=0000:65:00.1\n',
      'DRIVER=x\nPCI_CLASS=40300\nPCI_ID=10DE:228B\nPCI_SLOT_NAME=0000:65:00.0\n',
      'PCI_CLASS=40300\nPCI_ID=10DE:22\n',
      null,
    ]) {
      if (text === null) await unlink(uevent);
      else await writeFile(uevent, text);
      expect(await read()).toMatchObject(identity('vfio-pci'));
    }
    // Garbage in both: the function is not reported.
    await writeFile(path.join(dev, 'class'), 'garbage\n');
    expect(await read()).toBeUndefined();
  });

  it('lists a PF directory for its VFs only when sriov_numvfs cannot be read', async () => {
    const numVfs = path.join(root, 'devices/pci0000:00/0000:3b:00.0/sriov_numvfs');
    for (const write of [() => unlink(numVfs), () => writeFile(numVfs, 'busy\n')]) {
      await write();
      const m = byAddress(await readPciFunctions(root));
      expect(m.get('0000:3b:00.0')).toMatchObject({
        sriovNumVfs: 0,
        virtfns: ['0000:3b:02.0', '0000:3b:02.1', '0000:3b:02.2'],
      });
      expect(m.get('0000:3b:02.2')?.physfn).toBe('0000:3b:00.0');
    }
    // Read, it is believed: virtfn0 .. virtfn<n-1> only.
    await writeFile(numVfs, '2\n');
    const m = byAddress(await readPciFunctions(root));
    expect(m.get('0000:3b:00.0')?.virtfns).toEqual(['0000:3b:02.0', '0000:3b:02.1']);
    expect(m.get('0000:3b:02.2')?.physfn).toBeNull();
  });

  it('follows driver binds: the NVMe controller exists only while nvme is bound', async () => {
    await b.setDriver('0000:b1:00.0', 'vfio-pci');
    let f = await readParsed(root, '0000:b1:00.0');
    expect(f).toMatchObject({ kernelDriver: 'vfio-pci', nvmeControllers: [] });
    expect(await readNvmeController(root, 'nvme0')).toBeNull();
    await b.setDriver('0000:b1:00.0', null);
    expect((await readParsed(root, '0000:b1:00.0'))?.kernelDriver).toBeNull();
    await b.setDriver('0000:b1:00.0', 'nvme');
    f = byAddress(await readPciFunctions(root)).get('0000:b1:00.0')!;
    expect(f).toMatchObject({ kernelDriver: 'nvme', nvmeControllers: ['nvme0'] });
    expect((await readNvmeController(root, 'nvme0'))?.namespaces).toHaveLength(2);
  });

  it('reads shared namespaces (multipath) as the subsystem heads, mapped by nsid, never by name', async () => {
    // One port of a dual-port drive: controller nvme2 in subsystem 1, its paths nvme1c2nY,
    // its block devices nvme1nY.
    await b.addNvmeController({
      address: '0000:5e:00.0',
      vendorId: '144d',
      productId: 'a824',
      controller: 'nvme2',
      subsystem: 1,
      cntlid: 2,
      writeZeroesMaxBytes: 524288,
      namespaces: [
        { nsid: 2, sizeBytes: 12 << 20 },
        { nsid: 1, sizeBytes: 8 << 20, lbaSize: 4096 },
      ],
    });
    expect((await readNvmeController(root, 'nvme2'))?.namespaces).toEqual([
      { name: 'nvme1n1', nsid: 1, sizeBytes: 8 << 20, lbaSize: 4096, writeZeroesMaxBytes: 524288 },
      { name: 'nvme1n2', nsid: 2, sizeBytes: 12 << 20, lbaSize: 512, writeZeroesMaxBytes: 524288 },
    ]);
    // The head of nsid 2 renamed (head instances need not follow nsids): found by nsid all the same.
    const subsys = path.join(root, 'devices/virtual/nvme-subsystem/nvme-subsys1');
    await rename(path.join(subsys, 'nvme1n2'), path.join(subsys, 'nvme1n7'));
    // A path whose head is missing is reported as unresolved: the driver fails closed on it.
    await rm(path.join(subsys, 'nvme1n1'), { recursive: true });
    const ctrl = await readNvmeController(root, 'nvme2');
    expect(ctrl?.namespaces.map((n) => n.name)).toEqual(['nvme1n7']);
    expect(ctrl?.unresolvedPaths).toEqual(['nvme1c2n1']);
  });

  it('skips bus entries that are not valid addresses, dangling, or half-gone', async () => {
    const bus = path.join(root, 'bus/pci/devices');
    await writeFile(path.join(bus, 'garbage'), '');
    await symlink('../../../devices/pci0000:00/0000:65:00.0', path.join(bus, '0000:65:00.0-evil'));
    // Upper-case spelling of a real function: not a valid address, never read.
    await symlink('../../../devices/pci0000:00/0000:65:00.0', path.join(bus, '0000:AA:00.0'));
    // A function whose directory vanished while its bus link stayed (removal in progress).
    await symlink('../../../devices/pci0000:00/0000:99:00.0', path.join(bus, '0000:99:00.0'));
    // A function caught half-removed: directory there, attributes gone.
    await mkdir(path.join(root, 'devices/pci0000:00/0000:98:00.0'));
    await symlink('../../../devices/pci0000:00/0000:98:00.0', path.join(bus, '0000:98:00.0'));
    const fns = await readPciFunctions(root);
    expect(fns.every((f) => isPciAddress(f.address))).toBe(true);
    expect(fns.map((f) => f.address)).not.toContain('0000:99:00.0');
    expect(fns.map((f) => f.address)).not.toContain('0000:98:00.0');
    expect(fns).toHaveLength(8);
    expect(await readParsed(root, '0000:99:00.0')).toBeNull();
    expect(await readParsed(root, '0000:98:00.0')).toBeNull();
  });

  it('gives defaults for optional attributes that are missing', async () => {
    const dev = path.join(root, 'devices/pci0000:00/0000:65:00.1');
    await unlink(path.join(dev, 'numa_node'));
    await unlink(path.join(dev, 'iommu_group'));
    const f = await readParsed(root, '0000:65:00.1');
    expect(f).toMatchObject({ numaNode: -1, iommuGroup: null, kernelDriver: 'snd_hda_intel' });
  });

  it('returns an empty list for a tree without PCI', async () => {
    expect(await readPciFunctions(path.join(root, 'nowhere'))).toEqual([]);
  });
});

describe('parsePciUevent', () => {
  // As this machine's kernel prints it (drivers/pci/pci-driver.c pci_uevent).
  const real = [
    'DRIVER=virtio-pci',
    'PCI_CLASS=20000',
    'PCI_ID=1AF4:1041',
    'PCI_SUBSYS_ID=1AF4:1041',
    'PCI_SLOT_NAME=0000:00:03.0',
    'MODALIAS=pci:v00001AF4d00001041sv00001AF4sd00001041bc02sc00i00',
  ].join('\n');

  it('reads the ids lower-case, the class padded to six digits, the driver, the subsystem ids', () => {
    expect(parsePciUevent(real, '0000:00:03.0')).toEqual({
      vendorId: '1af4',
      productId: '1041',
      classCode: '020000',
      kernelDriver: 'virtio-pci',
      subsystemVendorId: '1af4',
      subsystemProductId: '1041',
    });
    expect(parsePciUevent('PCI_CLASS=FFFF00\nPCI_ID=8086:0D57', '0000:00:00.0')).toEqual({
      vendorId: '8086',
      productId: '0d57',
      classCode: 'ffff00',
      kernelDriver: null,
    });
  });

  it('counts a key given twice once, first, and a key only at the start of a line', () => {
    const text = 'XPCI_ID=1111:2222\nPCI_ID=8086:154C\nPCI_ID=1234:5678\nPCI_CLASS=20000\nDRIVER=\n';
    expect(parsePciUevent(text, '0000:00:00.0')).toMatchObject({
      vendorId: '8086',
      productId: '154c',
      kernelDriver: null,
    });
  });

  it.each([
    ['another function', real, '0000:00:04.0'],
    ['no ids', 'DRIVER=x\nPCI_CLASS=20000', '0000:00:03.0'],
    ['no class', 'PCI_ID=8086:154C', '0000:00:03.0'],
    ['short ids', 'PCI_ID=8086:154\nPCI_CLASS=20000', '0000:00:03.0'],
    ['ids that are not hex', 'PCI_ID=80g6:154C\nPCI_CLASS=20000', '0000:00:03.0'],
    ['a class of seven digits', 'PCI_ID=8086:154C\nPCI_CLASS=1020000', '0000:00:03.0'],
    ['a driver name with a slash', 'DRIVER=../x\nPCI_ID=8086:154C\nPCI_CLASS=20000', '0000:00:03.0'],
    ['a driver named ..', 'DRIVER=..\nPCI_ID=8086:154C\nPCI_CLASS=20000', '0000:00:03.0'],
    ['empty', '', '0000:00:03.0'],
  ])('is undefined for %s', (_what, text, address) => {
    expect(parsePciUevent(text, address)).toBeUndefined();
  });
});

describe('property: the reader returns what the builder was told', () => {
  const hex = (n: number, w: number) => n.toString(16).padStart(w, '0');
  const fnSpec = fc.record({
    rid: fc.integer({ min: 0, max: 0xffff }),
    vendor: fc.integer({ min: 0, max: 0xffff }),
    device: fc.integer({ min: 0, max: 0xffff }),
    klass: fc.integer({ min: 0, max: 0xffffff }),
    driver: fc.constantFrom(null, 'vfio-pci', 'mlx5_core', 'nvme'),
    numa: fc.integer({ min: -1, max: 3 }),
    group: fc.option(fc.integer({ min: 0, max: 5 }), { nil: undefined }),
  });

  it('for random sets of plain functions', async () => {
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.uniqueArray(fnSpec, { selector: (s) => s.rid, maxLength: 12 }), async (specs) => {
        const dir = path.join(root, `run${run++}`);
        const functions: SimFunctionSpec[] = specs.map((s) => ({
          address: `0000:${hex(s.rid >> 8, 2)}:${hex((s.rid >> 3) & 31, 2)}.${s.rid & 7}`,
          vendorId: hex(s.vendor, 4),
          productId: hex(s.device, 4),
          classCode: hex(s.klass, 6),
          driver: s.driver,
          numaNode: s.numa,
          ...(s.group === undefined ? {} : { iommuGroup: s.group }),
        }));
        await buildSysfs(dir, { functions });
        const fns = await readPciFunctions(dir);
        expect(fns.map((f) => f.address)).toEqual(functions.map((f) => f.address).sort());
        const m = byAddress(fns);
        const explicit = new Set(functions.map((f) => f.iommuGroup).filter((g) => g !== undefined));
        const fresh = new Set<number>();
        for (const f of functions) {
          const got = m.get(f.address)!;
          expect(got).toMatchObject({
            vendorId: f.vendorId,
            productId: f.productId,
            classCode: f.classCode,
            kernelDriver: f.driver,
            numaNode: f.numaNode,
          });
          if (f.iommuGroup !== undefined) expect(got.iommuGroup).toBe(f.iommuGroup);
          else {
            expect(got.iommuGroup).not.toBeNull();
            expect(explicit.has(got.iommuGroup!)).toBe(false);
            expect(fresh.has(got.iommuGroup!)).toBe(false);
            fresh.add(got.iommuGroup!);
          }
        }
        await expectPathsAgree(dir, fns);
        await rm(dir, { recursive: true, force: true });
      }),
      { numRuns: 15 },
    );
  });
});

/** `0000:3b:00.0 0200: 8086:1572 (rev 02)` → the parts we compare. */
function parseLspci(out: string): { address: string; klass: string; ids: string }[] {
  const re = /^([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) ([0-9a-f]{4}): ([0-9a-f]{4}:[0-9a-f]{4})/;
  return out
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => {
      const m = re.exec(l);
      if (!m) throw new Error(`unexpected lspci line: ${l}`);
      return { address: m[1]!, klass: m[2]!, ids: m[3]! };
    });
}

const realMachine = 'the real-/sys comparison with lspci';
const canCompare = available(lspci(), realMachine) && available(realPciDevices(), realMachine);

describe.skipIf(!canCompare)('the real machine (read-only /sys) against lspci', () => {
  it('lists the same addresses, vendor:device and class', async () => {
    const fns = await readPciFunctions('/sys');
    const lspci = parseLspci(execFileSync('lspci', ['-D', '-n'], { encoding: 'utf8' }));
    expect(fns.map((f) => f.address)).toEqual(lspci.map((l) => l.address));
    expect(fns.map((f) => `${f.vendorId}:${f.productId}`)).toEqual(lspci.map((l) => l.ids));
    expect(fns.map((f) => f.classCode.slice(0, 4))).toEqual(lspci.map((l) => l.klass));
    await expectPathsAgree('/sys', fns);
  });
});
