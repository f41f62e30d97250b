/**
 * Commands that rewrite user data: `write-zeroes` (an I/O command on one LBA
 * range, zeroing real bytes of the backing file) and `format` (Format NVM with
 * SES 0/1 → zeroes, SES 2 → random bytes standing in for a crypto erase).
 */
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
import { fillRange, fillWhole } from '../media.js';
import { SSTAT_GLOBAL_ERASED, sanitizeFailedLocked, sanitizeRunning } from '../sanitize-engine.js';
import type { SimControllerState } from '../state.js';
import { Status } from '../status.js';
import { isAttached } from '../subsystem.js';
import { LBA_FORMATS, NAMESPACE_ID } from './identify.js';

const NSID_ALL = 0xffffffff;
const OACS_FORMAT = 1 << 1;
const ONCS_WRITE_ZEROES = 1 << 3;
const FNA_FORMAT_ALL = 1 << 0;
const FNA_SECURE_ERASE_ALL = 1 << 1;
const FNA_CRYPTO_ERASE = 1 << 2;

/** Statuses every media-modifying command gets while a sanitize runs or after one failed. */
export function sanitizeBlocks(ctrl: SimControllerState): number | undefined {
  if (sanitizeRunning(ctrl)) return Status.SANITIZE_IN_PROGRESS;
  if (sanitizeFailedLocked(ctrl)) return Status.SANITIZE_FAILED;
  return undefined;
}

function nsidFor(o: Out, dev: Device, given: unknown): number | CliResult {
  if (given !== undefined) return given as number;
  if (dev.ns) return dev.ns.nsid;
  o.err('get-namespace-id: Inappropriate ioctl for device\n');
  return o.done(1);
}

export async function writeZeroes(argv: string[], env: CliEnv): Promise<CliResult> {
  const o = new Out();
  const p = parseOrFail(o, 'write-zeroes', argv, [
    NAMESPACE_ID,
    { long: 'start-block', short: 's', kind: 'suffix' },
    { long: 'block-count', short: 'c', kind: 'short' },
    { long: 'deac', short: 'd', kind: 'flag' },
    { long: 'limited-retry', short: 'l', kind: 'flag' },
    { long: 'force-unit-access', short: 'f', kind: 'flag' },
    { long: 'prinfo', short: 'p', kind: 'byte' },
    { long: 'ref-tag', short: 'r', kind: 'suffix' },
    { long: 'app-tag-mask', short: 'm', kind: 'short' },
    { long: 'app-tag', short: 'a', kind: 'short' },
    { long: 'storage-tag', short: 'S', kind: 'suffix' },
    { long: 'storage-tag-check', short: 'C', kind: 'flag' },
  ]);
  if ('result' in p) return p.result;
  const dev = openDevice(o, 'write-zeroes', p.args, env);
  if (!isDevice(dev)) return dev;
  const nsid = nsidFor(o, dev, p.args.opts.get('namespace-id'));
  if (typeof nsid !== 'number') return nsid;
  const slba = (p.args.opts.get('start-block') as bigint | undefined) ?? 0n;
  const nlb = ((p.args.opts.get('block-count') as number | undefined) ?? 0) + 1;

  return onController(env, dev, (ctrl) => {
    const fault = applyFault(o, 'write-zeroes', ctrl);
    if (fault === 'noop') {
      o.out('NVME Write Zeroes Success\n');
      return { changed: false, result: o.done(0) };
    }
    if (fault) return { changed: false, result: fault };
    if (!(ctrl.oncs & ONCS_WRITE_ZEROES))
      return { changed: false, result: nvmeError(o, Status.INVALID_OPCODE) };
    const ns = ctrl.namespaces.find((n) => n.nsid === nsid && isAttached(n, ctrl));
    if (!ns) return { changed: false, result: nvmeError(o, Status.INVALID_NS) };
    const blocked = sanitizeBlocks(ctrl);
    if (blocked !== undefined) return { changed: false, result: nvmeError(o, blocked) };
    const nsze = BigInt(Math.floor(ns.sizeBytes / ns.lbaSize));
    if (slba + BigInt(nlb) > nsze) return { changed: false, result: nvmeError(o, Status.LBA_RANGE) };
    const start = Number(slba) * ns.lbaSize;
    const end = start + nlb * ns.lbaSize;
    const skip = ctrl.faults?.['write-zeroes'];
    if (skip?.mode === 'skip-range') {
      // The lying controller: zeroes around the skipped bytes, reports success.
      const s0 = Math.max(start, skip.offset);
      const s1 = Math.min(end, skip.offset + skip.length);
      if (s0 < s1) {
        if (s0 > start) fillRange(ns.devPath, start, s0 - start, { kind: 'zero' });
        if (end > s1) fillRange(ns.devPath, s1, end - s1, { kind: 'zero' });
      } else fillRange(ns.devPath, start, end - start, { kind: 'zero' });
    } else fillRange(ns.devPath, start, end - start, { kind: 'zero' });
    // Any write means user data may exist again: Global Data Erased no longer holds.
    const hadGde = (ctrl.sanitize.sstat & SSTAT_GLOBAL_ERASED) !== 0;
    ctrl.sanitize.sstat &= ~SSTAT_GLOBAL_ERASED;
    o.out('NVME Write Zeroes Success\n');
    return { changed: hadGde, result: o.done(0) };
  });
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export async function format(argv: string[], env: CliEnv): Promise<CliResult> {
  const o = new Out();
  const p = parseOrFail(o, 'format', argv, [
    NAMESPACE_ID,
    { long: 'timeout', short: 't', kind: 'word' },
    { long: 'lbaf', short: 'l', kind: 'byte' },
    { long: 'ses', short: 's', kind: 'byte' },
    { long: 'pi', short: 'i', kind: 'byte' },
    { long: 'pil', short: 'p', kind: 'byte' },
    { long: 'ms', short: 'm', kind: 'byte' },
    { long: 'reset', short: 'r', kind: 'flag' },
    { long: 'force', kind: 'flag' },
    { long: 'block-size', short: 'b', kind: 'suffix' },
  ]);
  if ('result' in p) return p.result;
  const dev = openDevice(o, 'format', p.args, env);
  if (!isDevice(dev)) return dev;
  const opt = p.args.opts;
  const ses = (opt.get('ses') as number | undefined) ?? 0;
  const pi = (opt.get('pi') as number | undefined) ?? 0;
  const pil = (opt.get('pil') as number | undefined) ?? 0;
  const ms = (opt.get('ms') as number | undefined) ?? 0;
  const bs = opt.get('block-size') as bigint | undefined;
  let nsid = (opt.get('namespace-id') as number | undefined) ?? dev.ns?.nsid ?? 0;
  if (dev.ctrl.fna & FNA_FORMAT_ALL) nsid = NSID_ALL;
  const current = dev.ctrl.namespaces.find((n) => n.nsid === nsid);
  const prevLbaf = current ? Math.max(0, LBA_FORMATS.indexOf(current.lbaSize)) : 0;
  let lbaf = opt.get('lbaf') as number | undefined;
  if (bs !== undefined && bs !== 0n) {
    if (lbaf !== undefined) {
      o.err('Invalid specification of both LBAF and Block Size, please specify only one\n');
      return o.done(1);
    }
    const idx = LBA_FORMATS.indexOf(Number(bs));
    if (idx < 0) {
      o.err(`LBAF corresponding to given block size ${bs} not found\n`);
      o.err('Please correct block size, or specify LBAF directly\n');
      return o.done(1);
    }
    lbaf = idx;
  }
  lbaf ??= prevLbaf;
  if (ses > 7) return argError(o, `invalid secure erase settings:${ses}`);
  if (lbaf > 15) return argError(o, `invalid lbaf:${lbaf}`);
  if (pi > 7) return argError(o, `invalid pi:${pi}`);
  if (pil > 1) return argError(o, `invalid pil:${pil}`);
  if (ms > 1) return argError(o, `invalid ms:${ms}`);

  if (opt.get('force') !== true) {
    const nsText = nsid === 0 ? '0' : `0x${nsid.toString(16)}`;
    o.err(
      `You are about to format ${dev.name}, namespace ${nsText}${nsid === NSID_ALL ? '(ALL namespaces)' : ''}.\n`,
    );
    o.err(
      "WARNING: Format may irrevocably delete this device's data.\n" +
        'You have 10 seconds to press Ctrl-C to cancel this operation.\n\n' +
        'Use the force [--force] option to suppress this warning.\n',
    );
    await sleep(env.fast ? 100 : 10_000);
    o.err('Sending format operation ... \n');
  }

  return onController(env, dev, (ctrl) => {
    const fault = applyFault(o, 'format', ctrl);
    if (fault === 'noop') {
      o.out(`Success formatting namespace:${nsid.toString(16)}\n`);
      return { changed: false, result: o.done(0) };
    }
    if (fault) return { changed: false, result: fault };
    if (!(ctrl.oacs & OACS_FORMAT)) return { changed: false, result: nvmeError(o, Status.INVALID_OPCODE) };
    const blocked = sanitizeBlocks(ctrl);
    if (blocked !== undefined) return { changed: false, result: nvmeError(o, blocked) };
    if (ses > 2 || (ses === 2 && !(ctrl.fna & FNA_CRYPTO_ERASE)) || pi !== 0 || ms !== 0) {
      return { changed: false, result: nvmeError(o, Status.INVALID_FIELD) };
    }
    if (lbaf >= LBA_FORMATS.length) return { changed: false, result: nvmeError(o, Status.INVALID_FORMAT) };
    // NSID FFFFFFFFh formats the namespaces attached to this controller; a secure erase reaches
    // every namespace of the subsystem, attached or not, only when FNA bit 1 says so.
    const attachedHere = ctrl.namespaces.filter((n) => isAttached(n, ctrl));
    const targets =
      ses > 0 && ctrl.fna & FNA_SECURE_ERASE_ALL
        ? ctrl.namespaces
        : nsid === NSID_ALL
          ? attachedHere
          : attachedHere.filter((n) => n.nsid === nsid);
    if (targets.length === 0 && nsid !== NSID_ALL)
      return { changed: false, result: nvmeError(o, Status.INVALID_NS) };
    const lbaSize = LBA_FORMATS[lbaf] as number;
    for (const ns of targets) {
      ns.lbaSize = lbaSize;
      fillWhole(ns.devPath, ns.sizeBytes, ses === 2 ? { kind: 'random' } : { kind: 'zero' });
    }
    o.out(`Success formatting namespace:${nsid.toString(16)}\n`);
    return { changed: true, result: o.done(0) };
  });
}

function argError(o: Out, msg: string): CliResult {
  o.err(`${msg}\n`);
  return o.done(1);
}
