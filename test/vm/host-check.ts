/**
 * Whether this machine can run the VM suite, and with what: QEMU, a kernel
 * image with its NVMe and 9p modules, a static busybox, nvme-cli, udevadm. The guest
 * runs the host's own node, nvme-cli and checkout through a 9p share of the
 * host's root, so it must be the host's architecture (x86_64).
 *
 * Each missing piece is one reason, phrased so the skip line says what to
 * install. Environment overrides: BERTH_VM_QEMU, BERTH_VM_KERNEL (a
 * /boot/vmlinuz-<version> path), BERTH_VM_BUSYBOX, BERTH_VM_ACCEL (default
 * tcg: KVM hangs under nested virtualisation on our build machines).
 */
import { execFileSync } from 'node:child_process';
import { accessSync, closeSync, constants, existsSync, openSync, readdirSync, readSync } from 'node:fs';
import { basename, join } from 'node:path';

export interface VmHost {
  qemu: string;
  accel: string;
  kernel: string;
  kernelVersion: string;
  /** Kernel modules (.ko) in load order. */
  modules: string[];
  busybox: string;
  nvmeCli: string;
  node: string;
  /** buf's Go binary: the npm wrapper would start node first, which costs seconds under TCG. */
  buf: string;
}

export type VmHostProbe = { ok: true; host: VmHost } | { ok: false; reason: string };

/** What the guest loads: the NVMe driver, virtio-pci and the 9p filesystem. */
const WANTED_MODULES = ['nvme', 'virtio_pci', '9pnet_virtio', '9p'];

function findProgram(name: string, env: NodeJS.ProcessEnv): string | null {
  const dirs = [...(env.PATH ?? '').split(':'), '/usr/local/sbin', '/usr/sbin', '/sbin'];
  for (const d of dirs) {
    if (d === '') continue;
    const p = join(d, name);
    try {
      accessSync(p, constants.X_OK);
      return p;
    } catch {
      // not here
    }
  }
  return null;
}

/** True for an ELF executable without an interpreter (PT_INTERP): it runs with no libc around it. */
export function isStaticElf(file: string): boolean {
  const fd = openSync(file, 'r');
  try {
    const head = Buffer.alloc(64);
    readSync(fd, head, 0, 64, 0);
    if (head.readUInt32BE(0) !== 0x7f454c46 || head[4] !== 2) return false;
    const phoff = Number(head.readBigUInt64LE(0x20));
    const phentsize = head.readUInt16LE(0x36);
    const phnum = head.readUInt16LE(0x38);
    const table = Buffer.alloc(phentsize * phnum);
    readSync(fd, table, 0, table.length, phoff);
    for (let i = 0; i < phnum; i++) if (table.readUInt32LE(i * phentsize) === 3) return false;
    return true;
  } finally {
    closeSync(fd);
  }
}

/** Kernel images to try, newest first: BERTH_VM_KERNEL, or every /boot/vmlinuz-* with its modules installed. */
function kernelCandidates(env: NodeJS.ProcessEnv): { kernel: string; version: string }[] | string {
  if (env.BERTH_VM_KERNEL) {
    const kernel = env.BERTH_VM_KERNEL;
    return [{ kernel, version: basename(kernel).replace(/^vmlinuz-/, '') }];
  }
  let images: string[] = [];
  try {
    images = readdirSync('/boot').filter((n) => n.startsWith('vmlinuz-'));
  } catch {
    // no /boot
  }
  const usable = images
    .map((n) => n.slice('vmlinuz-'.length))
    .filter((v) => existsSync(`/lib/modules/${v}/modules.dep`))
    .sort((a, b) => b.localeCompare(a, 'en', { numeric: true }));
  if (usable.length === 0) {
    return images.length === 0
      ? 'no kernel image in /boot (apt-get install linux-image-amd64)'
      : `no /lib/modules/<version>/modules.dep for ${images.join(', ')} (reinstall linux-image-amd64)`;
  }
  return usable.map((version) => ({ kernel: `/boot/vmlinuz-${version}`, version }));
}

function moduleOrder(modprobe: string, version: string): string[] | string {
  let out: string;
  try {
    out = execFileSync(modprobe, ['-S', version, '-a', '--show-depends', ...WANTED_MODULES], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
    });
  } catch (e) {
    const stderr = String((e as { stderr?: unknown }).stderr ?? (e as Error).message).trim();
    return `modprobe cannot resolve ${WANTED_MODULES.join(' ')} for ${version}: ${stderr.split('\n')[0]}`;
  }
  const modules: string[] = [];
  for (const line of out.split('\n')) {
    const [verb, path] = line.trim().split(/\s+/);
    if (verb === 'insmod' && path && !modules.includes(path)) modules.push(path);
  }
  return modules;
}

export function probeVmHost(repo: string, env: NodeJS.ProcessEnv = process.env): VmHostProbe {
  const no = (reason: string): VmHostProbe => ({ ok: false, reason });
  if (process.platform !== 'linux' || process.arch !== 'x64') {
    return no(
      `the guest runs this host's binaries, so it needs linux/x64 (this is ${process.platform}/${process.arch})`,
    );
  }
  const qemu = env.BERTH_VM_QEMU ?? findProgram('qemu-system-x86_64', env);
  if (!qemu) return no('qemu-system-x86_64 not found (apt-get install qemu-system-x86)');
  const candidates = kernelCandidates(env);
  if (typeof candidates === 'string') return no(candidates);
  const modprobe = findProgram('modprobe', env);
  if (!modprobe) return no('modprobe not found (apt-get install kmod)');
  // The first kernel that has every module the guest loads (a cloud flavour may lack some).
  let picked: { kernel: string; version: string; modules: string[] } | undefined;
  let firstProblem = '';
  for (const k of candidates) {
    const modules = moduleOrder(modprobe, k.version);
    if (typeof modules !== 'string') {
      picked = { ...k, modules };
      break;
    }
    firstProblem ||= modules;
  }
  if (!picked) return no(firstProblem);
  try {
    accessSync(picked.kernel, constants.R_OK);
  } catch {
    return no(`cannot read ${picked.kernel} (Ubuntu installs it mode 0600: run as root or chmod a+r it)`);
  }
  const busybox =
    env.BERTH_VM_BUSYBOX ?? ['/bin/busybox', '/usr/bin/busybox'].find((p) => existsSync(p) && isStaticElf(p));
  if (!busybox) return no('no statically linked busybox (apt-get install busybox-static)');
  const nvmeCli = findProgram('nvme', env);
  if (!nvmeCli) return no('nvme-cli not found (apt-get install nvme-cli)');
  // The guest's agent follows the kernel's uevents with this machine's udevadm (the hotplug scenario).
  if (!findProgram('udevadm', { ...env, PATH: `${env.PATH ?? ''}:/bin:/usr/bin` })) {
    return no('udevadm not found (apt-get install udev)');
  }
  const buf = join(repo, 'node_modules/@bufbuild/buf-linux-x64/bin/buf');
  if (!existsSync(buf)) return no(`${buf} is missing (npm install)`);
  return {
    ok: true,
    host: {
      qemu,
      accel: env.BERTH_VM_ACCEL ?? 'tcg,thread=multi',
      kernel: picked.kernel,
      kernelVersion: picked.version,
      modules: picked.modules,
      busybox,
      nvmeCli,
      node: process.execPath,
      buf,
    },
  };
}
