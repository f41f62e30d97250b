/**
 * Devices that cannot be passed through are not offered: on a simulated host
 * whose own root file system sits on an NVMe namespace (through
 * device-mapper), whose swap is on another, whose /boot is on a SATA disk,
 * whose network runs over a bond of two NICs under a VLAN and a bridge (the
 * default route), with a NIC that has a global IPv6 address, and a function
 * without an IOMMU group — `vendor_id`/wildcard entries that match all of them
 * offer none, and the dry run says why for each; an entry naming one of them
 * by its full address with `allow_host_device` / `allow_no_iommu` offers that
 * one; the keys are refused on an entry that does not name one function.
 * What the host uses is read from the simulated host's own procfs and sysfs
 * (src/sim/host-use.ts), as on a real host from /proc and /sys.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readHostUse } from '../../src/plugins/host-use.js';
import { buildSimHost, demoHostDefinition, type SimHost } from '../../src/sim/host.js';
import { simProcRoot, writeSimHostUse } from '../../src/sim/host-use.js';
import { tempDir } from '../helpers/agent.js';
import { berth, cliEnv, parseJson } from '../helpers/berth-cli.js';

const AHCI = '0000:00:17.0';
const ENO = (n: number) => `0000:${(0x50 + n - 1).toString(16)}:00.0`;
const NO_IOMMU = '0000:54:00.0';
/** nvme0..nvme3 at 3d..40; the root file system on nvme1, swap on nvme2. */
const NVME = (n: number) => `0000:${(0x3d + n).toString(16)}:00.0`;

interface DryRun {
  devices: { address: string; attributes: Record<string, string> }[];
  excluded: { address: string; driver: string; reason: string }[];
}

describe('devices the host uses, or that nothing isolates, are not offered', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let sim: SimHost;
  let env: NodeJS.ProcessEnv;
  let n = 0;

  /** The dry run of the simulated host with these device_spec entries. */
  async function dryRun(pci: unknown[], nvme?: unknown[]) {
    const cfg = join(dir.path, `agent-${n++}.yaml`);
    const doc = structuredClone(sim.agentConfig) as Record<string, Record<string, unknown>>;
    doc.pci = { device_spec: pci };
    if (nvme) doc.nvme = { ...doc.nvme, device_spec: nvme };
    await writeFile(cfg, JSON.stringify(doc));
    return berth(['agent', 'discover', '-c', cfg, '-o', 'json'], env);
  }

  beforeAll(async () => {
    dir = await tempDir('berth-host-devices-');
    const def = demoHostDefinition('busy-host');
    def.pci.functions!.push(
      { address: AHCI, vendorId: '8086', productId: 'a352', classCode: '010601', driver: 'ahci' },
      ...[1, 2, 3, 4].map((i) => ({ address: ENO(i), vendorId: '8086', productId: '1521', driver: 'igb' })),
      { address: NO_IOMMU, vendorId: '8086', productId: '1521', driver: 'igb', iommuGroup: null },
    );
    def.pci.netdevs = [1, 2, 3, 4].map((i) => ({ address: ENO(i), ifname: `eno${i}` }));
    sim = await buildSimHost(join(dir.path, 'host'), def);
    await writeSimHostUse(sim, {
      nvmePartitions: [
        { namespace: 'nvme1n1', partitions: ['nvme1n1p1', 'nvme1n1p2'] },
        { namespace: 'nvme2n1', partitions: ['nvme2n1p1'] },
      ],
      stacked: [{ name: 'dm-0', slaves: ['nvme1n1p2'], devName: 'mapper/vg0-root' }],
      disks: [{ function: AHCI, name: 'sda', partitions: ['sda1'] }],
      mounts: [
        { device: '/dev/mapper/vg0-root', mountpoint: '/' },
        { device: '/dev/sda1', mountpoint: '/boot' },
        { device: '/dev/nvme1n1p1', mountpoint: '/boot/efi', fstype: 'vfat' },
      ],
      swaps: ['/dev/nvme2n1p1'],
      virtualNetdevs: [
        { name: 'bond0', lower: ['eno1', 'eno2'] },
        { name: 'bond0.100', lower: ['bond0'] },
        { name: 'br0', ports: ['bond0.100'] },
      ],
      routes: [
        { iface: 'br0', destination: '0.0.0.0', prefix: 0, gateway: '192.0.2.1' },
        { iface: 'br0', destination: '192.0.2.0', prefix: 24 },
      ],
      ipv6: [
        { iface: 'eno3', address: 'fe80::1', scope: 'link' },
        { iface: 'eno4', address: '2001:db8::4', scope: 'global' },
      ],
    });
    env = cliEnv(join(dir.path, 'client.yaml'));
  }, 120_000);
  afterAll(async () => {
    await dir?.cleanup();
  });

  it('reads what the host uses from its procfs and sysfs, through partitions, device-mapper, bonds, VLANs and bridges', async () => {
    const use = await readHostUse({
      sysfsRoot: sim.sysfsRoot,
      devRoot: sim.devRoot,
      procRoot: simProcRoot(sim.root),
    });
    expect(Object.fromEntries(use)).toEqual({
      [NVME(1)]: ['/dev/mapper/vg0-root is mounted on /', '/dev/nvme1n1p1 is mounted on /boot/efi'],
      [NVME(2)]: ['/dev/nvme2n1p1 is swap'],
      [AHCI]: ['/dev/sda1 is mounted on /boot'],
      [ENO(1)]: ["br0 has the host's default route", 'br0 has an IPv4 address (a route)'],
      [ENO(2)]: ["br0 has the host's default route", 'br0 has an IPv4 address (a route)'],
      [ENO(4)]: ['eno4 has the address 2001:0db8:0000:0000:0000:0000:0000:0004'],
    });
  });

  it('the dry run excludes each, with the reason, from entries that match them by ids or wildcards', async () => {
    const r = await dryRun([{ vendor_id: '8086' }], [{ vendor_id: '144d', address: '*:*:*.*' }]);
    expect(r.code, r.stderr).toBe(0);
    const out = parseJson<DryRun>(r);
    const reason = (a: string) => out.excluded.find((e) => e.address === a)?.reason;
    expect(reason(NVME(1))).toMatch(
      /^the host uses it: \/dev\/mapper\/vg0-root is mounted on \/; \/dev\/nvme1n1p1 is mounted on \/boot\/efi; to offer it anyway, name it by its address with allow_host_device: true \(nvme\.device_spec\[0\]\)$/,
    );
    expect(reason(NVME(2))).toMatch(/^the host uses it: \/dev\/nvme2n1p1 is swap;/);
    expect(reason(AHCI)).toMatch(
      /^the host uses it: \/dev\/sda1 is mounted on \/boot; .*\(pci\.device_spec\[0\]\)$/,
    );
    expect(reason(ENO(1))).toMatch(/^the host uses it: br0 has the host's default route; /);
    expect(reason(ENO(2))).toMatch(/^the host uses it: br0 has the host's default route; /);
    expect(reason(ENO(4))).toMatch(/^the host uses it: eno4 has the address 2001:0db8:/);
    expect(reason(NO_IOMMU)).toMatch(
      /^no IOMMU group: nothing isolates the function from the host \(is the IOMMU on\? .*\); to offer it anyway, name it by its address with allow_no_iommu: true \(pci\.device_spec\[0\]\)$/,
    );
    // What the host does not use is offered: a NIC with only a link-local address, the other drives, the VFs.
    const offered = out.devices.map((d) => d.address);
    for (const a of [ENO(3), NVME(0), NVME(3), '0000:3b:02.0']) expect(offered).toContain(a);
    for (const a of [ENO(1), ENO(2), ENO(4), AHCI, NO_IOMMU, NVME(1), NVME(2)])
      expect(offered).not.toContain(a);

    // The table says it too, every reason whole (wrapped), within 120 columns.
    const table = await berth(['agent', 'discover', '-c', join(dir.path, `agent-${n - 1}.yaml`)], env);
    expect(table.stdout).toContain('Excluded (matched by a device_spec entry, not offered):');
    expect(Math.max(...table.stdout.split('\n').map((l) => [...l].length))).toBeLessThanOrEqual(120);
    expect(table.stdout.replace(/\s+/g, ' ')).toContain(
      'to offer it anyway, name it by its address with allow_no_iommu: true',
    );
  }, 60_000);

  it('offers one of them when an entry names it by address and the operator confirms it', async () => {
    const r = await dryRun(
      [
        { address: AHCI, allow_host_device: true },
        { address: NO_IOMMU, allow_no_iommu: 'yes' },
        // allow_no_iommu does not allow a host device, nor the reverse.
        { address: ENO(4), allow_no_iommu: true },
        { vendor_id: '8086' },
      ],
      [{ address: NVME(1), allow_host_device: true }, { vendor_id: '144d' }],
    );
    expect(r.code, r.stderr).toBe(0);
    const out = parseJson<DryRun>(r);
    const offered = new Map(out.devices.map((d) => [d.address, d]));
    expect(offered.get(AHCI)?.attributes).toMatchObject({ host_use: '/dev/sda1 is mounted on /boot' });
    expect(offered.get(NO_IOMMU)?.attributes).toMatchObject({ iommu: 'none (allow_no_iommu)' });
    expect(offered.get(NVME(1))?.attributes.host_use).toMatch(/vg0-root is mounted on \//);
    expect(offered.has(ENO(4))).toBe(false);
    expect(out.excluded.find((e) => e.address === ENO(4))?.reason).toMatch(
      /^the host uses it: .*\(pci\.device_spec\[2\]\)$/,
    );
    expect(offered.has(NVME(2))).toBe(false);
  }, 60_000);

  it('refuses the keys on an entry that does not name one function by its full address', async () => {
    const cases: [unknown, RegExp][] = [
      [
        { vendor_id: '8086', allow_host_device: true },
        /pci\.device_spec\[0\]\.allow_host_device: true needs the entry to name one function by its full address .* not vendor and product ids alone/,
      ],
      [
        { address: '0000:50:*.0', allow_no_iommu: true },
        /pci\.device_spec\[0\]\.allow_no_iommu: true needs .* not a wildcard or a pattern/,
      ],
      [
        { devname: 'eno4', allow_host_device: 'on' },
        /pci\.device_spec\[0\]\.allow_host_device: true needs .* not devname/,
      ],
      [
        { address: AHCI, allow_host_device: 'maybe' },
        /pci\.device_spec\[0\]\.allow_host_device: "maybe" is not a boolean/,
      ],
    ];
    for (const [entry, message] of cases) {
      const r = await dryRun([entry]);
      expect(r.code, JSON.stringify(entry)).toBe(2);
      expect(r.stderr).toMatch(message);
    }
  }, 60_000);
});
