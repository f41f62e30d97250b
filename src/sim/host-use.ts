/**
 * What a simulated host itself uses, as the files discovery reads it from
 * (src/plugins/host-use.ts): a procfs of its own (`<root>/proc`: the mount
 * table, swaps, IPv4 routes, IPv6 addresses and routes), and in its sysfs tree
 * the block devices and interfaces those name — SATA disks on a controller
 * function, partitions of NVMe namespaces, device-mapper/md devices stacked on
 * them, bonds, VLANs and bridges on NICs. `buildSimHost` writes an empty
 * procfs (the host uses nothing Berth manages); `writeSimHostUse` replaces it.
 */
import { mkdir, readlink, rm, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';

export interface SimHostUse {
  /** Mounted block devices, as /proc/1/mounts lists them: `/dev/<name>` on a mount point. */
  mounts?: { device: string; mountpoint: string; fstype?: string }[];
  /** Swap partitions (`/dev/<name>`). */
  swaps?: string[];
  /** Disks on a storage controller function (SATA, SAS): `class/block/<name>` under it, with partitions. */
  disks?: { function: string; name: string; partitions?: string[] }[];
  /** Partitions of NVMe namespaces (`nvme0n1p1` under `nvme0n1`). */
  nvmePartitions?: { namespace: string; partitions: string[] }[];
  /** Device-mapper or md devices built on block devices (`dm-0` with `slaves/`), and their /dev name. */
  stacked?: { name: string; slaves: string[]; devName?: string }[];
  /** IPv4 routes of the main table: `0.0.0.0/0` is the default route. */
  routes?: { iface: string; destination: string; prefix: number; gateway?: string }[];
  /** IPv6 addresses (global or link-local). */
  ipv6?: { iface: string; address: string; scope: 'global' | 'link' }[];
  /** IPv6 default routes, by interface, through a gateway. */
  ipv6DefaultRoutes?: { iface: string; gateway: string }[];
  /** Interfaces built on others: a bond or VLAN (`lower`), a bridge (`ports`). */
  virtualNetdevs?: { name: string; lower?: string[]; ports?: string[] }[];
}

export interface SimHostUseTarget {
  root: string;
  sysfsRoot: string;
  devRoot: string;
}

/** The procfs root a simulated host's agent reads. */
export const simProcRoot = (root: string) => path.join(root, 'proc');

const hex32 = (ip: string) =>
  ip
    .split('.')
    .map((o) => Number(o).toString(16).toUpperCase().padStart(2, '0'))
    .reverse()
    .join('');
const mask = (prefix: number) => {
  const bits = prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
  return hex32([bits >>> 24, (bits >>> 16) & 255, (bits >>> 8) & 255, bits & 255].join('.'));
};
/** An IPv6 address as the 32 hex digits /proc/net writes. */
function hex128(address: string): string {
  const [head, tail] = address.includes('::') ? address.split('::') : [address, undefined];
  const a = head ? head.split(':').filter(Boolean) : [];
  const b = tail ? tail.split(':').filter(Boolean) : [];
  const groups = [...a, ...Array(8 - a.length - b.length).fill('0'), ...b];
  return groups.map((g) => g.padStart(4, '0').toLowerCase()).join('');
}

async function link(from: string, to: string): Promise<void> {
  await mkdir(path.dirname(from), { recursive: true });
  await rm(from, { force: true, recursive: true });
  await symlink(path.relative(path.dirname(from), to), from);
}

/** Writes the empty procfs of a simulated host: it mounts nothing and routes nothing Berth manages. */
export async function writeSimProc(root: string): Promise<string> {
  const proc = simProcRoot(root);
  await mkdir(path.join(proc, '1'), { recursive: true });
  await mkdir(path.join(proc, 'net'), { recursive: true });
  await writeFile(path.join(proc, '1', 'mounts'), 'proc /proc proc rw 0 0\nsysfs /sys sysfs rw 0 0\n');
  await writeFile(path.join(proc, 'swaps'), 'Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n');
  await writeFile(
    path.join(proc, 'net', 'route'),
    'Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n',
  );
  await writeFile(path.join(proc, 'net', 'if_inet6'), '');
  await writeFile(path.join(proc, 'net', 'ipv6_route'), '');
  return proc;
}

/** Makes the simulated host use what `use` says (see the module comment); replaces its procfs files. */
export async function writeSimHostUse(host: SimHostUseTarget, use: SimHostUse): Promise<void> {
  const proc = await writeSimProc(host.root);
  const sys = host.sysfsRoot;
  const fnDir = (address: string) => path.join(sys, 'bus', 'pci', 'devices', address);
  const blockDir = async (name: string) =>
    path.resolve(path.join(sys, 'class', 'block'), await readlink(path.join(sys, 'class', 'block', name)));

  for (const d of use.disks ?? []) {
    const dir = path.join(
      path.resolve(path.join(sys, 'bus', 'pci', 'devices'), await readlink(fnDir(d.function))),
      'ata1',
      'host0',
      'target0:0:0',
      '0:0:0:0',
      'block',
      d.name,
    );
    await mkdir(dir, { recursive: true });
    await link(path.join(sys, 'class', 'block', d.name), dir);
    for (const p of d.partitions ?? []) {
      await mkdir(path.join(dir, p), { recursive: true });
      await writeFile(path.join(dir, p, 'partition'), '1\n');
      await link(path.join(sys, 'class', 'block', p), path.join(dir, p));
    }
  }
  for (const n of use.nvmePartitions ?? []) {
    const dir = await blockDir(n.namespace);
    for (const p of n.partitions) {
      await mkdir(path.join(dir, p), { recursive: true });
      await writeFile(path.join(dir, p, 'partition'), '1\n');
      await link(path.join(sys, 'class', 'block', p), path.join(dir, p));
    }
  }
  for (const s of use.stacked ?? []) {
    const dir = path.join(sys, 'devices', 'virtual', 'block', s.name);
    await mkdir(path.join(dir, 'slaves'), { recursive: true });
    for (const slave of s.slaves) await link(path.join(dir, 'slaves', slave), await blockDir(slave));
    await link(path.join(sys, 'class', 'block', s.name), dir);
    // /dev/mapper/<x> -> ../dm-N, as udev makes it.
    await writeFile(path.join(host.devRoot, s.name), '');
    if (s.devName) await link(path.join(host.devRoot, s.devName), path.join(host.devRoot, s.name));
  }
  for (const v of use.virtualNetdevs ?? []) {
    const dir = path.join(sys, 'devices', 'virtual', 'net', v.name);
    await mkdir(dir, { recursive: true });
    for (const lower of v.lower ?? []) {
      await link(path.join(dir, `lower_${lower}`), path.join(sys, 'class', 'net', lower));
    }
    for (const port of v.ports ?? []) {
      await link(path.join(dir, 'brif', port), path.join(sys, 'class', 'net', port));
    }
    await link(path.join(sys, 'class', 'net', v.name), dir);
  }

  const mounts = (use.mounts ?? []).map(
    (m) => `${m.device} ${m.mountpoint.replaceAll(' ', '\\040')} ${m.fstype ?? 'ext4'} rw,relatime 0 0`,
  );
  await writeFile(
    path.join(proc, '1', 'mounts'),
    ['proc /proc proc rw 0 0', 'sysfs /sys sysfs rw 0 0', ...mounts, ''].join('\n'),
  );
  const swaps = (use.swaps ?? []).map((s) => `${s}\t\t\t\tpartition\t1048572\t\t0\t\t-2`);
  await writeFile(
    path.join(proc, 'swaps'),
    ['Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority', ...swaps, ''].join('\n'),
  );
  const routes = (use.routes ?? []).map((r) =>
    [
      r.iface,
      hex32(r.destination),
      hex32(r.gateway ?? '0.0.0.0'),
      r.gateway ? '0003' : '0001',
      '0',
      '0',
      '0',
      mask(r.prefix),
      '0',
      '0',
      '0',
    ].join('\t'),
  );
  await writeFile(
    path.join(proc, 'net', 'route'),
    [
      'Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT',
      ...routes,
      '',
    ].join('\n'),
  );
  const inet6 = (use.ipv6 ?? []).map(
    (a, i) =>
      `${hex128(a.address)} ${String(i + 2).padStart(2, '0')} 40 ${a.scope === 'global' ? '00' : '20'} 80 ${a.iface.padStart(8)}`,
  );
  await writeFile(path.join(proc, 'net', 'if_inet6'), inet6.length ? `${inet6.join('\n')}\n` : '');
  const routes6 = (use.ipv6DefaultRoutes ?? []).map(
    (r) =>
      `${'0'.repeat(32)} 00 ${'0'.repeat(32)} 00 ${hex128(r.gateway)} 00000400 00000001 00000000 00450003 ${r.iface.padStart(8)}`,
  );
  await writeFile(path.join(proc, 'net', 'ipv6_route'), routes6.length ? `${routes6.join('\n')}\n` : '');
}
