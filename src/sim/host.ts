/**
 * A whole simulated host: a sysfs tree, a /dev directory whose NVMe namespaces
 * are regular files, an nvme-cli 2.3 simulator bound to the host's controller
 * state, a `udevadm monitor` simulator printing the kernel events of every
 * change to the tree, and the agent configuration that manages it. `berth up`, `berth sim`,
 * the demo and the integration tests all build hosts here.
 */
import { existsSync, renameSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { stringify as toYaml } from 'yaml';
import { writeSimProc } from './host-use.js';
import { type SimControllerState, type SimFault, withStateLock } from './nvme-cli/state.js';
import { createNvmeSimState, type SimControllerSpec } from './nvme-cli/state-file.js';
import { writeNvmeWrapper } from './nvme-cli/wrapper.js';
import {
  buildSysfs,
  defaultNvmeSerial,
  deviceSubnqn,
  type SimHostSpec,
  type SimNvmeSpec,
  type SysfsBuilder,
} from './sysfs/index.js';
import { writeUdevadmWrapper } from './udevadm/wrapper.js';

/**
 * What QEMU 7.2's NVMe controller does with namespace management
 * (notes/qemu-nvme.md): OACS advertises it, create-ns and delete-ns answer
 * Invalid Command Opcode (0x4001).
 */
export const QEMU_NS_MANAGEMENT_FAULTS: Record<string, SimFault> = {
  'create-ns': { mode: 'error', status: 0x4001 },
  'delete-ns': { mode: 'error', status: 0x4001 },
};

/** NVMe capability bits (id-ctrl) a simulated controller can have. */
export interface SimNvmeCaps {
  /** SANICAP bit 0: crypto erase. */
  ces?: boolean;
  /** SANICAP bit 1: block erase. */
  bes?: boolean;
  /** ONCS bit 3: Write Zeroes. */
  wzs?: boolean;
  /** OACS bit 3: namespace management. */
  nsManagement?: boolean;
}

/**
 * A simulated NVMe controller. Controllers with the same `subsystem` are one
 * NVM subsystem (a dual-port drive): the first one listed holds its
 * namespaces, capacity, capabilities and media; the others reach the same
 * namespaces (list none of their own) and report the first one's serial,
 * model, firmware and NQN (their own are ignored), so sysfs and nvme-cli show
 * one identity and one set of namespace identifiers through every controller.
 */
export interface SimNvmeController extends Omit<SimNvmeSpec, 'namespaces'> {
  caps: SimNvmeCaps;
  /**
   * The namespaces; their identifiers (hex, '' = none) default to ones derived from the serial
   * (src/sim/nvme-identity.ts); `attachedTo` (cntlids) on a subsystem with several controllers,
   * default all of them.
   */
  namespaces: {
    nsid: number;
    sizeBytes: number;
    lbaSize?: 512 | 4096;
    attached?: boolean;
    attachedTo?: number[];
    nguid?: string;
    eui64?: string;
    uuid?: string;
  }[];
  /** How long a sanitize takes, in ms. */
  sanitizeMs?: number;
  faults?: Record<string, SimFault>;
  /** Total capacity; default twice the namespaces (at least 1 GiB). */
  tnvmcapBytes?: number;
  /** False: id-ctrl reports capacity "0", as QEMU's controller does. */
  reportCapacity?: boolean;
}

export interface SimHostDefinition {
  host: string;
  pci: SimHostSpec;
  nvme: SimNvmeController[];
  /** device_spec entries for the agent config. */
  pciDeviceSpec: unknown[];
  nvmeDeviceSpec: unknown[];
}

export interface SimHost {
  definition: SimHostDefinition;
  root: string;
  sysfsRoot: string;
  devRoot: string;
  stateDir: string;
  nvmeStatePath: string;
  /** The nvme wrapper to use as nvme_cli. */
  nvmeCli: string;
  /** The udevadm wrapper (hotplug.udevadm) and the event log the sysfs builder appends to. */
  udevadm: string;
  ueventLog: string;
  bootIdFile: string;
  sysfs: SysfsBuilder;
  /** Agent configuration document (what `agent.yaml` holds). */
  agentConfig: Record<string, unknown>;
  configPath: string;
  /** Sets or clears (null) a fault on a controller's nvme-cli command. */
  setFault(controller: string, command: string, fault: SimFault | null): Promise<void>;
  /** A new boot id, as after a reboot. */
  reboot(): Promise<void>;
  /**
   * Pulls an NVMe drive out (hot-unplug, or a host powered off): its function
   * leaves sysfs and nvme-cli's view; its media (backing files) and identity
   * go with the returned drive. The definition no longer lists it. A
   * controller of a subsystem with several controllers (a dual-port drive)
   * is refused: its media is reached through the others too.
   */
  detachNvme(controller: string): Promise<CarriedNvme>;
  /**
   * Puts a drive in at `address` (another slot, or another host's), optionally
   * under another controller name as the kernel may give it: the same serial,
   * NQN, namespaces and bytes; its backing files move (rename: the same
   * inodes) under this host's /dev. Its function comes up bound to `nvme`.
   */
  insertNvme(drive: CarriedNvme, at: { address: string; controller?: string }): Promise<void>;
  /** detachNvme and insertNvme on this host: the same drive at another PCI address. */
  moveNvme(controller: string, address: string, newController?: string): Promise<void>;
}

/** A drive out of its host: what the sysfs tree and nvme-cli said of it, and its media files. */
export interface CarriedNvme {
  definition: SimNvmeController;
  state: SimControllerState;
}

/** The controller that holds n's subsystem (the first listed with the same `subsystem`), or n itself. */
function holderOf(nvme: SimNvmeController[], n: SimNvmeController): SimNvmeController {
  return n.subsystem === undefined ? n : (nvme.find((x) => x.subsystem === n.subsystem) ?? n);
}

/**
 * The sysfs builder's spec of a simulated controller with id `cntlid`: what the kernel shows under
 * it, the namespaces of its subsystem (held by `holder`) attached to it. A further controller of a
 * subsystem reports the holder's identity (serial, model, firmware, NQN), as nvme-cli's view does.
 */
function sysfsSpecOf(n: SimNvmeController, holder: SimNvmeController, cntlid: number): SimNvmeSpec {
  const { caps, sanitizeMs: _s, faults: _f, tnvmcapBytes: _t, reportCapacity: _r, ...rest } = n;
  const namespaces = holder.namespaces
    .filter((ns) => (ns.attachedTo ? ns.attachedTo.includes(cntlid) : ns.attached !== false))
    .map(({ attached: _a, attachedTo: _to, ...ns }) => ns);
  const identity =
    holder === n
      ? {}
      : {
          serial: holder.serial ?? defaultNvmeSerial(holder.controller),
          model: holder.model,
          firmware: holder.firmware,
          subsysnqn: holder.subsysnqn,
          ignoreDeviceSubnqn: holder.ignoreDeviceSubnqn,
          subsystemVendorId: holder.subsystemVendorId ?? holder.vendorId,
        };
  return {
    ...rest,
    ...identity,
    cntlid,
    namespaces,
    driver: n.driver ?? 'nvme',
    writeZeroesMaxBytes: n.writeZeroesMaxBytes ?? (caps.wzs ? 131072 : 0),
  };
}

function bits(caps: SimNvmeCaps) {
  return {
    sanicap: (caps.ces ? 1 : 0) | (caps.bes ? 2 : 0),
    oncs: 0x57 | (caps.wzs ? 0x8 : 0),
    // Format NVM (bit 1) always; namespace management (bit 3) on request.
    oacs: 0x16 | (caps.nsManagement ? 0x8 : 0),
  };
}

/** Builds the host under `root` (which must be empty or absent). */
export async function buildSimHost(
  root: string,
  def: SimHostDefinition,
  listen = '127.0.0.1:0',
): Promise<SimHost> {
  const sysfsRoot = join(root, 'sys');
  const devRoot = join(root, 'dev');
  const stateDir = join(root, 'state');
  const nvmeStatePath = join(root, 'nvme-sim.json');
  await mkdir(devRoot, { recursive: true });
  await mkdir(stateDir, { recursive: true });
  const cntlid = (n: SimNvmeController, i: number) => n.cntlid ?? i + 1;
  const ueventLog = join(root, 'uevents.log');
  const sysfs = await buildSysfs(
    sysfsRoot,
    {
      ...def.pci,
      nvme: def.nvme.map((n, i) => sysfsSpecOf(n, holderOf(def.nvme, n), cntlid(n, i))),
    },
    { ueventLog },
  );
  const controllers: SimControllerSpec[] = def.nvme.map((n, i) => {
    const holder = holderOf(def.nvme, n);
    const own = {
      name: n.controller,
      devPath: join(devRoot, n.controller),
      pciAddress: n.address,
      cntlid: cntlid(n, i),
      faults: n.faults,
    };
    // A further controller of a subsystem: only its own fields; the holder has the rest.
    if (holder !== n) return { ...own, shares: holder.controller };
    return {
      ...own,
      vid: Number.parseInt(n.vendorId, 16),
      ssvid: Number.parseInt(n.subsystemVendorId ?? n.vendorId, 16),
      // The same identity sysfs shows: serial and model default as the builder's do.
      sn: n.serial ?? defaultNvmeSerial(n.controller),
      mn: n.model ?? 'Berth Simulated NVMe',
      subnqn: deviceSubnqn(n),
      ...(n.ignoreDeviceSubnqn ? { ignoreDeviceSubnqn: true } : {}),
      fr: n.firmware,
      ...bits(n.caps),
      namespaces: n.namespaces,
      sanitize: { durationMs: n.sanitizeMs ?? 1500 },
      ...(n.subsystem === undefined ? {} : { nsNamePrefix: `nvme${n.subsystem}n` }),
      ...(n.tnvmcapBytes === undefined ? {} : { tnvmcapBytes: n.tnvmcapBytes }),
      ...(n.reportCapacity === undefined ? {} : { reportCapacity: n.reportCapacity }),
    };
  });
  await createNvmeSimState(nvmeStatePath, { controllers });
  const nvmeCli = await writeNvmeWrapper(join(root, 'bin'), nvmeStatePath);
  // A procfs of its own: the host uses none of its devices until writeSimHostUse says otherwise.
  const procRoot = await writeSimProc(root);
  const udevadm = await writeUdevadmWrapper(join(root, 'bin'), ueventLog);
  const bootIdFile = join(root, 'boot_id');
  await writeFile(bootIdFile, `${crypto.randomUUID()}\n`);
  const agentConfig: Record<string, unknown> = {
    host: def.host,
    listen,
    sysfs_root: sysfsRoot,
    dev_root: devRoot,
    proc_root: procRoot,
    state_dir: stateDir,
    discovery_interval: 5,
    // The tree's changes come with the kernel's events, through the simulated udevadm.
    hotplug: { source: 'udevadm', udevadm },
    // A simulated host is a test bench: authentication is off, explicitly.
    // berth up replaces this with generated tokens.
    auth: { mode: 'none' },
    enabled_drivers: def.nvme.length > 0 ? ['pci', 'nvme'] : ['pci'],
    pci: { device_spec: def.pciDeviceSpec },
    ...(def.nvme.length > 0
      ? {
          nvme: {
            device_spec: def.nvmeDeviceSpec,
            nvme_cli: nvmeCli,
            cleanup_timeout: 120,
            poll_interval: 0.2,
          },
        }
      : {}),
  };
  const configPath = join(root, 'agent.yaml');
  await writeFile(configPath, `# Generated by berth for a simulated host.\n${toYaml(agentConfig)}`);
  const host: SimHost = {
    definition: def,
    root,
    sysfsRoot,
    devRoot,
    stateDir,
    nvmeStatePath,
    nvmeCli,
    udevadm,
    ueventLog,
    bootIdFile,
    sysfs,
    agentConfig,
    configPath,
    async setFault(controller, command, fault) {
      await withStateLock(nvmeStatePath, (state) => {
        const c = state.controllers.find((x) => x.name === controller);
        if (!c) throw new Error(`no simulated controller ${controller}`);
        const faults = { ...(c.faults ?? {}) };
        if (fault) faults[command] = fault;
        else delete faults[command];
        c.faults = faults;
        return { changed: true, result: undefined };
      });
    },
    async reboot() {
      await writeFile(bootIdFile, `${crypto.randomUUID()}\n`);
    },
    async detachNvme(controller) {
      const i = def.nvme.findIndex((n) => n.controller === controller);
      if (i < 0) throw new Error(`no simulated NVMe controller ${controller} on ${def.host}`);
      const definition = def.nvme[i]!;
      const members = def.nvme.filter(
        (n) => n.subsystem !== undefined && n.subsystem === definition.subsystem,
      );
      if (members.length > 1) {
        // Its namespaces and media are the subsystem's, reached through the other controllers too.
        throw new Error(
          `${controller} is one of ${members.length} controllers of NVM subsystem ${definition.subsystem} on ${def.host}: only a drive with one controller can be moved`,
        );
      }
      const state = await withStateLock(nvmeStatePath, (st) => {
        const at = st.controllers.findIndex((c) => c.name === controller);
        if (at < 0) throw new Error(`nvme-cli knows no controller ${controller}`);
        const [taken] = st.controllers.splice(at, 1);
        return { changed: true, result: taken! };
      });
      await sysfs.removeFunction(definition.address);
      def.nvme.splice(i, 1);
      return { definition: structuredClone(definition), state };
    },
    async insertNvme(drive, at) {
      const controller = at.controller ?? drive.definition.controller;
      const definition: SimNvmeController = {
        ...structuredClone(drive.definition),
        address: at.address,
        controller,
      };
      // A fresh IOMMU group at the new slot; the old number may be another function's here.
      delete definition.iommuGroup;
      const state = structuredClone(drive.state);
      const prefix = definition.subsystem === undefined ? `${controller}n` : `nvme${definition.subsystem}n`;
      const moves: [string, string][] = state.namespaces.map((ns) => [
        ns.devPath,
        join(devRoot, `${prefix}${ns.nsid}`),
      ]);
      if (state.mediaPath) moves.push([state.mediaPath, join(devRoot, `${controller}.media`)]);
      for (const [from, to] of moves) {
        if (from !== to && existsSync(to))
          throw new Error(`${to} exists on ${def.host}: another drive's media`);
      }
      await withStateLock(nvmeStatePath, (st) => {
        if (st.controllers.some((c) => c.name === controller)) {
          throw new Error(`${def.host} already has an NVMe controller ${controller}`);
        }
        for (const [from, to] of moves) if (from !== to) renameSync(from, to);
        state.namespaces.forEach((ns, k) => {
          ns.devPath = moves[k]![1];
        });
        if (state.mediaPath) state.mediaPath = moves.at(-1)![1];
        state.name = controller;
        state.devPath = join(devRoot, controller);
        state.pciAddress = at.address;
        st.controllers.push(state);
        return { changed: true, result: undefined };
      });
      await sysfs.addNvmeController(sysfsSpecOf(definition, definition, state.cntlid));
      def.nvme.push(definition);
    },
    async moveNvme(controller, address, newController) {
      const drive = await host.detachNvme(controller);
      await host.insertNvme(drive, { address, ...(newController ? { controller: newController } : {}) });
    },
  };
  return host;
}

const MIB = 1024 * 1024;

/**
 * The demo host: an Intel X710 with SR-IOV VFs (live-migratable), a GPU the
 * operator pre-binds to vfio-pci (managed: false) that is one-time-use, and
 * four NVMe controllers whose capabilities lock in each cleanup action:
 * sanitize-crypto, sanitize-block, write-zeroes, shred; declared clean
 * (assume_clean) on first sight.
 */
export function demoHostDefinition(host = 'sim-host-1', busBase = 0x3b): SimHostDefinition {
  const bus = (n: number) => (busBase + n).toString(16).padStart(2, '0');
  return {
    host,
    pci: {
      pfs: [
        {
          address: `0000:${bus(0)}:00.0`,
          vendorId: '8086',
          productId: '1572',
          driver: 'i40e',
          numaNode: 0,
          totalVfs: 8,
          numVfs: 4,
          vf: { productId: '154c', driver: 'vfio-pci' },
        },
      ],
      functions: [
        {
          address: `0000:${bus(1)}:00.0`,
          vendorId: '10de',
          productId: '25b6',
          classCode: '030200',
          driver: 'vfio-pci',
          numaNode: 1,
        },
      ],
    },
    nvme: [
      {
        ctrl: 'nvme0',
        model: 'Samsung PM1733 (simulated)',
        caps: { ces: true, bes: true, wzs: true, nsManagement: true },
      },
      { ctrl: 'nvme1', model: 'Intel P4510 (simulated)', caps: { bes: true, wzs: true } },
      { ctrl: 'nvme2', model: 'WDC SN730 (simulated)', caps: { wzs: true } },
      { ctrl: 'nvme3', model: 'Generic NVMe (simulated)', caps: {} },
    ].map((c, i) => ({
      address: `0000:${bus(2 + i)}:00.0`,
      vendorId: '144d',
      productId: 'a824',
      classCode: '010802',
      numaNode: i % 2,
      controller: c.ctrl,
      model: c.model,
      serial: `SIM${host
        .replace(/[^A-Za-z0-9]/g, '')
        .toUpperCase()
        .slice(0, 8)}${i}`,
      caps: c.caps,
      namespaces: [{ nsid: 1, sizeBytes: 16 * MIB }],
      sanitizeMs: 1500,
    })),
    pciDeviceSpec: [
      { vendor_id: '8086', product_id: '154c', live_migratable: true },
      { vendor_id: '10de', product_id: '25b6', managed: false, one_time_use: true, assume_clean: true },
    ],
    // The simulated drives start from fresh, empty backing files, so the demo (and
    // the tests that bind at once) declare them clean: without assume_clean a
    // drive Berth never cleaned is cleaned before its first offer
    // (test/integration/media-provenance.test.ts shows that).
    nvmeDeviceSpec: [{ vendor_id: '144d', assume_clean: true }],
  };
}
