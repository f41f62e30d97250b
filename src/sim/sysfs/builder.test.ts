import { existsSync } from 'node:fs';
import { mkdtemp, readdir, readFile, readlink, realpath, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { readNvmeController } from '../../plugins/nvme/sysfs-nvme.js';
import { buildSysfs, largeHostSpec, SysfsBuilder } from './index.js';

let root: string;
beforeEach(async () => {
  root = await mkdtemp(path.join(os.tmpdir(), 'berth-sysfs-builder-'));
});
afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

const dev = (a: string) => path.join(root, 'devices/pci0000:00', a);
const text = async (p: string) => readFile(p, 'latin1');

describe('SysfsBuilder layout', () => {
  it('writes a function the way the kernel shows it, with relative links', async () => {
    const b = new SysfsBuilder(root);
    await b.addFunction({
      address: '0000:3b:00.0',
      vendorId: '0x8086',
      productId: '1572',
      revision: '02',
      driver: 'i40e',
      numaNode: 1,
      iommuGroup: 12,
      subsystemProductId: '0000',
    });
    const d = dev('0000:3b:00.0');
    expect(await text(path.join(d, 'vendor'))).toBe('0x8086\n');
    expect(await text(path.join(d, 'device'))).toBe('0x1572\n');
    expect(await text(path.join(d, 'class'))).toBe('0x020000\n');
    expect(await text(path.join(d, 'subsystem_vendor'))).toBe('0x8086\n');
    expect(await text(path.join(d, 'subsystem_device'))).toBe('0x0000\n');
    expect(await text(path.join(d, 'revision'))).toBe('0x02\n');
    expect(await text(path.join(d, 'numa_node'))).toBe('1\n');
    expect(await text(path.join(d, 'enable'))).toBe('1\n');
    expect(await readlink(path.join(root, 'bus/pci/devices/0000:3b:00.0'))).toBe(
      '../../../devices/pci0000:00/0000:3b:00.0',
    );
    expect(await readlink(path.join(d, 'driver'))).toBe('../../../bus/pci/drivers/i40e');
    expect(await realpath(path.join(root, 'bus/pci/drivers/i40e/0000:3b:00.0'))).toBe(d);
    expect(await readlink(path.join(d, 'iommu_group'))).toBe('../../../kernel/iommu_groups/12');
    expect(await realpath(path.join(root, 'kernel/iommu_groups/12/devices/0000:3b:00.0'))).toBe(d);
    expect(await realpath(path.join(d, 'subsystem'))).toBe(path.join(root, 'bus/pci'));
  });

  it('writes a config space that agrees with the text attributes', async () => {
    const b = new SysfsBuilder(root);
    await b.addFunction({
      address: '0000:65:00.0',
      vendorId: '10de',
      productId: '25b6',
      classCode: '030200',
      revision: 'a1',
      subsystemVendorId: '10de',
      subsystemProductId: '157e',
    });
    const c = await readFile(path.join(dev('0000:65:00.0'), 'config'));
    expect(c.length).toBeGreaterThanOrEqual(64);
    expect(c.readUInt16LE(0)).toBe(0x10de);
    expect(c.readUInt16LE(2)).toBe(0x25b6);
    expect(c.readUInt8(8)).toBe(0xa1);
    expect([c[0x0b], c[0x0a], c[0x09]]).toEqual([0x03, 0x02, 0x00]);
    expect(c.readUInt8(0x0e) & 0x7f).toBe(0); // type-0 header
    expect(c.readUInt16LE(0x2c)).toBe(0x10de);
    expect(c.readUInt16LE(0x2e)).toBe(0x157e);
    expect(c.readUInt16LE(4)).toBe(0); // no driver: memory/bus master off
    await b.setDriver('0000:65:00.0', 'vfio-pci');
    expect((await readFile(path.join(dev('0000:65:00.0'), 'config'))).readUInt16LE(4)).toBe(0x0006);
  });

  it('writes uevent as the kernel prints it, DRIVER only while a driver is bound', async () => {
    const b = new SysfsBuilder(root);
    await b.addFunction({
      address: '0000:b1:00.0',
      vendorId: '144d',
      productId: 'a808',
      classCode: '010802',
      driver: 'nvme',
      subsystemVendorId: '144d',
      subsystemProductId: 'a801',
    });
    const uevent = path.join(dev('0000:b1:00.0'), 'uevent');
    expect(await text(uevent)).toBe(
      [
        'DRIVER=nvme',
        'PCI_CLASS=10802',
        'PCI_ID=144D:A808',
        'PCI_SUBSYS_ID=144D:A801',
        'PCI_SLOT_NAME=0000:b1:00.0',
        'MODALIAS=pci:v0000144Dd0000A808sv0000144Dsd0000A801bc01sc08i02',
        '',
      ].join('\n'),
    );
    await b.setDriver('0000:b1:00.0', null);
    expect(await text(uevent)).not.toContain('DRIVER=');
    await b.setDriver('0000:b1:00.0', 'vfio-pci');
    expect((await text(uevent)).split('\n')[0]).toBe('DRIVER=vfio-pci');
  });

  it('places VFs by offset/stride and links physfn/virtfnN like the kernel', async () => {
    const b = new SysfsBuilder(root);
    const spec = { vendorId: '8086', productId: '1572', totalVfs: 64, vf: { productId: '154c' } };
    expect(await b.addPf({ ...spec, address: '0000:3b:00.0', numVfs: 9 })).toEqual([
      ...[0, 1, 2, 3, 4, 5, 6, 7].map((f) => `0000:3b:02.${f}`),
      '0000:3b:03.0',
    ]);
    // The second port's VFs follow all 64 of the first's.
    expect(await b.addPf({ ...spec, address: '0000:3b:00.1', numVfs: 1 })).toEqual(['0000:3b:0a.0']);
    const pf0 = dev('0000:3b:00.0');
    expect(await text(path.join(pf0, 'sriov_totalvfs'))).toBe('64\n');
    expect(await text(path.join(pf0, 'sriov_numvfs'))).toBe('9\n');
    expect(await text(path.join(pf0, 'sriov_offset'))).toBe('16\n');
    expect(await text(path.join(dev('0000:3b:00.1'), 'sriov_offset'))).toBe('79\n');
    expect(await text(path.join(pf0, 'sriov_stride'))).toBe('1\n');
    expect(await readlink(path.join(pf0, 'virtfn8'))).toBe('../0000:3b:03.0');
    expect(await readlink(path.join(dev('0000:3b:03.0'), 'physfn'))).toBe('../0000:3b:00.0');
    // VFs carry no SR-IOV capability of their own.
    expect(existsSync(path.join(dev('0000:3b:03.0'), 'sriov_totalvfs'))).toBe(false);
  });

  it('logs each VF’s uevents once that VF is made or gone, as sriov_numvfs changes', async () => {
    const log = path.join(root, 'uevents.log');
    const b = await buildSysfs(
      path.join(root, 'sys'),
      {
        pfs: [
          {
            address: '0000:3b:00.0',
            vendorId: '8086',
            productId: '1572',
            totalVfs: 4,
            numVfs: 3,
            vf: { productId: '154c', driver: 'vfio-pci' },
          },
        ],
      },
      { ueventLog: log },
    );
    const vfDir = (f: number) => path.join(root, 'sys/devices/pci0000:00', `0000:3b:02.${f}`);
    const appends: { lines: string[]; dirs: boolean[] }[] = [];
    b.onUevents = (events) =>
      appends.push({
        lines: events.map((e) => `${e.action} ${e.devpath.split('/').at(-1)}`),
        // What sysfs shows when the append is made: every VF's directory.
        dirs: [0, 1, 2, 3].map((f) => existsSync(vfDir(f))),
      });
    await b.setNumVfs('0000:3b:00.0', 0);
    await b.setNumVfs('0000:3b:00.0', 2);
    expect(appends).toEqual([
      { lines: ['unbind 0000:3b:02.0', 'remove 0000:3b:02.0'], dirs: [false, true, true, false] },
      { lines: ['unbind 0000:3b:02.1', 'remove 0000:3b:02.1'], dirs: [false, false, true, false] },
      { lines: ['unbind 0000:3b:02.2', 'remove 0000:3b:02.2'], dirs: [false, false, false, false] },
      { lines: ['add 0000:3b:02.0', 'bind 0000:3b:02.0'], dirs: [true, false, false, false] },
      { lines: ['add 0000:3b:02.1', 'bind 0000:3b:02.1'], dirs: [true, true, false, false] },
    ]);
    // The log holds the same lines, in the same order.
    const logged = (await text(log))
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { action: string; seqnum: number });
    expect(logged.map((e) => e.action)).toEqual(appends.flatMap((a) => a.lines.map((l) => l.split(' ')[0])));
    expect(logged.map((e) => e.seqnum)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
  });

  it('spills VFs onto the next bus and refuses addresses that are taken or off the end', async () => {
    const b = new SysfsBuilder(root);
    const vfs = await b.addPf({
      address: '0000:10:00.0',
      vendorId: '8086',
      productId: '1572',
      totalVfs: 256,
      numVfs: 256,
      vf: { productId: '154c' },
    });
    expect(vfs.at(-1)).toBe('0000:11:01.7');
    expect(new Set(vfs).size).toBe(256);
    await b.addFunction({ address: '0000:20:02.0', vendorId: '8086', productId: '1234' });
    await b.addPf({
      address: '0000:20:00.0',
      vendorId: '8086',
      productId: '1572',
      totalVfs: 4,
      vf: { productId: '154c' },
    });
    await expect(b.setNumVfs('0000:20:00.0', 2)).rejects.toThrow(/0000:20:02.0, which exists/);
    // Nothing half-made: the PF still has no VFs.
    expect(await text(path.join(dev('0000:20:00.0'), 'sriov_numvfs'))).toBe('0\n');
    await b.addPf({
      address: '0000:ff:1f.0',
      vendorId: '8086',
      productId: '1572',
      totalVfs: 4,
      vf: { productId: '154c' },
    });
    await expect(b.setNumVfs('0000:ff:1f.0', 1)).rejects.toThrow(/beyond bus ff/);
    await expect(b.setNumVfs('0000:20:00.0', 5)).rejects.toThrow(/0-4/);
    await expect(b.setNumVfs('0000:20:02.0', 1)).rejects.toThrow(/not an SR-IOV PF/);
  });

  it('rejects duplicates and malformed specs', async () => {
    const b = new SysfsBuilder(root);
    await b.addFunction({ address: '0000:01:00.0', vendorId: '8086', productId: '1234' });
    await expect(
      b.addFunction({ address: '0000:01:00.0', vendorId: '8086', productId: '1234' }),
    ).rejects.toThrow(/already exists/);
    await expect(
      b.addFunction({ address: '../../x', vendorId: '8086', productId: '1234' }),
    ).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
    });
    await expect(
      b.addFunction({ address: '0000:01:00.1', vendorId: '18086', productId: '1234' }),
    ).rejects.toThrow(/vendorId/);
    await expect(
      b.addFunction({ address: '0000:01:00.1', vendorId: '8086', productId: '1234', driver: '../evil' }),
    ).rejects.toThrow(/driver/);
    await expect(b.addNetdev('0000:01:00.0', 'a/b')).rejects.toThrow(/ifname/);
    await b.addNetdev('0000:01:00.0', 'eth0');
    await expect(b.addNetdev('0000:01:00.0', 'eth0')).rejects.toThrow(/already belongs/);
    await expect(b.removeFunction('0000:02:00.0')).rejects.toThrow(/no PCI function/);
  });

  it('keeps groups with several members and frees a group with its last member', async () => {
    const b = await buildSysfs(root, {
      functions: [
        { address: '0000:65:00.0', vendorId: '10de', productId: '25b6', iommuGroup: 3 },
        { address: '0000:65:00.1', vendorId: '10de', productId: '228b', iommuGroup: 3 },
        { address: '0000:66:00.0', vendorId: '10de', productId: '25b6' },
      ],
    });
    const g3 = path.join(root, 'kernel/iommu_groups/3/devices');
    expect((await readdir(g3)).sort()).toEqual(['0000:65:00.0', '0000:65:00.1']);
    // The fresh group of the third function skips the reserved 3.
    expect(await readlink(path.join(dev('0000:66:00.0'), 'iommu_group'))).toBe(
      '../../../kernel/iommu_groups/0',
    );
    await b.removeFunction('0000:65:00.0');
    expect(await readdir(g3)).toEqual(['0000:65:00.1']);
    await b.removeFunction('0000:65:00.1');
    expect(existsSync(path.join(root, 'kernel/iommu_groups/3'))).toBe(false);
    expect(existsSync(dev('0000:65:00.1'))).toBe(false);
    expect(existsSync(path.join(root, 'bus/pci/devices/0000:65:00.1'))).toBe(false);
  });

  it('links netdevs through class/net, and hides them while another driver is bound', async () => {
    const b = new SysfsBuilder(root);
    await b.addFunction({ address: '0000:3b:00.0', vendorId: '8086', productId: '1572', driver: 'i40e' });
    await b.addNetdev('0000:3b:00.0', 'ens1f0');
    const cls = path.join(root, 'class/net/ens1f0');
    expect(await readlink(cls)).toBe('../../devices/pci0000:00/0000:3b:00.0/net/ens1f0');
    expect(await readlink(path.join(cls, 'device'))).toBe('../../../0000:3b:00.0');
    expect(await realpath(path.join(cls, 'device'))).toBe(dev('0000:3b:00.0'));
    expect(await text(path.join(cls, 'address'))).toMatch(/^02:00(:[0-9a-f]{2}){4}\n$/);
    await b.setDriver('0000:3b:00.0', 'vfio-pci');
    expect(existsSync(cls)).toBe(false);
    expect(existsSync(path.join(dev('0000:3b:00.0'), 'net/ens1f0'))).toBe(false);
    expect(await readlink(path.join(dev('0000:3b:00.0'), 'driver'))).toBe(
      '../../../bus/pci/drivers/vfio-pci',
    );
    expect(existsSync(path.join(root, 'bus/pci/drivers/i40e/0000:3b:00.0'))).toBe(false);
    await b.setDriver('0000:3b:00.0', 'i40e');
    expect(await realpath(path.join(cls, 'device'))).toBe(dev('0000:3b:00.0'));
  });

  it('shows NVMe identifiers the way the kernel prints them', async () => {
    const b = new SysfsBuilder(root);
    await b.addNvmeController({
      address: '0000:02:00.0',
      vendorId: '144d',
      productId: 'a824',
      controller: 'nvme0',
      serial: 'S5XYZ0001',
      model: 'SAMSUNG MZWLJ3T8HBLS',
      subsysnqn: 'nqn.1994-11.com.samsung:nvme:PM1733:2.5-inch:S5XYZ0001',
      namespaces: [
        { nsid: 1, sizeBytes: 1 << 20, nguid: '0123456789abcdef0011223344556677', eui64: '0025388b01020304' },
        { nsid: 2, sizeBytes: 1 << 20, eui64: '', uuid: '6f1c2d3e-4a5b-4c6d-8e7f-8091a2b3c4d5' },
        { nsid: 3, sizeBytes: 1 << 20, nguid: '', eui64: '0025388b0102030a' },
      ],
    });
    // Another controller reports an NQN the kernel ignores (NVME_QUIRK_IGNORE_DEV_SUBNQN): the fallback.
    await b.addNvmeController({
      address: '0000:03:00.0',
      vendorId: '1c5c',
      productId: '1504',
      controller: 'nvme1',
      serial: 'CLONE',
      model: 'PC400',
      subsysnqn: 'nqn.2014.08.org.nvmexpress:same-on-every-unit',
      ignoreDeviceSubnqn: true,
    });
    const c = path.join(root, 'class/nvme/nvme0');
    expect(await text(path.join(c, 'subsysnqn'))).toBe(
      'nqn.1994-11.com.samsung:nvme:PM1733:2.5-inch:S5XYZ0001\n',
    );
    expect(await text(path.join(root, 'class/nvme/nvme1/subsysnqn'))).toBe(
      `nqn.2014.08.org.nvmexpress:1c5c1c5c${'CLONE'.padEnd(20)}${'PC400'.padEnd(40)}\n`,
    );
    const attr = (n: number, f: string) => text(path.join(c, `nvme0n${n}`, f));
    expect(await attr(1, 'nguid')).toBe('01234567-89ab-cdef-0011-223344556677\n');
    expect(await attr(1, 'eui')).toBe('00 25 38 8b 01 02 03 04\n');
    // No UUID: the kernel shows the NGUID there, for old user space.
    expect(await attr(1, 'uuid')).toBe('01234567-89ab-cdef-0011-223344556677\n');
    expect(await attr(1, 'wwid')).toBe('eui.0123456789abcdef0011223344556677\n');
    expect(await attr(2, 'uuid')).toBe('6f1c2d3e-4a5b-4c6d-8e7f-8091a2b3c4d5\n');
    expect(await attr(2, 'wwid')).toBe('uuid.6f1c2d3e-4a5b-4c6d-8e7f-8091a2b3c4d5\n');
    expect(await attr(2, 'nguid')).toMatch(
      /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\n$/,
    );
    await expect(attr(2, 'eui')).rejects.toThrow(/ENOENT/);
    expect(await attr(3, 'wwid')).toBe('eui.0025388b0102030a\n');
    await expect(attr(3, 'uuid')).rejects.toThrow(/ENOENT/);
    await expect(
      b.addNvmeController({
        address: '0000:04:00.0',
        vendorId: '144d',
        productId: 'a824',
        controller: 'nvme2',
        namespaces: [{ nsid: 1, sizeBytes: 1 << 20, nguid: 'xyz' }],
      }),
    ).rejects.toThrow(/nguid/);
  });

  it('writes NVMe controllers and namespaces with the kernel padding and links', async () => {
    const b = new SysfsBuilder(root);
    await b.addNvmeController({
      address: '0000:01:00.0',
      vendorId: 'c0a9',
      productId: '540a',
      controller: 'nvme3',
      model: 'CT500P2SSD8',
      serial: '2117E59AD2C6',
      firmware: 'P2CR048',
      // A consumer drive that reports no namespace identifiers (the procfs fixture's Crucial).
      namespaces: [{ nsid: 1, sizeBytes: 500107862016, nguid: '', eui64: '' }],
      writeZeroesMaxBytes: 131072,
    });
    const c = path.join(root, 'class/nvme/nvme3');
    expect(await readlink(c)).toBe('../../devices/pci0000:00/0000:01:00.0/nvme/nvme3');
    expect(await realpath(path.join(c, 'device'))).toBe(dev('0000:01:00.0'));
    expect(await text(path.join(dev('0000:01:00.0'), 'class'))).toBe('0x010802\n');
    expect(await readlink(path.join(dev('0000:01:00.0'), 'driver'))).toBe('../../../bus/pci/drivers/nvme');
    const model = await text(path.join(c, 'model'));
    expect(model).toHaveLength(41);
    expect(model.trimEnd()).toBe('CT500P2SSD8');
    expect(await text(path.join(c, 'serial'))).toHaveLength(21);
    expect(await text(path.join(c, 'firmware_rev'))).toBe('P2CR048 \n');
    expect(await text(path.join(c, 'transport'))).toBe('pcie\n');
    expect(await text(path.join(c, 'address'))).toBe('0000:01:00.0\n');
    expect(await text(path.join(c, 'state'))).toBe('live\n');
    expect(await text(path.join(c, 'dev'))).toMatch(/^\d+:3\n$/);
    expect(await text(path.join(c, 'subsysnqn'))).toMatch(
      /^nqn\.2014\.08\.org\.nvmexpress:c0a9c0a92117E59AD2C6/,
    );
    const ns = path.join(c, 'nvme3n1');
    expect(await text(path.join(ns, 'size'))).toBe(`${500107862016 / 512}\n`);
    expect(await text(path.join(ns, 'queue/logical_block_size'))).toBe('512\n');
    expect(await text(path.join(ns, 'queue/write_zeroes_max_bytes'))).toBe('131072\n');
    // No NGUID, EUI-64 or UUID: the kernel hides those attributes and builds the wwid from the ids.
    const hex = (t: string) => Buffer.from(t).toString('hex');
    expect(await text(path.join(ns, 'wwid'))).toBe(
      `nvme.c0a9-${hex('2117E59AD2C6')}-${hex('CT500P2SSD8')}-00000001\n`,
    );
    for (const f of ['nguid', 'eui', 'uuid']) await expect(text(path.join(ns, f))).rejects.toThrow(/ENOENT/);
    expect(await realpath(path.join(ns, 'device'))).toBe(await realpath(c));
    expect(await realpath(path.join(root, 'class/block/nvme3n1'))).toBe(await realpath(ns));
    await b.setNvmeNamespaces('nvme3', [
      { nsid: 1, sizeBytes: 4096 * 10, lbaSize: 4096 },
      { nsid: 2, sizeBytes: 4096 * 20, lbaSize: 4096 },
    ]);
    expect((await readdir(await realpath(c))).filter((n) => n.startsWith('nvme3n')).sort()).toEqual([
      'nvme3n1',
      'nvme3n2',
    ]);
    expect(await text(path.join(c, 'nvme3n2/size'))).toBe(`${(4096 * 20) / 512}\n`);
    await expect(b.setNvmeNamespaces('nvme3', [{ nsid: 1, sizeBytes: 1000, lbaSize: 4096 }])).rejects.toThrow(
      /multiple of 4096/,
    );
    await b.removeFunction('0000:01:00.0');
    expect(existsSync(c)).toBe(false);
    expect(existsSync(path.join(root, 'class/block/nvme3n1'))).toBe(false);
    // The name is free again after the unplug.
    await b.addNvmeController({
      address: '0000:02:00.0',
      vendorId: 'c0a9',
      productId: '540a',
      controller: 'nvme3',
    });
  });
});

describe('SysfsBuilder NVMe multipath layout', () => {
  it('puts shared namespaces on the subsystem and hidden path nodes under the controller, as Linux does', async () => {
    const b = new SysfsBuilder(root);
    // Controller nvme2 of subsystem 1: the kernel names its namespaces nvme1n*, its paths nvme1c2n*.
    await b.addNvmeController({
      address: '0000:00:05.0',
      vendorId: '1b36',
      productId: '0010',
      controller: 'nvme2',
      subsystem: 1,
      namespaces: [
        { nsid: 1, sizeBytes: 8 << 20 },
        { nsid: 2, sizeBytes: 12 << 20 },
      ],
    });
    const ctrl = await realpath(path.join(root, 'class/nvme/nvme2'));
    const subsys = path.join(root, 'devices/virtual/nvme-subsystem/nvme-subsys1');
    expect(await readlink(path.join(root, 'class/nvme-subsystem/nvme-subsys1'))).toBe(
      '../../devices/virtual/nvme-subsystem/nvme-subsys1',
    );
    expect(await realpath(path.join(subsys, 'nvme2'))).toBe(ctrl);
    expect((await readdir(ctrl)).filter((n) => /^nvme\d/.test(n)).sort()).toEqual(['nvme1c2n1', 'nvme1c2n2']);
    expect(await text(path.join(ctrl, 'nvme1c2n2/hidden'))).toBe('1\n');
    expect(await text(path.join(ctrl, 'nvme1c2n2/nsid'))).toBe('2\n');
    expect(existsSync(path.join(ctrl, 'nvme1c2n2/dev'))).toBe(false);
    expect(await realpath(path.join(ctrl, 'nvme1c2n2/device'))).toBe(ctrl);
    expect(await text(path.join(subsys, 'nvme1n2/hidden'))).toBe('0\n');
    expect(await text(path.join(subsys, 'nvme1n2/size'))).toBe(`${(12 << 20) / 512}\n`);
    expect(await realpath(path.join(subsys, 'nvme1n2/device'))).toBe(subsys);
    expect(await realpath(path.join(root, 'class/block/nvme1n1'))).toBe(path.join(subsys, 'nvme1n1'));
    expect(await realpath(path.join(root, 'class/block/nvme1c2n1'))).toBe(path.join(ctrl, 'nvme1c2n1'));

    await b.setNvmeNamespaces('nvme2', [{ nsid: 3, sizeBytes: 1 << 20 }]);
    expect((await readdir(subsys)).filter((n) => /^nvme\dn/.test(n))).toEqual(['nvme1n3']);
    expect((await readdir(ctrl)).filter((n) => /^nvme\d/.test(n))).toEqual(['nvme1c2n3']);
    expect(existsSync(path.join(root, 'class/block/nvme1n1'))).toBe(false);

    // Unbinding the driver takes the controller and, with its last controller, the subsystem.
    await b.setDriver('0000:00:05.0', 'vfio-pci');
    expect(existsSync(subsys)).toBe(false);
    expect(existsSync(path.join(root, 'class/nvme-subsystem/nvme-subsys1'))).toBe(false);
    expect(existsSync(path.join(root, 'class/block/nvme1n3'))).toBe(false);
    await b.setDriver('0000:00:05.0', 'nvme');
    expect(await text(path.join(root, 'class/nvme-subsystem/nvme-subsys1/nvme1n3/nsid'))).toBe('3\n');
  });

  it('lets two controllers (two PCI functions) share one subsystem, its NQN and its namespaces', async () => {
    const b = new SysfsBuilder(root);
    const common = { vendorId: '144d', productId: 'a824', subsystem: 0 } as const;
    await b.addNvmeController({
      ...common,
      address: '0000:00:05.0',
      controller: 'nvme0',
      cntlid: 1,
      serial: 'DUALPORT01',
      model: 'Dual Port NVMe',
      namespaces: [
        { nsid: 1, sizeBytes: 8 << 20 },
        { nsid: 2, sizeBytes: 4 << 20 },
      ],
    });
    await b.addNvmeController({
      ...common,
      address: '0000:00:06.0',
      controller: 'nvme1',
      cntlid: 2,
      namespaces: [{ nsid: 1, sizeBytes: 8 << 20 }],
    });
    const subsys = path.join(root, 'devices/virtual/nvme-subsystem/nvme-subsys0');
    const c0 = await realpath(path.join(root, 'class/nvme/nvme0'));
    const c1 = await realpath(path.join(root, 'class/nvme/nvme1'));
    expect(await realpath(path.join(subsys, 'nvme0'))).toBe(c0);
    expect(await realpath(path.join(subsys, 'nvme1'))).toBe(c1);
    // One NQN for the subsystem, on both controllers; the second controller reports the subsystem's serial.
    const nqn = await text(path.join(subsys, 'subsysnqn'));
    expect(nqn).toMatch(/^nqn\.2014\.08\.org\.nvmexpress:144d144dDUALPORT01 {10}Dual Port NVMe/);
    expect(await text(path.join(c0, 'subsysnqn'))).toBe(nqn);
    expect(await text(path.join(c1, 'subsysnqn'))).toBe(nqn);
    expect((await text(path.join(c1, 'serial'))).trimEnd()).toBe('DUALPORT01');
    // Heads on the subsystem, hidden paths under each controller that reaches them.
    expect((await readdir(subsys)).filter((n) => /^nvme\dn/.test(n)).sort()).toEqual(['nvme0n1', 'nvme0n2']);
    expect((await readdir(c0)).filter((n) => /^nvme\d/.test(n)).sort()).toEqual(['nvme0c0n1', 'nvme0c0n2']);
    expect((await readdir(c1)).filter((n) => /^nvme\d/.test(n))).toEqual(['nvme0c1n1']);
    const seen1 = await readNvmeController(root, 'nvme1');
    expect(seen1?.namespaces.map((n) => [n.name, n.nsid, n.sizeBytes])).toEqual([['nvme0n1', 1, 8 << 20]]);
    expect(seen1?.subsystem).toBe('nvme-subsys0');

    // Namespace 2 attached to nvme1 too, then detached from nvme0: its head stays.
    await b.setNvmeNamespaces('nvme1', [
      { nsid: 1, sizeBytes: 8 << 20 },
      { nsid: 2, sizeBytes: 4 << 20 },
    ]);
    await b.setNvmeNamespaces('nvme0', [{ nsid: 1, sizeBytes: 8 << 20 }]);
    expect((await readdir(subsys)).filter((n) => /^nvme\dn/.test(n)).sort()).toEqual(['nvme0n1', 'nvme0n2']);
    expect(existsSync(path.join(root, 'class/block/nvme0n2'))).toBe(true);
    expect(existsSync(path.join(root, 'class/block/nvme0c0n2'))).toBe(false);
    await expect(b.setNvmeNamespaces('nvme0', [{ nsid: 2, sizeBytes: 8 << 20 }])).rejects.toThrow(
      /namespace 2 of subsystem 0 is 4194304 bytes \(512-byte blocks\) through nvme1/,
    );
    await expect(
      b.addNvmeController({
        ...common,
        address: '0000:00:07.0',
        controller: 'nvme2',
        subsysnqn: 'nqn.x:other',
      }),
    ).rejects.toThrow(/subsysnqn: subsystem 0 is nqn/);

    // Unbinding one controller keeps the subsystem and the heads the other reaches.
    await b.setDriver('0000:00:06.0', 'vfio-pci');
    expect(existsSync(path.join(subsys, 'nvme1'))).toBe(false);
    expect(existsSync(path.join(subsys, 'nvme0'))).toBe(true);
    expect((await readdir(subsys)).filter((n) => /^nvme\dn/.test(n))).toEqual(['nvme0n1']);
    await b.setDriver('0000:00:06.0', 'nvme');
    expect((await readdir(subsys)).filter((n) => /^nvme\dn/.test(n)).sort()).toEqual(['nvme0n1', 'nvme0n2']);
    // With its last controller gone, the subsystem goes.
    await b.removeFunction('0000:00:05.0');
    expect(existsSync(subsys)).toBe(true);
    await b.removeFunction('0000:00:06.0');
    expect(existsSync(subsys)).toBe(false);
    expect(existsSync(path.join(root, 'class/nvme-subsystem/nvme-subsys0'))).toBe(false);
  });
});

describe('largeHostSpec', () => {
  it('describes 16 PFs x 256 VFs and 256 NVMe controllers at distinct addresses by default', () => {
    const spec = largeHostSpec();
    expect(spec.pfs).toHaveLength(16);
    expect(spec.nvme).toHaveLength(256);
    expect(spec.pfs!.every((p) => p.numVfs === 256)).toBe(true);
    const nvme = spec.nvme!.map((n) => n.address);
    expect(new Set(nvme).size).toBe(256);
    expect(new Set(spec.nvme!.map((n) => n.controller)).size).toBe(256);
  });

  it('builds into a tree with every function and no address clash', async () => {
    const b = await buildSysfs(root, largeHostSpec({ pfs: 2, vfsPerPf: 250, nvme: 40 }));
    expect(b.root).toBe(root);
    expect(await readdir(path.join(root, 'bus/pci/devices'))).toHaveLength(2 + 500 + 40);
    expect(await readdir(path.join(root, 'class/nvme'))).toHaveLength(40);
  });

  it('refuses layouts that run past bus ff', () => {
    expect(() => largeHostSpec({ pfs: 120, vfsPerPf: 256 })).toThrow(/beyond ff/);
  });
});
