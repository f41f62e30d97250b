/**
 * Reads NVMe controllers, their namespaces and NVM subsystems from a sysfs
 * tree (the real /sys, or one built by src/sim/sysfs): the kernel's view of
 * what a controller reaches, which the NVMe driver's census and cleanup cover.
 * Synchronous attribute reads, as the PCI reader's (src/plugins/pci/sysfs-reader.ts);
 * a controller or namespace gone mid-read is left out, never an error.
 */
import { readdirSync, realpathSync } from 'node:fs';
import path from 'node:path';
import { invalidArgument } from '../../errors.js';
import { isPciAddress } from '../../identifiers.js';
import { intAttr, isGone, readdirOptional, readOptional } from '../pci/sysfs-attributes.js';

/**
 * The PCI addresses of the controllers of NVM subsystem `name`
 * (class/nvme-subsystem/<name>/nvmeX → the controller's PCI function), sorted.
 */
export function readNvmeSubsystemFunctions(sysfsRoot: string, name: string): string[] {
  if (!/^nvme-subsys\d+$/.test(name)) {
    throw invalidArgument('subsystem', `${JSON.stringify(name)} is not an NVMe subsystem name`);
  }
  const dir = path.join(sysfsRoot, 'class', 'nvme-subsystem', name);
  const out = new Set<string>();
  for (const c of readdirOptional(dir).filter((e) => NVME_CTRL_RE.test(e))) {
    const a = readOptional(path.join(dir, c, 'address')) ?? '';
    if (isPciAddress(a)) out.add(a);
  }
  return [...out].sort();
}

export interface NvmeNamespaceInfo {
  /** Block device name: nvmeXnY under the controller, or the subsystem's head nvmeSnY. */
  name: string;
  nsid: number;
  /** Capacity in bytes (sysfs `size` is always in 512-byte sectors). */
  sizeBytes: number;
  lbaSize: number;
  /** Per-request Write Zeroes cap; 0 when the kernel will not use Write Zeroes. */
  writeZeroesMaxBytes: number;
}

export interface NvmeControllerInfo {
  name: string;
  /** PCI address for pcie controllers ('' when the controller has none). */
  address: string;
  transport: string;
  state: string;
  model: string;
  serial: string;
  firmware: string;
  cntlid: number;
  namespaces: NvmeNamespaceInfo[];
  /** The nvme-subsystem the controller belongs to (nvme-subsysN), '' when none is listed. */
  subsystem: string;
  /**
   * Multipath path nodes (nvmeScXnY) whose namespace could not be found on the
   * subsystem: a namespace the controller reaches that we cannot name. A
   * cleanup must not claim to cover the controller while this is non-empty.
   */
  unresolvedPaths: string[];
}

const NVME_CTRL_RE = /^nvme\d+$/;
/** Namespace block devices: nvmeXnY (under a controller) or nvmeSnY (a subsystem's head). */
const NVME_NS_RE = /^nvme\d+n\d+$/;
/** Native-multipath path nodes under a controller: nvme<subsys>c<ctrl>n<ns>, hidden, no /dev node. */
const NVME_PATH_RE = /^nvme\d+c\d+n\d+$/;

/** The nvme-subsystem directory that lists `controller` as a member, or null. */
function subsystemOf(sysfsRoot: string, controller: string): string | null {
  const classDir = path.join(sysfsRoot, 'class', 'nvme-subsystem');
  for (const s of readdirOptional(classDir)) {
    if (readdirOptional(path.join(classDir, s)).includes(controller)) return path.join(classDir, s);
  }
  return null;
}

/**
 * An NVMe controller from `<root>/class/nvme/<name>`: its identity attributes
 * (model/serial/firmware trimmed of the kernel's space padding) and its
 * namespaces, in nsid order. Two layouts (notes/nvme-cli.md §6):
 *
 * - non-multipath: the namespaces are nvmeXnY block directories under the
 *   controller;
 * - native multipath (a controller in an nvme-subsys, dual-port drives, QEMU's
 *   `nvme-subsys`): the controller holds hidden path nodes nvmeScXnY, and the
 *   usable block device is the subsystem's head nvmeSnY. Each path node's
 *   `nsid` is matched to the head with the same `nsid` on the subsystem that
 *   lists this controller — never by rewriting names.
 *
 * Null when the controller is gone.
 */
export async function readNvmeController(
  sysfsRoot: string,
  name: string,
): Promise<NvmeControllerInfo | null> {
  if (typeof name !== 'string' || !NVME_CTRL_RE.test(name)) {
    throw invalidArgument('controller', `${JSON.stringify(name)} is not an NVMe controller name (nvmeN)`);
  }
  const dir = path.join(sysfsRoot, 'class', 'nvme', name);
  let entries: string[];
  try {
    entries = readdirSync(dir);
  } catch (e) {
    if (isGone(e)) return null;
    throw e;
  }
  const attr = (f: string) => readOptional(path.join(dir, f));
  let pciAddress = attr('address') ?? '';
  if (pciAddress === '') {
    // Older kernels lack `address`; the device link names the PCI function.
    let base = '';
    try {
      base = path.basename(realpathSync(path.join(dir, 'device')));
    } catch {
      // no device link: not a PCI controller
    }
    pciAddress = isPciAddress(base) ? base : '';
  }
  const namespaces: NvmeNamespaceInfo[] = [];
  for (const n of entries.filter((e) => NVME_NS_RE.test(e))) {
    const ns = readNamespace(path.join(dir, n), n);
    if (ns !== null) namespaces.push(ns);
  }
  const subsysDir = subsystemOf(sysfsRoot, name);
  const unresolvedPaths: string[] = [];
  const paths = entries.filter((e) => NVME_PATH_RE.test(e));
  if (paths.length > 0) {
    const heads = new Map<number, NvmeNamespaceInfo>();
    for (const h of subsysDir ? readdirOptional(subsysDir).filter((e) => NVME_NS_RE.test(e)) : []) {
      const ns = readNamespace(path.join(subsysDir!, h), h);
      if (ns !== null && ns.nsid > 0) heads.set(ns.nsid, ns);
    }
    for (const p of paths) {
      const nsid = intAttr(readOptional(path.join(dir, p, 'nsid')), 0);
      const head = heads.get(nsid);
      if (head && !namespaces.some((n) => n.nsid === nsid)) namespaces.push(head);
      else if (!head) unresolvedPaths.push(p);
    }
  }
  namespaces.sort((a, b) => a.nsid - b.nsid);
  return {
    name,
    address: pciAddress,
    transport: attr('transport') ?? '',
    state: attr('state') ?? '',
    model: attr('model') ?? '',
    serial: attr('serial') ?? '',
    firmware: attr('firmware_rev') ?? '',
    cntlid: intAttr(attr('cntlid'), 0),
    namespaces,
    subsystem: subsysDir ? path.basename(subsysDir) : '',
    unresolvedPaths,
  };
}

/**
 * The namespaces the kernel shows on an NVM subsystem (`nvme-subsysN`): one
 * head per namespace that any of its controllers bound to nvme reaches, in
 * nsid order. Empty for a subsystem that is not listed.
 */
export function readSubsystemNamespaces(sysfsRoot: string, subsystem: string): NvmeNamespaceInfo[] {
  if (!/^nvme-subsys\d+$/.test(subsystem)) {
    throw invalidArgument('subsystem', `${JSON.stringify(subsystem)} is not an NVMe subsystem name`);
  }
  const dir = path.join(sysfsRoot, 'class', 'nvme-subsystem', subsystem);
  const heads: NvmeNamespaceInfo[] = [];
  for (const h of readdirOptional(dir).filter((e) => NVME_NS_RE.test(e))) {
    const ns = readNamespace(path.join(dir, h), h);
    if (ns !== null && ns.nsid > 0) heads.push(ns);
  }
  return heads.sort((a, b) => a.nsid - b.nsid);
}

function readNamespace(dir: string, name: string): NvmeNamespaceInfo | null {
  const nsid = readOptional(path.join(dir, 'nsid'));
  const size = readOptional(path.join(dir, 'size'));
  const lba = readOptional(path.join(dir, 'queue', 'logical_block_size'));
  const wz = readOptional(path.join(dir, 'queue', 'write_zeroes_max_bytes'));
  // A namespace deleted mid-read has no size any more; leave it out.
  if (size === undefined) return null;
  return {
    name,
    nsid: intAttr(nsid, 0),
    sizeBytes: intAttr(size, 0) * 512,
    lbaSize: intAttr(lba, 512),
    writeZeroesMaxBytes: intAttr(wz, 0),
  };
}
