/**
 * Reads PCI functions (and the network interfaces hanging off them) from a
 * sysfs tree: the real /sys, or a simulated tree built by
 * src/sim/sysfs. Discovery runs this on an interval, so it is written to do few
 * syscalls per function (synchronous calls, yielding to the event loop between
 * time slices).
 *
 * Hot-unplug can remove a function while we read it; that must never fail a
 * discovery pass — the function is simply reported missing (null / left out).
 * Optional attributes that cannot be read fall back to their documented
 * defaults, because older kernels and other architectures omit some of them.
 *
 * The attribute primitives are in sysfs-attributes.ts; the NVMe controllers,
 * namespaces and subsystems are read by src/plugins/nvme/sysfs-nvme.ts.
 */

import { type Dir, existsSync, opendirSync, readdirSync } from 'node:fs';
import { realpath } from 'node:fs/promises';
import path from 'node:path';
import { setImmediate as yieldToEventLoop } from 'node:timers/promises';
import { invalidArgument } from '../../errors.js';
import { isPciAddress, type PciAddress } from '../../identifiers.js';
import type { PciFunction } from '../types.js';
import {
  hexAttr,
  intAttr,
  isGone,
  lastComponent,
  numericSuffix,
  readAttr,
  readdirOptional,
  readlinkOptional,
  readOptional,
} from './sysfs-attributes.js';

/**
 * How long readPciFunctions reads before it yields to the event loop: bounds
 * the stall it causes the agent's gRPC server (a yield costs ~15 µs; 64
 * functions a batch made 68 of them on the benchmark's 4,368 functions).
 */
const READ_SLICE_MS = 4;

const VIRTFN_RE = /^virtfn\d+$/;

/**
 * Reads one function from its directory (reached through bus/pci/devices, so
 * paths go through the kernel's symlink without us resolving it). One readdir
 * tells us which optional attributes and links exist, so nothing is opened that
 * is not there: a plain function costs a readdir, four small reads and two
 * readlinks.
 *
 * Synchronous on purpose: these attributes are values the kernel has cached
 * (no device access, no blocking), and sync calls skip the libuv thread-pool
 * round trip per operation, which makes a full scan of thousands of functions
 * several times faster. Callers bound the event-loop stall by yielding.
 */
function readFunctionDir(dir: string, address: PciAddress): PciFunction | null {
  let entries: string[];
  try {
    entries = readdirSync(dir);
  } catch (e) {
    if (isGone(e)) return null;
    throw e;
  }
  const names = new Set(entries);
  if (!names.has('vendor') || !names.has('device') || !names.has('class')) return null;
  const at = (name: string) => `${dir}/${name}`;
  const vendorId = hexAttr(readAttr(at('vendor')), 4);
  const productId = hexAttr(readAttr(at('device')), 4);
  const classCode = hexAttr(readAttr(at('class')), 6);
  // A vanished device shows up as missing required attributes; so does garbage,
  // which we must not report as a device either.
  if (vendorId === undefined || productId === undefined || classCode === undefined) return null;

  const opt = (name: string) => (names.has(name) ? readOptional(at(name)) : undefined);
  const link = (name: string) => (names.has(name) ? readlinkOptional(at(name)) : undefined);
  const list = (name: string) => (names.has(name) ? readdirOptional(at(name)) : []);

  const driver = link('driver');
  const physfn = link('physfn');
  const group = link('iommu_group');
  const groupName = group === undefined ? undefined : path.basename(group);
  const physfnAddr = physfn === undefined ? null : path.basename(physfn);
  const virtfns: string[] = [];
  const virtfnNames = entries.filter((n) => VIRTFN_RE.test(n));
  virtfnNames.sort((a, b) => numericSuffix(a, 'virtfn') - numericSuffix(b, 'virtfn'));
  for (const n of virtfnNames) {
    const l = readlinkOptional(at(n));
    const a = l === undefined ? '' : path.basename(l);
    if (isPciAddress(a)) virtfns.push(a);
  }

  const subsystemVendorId = hexAttr(opt('subsystem_vendor'), 4);
  const subsystemProductId = hexAttr(opt('subsystem_device'), 4);
  const fn: PciFunction = {
    address,
    vendorId,
    productId,
    classCode,
    kernelDriver: driver === undefined ? null : path.basename(driver),
    physfn: physfnAddr !== null && isPciAddress(physfnAddr) ? physfnAddr : null,
    virtfns,
    sriovTotalVfs: Math.max(0, intAttr(opt('sriov_totalvfs'), 0)),
    sriovNumVfs: Math.max(0, intAttr(opt('sriov_numvfs'), 0)),
    iommuGroup: groupName !== undefined && /^\d+$/.test(groupName) ? Number(groupName) : null,
    numaNode: Math.max(-1, intAttr(opt('numa_node'), -1)),
    netdevs: list('net').sort(),
    nvmeControllers: list('nvme')
      .filter((n) => /^nvme\d+$/.test(n))
      .sort((a, b) => numericSuffix(a, 'nvme') - numericSuffix(b, 'nvme')),
  };
  setSubsystemIds(fn, subsystemVendorId, subsystemProductId);
  return fn;
}

/**
 * The subsystem ids, set only when both are known. Set after the record is
 * built, not spread into its literal: a conditional spread per function cost
 * a few ms of CPU a pass on the large host (bench/README.md, "Regressions of
 * 2026-11-26").
 */
function setSubsystemIds(
  to: { subsystemVendorId?: string; subsystemProductId?: string },
  vendor: string | undefined,
  product: string | undefined,
): void {
  if (vendor === undefined || product === undefined) return;
  to.subsystemVendorId = vendor;
  to.subsystemProductId = product;
}

/**
 * address → names of the children a class directory (class/net, class/nvme)
 * links into `<function>/<kind>/<name>`. One readlink per entry replaces a
 * directory probe per function. Entries that do not sit directly under a PCI
 * function (virtio-net's eth0 under 0000:00:03.0/virtio2/net, lo under
 * devices/virtual) are not the function's `<kind>/` children and are skipped,
 * exactly as a listing of `<function>/<kind>/` would not show them.
 */
function classChildren(sysfsRoot: string, klass: string, kind: string): Map<string, string[]> {
  const dir = path.join(sysfsRoot, 'class', klass);
  const out = new Map<string, string[]>();
  for (const name of readdirOptional(dir)) {
    const target = readlinkOptional(path.join(dir, name));
    if (target === undefined) continue;
    const parts = target.split('/');
    const n = parts.length;
    if (n < 3 || parts[n - 1] !== name || parts[n - 2] !== kind) continue;
    const address = parts[n - 3]!;
    if (!isPciAddress(address)) continue;
    const list = out.get(address);
    if (list) list.push(name);
    else out.set(address, [name]);
  }
  return out;
}

interface ScannedFunction {
  fn: PciFunction;
  dir: string;
  /** A PF whose sriov_numvfs could not be read (or is not a number): its VFs are found by listing it. */
  numVfsUnread: boolean;
}

/** What a function's `uevent` says of it: the ids, the class and the bound driver. */
interface Identity {
  vendorId: string;
  productId: string;
  classCode: string;
  kernelDriver: string | null;
  /** From PCI_SUBSYS_ID (or the subsystem_* attributes); absent when neither says. */
  subsystemVendorId?: string;
  subsystemProductId?: string;
}

const PCI_ID_RE = /^[0-9A-Fa-f]{4}:[0-9A-Fa-f]{4}$/;
const CLASS_RE = /^[0-9A-Fa-f]{1,6}$/;
/** A kernel driver's name: what a module or built-in driver can be called. */
const DRIVER_NAME_RE = /^[A-Za-z0-9_.+-]{1,64}$/;

/**
 * Parses a PCI function's `uevent` (the kernel's pci_uevent: `PCI_ID=8086:154C`,
 * `PCI_CLASS=20000`, `DRIVER=` while a driver is bound, `PCI_SLOT_NAME=`). The
 * kernel prints these from the same fields of struct pci_dev as the `vendor`,
 * `device` and `class` attributes and the `driver` link, so one read gives
 * what four operations gave. Undefined when the text is not a uevent of this
 * function (no ids, ids that are not hex, another function's slot name, a
 * driver name no driver has): the caller then reads the attributes. A key
 * given twice counts once, first.
 */
export function parsePciUevent(text: string, address: string): Identity | undefined {
  let id: string | undefined;
  let cls: string | undefined;
  let driver: string | undefined;
  let slot: string | undefined;
  let subsys: string | undefined;
  for (let at = 0; at < text.length; ) {
    let end = text.indexOf('\n', at);
    if (end === -1) end = text.length;
    if (id === undefined && text.startsWith('PCI_ID=', at)) id = text.slice(at + 7, end);
    else if (cls === undefined && text.startsWith('PCI_CLASS=', at)) cls = text.slice(at + 10, end);
    else if (driver === undefined && text.startsWith('DRIVER=', at)) driver = text.slice(at + 7, end);
    else if (slot === undefined && text.startsWith('PCI_SLOT_NAME=', at)) slot = text.slice(at + 14, end);
    else if (subsys === undefined && text.startsWith('PCI_SUBSYS_ID=', at)) subsys = text.slice(at + 14, end);
    at = end + 1;
  }
  if (slot !== undefined && slot !== address) return undefined;
  if (id === undefined || cls === undefined || !PCI_ID_RE.test(id) || !CLASS_RE.test(cls)) return undefined;
  if (driver !== undefined && driver !== '' && (!DRIVER_NAME_RE.test(driver) || /^\.+$/.test(driver)))
    return undefined;
  const identity: Identity = {
    vendorId: id.slice(0, 4).toLowerCase(),
    productId: id.slice(5).toLowerCase(),
    classCode: cls.toLowerCase().padStart(6, '0'),
    kernelDriver: driver === undefined || driver === '' ? null : driver,
  };
  if (subsys !== undefined && PCI_ID_RE.test(subsys)) {
    setSubsystemIds(identity, subsys.slice(0, 4).toLowerCase(), subsys.slice(5).toLowerCase());
  }
  return identity;
}

/**
 * A function's identity from its `uevent`, or — when there is none that says
 * it (a tree written by an older simulator, a kernel that prints less) — from
 * the `vendor`, `device` and `class` attributes and the `driver` link. Null
 * when the function is gone or its ids are garbage.
 */
function readIdentity(dir: string, address: PciAddress): Identity | null {
  const text = readAttr(`${dir}/uevent`);
  const parsed = text === undefined ? undefined : parsePciUevent(text, address);
  if (parsed !== undefined) return parsed;
  const vendorId = hexAttr(readAttr(`${dir}/vendor`), 4);
  const productId = hexAttr(readAttr(`${dir}/device`), 4);
  const classCode = hexAttr(readAttr(`${dir}/class`), 6);
  if (vendorId === undefined || productId === undefined || classCode === undefined) return null;
  const driver = readlinkOptional(`${dir}/driver`);
  const subsystemVendorId = hexAttr(readOptional(`${dir}/subsystem_vendor`), 4);
  const subsystemProductId = hexAttr(readOptional(`${dir}/subsystem_device`), 4);
  const identity: Identity = {
    vendorId,
    productId,
    classCode,
    kernelDriver: driver === undefined ? null : path.basename(driver),
  };
  setSubsystemIds(identity, subsystemVendorId, subsystemProductId);
  return identity;
}

/**
 * Whether the host has IOMMU groups at all: the first entry of
 * kernel/iommu_groups, not a listing of every group.
 */
function hasIommuGroups(sysfsRoot: string): boolean {
  let dir: Dir;
  try {
    dir = opendirSync(path.join(sysfsRoot, 'kernel', 'iommu_groups'));
  } catch {
    return false;
  }
  try {
    return dir.readSync() !== null;
  } catch {
    return false;
  } finally {
    dir.closeSync();
  }
}

/**
 * The per-function part of a full scan: the attributes only the function's
 * own directory has. Returns null when the function vanished.
 */
function scanFunction(dir: string, address: PciAddress, withGroups: boolean): ScannedFunction | null {
  const id = readIdentity(dir, address);
  if (id === null) return null;
  let iommuGroup: number | null = null;
  if (withGroups) {
    const group = readlinkOptional(`${dir}/iommu_group`);
    const name = group === undefined ? '' : lastComponent(group);
    if (/^\d+$/.test(name)) iommuGroup = Number(name);
  }
  const isPf = existsSync(`${dir}/sriov_totalvfs`);
  const numVfs = isPf ? readOptional(`${dir}/sriov_numvfs`) : undefined;
  const fn: PciFunction = {
    address,
    vendorId: id.vendorId,
    productId: id.productId,
    classCode: id.classCode,
    kernelDriver: id.kernelDriver,
    physfn: null,
    virtfns: [],
    sriovTotalVfs: isPf ? Math.max(0, intAttr(readOptional(`${dir}/sriov_totalvfs`), 0)) : 0,
    sriovNumVfs: Math.max(0, intAttr(numVfs, 0)),
    iommuGroup,
    numaNode: Math.max(-1, intAttr(readOptional(`${dir}/numa_node`), -1)),
    netdevs: [],
    nvmeControllers: [],
  };
  setSubsystemIds(fn, id.subsystemVendorId, id.subsystemProductId);
  return { fn, dir, numVfsUnread: isPf && (numVfs === undefined || !/^\d+$/.test(numVfs)) };
}

/**
 * A PF's VFs in index order, as addresses. The kernel links virtfn0 …
 * virtfn<numvfs-1>, so those are read by name; only when sriov_numvfs could
 * not be read (`numVfs` null) is the PF's directory listed for its virtfnN links.
 */
function readVirtfns(dir: string, numVfs: number | null): string[] {
  let names: string[];
  if (numVfs !== null) {
    names = [];
    for (let i = 0; i < numVfs; i++) names.push(`virtfn${i}`);
  } else {
    names = readdirOptional(dir).filter((n) => VIRTFN_RE.test(n));
    names.sort((a, b) => numericSuffix(a, 'virtfn') - numericSuffix(b, 'virtfn'));
  }
  const out: string[] = [];
  for (const n of names) {
    const l = readlinkOptional(`${dir}/${n}`);
    const a = l === undefined ? '' : lastComponent(l);
    if (isPciAddress(a)) out.push(a);
  }
  return out;
}

/**
 * Every PCI function under `<sysfsRoot>/bus/pci/devices`, sorted by address.
 * Entries whose names are not valid addresses are skipped (never turned into
 * paths); functions that disappear during the read are left out.
 *
 * The result is what readPciFunction gives for each function, but gathered the
 * way that costs fewest syscalls on a big host (the benchmark reads 4,368
 * functions against lspci): per function its `uevent` (ids, class and bound
 * driver in one read), numa_node, the iommu_group link and an SR-IOV probe;
 * netdevs and NVMe controllers from class/net and class/nvme, and physfn from
 * the PFs' virtfnN links (the kernel keeps both directions). On a host
 * without IOMMU groups the per-function group link is not even tried.
 * Yields to the event loop every READ_SLICE_MS, so a host with thousands of
 * functions never stalls the agent's gRPC server for long.
 */
export async function readPciFunctions(sysfsRoot: string): Promise<PciFunction[]> {
  const devicesDir = path.join(sysfsRoot, 'bus', 'pci', 'devices');
  let names: string[];
  try {
    names = readdirSync(devicesDir);
  } catch (e) {
    if (isGone(e)) return [];
    throw e;
  }
  const addresses = names.filter((n) => isPciAddress(n)).sort();
  const withGroups = hasIommuGroups(sysfsRoot);
  const scanned: ScannedFunction[] = [];
  let sliceStart = performance.now();
  for (let i = 0; i < addresses.length; i++) {
    if (performance.now() - sliceStart >= READ_SLICE_MS) {
      await yieldToEventLoop();
      sliceStart = performance.now();
    }
    const a = addresses[i]!;
    const dir = `${devicesDir}/${a}`;
    const scan = scanFunction(dir, a, withGroups);
    if (scan !== null) scanned.push(scan);
  }
  // Relations last: read after the functions, they describe the same moment or
  // a later one, and never name a function the list has dropped.
  const netdevs = classChildren(sysfsRoot, 'net', 'net');
  const controllers = classChildren(sysfsRoot, 'nvme', 'nvme');
  const physfns = new Map<string, string>();
  for (const { fn, dir, numVfsUnread } of scanned) {
    if (fn.sriovNumVfs > 0 || numVfsUnread) {
      fn.virtfns = readVirtfns(dir, numVfsUnread ? null : fn.sriovNumVfs);
      for (const vf of fn.virtfns) physfns.set(vf, fn.address);
    }
  }
  return scanned.map(({ fn }) => {
    fn.physfn = physfns.get(fn.address) ?? null;
    const nets = netdevs.get(fn.address);
    if (nets !== undefined) fn.netdevs = nets.sort();
    const ctrls = controllers.get(fn.address);
    if (ctrls !== undefined)
      fn.nvmeControllers = ctrls.sort((x, y) => numericSuffix(x, 'nvme') - numericSuffix(y, 'nvme'));
    return fn;
  });
}

/** One function, or null when it is not (or no longer) present. */
export async function readPciFunction(sysfsRoot: string, address: PciAddress): Promise<PciFunction | null> {
  return readPciFunctionSync(sysfsRoot, address);
}

/**
 * readPciFunction without the promise: a hotplug pass reads a few functions,
 * and a device_spec matcher asks for a PF while it compiles. Equal to what
 * readPciFunctions gives for the function (sysfs-reader.test.ts holds them equal).
 */
export function readPciFunctionSync(sysfsRoot: string, address: PciAddress): PciFunction | null {
  return readFunctionDir(path.join(sysfsRoot, 'bus', 'pci', 'devices', address), address);
}

/**
 * The functions of IOMMU group `group` (kernel/iommu_groups/<n>/devices),
 * sorted; empty when the group is gone.
 */
export function readIommuGroupMembers(sysfsRoot: string, group: number): string[] {
  if (!Number.isSafeInteger(group) || group < 0) {
    throw invalidArgument('iommu_group', `${JSON.stringify(group)} is not an IOMMU group number`);
  }
  return readdirOptional(path.join(sysfsRoot, 'kernel', 'iommu_groups', String(group), 'devices'))
    .filter((a) => isPciAddress(a))
    .sort();
}

/**
 * Linux's own rule for interface names (dev_valid_name): 1-15 bytes, not `.` or
 * `..`, no `/`, `:` or whitespace. Checked before the name becomes a path.
 */
function assertIfname(ifname: string): void {
  if (
    typeof ifname !== 'string' ||
    ifname.length === 0 ||
    ifname.length > 15 ||
    ifname === '.' ||
    ifname === '..' ||
    /[/:\s\0]/.test(ifname)
  ) {
    throw invalidArgument('devname', `${JSON.stringify(ifname)} is not a valid network interface name`);
  }
}

/**
 * The PCI address behind a network interface, via `class/net/<if>/device`.
 * The link may point at a child of the PCI function rather than the function
 * itself (virtio-net: `0000:00:03.0/virtio2`), so we walk up to the nearest
 * ancestor named like a PCI address. Null for interfaces without one (lo,
 * bridges, USB NICs) and for unknown names.
 */
export async function resolveNetdevAddress(sysfsRoot: string, ifname: string): Promise<string | null> {
  assertIfname(ifname);
  let target: string;
  let top: string;
  try {
    target = await realpath(path.join(sysfsRoot, 'class', 'net', ifname, 'device'));
    top = await realpath(sysfsRoot);
  } catch (e) {
    if (isGone(e)) return null;
    throw e;
  }
  // Never above the sysfs root: a directory there named like an address is not a device.
  const inside = top.endsWith('/') ? top : `${top}/`;
  for (let dir = target; dir.startsWith(inside); dir = path.dirname(dir)) {
    const base = path.basename(dir);
    if (isPciAddress(base)) return base;
  }
  return null;
}
