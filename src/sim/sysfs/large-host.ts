/**
 * A deliberately large simulated host for benchmarks: many SR-IOV PFs with all
 * their VFs enabled, plus many NVMe controllers, on a single PCI domain. With
 * the defaults it holds 16 PFs + 4,096 VFs + 256 NVMe functions (4,368 in all).
 */

import type { SimHostSpec, SimNvmeSpec, SimPfSpec } from './builder.js';

export interface LargeHostOptions {
  pfs?: number;
  vfsPerPf?: number;
  nvme?: number;
}

const hex2 = (n: number) => n.toString(16).padStart(2, '0');

/**
 * PFs sit at function 0 of slot 0 on their own buses (0x10, then one bus per
 * 256 routing IDs their VFs need); NVMe controllers fill slots 0-31 of the
 * buses after them, 32 per bus. Throws when the layout would pass bus ff.
 */
export function largeHostSpec(opts: LargeHostOptions = {}): SimHostSpec {
  const pfCount = opts.pfs ?? 16;
  const vfsPerPf = opts.vfsPerPf ?? 256;
  const nvmeCount = opts.nvme ?? 256;
  // VFs start 16 routing IDs (two slots) after their PF; see SimPfSpec.
  const busesPerPf = Math.max(1, Math.ceil((16 + vfsPerPf) / 256));
  let bus = 0x10;
  const pfs: SimPfSpec[] = [];
  const netdevs: { address: string; ifname: string }[] = [];
  for (let i = 0; i < pfCount; i++, bus += busesPerPf) {
    const address = `0000:${hex2(bus)}:00.0`;
    pfs.push({
      address,
      vendorId: '8086',
      productId: '1572',
      revision: '02',
      driver: 'i40e',
      numaNode: i % 2,
      totalVfs: Math.max(1, vfsPerPf),
      numVfs: vfsPerPf,
      vf: { productId: '154c', driver: 'iavf' },
    });
    netdevs.push({ address, ifname: `ens${i}f0` });
  }
  const nvme: SimNvmeSpec[] = [];
  for (let i = 0; i < nvmeCount; i++) {
    const b = bus + Math.floor(i / 32);
    nvme.push({
      address: `0000:${hex2(b)}:${hex2(i % 32)}.0`,
      vendorId: '144d',
      productId: 'a808',
      numaNode: i % 2,
      controller: `nvme${i}`,
      model: 'Samsung SSD 970 EVO Plus 1TB',
      serial: `S4EWNX0R${i.toString().padStart(6, '0')}`,
      firmware: '2B2QEXM7',
      namespaces: [{ nsid: 1, sizeBytes: 1_000_204_886_016 }],
      writeZeroesMaxBytes: 131072,
    });
  }
  const lastBus = nvmeCount > 0 ? bus + Math.floor((nvmeCount - 1) / 32) : bus - 1;
  if (lastBus > 0xff)
    throw new Error(`largeHostSpec: the layout needs bus ${lastBus.toString(16)}, beyond ff`);
  return { pfs, nvme, netdevs };
}
