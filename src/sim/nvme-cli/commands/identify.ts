/**
 * Read-only commands: `id-ctrl`, `id-ns`, `list`, `list-ns`. JSON field sets and
 * order follow nvme-cli 2.3's `json_nvme_id_ctrl` / `json_nvme_id_ns` /
 * `json_simple_list` / `json_nvme_list_ns`, including its type quirks (int32
 * for u32 fields, uint128 capacities as strings, trailing spaces in sn/mn/fr).
 */
import { basename, dirname } from 'node:path';
import { namespaceIds, type SimNamespaceIds } from '../../nvme-identity.js';
import type { OptSpec } from '../args.js';
import {
  applyFault,
  type CliEnv,
  type CliResult,
  type Device,
  isDevice,
  nvmeError,
  Out,
  onController,
  openDevice,
  parseOrFail,
} from '../context.js';
import { int32, type JsonObject, type JsonValue, jsonPrint, uint128String } from '../json-print.js';
import { loadState, type NvmeSimState, type SimControllerState, type SimNamespaceState } from '../state.js';
import { Status } from '../status.js';
import { controllersOf, isAttached, snapshotOf, subnqnOf } from '../subsystem.js';

export const OUTPUT_FORMAT: OptSpec = { long: 'output-format', short: 'o', kind: 'string' };
export const NAMESPACE_ID: OptSpec = { long: 'namespace-id', short: 'n', kind: 'word' };

/** The LBA formats every simulated namespace offers (index = FLBAS). */
export const LBA_FORMATS = [512, 4096];

export type OutputFormat = 'normal' | 'json' | 'binary';

/** 2.3's `validate_output_format()`: undefined for anything but the three names. */
export function outputFormat(v: unknown): OutputFormat | undefined {
  const s = v === undefined ? 'normal' : String(v);
  return s === 'normal' || s === 'json' || s === 'binary' ? s : undefined;
}

function log2(n: number): number {
  return Math.round(Math.log2(n));
}

function usedBytes(ctrl: SimControllerState): number {
  return ctrl.namespaces.reduce((sum, n) => sum + n.sizeBytes, 0);
}

export function idCtrlJson(ctrl: SimControllerState, env: NodeJS.ProcessEnv): JsonObject {
  const u = int32;
  return {
    vid: ctrl.vid,
    ssvid: ctrl.ssvid,
    sn: ctrl.sn,
    mn: ctrl.mn,
    fr: ctrl.fr,
    rab: 0,
    ieee: 0,
    cmic: 0,
    mdts: 5,
    cntlid: ctrl.cntlid,
    ver: u(0x10400),
    rtd3r: u(0),
    rtd3e: u(0),
    oaes: u(0x100),
    ctratt: u(0),
    rrls: 0,
    cntrltype: 1,
    fguid: '',
    crdt1: 0,
    crdt2: 0,
    crdt3: 0,
    nvmsr: 0,
    vwci: 0,
    mec: 0,
    oacs: ctrl.oacs & 0xffff,
    acl: 3,
    aerl: 3,
    frmw: 0x2,
    lpa: 0x2,
    elpe: 63,
    npss: 0,
    avscc: 0,
    apsta: 0,
    wctemp: 343,
    cctemp: 373,
    mtfa: 0,
    hmpre: u(0),
    hmmin: u(0),
    // QEMU's controller reports "0" for both: capacity unknown.
    tnvmcap: uint128String(ctrl.reportCapacity === false ? 0 : ctrl.tnvmcapBytes, env),
    unvmcap: uint128String(
      ctrl.reportCapacity === false ? 0 : Math.max(0, ctrl.tnvmcapBytes - usedBytes(ctrl)),
      env,
    ),
    rpmbs: u(0),
    edstt: 0,
    dsto: 0,
    fwug: 0,
    kas: 0,
    hctma: 0,
    mntmt: 0,
    mxtmt: 0,
    sanicap: u(ctrl.sanicap),
    hmminds: u(0),
    hmmaxd: 0,
    nsetidmax: 0,
    endgidmax: 0,
    anatt: 0,
    anacap: 0,
    anagrpmax: u(0),
    nanagrpid: u(0),
    pels: u(0),
    domainid: 0,
    megcap: uint128String(0, env),
    sqes: 0x66,
    cqes: 0x44,
    maxcmd: 0,
    nn: u(ctrl.nn),
    oncs: ctrl.oncs & 0xffff,
    fuses: 0,
    fna: ctrl.fna & 0xff,
    vwc: 0,
    awun: 0,
    awupf: 0,
    icsvscc: 0,
    nwpc: 0,
    acwu: 0,
    ocfs: 0,
    sgls: u(0),
    mnan: u(0),
    maxdna: uint128String(0, env),
    maxcna: u(0),
    // 2.3 prints the field only when the controller reports one.
    ...(ctrl.subnqn ? { subnqn: ctrl.subnqn } : {}),
    ioccsz: u(0),
    iorcsz: u(0),
    icdoff: 0,
    fcatt: 0,
    msdbd: 0,
    ofcs: 0,
    psds: [
      {
        max_power: 2500,
        flags: 0,
        entry_lat: u(0),
        exit_lat: u(0),
        read_tput: 0,
        read_lat: 0,
        write_tput: 0,
        write_lat: 0,
        idle_power: 0,
        idle_scale: 0,
        active_power: 0,
        active_power_work: 0,
        active_scale: 0,
      },
    ],
  };
}

/** A cheap subset of 2.3's normal `id-ctrl` text (field names and hex formatting as the real tool). */
function idCtrlText(ctrl: SimControllerState, env: NodeJS.ProcessEnv): string {
  const hex = (v: number) => (v === 0 ? '0' : `0x${(v >>> 0).toString(16)}`);
  const lines = [
    'NVME Identify Controller:',
    `vid       : ${hex(ctrl.vid)}`,
    `ssvid     : ${hex(ctrl.ssvid)}`,
    `sn        : ${ctrl.sn}`,
    `mn        : ${ctrl.mn}`,
    `fr        : ${ctrl.fr}`,
    `cntlid    : ${hex(ctrl.cntlid)}`,
    `oacs      : ${hex(ctrl.oacs)}`,
    `tnvmcap   : ${uint128String(ctrl.reportCapacity === false ? 0 : ctrl.tnvmcapBytes, env)}`,
    `unvmcap   : ${uint128String(ctrl.reportCapacity === false ? 0 : Math.max(0, ctrl.tnvmcapBytes - usedBytes(ctrl)), env)}`,
    `sanicap   : ${hex(ctrl.sanicap)}`,
    `nn        : ${ctrl.nn >>> 0}`,
    `oncs      : ${hex(ctrl.oncs)}`,
    `fna       : ${hex(ctrl.fna)}`,
  ];
  return `${lines.join('\n')}\n`;
}

export async function idCtrl(argv: string[], env: CliEnv): Promise<CliResult> {
  const o = new Out();
  const p = parseOrFail(o, 'id-ctrl', argv, [
    { long: 'vendor-specific', short: 'v', kind: 'flag' },
    OUTPUT_FORMAT,
    { long: 'raw-binary', short: 'b', kind: 'flag' },
    { long: 'human-readable', short: 'H', kind: 'flag' },
  ]);
  if ('result' in p) return p.result;
  const dev = openDevice(o, 'id-ctrl', p.args, env);
  if (!isDevice(dev)) return dev;
  const ctrl = await onController(env, dev, (c, state) => ({ changed: false, result: snapshotOf(state, c) }));
  const fault = applyFault(o, 'id-ctrl', ctrl);
  if (fault && fault !== 'noop') return fault;
  const fmt = outputFormat(p.args.opts.get('output-format'));
  if (fmt === undefined || fmt === 'binary') return o.done(1);
  o.out(fmt === 'json' ? jsonPrint(idCtrlJson(ctrl, env.env)) : idCtrlText(ctrl, env.env));
  return o.done(0);
}

function nsidOf(o: Out, dev: Device, given: unknown): number | CliResult {
  if (given !== undefined) return given as number;
  if (dev.ns) return dev.ns.nsid;
  // NVME_IOCTL_ID on the controller character device.
  o.err('get-namespace-id: Inappropriate ioctl for device\n');
  return o.done(1);
}

/** The identifiers of an active namespace: what it was given, else the defaults sysfs shows too. */
export function namespaceIdsOf(ctrl: SimControllerState, ns: SimNamespaceState): SimNamespaceIds {
  const given: Partial<SimNamespaceIds> = {};
  if (ns.nguid !== undefined) given.nguid = ns.nguid;
  if (ns.eui64 !== undefined) given.eui64 = ns.eui64;
  if (ns.uuid !== undefined) given.uuid = ns.uuid;
  return namespaceIds(ctrl.sn, ns.nsid, given);
}

export function idNsJson(
  ns: SimNamespaceState | undefined,
  env: NodeJS.ProcessEnv,
  ids?: SimNamespaceIds,
): JsonObject {
  const lbas = ns ? Math.floor(ns.sizeBytes / ns.lbaSize) : 0;
  const flbas = ns ? Math.max(0, LBA_FORMATS.indexOf(ns.lbaSize)) : 0;
  const lbafs: JsonValue[] = ns
    ? LBA_FORMATS.map((size, i) => ({ ms: 0, ds: log2(size), rp: i === 0 ? 2 : 0 }))
    : [{ ms: 0, ds: 0, rp: 0 }];
  return {
    nsze: lbas,
    ncap: lbas,
    nuse: lbas,
    nsfeat: 0,
    nlbaf: ns ? LBA_FORMATS.length - 1 : 0,
    flbas,
    mc: 0,
    dpc: 0,
    dps: 0,
    nmic: 0,
    rescap: 0,
    fpi: 0,
    dlfeat: ns ? 9 : 0,
    nawun: 0,
    nawupf: 0,
    nacwu: 0,
    nabsn: 0,
    nabo: 0,
    nabspf: 0,
    noiob: 0,
    nvmcap: uint128String(ns ? ns.sizeBytes : 0, env),
    nsattr: 0,
    nvmsetid: 0,
    mssrl: 0,
    mcl: int32(0),
    msrc: 0,
    nulbaf: 0,
    anagrpid: int32(0),
    endgid: 0,
    // 2.3 prints both as plain hex, all zeros when the namespace reports none.
    eui64: ids?.eui64 || '0'.repeat(16),
    nguid: ids?.nguid || '0'.repeat(32),
    lbafs,
  };
}

export async function idNs(argv: string[], env: CliEnv): Promise<CliResult> {
  const o = new Out();
  const p = parseOrFail(o, 'id-ns', argv, [
    NAMESPACE_ID,
    { long: 'force', kind: 'flag' },
    { long: 'vendor-specific', short: 'v', kind: 'flag' },
    { long: 'raw-binary', short: 'b', kind: 'flag' },
    OUTPUT_FORMAT,
    { long: 'human-readable', short: 'H', kind: 'flag' },
  ]);
  if ('result' in p) return p.result;
  const dev = openDevice(o, 'id-ns', p.args, env);
  if (!isDevice(dev)) return dev;
  const nsid = nsidOf(o, dev, p.args.opts.get('namespace-id'));
  if (typeof nsid !== 'number') return nsid;
  const force = p.args.opts.get('force') === true;
  const ctrl = await onController(env, dev, (c, state) => ({ changed: false, result: snapshotOf(state, c) }));
  const fault = applyFault(o, 'id-ns', ctrl);
  if (fault && fault !== 'noop') return fault;
  if (nsid === 0 || (nsid > ctrl.nn >>> 0 && nsid !== 0xffffffff)) return nvmeError(o, Status.INVALID_NS);
  // Identify on an inactive NSID returns a zero-filled structure; --force (CNS 0x11) also shows allocated ones.
  const ns = ctrl.namespaces.find((n) => n.nsid === nsid && (isAttached(n, ctrl) || force));
  const fmt = outputFormat(p.args.opts.get('output-format'));
  if (fmt === undefined || fmt === 'binary') return o.done(1);
  const j = idNsJson(ns, env.env, ns ? namespaceIdsOf(ctrl, ns) : undefined);
  if (fmt === 'json') o.out(jsonPrint(j));
  else {
    o.out(`NVME Identify Namespace ${nsid}:\n`);
    o.out(`nsze    : 0x${(j.nsze as number).toString(16)}\n`);
    o.out(`ncap    : 0x${(j.ncap as number).toString(16)}\n`);
    o.out(`nuse    : 0x${(j.nuse as number).toString(16)}\n`);
    o.out(`flbas   : 0x${(j.flbas as number).toString(16)}\n`);
    o.out(`nvmcap  : ${j.nvmcap}\n`);
  }
  return o.done(0);
}

export async function listNs(argv: string[], env: CliEnv): Promise<CliResult> {
  const o = new Out();
  const p = parseOrFail(o, 'list-ns', argv, [
    { long: 'namespace-id', short: 'n', kind: 'word' },
    { long: 'csi', short: 'y', kind: 'byte' },
    { long: 'all', short: 'a', kind: 'flag' },
    OUTPUT_FORMAT,
  ]);
  if ('result' in p) return p.result;
  const dev = openDevice(o, 'list-ns', p.args, env);
  if (!isDevice(dev)) return dev;
  const fmt = outputFormat(p.args.opts.get('output-format'));
  if (fmt === undefined || fmt === 'binary') return o.done(1);
  const start = (p.args.opts.get('namespace-id') as number | undefined) ?? 1;
  if (start === 0) {
    o.err('invalid nsid parameter\n');
    return o.done(1);
  }
  const ctrl = await onController(env, dev, (c, state) => ({ changed: false, result: snapshotOf(state, c) }));
  const fault = applyFault(o, 'list-ns', ctrl);
  if (fault && fault !== 'noop') return fault;
  const all = p.args.opts.get('all') === true;
  const ids = ctrl.namespaces
    .filter((n) => (all || isAttached(n, ctrl)) && n.nsid >= start)
    .map((n) => n.nsid)
    .sort((a, b) => a - b);
  if (fmt === 'json') o.out(jsonPrint({ nsid_list: ids.map((nsid) => ({ nsid: int32(nsid) })) }));
  else {
    for (const [i, nsid] of ids.entries()) o.out(`[${String(i).padStart(4)}]:0x${nsid.toString(16)}\n`);
  }
  return o.done(0);
}

function nsSizes(n: SimNamespaceState) {
  const lbas = Math.floor(n.sizeBytes / n.lbaSize);
  return {
    UsedBytes: lbas * n.lbaSize,
    MaximumLBA: lbas,
    PhysicalSize: lbas * n.lbaSize,
    SectorSize: n.lbaSize,
  };
}

/**
 * `list -v -o json` (2.3 `json_detail_list`): one subsystem per simulated NVM
 * subsystem, holding its controllers (name, PCI address, the namespaces
 * attached to each) and its namespaces. Here `NameSpace` is the device name
 * string, unlike the simple list.
 */
function detailList(state: NvmeSimState): JsonObject {
  const holders = state.controllers.filter((c) => c.shares === undefined);
  const subsystems = holders.map((h, i) => ({
    Subsystem: `nvme-subsys${i}`,
    SubsystemNQN: subnqnOf(h),
    Controllers: controllersOf(state, h).map((own) => {
      const c = snapshotOf(state, own);
      return {
        Controller: c.name,
        Cntlid: String(c.cntlid),
        SerialNumber: c.sn.trimEnd(),
        ModelNumber: c.mn.trimEnd(),
        Firmware: c.fr.trimEnd(),
        Transport: 'pcie',
        Address: c.pciAddress,
        Namespaces: c.namespaces
          .filter((n) => isAttached(n, c))
          .map((n) => ({
            NameSpace: basename(n.devPath),
            Generic: `ng${c.name.slice(4)}n${n.nsid}`,
            NSID: n.nsid,
            ...nsSizes(n),
          })),
        Paths: [],
      };
    }),
    Namespaces: [],
  }));
  return { Devices: [{ Subsystems: subsystems }] };
}

/** `%-21s`-style left padding. */
function pad(s: string, n: number): string {
  return s.padEnd(n);
}

function humanSize(bytes: number): [string, string] {
  const units = ['', 'K', 'M', 'G', 'T', 'P'];
  let v = bytes;
  let i = 0;
  while (v >= 1000 && i < units.length - 1) {
    v /= 1000;
    i++;
  }
  return [v.toFixed(2).padStart(6), (units[i] as string).padStart(2)];
}

export async function list(argv: string[], env: CliEnv): Promise<CliResult> {
  const o = new Out();
  const p = parseOrFail(o, 'list', argv, [OUTPUT_FORMAT, { long: 'verbose', short: 'v', kind: 'flag' }]);
  if ('result' in p) return p.result;
  const fmt = outputFormat(p.args.opts.get('output-format'));
  if (fmt === undefined || fmt === 'binary') {
    o.err('Invalid output format\n');
    return o.done(1);
  }
  let state: NvmeSimState = { version: 1, controllers: [] };
  try {
    if (env.statePath) state = loadState(env.statePath);
  } catch {
    state = { version: 1, controllers: [] };
  }
  // One row per namespace with a block device: each subsystem once, through its holder.
  const rows = state.controllers
    .filter((c) => c.shares === undefined)
    .flatMap((c) => c.namespaces.filter((n) => n.attached).map((n) => ({ c, n })))
    .sort((a, b) => a.n.devPath.localeCompare(b.n.devPath));
  if (fmt === 'json' && p.args.opts.get('verbose') === true) {
    o.out(jsonPrint(detailList(state)));
    return o.done(0);
  }
  if (fmt === 'json') {
    o.out(
      jsonPrint({
        Devices: rows.map(({ c, n }) => {
          const lbas = Math.floor(n.sizeBytes / n.lbaSize);
          return {
            NameSpace: int32(n.nsid),
            DevicePath: n.devPath,
            Firmware: c.fr.trimEnd(),
            ModelNumber: c.mn.trimEnd(),
            SerialNumber: c.sn.trimEnd(),
            UsedBytes: lbas * n.lbaSize,
            MaximumLBA: lbas,
            PhysicalSize: lbas * n.lbaSize,
            SectorSize: n.lbaSize,
          };
        }),
      }),
    );
    return o.done(0);
  }
  const fmtRow = (cols: string[]) =>
    `${[pad(cols[0] as string, 21), pad(cols[1] as string, 21), pad(cols[2] as string, 20), pad(cols[3] as string, 40), pad(cols[4] as string, 9), pad(cols[5] as string, 26), pad(cols[6] as string, 16), pad(cols[7] as string, 8)].join(' ')}\n`;
  o.out(fmtRow(['Node', 'Generic', 'SN', 'Model', 'Namespace', 'Usage', 'Format', 'FW Rev']));
  o.out(fmtRow([21, 21, 20, 40, 9, 26, 16, 8].map((n) => '-'.repeat(n))));
  for (const { c, n } of rows) {
    const [uv, uu] = humanSize(n.sizeBytes);
    const generic = `${dirname(n.devPath)}/ng${c.name.slice(4)}n${n.nsid}`;
    const lbaf =
      n.lbaSize >= 1024
        ? `${String(n.lbaSize / 1024).padStart(3)} KiB`
        : `${String(n.lbaSize).padStart(3)}   B`;
    o.out(
      fmtRow([
        n.devPath,
        generic,
        c.sn.trimEnd(),
        c.mn.trimEnd(),
        String(n.nsid),
        `${uv} ${uu}B / ${uv} ${uu}B`,
        `${lbaf} +  0 B`,
        c.fr.trimEnd(),
      ]),
    );
  }
  return o.done(0);
}
