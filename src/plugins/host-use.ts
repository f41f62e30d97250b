/**
 * Which PCI functions the host itself uses, read from procfs and sysfs (never
 * by running a command, so the simulator models it with files): a function
 * whose block device holds a mounted file system or swap (its own, or one
 * under a device-mapper or md device built on it; an NVMe namespace shared
 * through a subsystem counts for every controller of the subsystem), and a
 * function whose network interface carries an address or a route (its own, or
 * a bond, VLAN, macvlan or bridge built on it). Handing such a function to a
 * guest takes the host's disk or network away, so discovery does not offer it
 * unless the operator says so for that function (device_spec
 * `allow_host_device`).
 *
 * Sources, under the agent's `proc_root` (default /proc) and `sysfs_root`:
 * - `<proc>/1/mounts` (the host's mount table; else `self/mounts`, `mounts`)
 *   and `<proc>/swaps`: device sources under /dev, resolved through `dev_root`
 *   (`/dev/mapper/root` → `dm-0`) and `<sys>/class/block/<name>`;
 *   device-mapper and md devices through their `slaves/`.
 * - `<proc>/net/route` (IPv4: an interface with any route has an address on
 *   that network; the destination 0 is the default route),
 *   `<proc>/net/if_inet6` (IPv6 addresses of global scope; link-local ones,
 *   which every interface that is up has, do not count) and
 *   `<proc>/net/ipv6_route` (an IPv6 default route). An IPv4 address with no
 *   route at all (a /32 with noprefixroute) is not seen.
 * - `<sys>/class/net/<if>`: its `device` link (the function), `lower_*` links
 *   (bond slaves, a VLAN's or macvlan's parent) and `brif/` (bridge ports).
 */
import { readdir, readFile, realpath } from 'node:fs/promises';
import path from 'node:path';
import { isPciAddress } from '../identifiers.js';

/** A kernel name for a block device or an interface: no path separators, nothing odd. */
const SAFE_NAME = /^[A-Za-z0-9_.:@+-]{1,64}$/;
/** How deep a stack of devices (dm on md on partitions) or interfaces (vlan on bond on NIC) is followed. */
const MAX_DEPTH = 8;

export interface HostUseRoots {
  sysfsRoot: string;
  devRoot: string;
  procRoot: string;
}

/** PCI address → why the host uses it (one line per use). */
export type HostUse = Map<string, string[]>;

async function readText(file: string): Promise<string | null> {
  try {
    return await readFile(file, 'utf8');
  } catch {
    return null;
  }
}

async function resolved(p: string): Promise<string | null> {
  try {
    return await realpath(p);
  } catch {
    return null;
  }
}

async function list(dir: string): Promise<string[]> {
  try {
    return await readdir(dir);
  } catch {
    return [];
  }
}

/** The deepest PCI address in a sysfs path: the function a device hangs off (bridges sit above it). */
function deepestFunction(sysPath: string): string | null {
  const parts = sysPath.split('/');
  for (let i = parts.length - 1; i >= 0; i--) if (isPciAddress(parts[i])) return parts[i]!;
  return null;
}

/** `\040` and friends in /proc/mounts fields. */
const mountField = (s: string) =>
  s.replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(Number.parseInt(o, 8)));

export class HostUseReader {
  private readonly use: HostUse = new Map();

  constructor(private readonly roots: HostUseRoots) {}

  private add(address: string, why: string): void {
    const reasons = this.use.get(address) ?? [];
    if (!reasons.includes(why)) reasons.push(why);
    this.use.set(address, reasons);
  }

  /** The PCI functions behind block device `name` (a partition, dm, md, an NVMe namespace or multipath head). */
  private async blockFunctions(name: string, depth = 0): Promise<string[]> {
    if (!SAFE_NAME.test(name) || depth > MAX_DEPTH) return [];
    const dir = await resolved(path.join(this.roots.sysfsRoot, 'class', 'block', name));
    if (!dir) return [];
    const slaves = await list(path.join(dir, 'slaves'));
    if (slaves.length > 0) {
      return (await Promise.all(slaves.map((s) => this.blockFunctions(s, depth + 1)))).flat();
    }
    const own = deepestFunction(dir);
    if (own) return [own];
    // An NVMe multipath head (devices/virtual/nvme-subsystem/nvme-subsysS/nvmeSnY): every controller of the subsystem.
    const parts = dir.split('/');
    const at = parts.lastIndexOf('nvme-subsystem');
    if (at >= 0 && at + 1 < parts.length - 1) {
      const subsystem = parts.slice(0, at + 2).join('/');
      const out: string[] = [];
      for (const entry of await list(subsystem)) {
        if (!/^nvme\d+$/.test(entry)) continue;
        const controller = await resolved(path.join(subsystem, entry));
        const fn = controller ? deepestFunction(controller) : null;
        if (fn) out.push(fn);
      }
      return out;
    }
    return [];
  }

  /** A /dev path as the kernel's block device name (`/dev/mapper/root` → `dm-0`). */
  private async blockName(source: string): Promise<string | null> {
    if (!source.startsWith('/dev/')) return null;
    const inDev = path.join(this.roots.devRoot, source.slice('/dev/'.length));
    const target = await resolved(inDev);
    const name = path.basename(target ?? source);
    return SAFE_NAME.test(name) ? name : null;
  }

  private async readBlockUse(): Promise<void> {
    const proc = this.roots.procRoot;
    const mounts =
      (await readText(path.join(proc, '1', 'mounts'))) ??
      (await readText(path.join(proc, 'self', 'mounts'))) ??
      (await readText(path.join(proc, 'mounts'))) ??
      '';
    const uses: { source: string; what: string }[] = [];
    for (const line of mounts.split('\n')) {
      const [source, mountpoint] = line.split(' ');
      if (source?.startsWith('/dev/') && mountpoint) {
        uses.push({ source: mountField(source), what: `is mounted on ${mountField(mountpoint)}` });
      }
    }
    const swaps = (await readText(path.join(proc, 'swaps'))) ?? '';
    for (const line of swaps.split('\n').slice(1)) {
      const [file, type] = line.split(/\s+/);
      if (file?.startsWith('/dev/') && type === 'partition')
        uses.push({ source: mountField(file), what: 'is swap' });
    }
    for (const u of uses) {
      const name = await this.blockName(u.source);
      if (!name) continue;
      for (const fn of await this.blockFunctions(name)) this.add(fn, `${u.source} ${u.what}`);
    }
  }

  /** The PCI functions under interface `ifname`: its own device, or those of the interfaces it is built on. */
  private async netFunctions(ifname: string, depth = 0): Promise<string[]> {
    if (!SAFE_NAME.test(ifname) || depth > MAX_DEPTH) return [];
    const dir = path.join(this.roots.sysfsRoot, 'class', 'net', ifname);
    const device = await resolved(path.join(dir, 'device'));
    const own = device ? deepestFunction(device) : null;
    const lower = (await list(dir))
      .filter((e) => e.startsWith('lower_'))
      .map((e) => e.slice('lower_'.length));
    const ports = await list(path.join(dir, 'brif'));
    const below = (
      await Promise.all([...lower, ...ports].map((n) => this.netFunctions(n, depth + 1)))
    ).flat();
    return own ? [own, ...below] : below;
  }

  private async readNetUse(): Promise<void> {
    const proc = this.roots.procRoot;
    const uses: { ifname: string; what: string }[] = [];
    const routes = (await readText(path.join(proc, 'net', 'route'))) ?? '';
    for (const line of routes.split('\n').slice(1)) {
      const [ifname, destination] = line.trim().split(/\s+/);
      if (!ifname || !destination) continue;
      uses.push({
        ifname,
        what: destination === '00000000' ? "has the host's default route" : 'has an IPv4 address (a route)',
      });
    }
    const inet6 = (await readText(path.join(proc, 'net', 'if_inet6'))) ?? '';
    for (const line of inet6.split('\n')) {
      const [hex, , , scope, , ifname] = line.trim().split(/\s+/);
      // Scope 00 is global; 20 link-local, 10 host, 40 site: only a global address makes the host depend on it.
      if (!hex || !ifname || scope !== '00') continue;
      uses.push({ ifname, what: `has the address ${hex.match(/.{4}/g)!.join(':')}` });
    }
    const routes6 = (await readText(path.join(proc, 'net', 'ipv6_route'))) ?? '';
    for (const line of routes6.split('\n')) {
      const f = line.trim().split(/\s+/);
      const ifname = f[9];
      if (f[0] === '0'.repeat(32) && f[1] === '00' && ifname && /[1-9a-f]/.test(f[4] ?? '')) {
        uses.push({ ifname, what: "has the host's IPv6 default route" });
      }
    }
    for (const u of uses) {
      if (u.ifname === 'lo') continue;
      for (const fn of await this.netFunctions(u.ifname)) this.add(fn, `${u.ifname} ${u.what}`);
    }
  }

  async read(): Promise<HostUse> {
    await Promise.all([this.readBlockUse(), this.readNetUse()]);
    return this.use;
  }
}

/** What the host uses, by PCI address (see the module comment). */
export function readHostUse(roots: HostUseRoots): Promise<HostUse> {
  return new HostUseReader(roots).read();
}
