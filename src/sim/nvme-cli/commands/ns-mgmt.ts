/**
 * Namespace management (OACS bit 3): `create-ns`, `delete-ns`, `attach-ns`,
 * `detach-ns`, plus the harmless `ns-rescan` and `reset`. Capacity is enforced
 * against tnvmcap. Namespaces are extents of the controller's media file: a
 * deleted namespace's bytes go back to the media (unallocated, still there),
 * and a created namespace starts with whatever its extent of the media held —
 * the pessimistic controller that does not deallocate on create, so tenant
 * data left in unallocated capacity is readable again through a new namespace.
 */
import { unlinkSync } from 'node:fs';
import { dirname } from 'node:path';
import {
  applyFault,
  type CliEnv,
  type CliResult,
  isDevice,
  nvmeError,
  Out,
  onController,
  openDevice,
  parseOrFail,
} from '../context.js';
import { copyRange, createBackingFile } from '../media.js';
import type { NvmeSimState, SimControllerState } from '../state.js';
import { Status } from '../status.js';
import { controllersOf, holderOf, isAttached, setAttached } from '../subsystem.js';
import { LBA_FORMATS, NAMESPACE_ID } from './identify.js';
import { sanitizeBlocks } from './media.js';

const NSID_ALL = 0xffffffff;
const OACS_NS_MGMT = 1 << 3;
const TIMEOUT = { long: 'timeout', short: 't', kind: 'word' } as const;

/** nvme-cli prints nsids with `%d`: 0xFFFFFFFF shows as -1. */
function pd(nsid: number): number {
  return nsid | 0;
}

/** Whether the controller's subsystem has several controllers (attachment is then per controller). */
function sharedSubsystem(state: NvmeSimState, ctrl: SimControllerState): boolean {
  return controllersOf(state, holderOf(state, ctrl)).length > 1;
}

/** Statuses common to all namespace-management commands. */
function mgmtBlocked(ctrl: SimControllerState): number | undefined {
  if (!(ctrl.oacs & OACS_NS_MGMT)) return Status.INVALID_OPCODE;
  return sanitizeBlocks(ctrl);
}

/** The first media offset with `size` bytes no namespace occupies, or null. */
function freeExtent(ctrl: SimControllerState, size: number): number | null {
  const used = ctrl.namespaces
    .filter((n) => n.mediaOffset !== undefined)
    .map((n) => [n.mediaOffset!, n.mediaOffset! + n.sizeBytes] as const)
    .sort((a, b) => a[0] - b[0]);
  let at = 0;
  for (const [s, e] of used) {
    if (s - at >= size) return at;
    at = Math.max(at, e);
  }
  return ctrl.tnvmcapBytes - at >= size ? at : null;
}

/** SI-suffixed byte counts of --nsze-si/--ncap-si (k/M/G/T/P/E, powers of 1000). */
function parseSi(s: string): number | undefined {
  const m = /^\s*([0-9]+(?:\.[0-9]+)?)\s*([kKMGTPE]?)B?\s*$/.exec(s);
  if (!m) return undefined;
  const exp = ' kMGTPE'.indexOf((m[2] || ' ').replace('K', 'k'));
  return Number(m[1]) * 1000 ** exp;
}

export async function createNs(argv: string[], env: CliEnv): Promise<CliResult> {
  const o = new Out();
  const p = parseOrFail(o, 'create-ns', argv, [
    { long: 'nsze', short: 's', kind: 'suffix' },
    { long: 'ncap', short: 'c', kind: 'suffix' },
    { long: 'flbas', short: 'f', kind: 'byte' },
    { long: 'dps', short: 'd', kind: 'byte' },
    { long: 'nmic', short: 'm', kind: 'byte' },
    { long: 'anagrp-id', short: 'a', kind: 'word' },
    { long: 'nvmset-id', short: 'i', kind: 'short' },
    { long: 'block-size', short: 'b', kind: 'suffix' },
    TIMEOUT,
    { long: 'csi', short: 'y', kind: 'byte' },
    { long: 'lbstm', short: 'l', kind: 'suffix' },
    { long: 'nsze-si', short: 'S', kind: 'string' },
    { long: 'ncap-si', short: 'C', kind: 'string' },
  ]);
  if ('result' in p) return p.result;
  const dev = openDevice(o, 'create-ns', p.args, env);
  if (!isDevice(dev)) return dev;
  const opt = p.args.opts;
  let flbas = opt.get('flbas') as number | undefined;
  const bs = (opt.get('block-size') as bigint | undefined) ?? 0n;
  if (flbas !== undefined && bs !== 0n) {
    o.err('Invalid specification of both FLBAS and Block Size, please specify only one\n');
    return o.done(1);
  }
  if (flbas === undefined) {
    const idx = LBA_FORMATS.indexOf(Number(bs));
    if (bs === 0n || idx < 0) {
      o.err(`FLBAS corresponding to block size ${bs} not found\n`);
      o.err('Please correct block size, or specify FLBAS directly\n');
      return o.done(1);
    }
    flbas = idx;
  }
  const lbaSize = LBA_FORMATS[flbas & 0xf];
  let nsze = Number((opt.get('nsze') as bigint | undefined) ?? 0n);
  let ncap = Number((opt.get('ncap') as bigint | undefined) ?? 0n);
  for (const [key, apply] of [
    ['nsze-si', (v: number) => (nsze = v)],
    ['ncap-si', (v: number) => (ncap = v)],
  ] as const) {
    const raw = opt.get(key) as string | undefined;
    if (raw === undefined) continue;
    const bytes = parseSi(raw);
    if (bytes === undefined || lbaSize === undefined) {
      o.err(`Expected long suffixed integer argument for '${key}' but got '${raw}'!\n`);
      return o.done(1);
    }
    apply(Math.floor(bytes / lbaSize));
  }

  return onController(env, dev, (ctrl, state) => {
    const fault = applyFault(o, 'create-ns', ctrl);
    if (fault && fault !== 'noop') return { changed: false, result: fault };
    const blocked = mgmtBlocked(ctrl);
    if (blocked !== undefined) return { changed: false, result: nvmeError(o, blocked) };
    if (lbaSize === undefined) return { changed: false, result: nvmeError(o, Status.INVALID_FORMAT) };
    if (nsze === 0 || ncap > nsze) return { changed: false, result: nvmeError(o, Status.INVALID_FIELD) };
    const sizeBytes = nsze * lbaSize;
    const used = ctrl.namespaces.reduce((s, n) => s + n.sizeBytes, 0);
    if (used + sizeBytes > ctrl.tnvmcapBytes) {
      return { changed: false, result: nvmeError(o, Status.NS_INSUFFICIENT_CAP) };
    }
    let nsid = 1;
    while (ctrl.namespaces.some((n) => n.nsid === nsid)) nsid++;
    if (nsid > ctrl.nn >>> 0) return { changed: false, result: nvmeError(o, Status.NS_ID_UNAVAILABLE) };
    const mediaOffset = ctrl.mediaPath ? freeExtent(ctrl, sizeBytes) : undefined;
    if (mediaOffset === null) return { changed: false, result: nvmeError(o, Status.NS_INSUFFICIENT_CAP) };
    if (fault === 'noop') {
      o.out(`create-ns: Success, created nsid:${pd(nsid)}\n`);
      return { changed: false, result: o.done(0) };
    }
    const devPath = `${dirname(ctrl.devPath)}/${ctrl.nsNamePrefix ?? `${ctrl.name}n`}${nsid}`;
    createBackingFile(devPath, sizeBytes);
    // No deallocation on create: the new namespace shows whatever its media held.
    if (ctrl.mediaPath && mediaOffset !== undefined)
      copyRange(ctrl.mediaPath, mediaOffset, devPath, 0, sizeBytes);
    ctrl.namespaces.push({
      nsid,
      devPath,
      sizeBytes,
      lbaSize,
      attached: false,
      // On a subsystem with several controllers, attachment is per controller.
      ...(sharedSubsystem(state, ctrl) ? { attachedTo: [] } : {}),
      ...(mediaOffset === undefined ? {} : { mediaOffset }),
    });
    ctrl.namespaces.sort((a, b) => a.nsid - b.nsid);
    o.out(`create-ns: Success, created nsid:${pd(nsid)}\n`);
    return { changed: true, result: o.done(0) };
  });
}

export async function deleteNs(argv: string[], env: CliEnv): Promise<CliResult> {
  const o = new Out();
  const p = parseOrFail(o, 'delete-ns', argv, [NAMESPACE_ID, TIMEOUT]);
  if ('result' in p) return p.result;
  const dev = openDevice(o, 'delete-ns', p.args, env);
  if (!isDevice(dev)) return dev;
  let nsid = (p.args.opts.get('namespace-id') as number | undefined) ?? 0;
  if (nsid === 0) {
    if (!dev.ns) {
      o.err('get-namespace-id: Inappropriate ioctl for device\n');
      return o.done(1);
    }
    nsid = dev.ns.nsid;
  }
  return onController(env, dev, (ctrl) => {
    const fault = applyFault(o, 'delete-ns', ctrl);
    if (fault === 'noop') {
      o.out(`delete-ns: Success, deleted nsid:${pd(nsid)}\n`);
      return { changed: false, result: o.done(0) };
    }
    if (fault) return { changed: false, result: fault };
    const blocked = mgmtBlocked(ctrl);
    if (blocked !== undefined) return { changed: false, result: nvmeError(o, blocked) };
    const victims = ctrl.namespaces.filter((n) => nsid === NSID_ALL || n.nsid === nsid);
    if (victims.length === 0 && nsid !== NSID_ALL)
      return { changed: false, result: nvmeError(o, Status.INVALID_NS) };
    for (const ns of victims) {
      // The namespace's bytes stay on the media, now unallocated.
      if (ctrl.mediaPath && ns.mediaOffset !== undefined) {
        copyRange(ns.devPath, 0, ctrl.mediaPath, ns.mediaOffset, ns.sizeBytes);
      }
      try {
        unlinkSync(ns.devPath);
      } catch {
        // Already gone: deleting the namespace is what matters.
      }
    }
    ctrl.namespaces = ctrl.namespaces.filter((n) => !victims.includes(n));
    o.out(`delete-ns: Success, deleted nsid:${pd(nsid)}\n`);
    return { changed: true, result: o.done(0) };
  });
}

async function attachDetach(cmd: 'attach-ns' | 'detach-ns', argv: string[], env: CliEnv): Promise<CliResult> {
  const o = new Out();
  const attach = cmd === 'attach-ns';
  const p = parseOrFail(o, cmd, argv, [NAMESPACE_ID, { long: 'controllers', short: 'c', kind: 'string' }]);
  if ('result' in p) return p.result;
  const dev = openDevice(o, cmd, p.args, env);
  if (!isDevice(dev)) return dev;
  const nsid = (p.args.opts.get('namespace-id') as number | undefined) ?? 0;
  if (nsid === 0) {
    o.err(`${cmd}: namespace-id parameter required\n`);
    return o.done(1);
  }
  const rawList = (p.args.opts.get('controllers') as string | undefined) ?? '';
  const ids: number[] = [];
  if (rawList !== '') {
    for (const part of rawList.split(',')) {
      const v = /^\s*(0x[0-9a-fA-F]+|[0-9]+)\s*$/.exec(part);
      const n = v ? Number(v[1]) : Number.NaN;
      if (!(n >= 0 && n < 65536)) {
        o.err(`${cmd}: controller id list is malformed\n`);
        return o.done(1);
      }
      ids.push(n);
    }
  }
  if (ids.length === 0) {
    o.err('warning: empty controller-id list will result in no actual change in namespace attachment\n');
  }
  return onController(env, dev, (ctrl, state) => {
    const fault = applyFault(o, cmd, ctrl);
    if (fault === 'noop') {
      o.out(`${cmd}: Success, nsid:${pd(nsid)}\n`);
      return { changed: false, result: o.done(0) };
    }
    if (fault) return { changed: false, result: fault };
    const blocked = mgmtBlocked(ctrl);
    if (blocked !== undefined) return { changed: false, result: nvmeError(o, blocked) };
    const ns = ctrl.namespaces.find((n) => n.nsid === nsid);
    if (!ns) return { changed: false, result: nvmeError(o, Status.INVALID_NS) };
    // The list may name any controller of this subsystem, and only those.
    const members = controllersOf(state, holderOf(state, ctrl)).map((c) => c.cntlid);
    if (ids.some((id) => !members.includes(id)))
      return { changed: false, result: nvmeError(o, Status.CTRL_LIST_INVALID) };
    let changed = false;
    for (const cntlid of new Set(ids)) {
      const on = isAttached(ns, { cntlid });
      if (attach && on) return { changed: false, result: nvmeError(o, Status.NS_ALREADY_ATTACHED) };
      if (!attach && !on) return { changed: false, result: nvmeError(o, Status.NS_NOT_ATTACHED) };
    }
    for (const cntlid of new Set(ids)) {
      setAttached(ns, { cntlid }, attach);
      changed = true;
    }
    o.out(`${cmd}: Success, nsid:${pd(nsid)}\n`);
    return { changed, result: o.done(0) };
  });
}

export function attachNs(argv: string[], env: CliEnv): Promise<CliResult> {
  return attachDetach('attach-ns', argv, env);
}

export function detachNs(argv: string[], env: CliEnv): Promise<CliResult> {
  return attachDetach('detach-ns', argv, env);
}

/** `ns-rescan` / `reset`: no output on success; they only need an existing controller. */
export async function simpleCtrlCommand(
  cmd: 'ns-rescan' | 'reset',
  argv: string[],
  env: CliEnv,
): Promise<CliResult> {
  const o = new Out();
  const p = parseOrFail(o, cmd, argv, []);
  if ('result' in p) return p.result;
  const dev = openDevice(o, cmd, p.args, env);
  if (!isDevice(dev)) return dev;
  return onController(env, dev, (ctrl) => {
    const fault = applyFault(o, cmd, ctrl);
    if (fault === 'noop') return { changed: false, result: o.done(0) };
    if (fault) return { changed: false, result: fault };
    // A controller reset does not stop a sanitize (it survives resets): nothing to change.
    return { changed: false, result: o.done(0) };
  });
}
