/**
 * Builds simulated sysfs trees: the part of /sys that Berth's discovery (and
 * lspci) reads, laid out the way the kernel lays it out, so that the same code
 * runs against a test tree and a real host, and so that real tools can act as
 * oracles on the simulated tree.
 *
 * Layout (all under `root`, which stands for /sys):
 *   devices/pci<domain>:00/<addr>/            real directory per function (flat:
 *                                             no bridges; VFs sit beside their PF)
 *   bus/pci/devices/<addr>                    -> ../../../devices/pci0000:00/<addr>
 *   bus/pci/drivers/<name>/<addr>             -> the function (plus bind/unbind files)
 *   kernel/iommu_groups/<n>/devices/<addr>    -> the function
 *   class/net/<if>                            -> <function>/net/<if>
 *   class/nvme/nvmeX                          -> <function>/nvme/nvmeX
 *   class/block/nvmeXnY                       -> <function>/nvme/nvmeX/nvmeXnY
 * and, for controllers whose namespaces are shared (`subsystem` set: native
 * multipath, as on dual-port drives and QEMU's nvme-subsys; one or more
 * controllers per subsystem, each its own PCI function):
 *   devices/virtual/nvme-subsystem/nvme-subsysS/         attributes, plus
 *     nvmeX                                   -> each member controller
 *     nvmeSnY/                                the namespace head (the /dev block device),
 *                                             while any member controller reaches it
 *   class/nvme-subsystem/nvme-subsysS         -> devices/virtual/nvme-subsystem/nvme-subsysS
 *   <function>/nvme/nvmeX/nvmeScXnY/          hidden path node (hidden=1, no dev)
 *   class/block/nvmeSnY, class/block/nvmeScXnY
 * Every link is relative, like the kernel's, so a tree can be moved or copied.
 *
 * Driver-owned children follow the driver, as on a real host: a controller's
 * nvme/nvmeX directory exists only while the function is bound to `nvme`, and a
 * netdev exists only while the function is bound to the driver it had when the
 * netdev was added. Unbinding hides them; binding back restores them.
 *
 * Uevents: with a `ueventLog` file, every change appends the events the
 * kernel would send for it (add, remove, bind, unbind of the PCI function;
 * add and remove of its nvme controller, namespaces and netdevs), one JSON
 * line each, after the change is on disk. Changing sriov_numvfs appends each
 * VF's events once that VF is added or removed, as the kernel sends them VF
 * by VF, not after the last one. The simulated `udevadm`
 * (src/sim/udevadm) prints them as `udevadm monitor --kernel` prints the
 * kernel's, so an agent follows a simulated host exactly as a real one.
 *
 * The builder keeps the model in memory and writes through to disk with
 * synchronous fs calls: each public call applies all its changes at once (no
 * half-made function is ever visible to a concurrent reader in the same
 * process), and a large tree builds several times faster than through the
 * libuv thread pool. buildSysfs yields to the event loop between items so a big
 * build does not starve timers.
 */

import { appendFileSync, mkdirSync, rmSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { setImmediate as yieldToEventLoop } from 'node:timers/promises';
import { parsePciAddress } from '../../identifiers.js';
import {
  fnv,
  kernelSubsysNqn,
  namespaceIds,
  namespaceSysfsAttributes,
  type SimNamespaceIds,
} from '../nvme-identity.js';
import { buildConfigSpace, normaliseDsn } from './config-space.js';

export interface SimFunctionSpec {
  address: string;
  vendorId: string;
  productId: string;
  /** Six hex digits; default '020000' (Ethernet controller). */
  classCode?: string;
  /** Bound kernel driver; default none (null). */
  driver?: string | null;
  /** Default -1 (no NUMA affinity). */
  numaNode?: number;
  /** Default: a fresh group per function; null: no IOMMU group at all. */
  iommuGroup?: number | null;
  /** Default: the vendor id. */
  subsystemVendorId?: string;
  /** Default: the product id. */
  subsystemProductId?: string;
  /** Two hex digits; default '00' (lspci then prints no "(rev ..)"). Extension to the agreed API. */
  revision?: string;
  /**
   * The PCIe Device Serial Number (16 hex digits, dashes allowed, as lspci
   * prints it): the function gets a PCIe capability and the extended
   * configuration space holding the DSN capability (config-space.ts). Default:
   * none (a 256-byte config space, as most consumer cards' functions show).
   */
  deviceSerialNumber?: string;
}

/**
 * An SR-IOV physical function. VF addresses follow the SR-IOV routing-ID rule
 * `VF_i = PF RID + offset + i * stride` with stride 1 and
 * `offset = 16 + fn * (totalVfs - 1)`, i.e. the VFs of function `fn` start at
 * slot+2, function 0, right after those of the lower-numbered PFs of the same
 * device (0000:3b:00.0 with 64 VFs → 0000:3b:02.0 … 0000:3b:09.7; 0000:3b:00.1 →
 * 0000:3b:0a.0 …), spilling onto the next bus numbers when the slots run out.
 * The PF's sriov_offset / sriov_stride files state the numbers used.
 */
export interface SimPfSpec extends SimFunctionSpec {
  totalVfs: number;
  numVfs?: number;
  vf: { productId: string; driver?: string | null; classCode?: string };
}

export interface SimNvmeNamespaceSpec {
  nsid: number;
  sizeBytes: number;
  /** 512 (default) or 4096. */
  lbaSize?: number;
  /**
   * The namespace's identifiers (hex; '' = the namespace reports none).
   * Default: an NGUID and an EUI-64 derived from the serial and nsid
   * (src/sim/nvme-identity.ts), the ones nvme-cli's `id-ns` prints too.
   */
  nguid?: string;
  eui64?: string;
  uuid?: string;
}

/** A namespace as the builder keeps it: checked, with the identifiers it was given (the rest default). */
type SimNamespace = { nsid: number; sizeBytes: number; lbaSize: number; ids: Partial<SimNamespaceIds> };

export interface SimNvmeSpec extends SimFunctionSpec {
  /** Controller name, nvmeN. */
  controller: string;
  model?: string;
  serial?: string;
  firmware?: string;
  cntlid?: number;
  namespaces?: SimNvmeNamespaceSpec[];
  /** Controller state attribute; default 'live'. */
  state?: string;
  /** queue/write_zeroes_max_bytes of every namespace; default 0 (kernel will not use Write Zeroes). */
  writeZeroesMaxBytes?: number;
  /**
   * The SUBNQN the controller reports (`nvme id-ctrl` subnqn), e.g. QEMU's
   * `nqn.2019-08.org.qemu:<serial>`. Default: none, so the kernel shows its
   * fallback NQN built from the ids, serial and model. The kernel's
   * `subsysnqn` (on the controller, and on its subsystem) is its subsystem's:
   * a further controller of a `subsystem` must come to the same NQN (the
   * kernel groups controllers by it), and shows the subsystem's serial, model
   * and firmware.
   */
  subsysnqn?: string;
  /** The model is on the kernel's NVME_QUIRK_IGNORE_DEV_SUBNQN list: sysfs shows the fallback NQN whatever it reports. */
  ignoreDeviceSubnqn?: boolean;
  /**
   * Instance S of the NVM subsystem whose shared namespaces this controller
   * reaches (the multipath layout above); default: private namespaces under the
   * controller. Several controllers (PCI functions) may join one subsystem:
   * they reach one set of namespaces, and each lists those attached to it.
   */
  subsystem?: number;
}

export interface SimHostSpec {
  functions?: SimFunctionSpec[];
  pfs?: SimPfSpec[];
  nvme?: SimNvmeSpec[];
  netdevs?: { address: string; ifname: string }[];
}

interface NvmeState {
  controller: string;
  model: string;
  serial: string;
  firmware: string;
  cntlid: number;
  state: string;
  writeZeroesMaxBytes: number;
  subsystem: number | null;
  /** The kernel's subsysnqn of the controller: its subsystem's NQN (kernelSubsysNqn of its first controller). */
  subsysnqn: string;
  /** The namespaces attached to this controller. */
  namespaces: SimNamespace[];
}

/** An NVM subsystem of the multipath layout: what its first controller said, shared by every member. */
interface SubsystemState {
  nqn: string;
  model: string;
  serial: string;
  firmware: string;
  /** The PCI vendor id of its first controller (the kernel's subsys->vendor_id, in a namespace's fallback wwid). */
  vendorId: string;
}

interface FunctionState {
  address: string;
  vendorId: string;
  productId: string;
  classCode: string;
  revision: string;
  subsystemVendorId: string;
  subsystemProductId: string;
  /** 16 hex digits, or undefined. */
  deviceSerialNumber: string | undefined;
  driver: string | null;
  numaNode: number;
  iommuGroup: number | null;
  pf?: { totalVfs: number; numVfs: number; offset: number; vf: SimPfSpec['vf']; vfs: (string | undefined)[] };
  vf?: { physfn: string; index: number };
  /** ifname → the driver that owns it (it exists only while that driver is bound). */
  netdevs: Map<string, string | null>;
  nvme?: NvmeState;
}

/** Major numbers the simulated char/block devices use (dynamic on a real host). */
const NVME_CHAR_MAJOR = 240;
const NVME_BLOCK_MAJOR = 259;
/** Minor numbers of multipath heads start here, apart from those of private namespaces. */
const NVME_HEAD_MINOR_BASE = 1 << 16;
const IFNAME_RE = /^[^/:\s\0]{1,15}$/;
const NVME_CTRL_RE = /^nvme\d+$/;
const DRIVER_RE = /^[A-Za-z0-9_.+-]+$/;

function hexId(value: string, digits: number, what: string): string {
  const m = /^(?:0x)?([0-9a-fA-F]+)$/.exec(String(value));
  if (!m || m[1]!.length > digits)
    throw new Error(`${what}: ${JSON.stringify(value)} is not ${digits} hex digits`);
  return m[1]!.toLowerCase().padStart(digits, '0');
}

function parseBdf(address: string): { domain: number; rid: number } {
  parsePciAddress('address', address);
  const [dom, bus, rest] = address.split(':') as [string, string, string];
  const [slot, fn] = rest.split('.') as [string, string];
  return {
    domain: Number.parseInt(dom, 16),
    rid: (Number.parseInt(bus, 16) << 8) | (Number.parseInt(slot, 16) << 3) | Number.parseInt(fn, 10),
  };
}

function formatBdf(domain: number, rid: number): string {
  const h = (n: number, w: number) => n.toString(16).padStart(w, '0');
  return `${h(domain, 4)}:${h(rid >> 8, 2)}:${h((rid >> 3) & 0x1f, 2)}.${rid & 7}`;
}

function assertDriverName(driver: string): void {
  if (!DRIVER_RE.test(driver) || driver === '.' || driver === '..') {
    throw new Error(`driver: ${JSON.stringify(driver)} is not a kernel driver name`);
  }
}

/**
 * The function's `uevent`, as the kernel prints it (drivers/base/core.c
 * dev_uevent, then drivers/pci/pci-driver.c pci_uevent): DRIVER only while a
 * driver is bound; ids in upper-case hex, the class with at least four digits
 * (`PCI_CLASS=20000` for 0x020000).
 */
function uevent(st: FunctionState): string {
  const up = (hex: string) => hex.toUpperCase();
  const cls = Number.parseInt(st.classCode, 16);
  return [
    ...(st.driver === null ? [] : [`DRIVER=${st.driver}`]),
    `PCI_CLASS=${up(cls.toString(16).padStart(4, '0'))}`,
    `PCI_ID=${up(st.vendorId)}:${up(st.productId)}`,
    `PCI_SUBSYS_ID=${up(st.subsystemVendorId)}:${up(st.subsystemProductId)}`,
    `PCI_SLOT_NAME=${st.address}`,
    `MODALIAS=pci:v0000${up(st.vendorId)}d0000${up(st.productId)}sv0000${up(st.subsystemVendorId)}sd0000${up(st.subsystemProductId)}bc${up(st.classCode.slice(0, 2))}sc${up(st.classCode.slice(2, 4))}i${up(st.classCode.slice(4, 6))}`,
    '',
  ].join('\n');
}

/** The kernel pads these identify-controller strings with spaces to their field widths. */
function pad(value: string, width: number): string {
  return value.slice(0, width).padEnd(width, ' ');
}

/** One uevent as the builder logs it (a JSON line of the uevent log). */
export interface SimUevent {
  action: 'add' | 'remove' | 'bind' | 'unbind' | 'change';
  /** Under /sys, from /devices/: what udevadm prints. */
  devpath: string;
  subsystem: string;
  seqnum: number;
}

export interface SysfsBuilderOptions {
  /** Where to append the uevents of every change (see above); none when absent. */
  ueventLog?: string;
}

export class SysfsBuilder {
  readonly root: string;
  /** The uevent log, or null: then no events are written. */
  ueventLog: string | null;
  /**
   * Called after each append to the uevent log with the events appended: once
   * per public change, and once per VF while sriov_numvfs changes (as the
   * kernel sends each VF's events when it adds or removes that VF).
   */
  onUevents: ((events: readonly SimUevent[]) => void) | null = null;
  private seqnum = 0;
  private queued: SimUevent[] = [];
  private readonly functions = new Map<string, FunctionState>();
  private readonly ifnames = new Map<string, string>();
  private readonly controllers = new Map<string, string>();
  /** Multipath subsystems by instance number (kept while any member controller exists). */
  private readonly subsystems = new Map<number, SubsystemState>();
  private readonly groupMembers = new Map<number, Set<string>>();
  private nextGroup = 0;
  /** Directories known to exist, so shared parents are created once. */
  private readonly dirsMade = new Set<string>();
  /** Group numbers named explicitly somewhere in a host spec: fresh groups skip them. */
  private readonly reservedGroups = new Set<number>();

  constructor(root: string, options: SysfsBuilderOptions = {}) {
    this.root = path.resolve(root);
    this.ueventLog = options.ueventLog ?? null;
  }

  /** Adds a plain PCI function (hotplug when the tree is already in use). */
  async addFunction(spec: SimFunctionSpec): Promise<void> {
    this.withEvents(() => {
      const st = this.register(spec, {});
      this.writeFunction(st);
    });
  }

  /**
   * Runs one public change and then writes its uevents, so a reader that
   * acts on an event finds the change made (the kernel's order for all that
   * Berth reads: a function's bus link and attributes exist before its `add`,
   * its bus link is gone before its `remove`).
   */
  private withEvents<T>(change: () => T): T {
    try {
      return change();
    } finally {
      this.flushEvents();
    }
  }

  /** Appends the queued uevents to the log, then tells `onUevents`. */
  private flushEvents(): void {
    const events = this.queued;
    this.queued = [];
    if (this.ueventLog === null || events.length === 0) return;
    appendFileSync(this.ueventLog, events.map((e) => `${JSON.stringify(e)}\n`).join(''));
    this.onUevents?.(events);
  }

  private event(action: SimUevent['action'], dir: string, subsystem: string): void {
    if (this.ueventLog === null) return;
    this.queued.push({
      action,
      devpath: `/${path.relative(this.root, dir)}`,
      subsystem,
      seqnum: ++this.seqnum,
    });
  }

  /** The events of a function's driver-owned children appearing (`add`) or going (`remove`). */
  private childEvents(
    st: FunctionState,
    action: 'add' | 'remove',
    only?: { netdevs: Set<string>; nvme: boolean },
    bind = false,
  ) {
    const visible = only ?? this.visibleChildren(st);
    const dev = this.devDir(st.address);
    const netdevs = () => {
      for (const n of visible.netdevs) this.event(action, path.join(dev, 'net', n), 'net');
    };
    const nvme = () => {
      if (!visible.nvme) return;
      this.event(action, this.ctrlDir(st), 'nvme');
    };
    const blocks = () => {
      if (!visible.nvme) return;
      for (const ns of st.nvme!.namespaces) this.namespaceEvents(st, ns.nsid, action);
    };
    if (action === 'add') {
      // What the driver's probe registers (a netdev, the nvme controller), then its bind, then
      // what comes once the controller is up: `NVME_EVENT=connected` and the namespaces it scans.
      netdevs();
      nvme();
      if (bind && st.driver !== null) this.event('bind', dev, 'pci');
      if (visible.nvme) this.event('change', this.ctrlDir(st), 'nvme');
      blocks();
    } else {
      blocks();
      nvme();
      netdevs();
    }
  }

  /** A namespace's block devices: the private one, or the path node and (unless a peer keeps it) the head. */
  private namespaceEvents(st: FunctionState, nsid: number, action: 'add' | 'remove'): void {
    const names = this.namespaceNames(st, nsid);
    if (names.path === null) {
      this.event(action, path.join(this.ctrlDir(st), names.head), 'block');
      return;
    }
    this.event(action, path.join(this.ctrlDir(st), names.path), 'block');
    if (!this.headKeptByPeer(st, nsid))
      this.event(action, path.join(this.subsysDir(st), names.head), 'block');
  }

  /** Adds an SR-IOV PF and enables `numVfs` of its VFs; returns their addresses. */
  async addPf(spec: SimPfSpec): Promise<string[]> {
    if (!Number.isInteger(spec.totalVfs) || spec.totalVfs < 1 || spec.totalVfs > 65535) {
      throw new Error(`totalVfs: ${spec.totalVfs} must be an integer 1-65535`);
    }
    const fn = parseBdf(spec.address).rid & 7;
    const pf = {
      totalVfs: spec.totalVfs,
      numVfs: 0,
      offset: 16 + fn * (spec.totalVfs - 1),
      vf: { ...spec.vf, productId: hexId(spec.vf.productId, 4, 'vf.productId') },
      vfs: [] as (string | undefined)[],
    };
    if (pf.vf.classCode !== undefined) pf.vf.classCode = hexId(pf.vf.classCode, 6, 'vf.classCode');
    if (pf.vf.driver) assertDriverName(pf.vf.driver);
    return this.withEvents(() => {
      const st = this.register(spec, { pf });
      this.writeFunction(st);
      return this.numVfs(spec.address, spec.numVfs ?? 0);
    });
  }

  /**
   * Like writing sriov_numvfs: creates the VFs up to `numVfs` (with their
   * physfn/virtfnN links, bus links and IOMMU groups) or removes those above it.
   * Unlike the kernel it does not insist on going through 0 first, and VFs that
   * stay keep their driver binding. Returns the addresses of the enabled VFs.
   */
  async setNumVfs(pfAddress: string, numVfs: number): Promise<string[]> {
    return this.withEvents(() => this.numVfs(pfAddress, numVfs));
  }

  private numVfs(pfAddress: string, numVfs: number): string[] {
    const pfState = this.get(pfAddress);
    const pf = pfState.pf;
    if (!pf) throw new Error(`${pfAddress} is not an SR-IOV PF`);
    if (!Number.isInteger(numVfs) || numVfs < 0 || numVfs > pf.totalVfs) {
      throw new Error(`numVfs: ${numVfs} must be an integer 0-${pf.totalVfs}`);
    }
    const dir = this.devDir(pfAddress);
    const { domain, rid } = parseBdf(pfAddress);
    if (numVfs > pf.numVfs) {
      // Check every new address before creating anything, so a clash changes nothing.
      const addrs: string[] = [];
      for (let i = pf.numVfs; i < numVfs; i++) {
        const vfRid = rid + pf.offset + i;
        if (vfRid > 0xffff) throw new Error(`VF ${i} of ${pfAddress} would fall beyond bus ff`);
        const a = formatBdf(domain, vfRid);
        if (this.functions.has(a)) throw new Error(`VF ${i} of ${pfAddress} would take ${a}, which exists`);
        addrs.push(a);
      }
      addrs.forEach((a, k) => {
        const index = pf.numVfs + k;
        const vf = this.register(
          {
            address: a,
            vendorId: pfState.vendorId,
            productId: pf.vf.productId,
            classCode: pf.vf.classCode ?? pfState.classCode,
            driver: pf.vf.driver ?? null,
            numaNode: pfState.numaNode,
            subsystemVendorId: pfState.subsystemVendorId,
            subsystemProductId: pfState.subsystemProductId,
            revision: pfState.revision,
          },
          { vf: { physfn: pfAddress, index } },
        );
        pf.vfs[index] = a;
        this.writeFunction(vf);
        this.link(path.join(dir, `virtfn${index}`), this.devDir(a));
        this.flushEvents();
      });
    } else {
      for (let i = numVfs; i < pf.numVfs; i++) {
        const a = pf.vfs[i];
        if (a !== undefined) this.removeOne(a);
        this.unlinkQuiet(path.join(dir, `virtfn${i}`));
        this.flushEvents();
      }
      pf.vfs.length = numVfs;
    }
    pf.numVfs = numVfs;
    writeFileSync(path.join(dir, 'sriov_numvfs'), `${numVfs}\n`);
    return pf.vfs.filter((a): a is string => a !== undefined);
  }

  /**
   * Hot-unplug: the function disappears from devices/, bus/pci/devices, its
   * driver's directory, its IOMMU group and class/net, class/nvme, class/block.
   * A PF takes its VFs with it (the kernel disables SR-IOV first); a VF removed
   * on its own loses its PF's virtfnN link while sriov_numvfs stays.
   */
  async removeFunction(address: string): Promise<void> {
    this.withEvents(() => this.removeFunctionNow(address));
  }

  private removeFunctionNow(address: string): void {
    const st = this.get(address);
    if (st.pf) for (const vf of st.pf.vfs) if (vf !== undefined) this.removeOne(vf);
    if (st.vf) {
      const pf = this.functions.get(st.vf.physfn);
      if (pf?.pf && pf.pf.vfs[st.vf.index] === address) {
        pf.pf.vfs[st.vf.index] = undefined;
        this.unlinkQuiet(path.join(this.devDir(pf.address), `virtfn${st.vf.index}`));
      }
    }
    this.removeOne(address);
  }

  /** Binds `driver` (or unbinds, with null), with the side effects on net/ and nvme/ children. */
  async setDriver(address: string, driver: string | null): Promise<void> {
    this.withEvents(() => this.setDriverNow(address, driver));
  }

  private setDriverNow(address: string, driver: string | null): void {
    const st = this.get(address);
    if (driver !== null) assertDriverName(driver);
    if (st.driver === driver) return;
    const before = this.visibleChildren(st);
    const gone = {
      netdevs: new Set([...before.netdevs].filter((n) => st.netdevs.get(n) !== driver)),
      nvme: before.nvme && driver !== 'nvme',
    };
    this.childEvents(st, 'remove', gone);
    if (st.driver !== null) this.event('unbind', this.devDir(address), 'pci');
    this.unlinkDriver(st);
    st.driver = driver;
    const after = this.visibleChildren(st);
    const came = {
      netdevs: new Set([...after.netdevs].filter((n) => !before.netdevs.has(n))),
      nvme: after.nvme && !before.nvme,
    };
    this.childEvents(st, 'add', came, true);
    const dir = this.devDir(address);
    this.linkDriver(st);
    writeFileSync(path.join(dir, 'uevent'), uevent(st));
    writeFileSync(path.join(dir, 'enable'), driver ? '1\n' : '0\n');
    writeFileSync(path.join(dir, 'config'), this.config(st));
    for (const n of before.netdevs) if (!after.netdevs.has(n)) this.removeNetdevFiles(st, n);
    for (const n of after.netdevs) if (!before.netdevs.has(n)) this.writeNetdev(st, n);
    if (before.nvme && !after.nvme) this.removeNvmeFiles(st);
    if (!before.nvme && after.nvme) this.writeNvme(st);
  }

  /** A network interface of the function, owned by the driver bound now. */
  async addNetdev(address: string, ifname: string): Promise<void> {
    const st = this.get(address);
    if (!IFNAME_RE.test(ifname) || ifname === '.' || ifname === '..') {
      throw new Error(`ifname: ${JSON.stringify(ifname)} is not a network interface name`);
    }
    const taken = this.ifnames.get(ifname);
    if (taken !== undefined) throw new Error(`ifname ${ifname} already belongs to ${taken}`);
    this.ifnames.set(ifname, address);
    st.netdevs.set(ifname, st.driver);
    this.withEvents(() => {
      this.writeNetdev(st, ifname);
      this.event('add', path.join(this.devDir(address), 'net', ifname), 'net');
    });
  }

  /**
   * An NVMe PCI function (class 010802, driver nvme unless the spec says
   * otherwise) with its controller directory and namespaces. The controller
   * directory exists only while the function is bound to `nvme`.
   */
  async addNvmeController(spec: SimNvmeSpec): Promise<void> {
    if (!NVME_CTRL_RE.test(spec.controller))
      throw new Error(`controller: ${JSON.stringify(spec.controller)}`);
    if (this.controllers.has(spec.controller))
      throw new Error(`controller ${spec.controller} already exists`);
    const subsystem = spec.subsystem ?? null;
    const shared = subsystem === null ? undefined : this.subsystems.get(subsystem);
    if (subsystem !== null && (!Number.isInteger(subsystem) || subsystem < 0))
      throw new Error(`subsystem: ${subsystem}`);
    const vendorId = hexId(spec.vendorId, 4, 'vendorId');
    const subsystemVendorId = hexId(spec.subsystemVendorId ?? vendorId, 4, 'subsystemVendorId');
    // What this controller's identify data makes the kernel's subsysnqn (serial and model default
    // to the subsystem's): the kernel puts a controller in the subsystem with that NQN.
    const ownNqn = kernelSubsysNqn({
      vendorId,
      subsystemVendorId,
      serial: spec.serial ?? shared?.serial ?? defaultNvmeSerial(spec.controller),
      model: spec.model ?? shared?.model ?? 'Berth Simulated NVMe',
      subnqn: deviceSubnqn(spec),
      ignoreDeviceSubnqn: spec.ignoreDeviceSubnqn ?? false,
    });
    if (shared && ownNqn !== shared.nqn) {
      throw new Error(`subsysnqn: subsystem ${subsystem} is ${shared.nqn}, not ${ownNqn}`);
    }
    // Every controller of one subsystem shows the subsystem's serial, model and firmware (the kernel's
    // ctrl->subsys->serial ...), as its first controller reported them.
    const model = shared?.model ?? spec.model ?? 'Berth Simulated NVMe';
    const serial = shared?.serial ?? spec.serial ?? defaultNvmeSerial(spec.controller);
    const firmware = shared?.firmware ?? spec.firmware ?? '1.0';
    const namespaces = normaliseNamespaces(spec.namespaces ?? []);
    if (subsystem !== null) this.checkSharedNamespaces(subsystem, spec.controller, serial, namespaces);
    const nvme: NvmeState = {
      controller: spec.controller,
      model,
      serial,
      firmware,
      cntlid: spec.cntlid ?? 1,
      state: spec.state ?? 'live',
      writeZeroesMaxBytes: spec.writeZeroesMaxBytes ?? 0,
      subsystem,
      subsysnqn: shared?.nqn ?? ownNqn,
      namespaces,
    };
    if (subsystem !== null && !shared) {
      this.subsystems.set(subsystem, { nqn: nvme.subsysnqn, model, serial, firmware, vendorId });
    }
    this.withEvents(() => {
      const st = this.register(
        {
          ...spec,
          classCode: spec.classCode ?? '010802',
          driver: spec.driver === undefined ? 'nvme' : spec.driver,
        },
        { nvme },
      );
      this.controllers.set(spec.controller, spec.address);
      this.writeFunction(st);
    });
  }

  /** The NVMe controllers in the tree (bound to nvme or not). */
  nvmeControllers(): string[] {
    return [...this.controllers.keys()];
  }

  /** Replaces a controller's namespaces, as after nvme delete-ns / create-ns / attach-ns. */
  async setNvmeNamespaces(controller: string, namespaces: SimNvmeNamespaceSpec[]): Promise<void> {
    const address = this.controllers.get(controller);
    if (address === undefined) throw new Error(`no NVMe controller ${controller}`);
    const st = this.get(address);
    const nvme = st.nvme!;
    const next = normaliseNamespaces(namespaces);
    if (nvme.subsystem !== null) this.checkSharedNamespaces(nvme.subsystem, controller, nvme.serial, next);
    const visible = this.visibleChildren(st).nvme;
    const before = nvme.namespaces;
    if (!visible) {
      nvme.namespaces = next;
      return;
    }
    this.withEvents(() => {
      for (const ns of before) {
        this.namespaceEvents(st, ns.nsid, 'remove');
        this.removeNamespaceFiles(st, ns.nsid);
      }
      nvme.namespaces = next;
      for (const ns of next) {
        this.writeNamespace(st, ns);
        this.namespaceEvents(st, ns.nsid, 'add');
      }
    });
  }

  /** The other controllers of subsystem `s` (bound to nvme or not). */
  private subsystemPeers(s: number, controller: string): FunctionState[] {
    return [...this.functions.values()].filter(
      (f) => f.nvme?.subsystem === s && f.nvme.controller !== controller,
    );
  }

  /**
   * One namespace has one size and one set of identifiers, whichever controller reaches it (the
   * kernel refuses a path whose namespace IDs differ from its head's).
   */
  private checkSharedNamespaces(
    s: number,
    controller: string,
    serial: string,
    namespaces: SimNamespace[],
  ): void {
    for (const peer of this.subsystemPeers(s, controller)) {
      for (const ns of namespaces) {
        const other = peer.nvme!.namespaces.find((x) => x.nsid === ns.nsid);
        if (!other) continue;
        const through = peer.nvme!.controller;
        if (other.sizeBytes !== ns.sizeBytes || other.lbaSize !== ns.lbaSize) {
          throw new Error(
            `namespace ${ns.nsid} of subsystem ${s} is ${other.sizeBytes} bytes (${other.lbaSize}-byte blocks) through ${through}`,
          );
        }
        const mine = namespaceIds(serial, ns.nsid, ns.ids);
        const theirs = namespaceIds(peer.nvme!.serial, other.nsid, other.ids);
        if (mine.nguid !== theirs.nguid || mine.eui64 !== theirs.eui64 || mine.uuid !== theirs.uuid) {
          throw new Error(
            `namespace ${ns.nsid} of subsystem ${s} has other identifiers through ${through}: ${JSON.stringify(theirs)}`,
          );
        }
      }
    }
  }

  /** Whether another controller of the subsystem, bound to nvme, reaches namespace `nsid` (its head stays). */
  private headKeptByPeer(st: FunctionState, nsid: number): boolean {
    const nvme = st.nvme!;
    return (
      nvme.subsystem !== null &&
      this.subsystemPeers(nvme.subsystem, nvme.controller).some(
        (p) => this.visibleChildren(p).nvme && p.nvme!.namespaces.some((x) => x.nsid === nsid),
      )
    );
  }

  /** Whether another controller of the subsystem is bound to nvme (the subsystem directory stays). */
  private subsystemKeptByPeer(st: FunctionState): boolean {
    const nvme = st.nvme!;
    return (
      nvme.subsystem !== null &&
      this.subsystemPeers(nvme.subsystem, nvme.controller).some((p) => this.visibleChildren(p).nvme)
    );
  }

  /**
   * Keeps `group` out of the fresh-group sequence, for callers that will name it
   * explicitly later (buildSysfs does this for the whole spec up front).
   */
  reserveIommuGroup(group: number): void {
    this.reservedGroups.add(group);
  }

  // ---- model -------------------------------------------------------------

  private get(address: string): FunctionState {
    parsePciAddress('address', address);
    const st = this.functions.get(address);
    if (!st) throw new Error(`no PCI function ${address} in the simulated tree`);
    return st;
  }

  private register(spec: SimFunctionSpec, extra: Pick<FunctionState, 'pf' | 'vf' | 'nvme'>): FunctionState {
    parsePciAddress('address', spec.address);
    if (this.functions.has(spec.address)) throw new Error(`PCI function ${spec.address} already exists`);
    if (spec.driver) assertDriverName(spec.driver);
    const vendorId = hexId(spec.vendorId, 4, 'vendorId');
    const productId = hexId(spec.productId, 4, 'productId');
    const classCode = hexId(spec.classCode ?? '020000', 6, 'classCode');
    const revision = hexId(spec.revision ?? '00', 2, 'revision');
    const subsystemVendorId = hexId(spec.subsystemVendorId ?? vendorId, 4, 'subsystemVendorId');
    const subsystemProductId = hexId(spec.subsystemProductId ?? productId, 4, 'subsystemProductId');
    const numaNode = spec.numaNode ?? -1;
    if (!Number.isInteger(numaNode) || numaNode < -1) throw new Error(`numaNode: ${numaNode}`);
    let iommuGroup: number | null;
    if (spec.iommuGroup === undefined) {
      while (this.groupMembers.has(this.nextGroup) || this.reservedGroups.has(this.nextGroup))
        this.nextGroup++;
      iommuGroup = this.nextGroup++;
    } else {
      iommuGroup = spec.iommuGroup;
      if (iommuGroup !== null && (!Number.isInteger(iommuGroup) || iommuGroup < 0)) {
        throw new Error(`iommuGroup: ${iommuGroup} must be a non-negative integer`);
      }
    }
    const st: FunctionState = {
      address: spec.address,
      vendorId,
      productId,
      classCode,
      revision,
      subsystemVendorId,
      subsystemProductId,
      deviceSerialNumber:
        spec.deviceSerialNumber === undefined ? undefined : normaliseDsn(spec.deviceSerialNumber),
      driver: spec.driver ?? null,
      numaNode,
      iommuGroup,
      netdevs: new Map(),
      ...extra,
    };
    this.functions.set(st.address, st);
    if (iommuGroup !== null) {
      let members = this.groupMembers.get(iommuGroup);
      if (!members) {
        members = new Set();
        this.groupMembers.set(iommuGroup, members);
      }
      members.add(st.address);
    }
    return st;
  }

  private visibleChildren(st: FunctionState): { netdevs: Set<string>; nvme: boolean } {
    const netdevs = new Set<string>();
    for (const [n, owner] of st.netdevs) if (owner === st.driver) netdevs.add(n);
    return { netdevs, nvme: st.nvme !== undefined && st.driver === 'nvme' };
  }

  // ---- paths -------------------------------------------------------------

  private devDir(address: string): string {
    return path.join(this.root, 'devices', `pci${address.slice(0, 4)}:00`, address);
  }

  private config(st: FunctionState): Buffer {
    return buildConfigSpace({ ...st, enabled: st.driver !== null });
  }

  // ---- disk --------------------------------------------------------------

  /** mkdir -p, done once per directory while it exists. */
  private ensureDir(dir: string): void {
    if (this.dirsMade.has(dir)) return;
    mkdirSync(dir, { recursive: true });
    this.dirsMade.add(dir);
  }

  /** A relative symlink at `at` pointing to the absolute `target`, the kernel's way. */
  private link(at: string, target: string): void {
    symlinkSync(path.relative(path.dirname(at), target), at);
  }

  /** Removes a link or file that may already be gone. */
  private unlinkQuiet(p: string): void {
    try {
      unlinkSync(p);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    }
  }

  private driverDir(driver: string): string {
    return path.join(this.root, 'bus', 'pci', 'drivers', driver);
  }

  private linkDriver(st: FunctionState): void {
    if (st.driver === null) return;
    const drvDir = this.driverDir(st.driver);
    if (!this.dirsMade.has(drvDir)) {
      this.ensureDir(drvDir);
      // Write-only control files of a real driver directory.
      for (const f of ['bind', 'unbind', 'new_id', 'remove_id', 'uevent'])
        writeFileSync(path.join(drvDir, f), '');
    }
    const dev = this.devDir(st.address);
    this.link(path.join(dev, 'driver'), drvDir);
    this.link(path.join(drvDir, st.address), dev);
  }

  private unlinkDriver(st: FunctionState): void {
    if (st.driver === null) return;
    this.unlinkQuiet(path.join(this.devDir(st.address), 'driver'));
    this.unlinkQuiet(path.join(this.driverDir(st.driver), st.address));
  }

  private writeFunction(st: FunctionState): void {
    const dev = this.devDir(st.address);
    const busDevices = path.join(this.root, 'bus', 'pci', 'devices');
    this.ensureDir(path.dirname(dev));
    this.ensureDir(busDevices);
    mkdirSync(dev);
    const w = (name: string, content: string | Buffer) => writeFileSync(path.join(dev, name), content);
    w('vendor', `0x${st.vendorId}\n`);
    w('device', `0x${st.productId}\n`);
    w('class', `0x${st.classCode}\n`);
    w('subsystem_vendor', `0x${st.subsystemVendorId}\n`);
    w('subsystem_device', `0x${st.subsystemProductId}\n`);
    w('revision', `0x${st.revision}\n`);
    w('numa_node', `${st.numaNode}\n`);
    w('uevent', uevent(st));
    w('config', this.config(st));
    // 6 BARs + ROM + 6 IOV BARs, none assigned.
    w('resource', '0x0000000000000000 0x0000000000000000 0x0000000000000000\n'.repeat(13));
    w('irq', '0\n');
    w('enable', st.driver ? '1\n' : '0\n');
    this.link(path.join(dev, 'subsystem'), path.join(this.root, 'bus', 'pci'));
    this.linkDriver(st);
    if (st.iommuGroup !== null) {
      const groupDir = path.join(this.root, 'kernel', 'iommu_groups', String(st.iommuGroup));
      this.ensureDir(path.join(groupDir, 'devices'));
      this.link(path.join(dev, 'iommu_group'), groupDir);
      this.link(path.join(groupDir, 'devices', st.address), dev);
    }
    if (st.pf) {
      w('sriov_totalvfs', `${st.pf.totalVfs}\n`);
      w('sriov_numvfs', `${st.pf.numVfs}\n`);
      w('sriov_offset', `${st.pf.offset}\n`);
      w('sriov_stride', '1\n');
      w('sriov_vf_device', `${st.pf.vf.productId}\n`);
    }
    if (st.vf) this.link(path.join(dev, 'physfn'), this.devDir(st.vf.physfn));
    const visible = this.visibleChildren(st);
    for (const n of visible.netdevs) this.writeNetdev(st, n);
    if (visible.nvme) this.writeNvme(st);
    // Last, so a reader never finds a bus entry for a half-written function.
    this.link(path.join(busDevices, st.address), dev);
    // The kernel's order (as a QEMU hotplug shows it): the function, what its driver's probe made,
    // the bind, what came once the device was up.
    this.event('add', dev, 'pci');
    this.childEvents(st, 'add', undefined, true);
  }

  /** Removes one function's files and links (not its VFs) and forgets it. */
  private removeOne(address: string): void {
    const st = this.functions.get(address);
    if (!st) return;
    const visible = this.visibleChildren(st);
    // Queued now (the model still knows the children), written after the removal.
    this.childEvents(st, 'remove');
    if (st.driver !== null) this.event('unbind', this.devDir(address), 'pci');
    this.event('remove', this.devDir(address), 'pci');
    this.functions.delete(address);
    for (const n of st.netdevs.keys()) this.ifnames.delete(n);
    if (st.nvme) {
      this.controllers.delete(st.nvme.controller);
      const sub = st.nvme.subsystem;
      // The subsystem is forgotten with its last controller.
      if (sub !== null && this.subsystemPeers(sub, st.nvme.controller).length === 0)
        this.subsystems.delete(sub);
    }
    // First the bus entry, as the kernel does, so readers stop finding it.
    this.unlinkQuiet(path.join(this.root, 'bus', 'pci', 'devices', address));
    this.unlinkDriver(st);
    for (const n of visible.netdevs) this.unlinkQuiet(path.join(this.root, 'class', 'net', n));
    if (visible.nvme) this.removeNvmeLinks(st);
    if (st.iommuGroup !== null) {
      const members = this.groupMembers.get(st.iommuGroup);
      members?.delete(address);
      const groupDir = path.join(this.root, 'kernel', 'iommu_groups', String(st.iommuGroup));
      if (members && members.size === 0) {
        // The kernel frees a group with its last device.
        this.groupMembers.delete(st.iommuGroup);
        this.dirsMade.delete(path.join(groupDir, 'devices'));
        rmSync(groupDir, { recursive: true, force: true });
      } else {
        this.unlinkQuiet(path.join(groupDir, 'devices', address));
      }
    }
    rmSync(this.devDir(address), { recursive: true, force: true });
  }

  private writeNetdev(st: FunctionState, ifname: string): void {
    const netDir = path.join(this.devDir(st.address), 'net', ifname);
    mkdirSync(netDir, { recursive: true });
    this.ensureDir(path.join(this.root, 'class', 'net'));
    writeFileSync(path.join(netDir, 'address'), `${macFor(st.address, ifname)}\n`);
    writeFileSync(path.join(netDir, 'operstate'), 'up\n');
    // Kernel form: net/<if>/device -> ../../../<addr>
    symlinkSync(`../../../${st.address}`, path.join(netDir, 'device'));
    this.link(path.join(this.root, 'class', 'net', ifname), netDir);
  }

  private removeNetdevFiles(st: FunctionState, ifname: string): void {
    this.unlinkQuiet(path.join(this.root, 'class', 'net', ifname));
    rmSync(path.join(this.devDir(st.address), 'net', ifname), { recursive: true, force: true });
  }

  private ctrlDir(st: FunctionState): string {
    return path.join(this.devDir(st.address), 'nvme', st.nvme!.controller);
  }

  private writeNvme(st: FunctionState): void {
    const nvme = st.nvme!;
    const dir = this.ctrlDir(st);
    mkdirSync(dir, { recursive: true });
    this.ensureDir(path.join(this.root, 'class', 'nvme'));
    const w = (name: string, content: string) => writeFileSync(path.join(dir, name), content);
    writeIdentity(w, nvme);
    w('cntlid', `${nvme.cntlid}\n`);
    w('transport', 'pcie\n');
    w('address', `${st.address}\n`);
    w('state', `${nvme.state}\n`);
    w('dev', `${NVME_CHAR_MAJOR}:${Number(nvme.controller.slice(4))}\n`);
    w('numa_node', `${st.numaNode}\n`);
    // The subsystem's NQN (the controller's SUBNQN, or nvme_init_subnqn's fallback NQN):
    // every controller of one subsystem shows the same.
    w('subsysnqn', `${nvme.subsysnqn}\n`);
    // Kernel form: nvme/nvmeX/device -> ../../../<addr>
    symlinkSync(`../../../${st.address}`, path.join(dir, 'device'));
    if (nvme.subsystem !== null) this.writeSubsystem(st);
    for (const ns of nvme.namespaces) this.writeNamespace(st, ns);
    this.link(path.join(this.root, 'class', 'nvme', nvme.controller), dir);
  }

  private subsysDir(st: FunctionState): string {
    return path.join(this.root, 'devices', 'virtual', 'nvme-subsystem', `nvme-subsys${st.nvme!.subsystem}`);
  }

  /** The NVM subsystem of a multipath controller (made with its first member), with the controller as a member. */
  private writeSubsystem(st: FunctionState): void {
    const nvme = st.nvme!;
    const dir = this.subsysDir(st);
    if (!this.subsystemKeptByPeer(st)) {
      mkdirSync(dir, { recursive: true });
      this.ensureDir(path.join(this.root, 'class', 'nvme-subsystem'));
      const w = (name: string, content: string) => writeFileSync(path.join(dir, name), content);
      w('subsysnqn', `${nvme.subsysnqn}\n`);
      writeIdentity(w, nvme);
      w('iopolicy', 'numa\n');
      this.link(path.join(this.root, 'class', 'nvme-subsystem', path.basename(dir)), dir);
    }
    this.link(path.join(dir, nvme.controller), this.ctrlDir(st));
  }

  /** Block device names of a namespace: the private one, or the multipath head and path node. */
  private namespaceNames(st: FunctionState, nsid: number): { head: string; path: string | null } {
    const nvme = st.nvme!;
    if (nvme.subsystem === null) return { head: `${nvme.controller}n${nsid}`, path: null };
    const s = nvme.subsystem;
    return { head: `nvme${s}n${nsid}`, path: `nvme${s}c${nvme.controller.slice(4)}n${nsid}` };
  }

  private removeNvmeLinks(st: FunctionState): void {
    const nvme = st.nvme!;
    this.unlinkQuiet(path.join(this.root, 'class', 'nvme', nvme.controller));
    for (const ns of nvme.namespaces) {
      const names = this.namespaceNames(st, ns.nsid);
      if (names.path) this.unlinkQuiet(path.join(this.root, 'class', 'block', names.path));
      if (this.headKeptByPeer(st, ns.nsid)) continue;
      this.unlinkQuiet(path.join(this.root, 'class', 'block', names.head));
      if (names.path) rmSync(path.join(this.subsysDir(st), names.head), { recursive: true, force: true });
    }
    if (nvme.subsystem !== null) {
      if (this.subsystemKeptByPeer(st)) {
        this.unlinkQuiet(path.join(this.subsysDir(st), nvme.controller));
        return;
      }
      // The kernel frees a subsystem with its last controller.
      this.unlinkQuiet(path.join(this.root, 'class', 'nvme-subsystem', path.basename(this.subsysDir(st))));
      rmSync(this.subsysDir(st), { recursive: true, force: true });
    }
  }

  private removeNvmeFiles(st: FunctionState): void {
    this.removeNvmeLinks(st);
    rmSync(path.join(this.devDir(st.address), 'nvme'), { recursive: true, force: true });
  }

  private writeNamespace(st: FunctionState, ns: SimNamespace): void {
    const nvme = st.nvme!;
    const names = this.namespaceNames(st, ns.nsid);
    this.ensureDir(path.join(this.root, 'class', 'block'));
    // The subsystem's serial and model name its namespaces, whichever controller shows them.
    const vendorId = (nvme.subsystem === null ? undefined : this.subsystems.get(nvme.subsystem))?.vendorId;
    const idAttributes = namespaceSysfsAttributes(
      namespaceIds(nvme.serial, ns.nsid, ns.ids),
      { vendorId: vendorId ?? st.vendorId, serial: pad(nvme.serial, 20), model: pad(nvme.model, 40) },
      ns.nsid,
    );
    const write = (dir: string, hidden: boolean) => {
      mkdirSync(path.join(dir, 'queue'), { recursive: true });
      const w = (file: string, content: string) => writeFileSync(path.join(dir, file), content);
      w('nsid', `${ns.nsid}\n`);
      w('size', `${ns.sizeBytes / 512}\n`);
      w('ro', '0\n');
      w('hidden', hidden ? '1\n' : '0\n');
      for (const [file, value] of Object.entries(idAttributes)) w(file, value);
      // A hidden path node has no device number: it has no /dev node. A head's is the subsystem's.
      const minor =
        nvme.subsystem === null
          ? Number(nvme.controller.slice(4)) * 64 + ns.nsid
          : NVME_HEAD_MINOR_BASE + nvme.subsystem * 64 + ns.nsid;
      if (!hidden) w('dev', `${NVME_BLOCK_MAJOR}:${minor}\n`);
      w('queue/logical_block_size', `${ns.lbaSize}\n`);
      w('queue/physical_block_size', `${ns.lbaSize}\n`);
      w('queue/write_zeroes_max_bytes', `${nvme.writeZeroesMaxBytes}\n`);
    };
    if (names.path === null) {
      const dir = path.join(this.ctrlDir(st), names.head);
      write(dir, false);
      // Kernel form (non-multipath): nvmeXnY/device -> ../../nvmeX
      symlinkSync(`../../${nvme.controller}`, path.join(dir, 'device'));
      this.link(path.join(this.root, 'class', 'block', names.head), dir);
      return;
    }
    const pathDir = path.join(this.ctrlDir(st), names.path);
    write(pathDir, true);
    symlinkSync(`../../${nvme.controller}`, path.join(pathDir, 'device'));
    this.link(path.join(this.root, 'class', 'block', names.path), pathDir);
    const headDir = path.join(this.subsysDir(st), names.head);
    // One head per namespace of the subsystem, whichever controllers reach it.
    if (this.headKeptByPeer(st, ns.nsid)) return;
    write(headDir, false);
    // Kernel form (multipath head): nvmeSnY/device -> ../../nvme-subsysS
    symlinkSync(`../../nvme-subsys${nvme.subsystem}`, path.join(headDir, 'device'));
    this.link(path.join(this.root, 'class', 'block', names.head), headDir);
  }

  private removeNamespaceFiles(st: FunctionState, nsid: number): void {
    const names = this.namespaceNames(st, nsid);
    if (names.path === null) {
      this.unlinkQuiet(path.join(this.root, 'class', 'block', names.head));
      rmSync(path.join(this.ctrlDir(st), names.head), { recursive: true, force: true });
      return;
    }
    this.unlinkQuiet(path.join(this.root, 'class', 'block', names.path));
    rmSync(path.join(this.ctrlDir(st), names.path), { recursive: true, force: true });
    // The head stays while another controller of the subsystem reaches the namespace.
    if (this.headKeptByPeer(st, nsid)) return;
    this.unlinkQuiet(path.join(this.root, 'class', 'block', names.head));
    rmSync(path.join(this.subsysDir(st), names.head), { recursive: true, force: true });
  }
}

/** model, serial, firmware_rev: fixed width, space-padded, on a controller and on its subsystem alike. */
function writeIdentity(w: (name: string, content: string) => void, nvme: NvmeState): void {
  w('model', `${pad(nvme.model, 40)}\n`);
  w('serial', `${pad(nvme.serial, 20)}\n`);
  w('firmware_rev', `${pad(nvme.firmware, 8)}\n`);
}

function normaliseNamespaces(namespaces: SimNvmeNamespaceSpec[]): SimNamespace[] {
  const seen = new Set<number>();
  return namespaces.map((ns) => {
    const lbaSize = ns.lbaSize ?? 512;
    if (!Number.isInteger(ns.nsid) || ns.nsid < 1 || seen.has(ns.nsid)) throw new Error(`nsid: ${ns.nsid}`);
    seen.add(ns.nsid);
    if (lbaSize !== 512 && lbaSize !== 4096) throw new Error(`lbaSize: ${lbaSize} must be 512 or 4096`);
    if (!Number.isSafeInteger(ns.sizeBytes) || ns.sizeBytes <= 0 || ns.sizeBytes % lbaSize !== 0) {
      throw new Error(`sizeBytes: ${ns.sizeBytes} must be a positive multiple of ${lbaSize}`);
    }
    const ids: Partial<SimNamespaceIds> = {};
    if (ns.nguid !== undefined) ids.nguid = ns.nguid;
    if (ns.eui64 !== undefined) ids.eui64 = ns.eui64;
    if (ns.uuid !== undefined) ids.uuid = ns.uuid;
    // Checked now, so a bad identifier fails the call that gave it.
    namespaceIds('', ns.nsid, ids);
    return { nsid: ns.nsid, sizeBytes: ns.sizeBytes, lbaSize, ids };
  });
}

/** The serial a simulated controller has when its spec gives none. */
export function defaultNvmeSerial(controller: string): string {
  return `BSIM${Number(controller.slice(4)).toString().padStart(8, '0')}`;
}

/** The SUBNQN a simulated controller reports ('' = none; see SimNvmeSpec.subsysnqn). */
export function deviceSubnqn(spec: Pick<SimNvmeSpec, 'subsysnqn'>): string {
  return spec.subsysnqn ?? '';
}

/** A locally administered unicast MAC derived from the function and name. */
function macFor(address: string, ifname: string): string {
  const h = fnv(`${address}/${ifname}`);
  const bytes = [0x02, 0x00, (h >>> 24) & 0xff, (h >>> 16) & 0xff, (h >>> 8) & 0xff, h & 0xff];
  return bytes.map((b) => b.toString(16).padStart(2, '0')).join(':');
}

/**
 * Builds a whole host: plain functions, then PFs (with their VFs), then NVMe
 * controllers, then netdevs, each in spec order, so addresses and IOMMU group
 * numbers are deterministic. Explicit group numbers anywhere in the spec are
 * reserved first, so fresh groups never collide with them. Yields to the event
 * loop every few items, so building a large host does not starve timers.
 */
export async function buildSysfs(
  root: string,
  spec: SimHostSpec,
  options: SysfsBuilderOptions = {},
): Promise<SysfsBuilder> {
  // The events of the build itself are the boot's, before any agent: only later changes are logged.
  const b = new SysfsBuilder(root);
  for (const f of [...(spec.functions ?? []), ...(spec.pfs ?? []), ...(spec.nvme ?? [])]) {
    if (typeof f.iommuGroup === 'number') b.reserveIommuGroup(f.iommuGroup);
  }
  mkdirSync(b.root, { recursive: true });
  const steps: (() => Promise<unknown>)[] = [
    ...(spec.functions ?? []).map((f) => () => b.addFunction(f)),
    ...(spec.pfs ?? []).map((p) => () => b.addPf(p)),
    ...(spec.nvme ?? []).map((n) => () => b.addNvmeController(n)),
    ...(spec.netdevs ?? []).map((n) => () => b.addNetdev(n.address, n.ifname)),
  ];
  for (let i = 0; i < steps.length; i++) {
    await steps[i]!();
    if (i % 32 === 31) await yieldToEventLoop();
  }
  if (options.ueventLog !== undefined) {
    b.ueventLog = options.ueventLog;
    appendFileSync(options.ueventLog, '');
  }
  return b;
}
