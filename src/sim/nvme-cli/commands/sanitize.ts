/**
 * `sanitize` and `sanitize-log`. The sanitize command only validates and
 * records the start (printing nothing, like 2.3); the erasure itself happens
 * when the operation's time is up (see sanitize-engine.ts). The log is printed
 * as 2.3's `json_sanitize_log`: wrapped in the device basename, SSTAT as an
 * object with a `"(N) text"` status, u32 times as int32 (0xFFFFFFFF → -1).
 */
import { convert, type OptSpec, valueError } from '../args.js';
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
import { int32, jsonPrint } from '../json-print.js';
import {
  currentSprog,
  reportedSstat,
  SANACT_BLOCK_ERASE,
  SANACT_CRYPTO_ERASE,
  SANACT_EXIT_FAILURE,
  SANACT_OVERWRITE,
  SPROG_IDLE,
  SSTAT_FAILED,
  SSTAT_IN_PROGRESS,
  sanitizeRunning,
  sanitizeStatus,
  spawnSanitizeWorker,
} from '../sanitize-engine.js';
import type { SimControllerState } from '../state.js';
import { Status } from '../status.js';
import { OUTPUT_FORMAT, outputFormat } from './identify.js';

const SANICAP_CES = 1 << 0;
const SANICAP_BES = 1 << 1;
const SANICAP_OWS = 1 << 2;
const SANICAP_NDI = 1 << 29;

const SANACT_SPEC: OptSpec = {
  long: 'sanact',
  short: 'a',
  kind: 'byte',
  values: [
    { name: 'exit-failure', value: SANACT_EXIT_FAILURE },
    { name: 'start-block-erase', value: SANACT_BLOCK_ERASE },
    { name: 'start-overwrite', value: SANACT_OVERWRITE },
    { name: 'start-crypto-erase', value: SANACT_CRYPTO_ERASE },
  ],
};

const ACTION_CAP: Record<number, number> = {
  [SANACT_BLOCK_ERASE]: SANICAP_BES,
  [SANACT_OVERWRITE]: SANICAP_OWS,
  [SANACT_CRYPTO_ERASE]: SANICAP_CES,
};

export async function sanitize(argv: string[], env: CliEnv): Promise<CliResult> {
  const o = new Out();
  const p = parseOrFail(o, 'sanitize', argv, [
    { long: 'no-dealloc', short: 'd', kind: 'flag' },
    { long: 'oipbp', short: 'i', kind: 'flag' },
    { long: 'owpass', short: 'n', kind: 'byte' },
    { long: 'ause', short: 'u', kind: 'flag' },
    // A string for argconfig; converted (names or a byte) only after the device is open, as 2.3 does.
    { long: 'sanact', short: 'a', kind: 'string' },
    { long: 'ovrpat', short: 'p', kind: 'word' },
  ]);
  if ('result' in p) return p.result;
  const dev = openDevice(o, 'sanitize', p.args, env);
  if (!isDevice(dev)) return dev;
  const opt = p.args.opts;
  const rawSanact = opt.get('sanact') as string | undefined;
  const sanact = rawSanact === undefined ? 0 : convert(SANACT_SPEC, rawSanact);
  if (sanact === undefined) {
    o.err(valueError(SANACT_SPEC, rawSanact as string));
    return o.done(1);
  }
  const ause = opt.get('ause') === true;
  const noDealloc = opt.get('no-dealloc') === true;
  const oipbp = opt.get('oipbp') === true;
  const owpass = (opt.get('owpass') as number | undefined) ?? 0;
  const ovrpat = (opt.get('ovrpat') as number | undefined) ?? 0;
  if (typeof sanact !== 'number' || !(sanact >= SANACT_EXIT_FAILURE && sanact <= SANACT_CRYPTO_ERASE)) {
    o.err('Invalid Sanitize Action\n');
    return o.done(1);
  }
  if (sanact === SANACT_EXIT_FAILURE && (ause || noDealloc)) {
    o.err('SANACT is Exit Failure Mode\n');
    return o.done(1);
  }
  if (sanact === SANACT_OVERWRITE) {
    if (owpass > 16) {
      o.err('OWPASS out of range [0-16]\n');
      return o.done(1);
    }
  } else if (owpass || oipbp || ovrpat) {
    o.err('SANACT is not Overwrite\n');
    return o.done(1);
  }
  // libnvme 1.3 nvme_sanitize_nvm(): CDW10 layout.
  const cdw10 =
    sanact | (ause ? 1 << 3 : 0) | ((owpass & 0xf) << 4) | (oipbp ? 1 << 8 : 0) | (noDealloc ? 1 << 9 : 0);

  /** The started-at time when a new sanitize began (its worker is spawned after the lock is released). */
  let startedAt: number | undefined;
  /** The controller that holds the subsystem's sanitize state: the one the worker completes. */
  let holder = dev.ctrl.name;
  const outcome = await onController(env, dev, (ctrl) => {
    const fault = applyFault(o, 'sanitize', ctrl);
    if (fault === 'noop') return { changed: false, result: o.done(0) };
    if (fault) return { changed: false, result: fault };
    const status = checkSanitize(ctrl, sanact, noDealloc);
    if (status !== undefined) return { changed: false, result: nvmeError(o, status) };
    const s = ctrl.sanitize;
    if (sanact === SANACT_EXIT_FAILURE) {
      // Leaves the failed state only if the failed sanitize allowed unrestricted exit (AUSE).
      if (sanitizeStatus(ctrl) === SSTAT_FAILED && !s.failureCleared) {
        if (!((s.cdw10 ?? 0) & (1 << 3)))
          return { changed: false, result: nvmeError(o, Status.SANITIZE_FAILED) };
        s.failureCleared = true;
        return { changed: true, result: o.done(0) };
      }
      return { changed: false, result: o.done(0) };
    }
    startedAt = env.now();
    holder = ctrl.shares ?? ctrl.name;
    // Sanitize is subsystem-wide: a failure injected on the controller that sent it sticks to the operation.
    if (ctrl.faults?.sanitize?.mode === 'sanitize-fails') s.failing = true;
    else delete s.failing;
    s.sstat = SSTAT_IN_PROGRESS;
    s.sprog = 0;
    s.startedAt = startedAt;
    s.action = sanact;
    s.cdw10 = cdw10;
    s.ovrpat = ovrpat;
    delete s.failureCleared;
    return { changed: true, result: o.done(0) };
  });
  if (startedAt !== undefined && env.statePath) spawnSanitizeWorker(env.statePath, holder, startedAt);
  return outcome;
}

/** The controller-side checks of a Sanitize command; returns an NVMe status or undefined. */
function checkSanitize(ctrl: SimControllerState, sanact: number, noDealloc: boolean): number | undefined {
  if (ctrl.sanicap === 0) return Status.INVALID_OPCODE;
  if (sanitizeRunning(ctrl)) return Status.SANITIZE_IN_PROGRESS;
  if (sanact === SANACT_EXIT_FAILURE) return undefined;
  if (!((ctrl.sanicap >>> 0) & (ACTION_CAP[sanact] ?? 0))) return Status.INVALID_FIELD;
  // NDI set (and NODRM clear, the default): No-Deallocate is refused.
  if (noDealloc && (ctrl.sanicap >>> 0) & SANICAP_NDI) return Status.INVALID_FIELD;
  return undefined;
}

const SSTAT_TEXT: Record<number, string> = {
  0: 'NVM Subsystem has never been sanitized.',
  1: 'Most Recent Sanitize Command Completed Successfully.',
  2: 'Sanitize in Progress.',
  3: 'Most Recent Sanitize Command Failed.',
  4: 'Most Recent Sanitize Command (No-Deallocate After Sanitize) Completed Successfully.',
};

interface SanitizeLog {
  sprog: number;
  sstat: number;
  scdw10: number;
  eto: number;
  etbe: number;
  etce: number;
  etond: number;
  etbend: number;
  etcend: number;
}

/** The Sanitize Status log page (LID 0x81) as the controller would return it now. */
export function sanitizeLogPage(ctrl: SimControllerState, now: number): SanitizeLog {
  const secs = Math.ceil(ctrl.sanitize.durationMs / 1000);
  const est = (cap: number) => ((ctrl.sanicap >>> 0) & cap ? secs : 0xffffffff);
  const running = sanitizeRunning(ctrl);
  return {
    sprog: running ? currentSprog(ctrl, now) : SPROG_IDLE,
    sstat: reportedSstat(ctrl),
    scdw10: ctrl.sanitize.cdw10 ?? 0,
    eto: est(SANICAP_OWS),
    etbe: est(SANICAP_BES),
    etce: est(SANICAP_CES),
    etond: 0xffffffff,
    etbend: 0xffffffff,
    etcend: 0xffffffff,
  };
}

function estimateLine(label: string, v: number): string {
  return `${label}:  ${v >>> 0}${v >>> 0 === 0xffffffff ? ' (No time period reported)' : ''}\n`;
}

export async function sanitizeLog(argv: string[], env: CliEnv): Promise<CliResult> {
  const o = new Out();
  const p = parseOrFail(o, 'sanitize-log', argv, [
    { long: 'rae', short: 'r', kind: 'flag' },
    OUTPUT_FORMAT,
    { long: 'human-readable', short: 'H', kind: 'flag' },
    { long: 'raw-binary', short: 'b', kind: 'flag' },
  ]);
  if ('result' in p) return p.result;
  const dev = openDevice(o, 'sanitize-log', p.args, env);
  if (!isDevice(dev)) return dev;
  const outcome = await onController<CliResult | SanitizeLog>(env, dev, (ctrl) => {
    const fault = applyFault(o, 'sanitize-log', ctrl);
    if (fault && fault !== 'noop') return { changed: false, result: fault };
    if (ctrl.sanicap === 0) return { changed: false, result: nvmeError(o, Status.INVALID_FIELD) };
    return { changed: false, result: sanitizeLogPage(ctrl, env.now()) };
  });
  if ('code' in outcome) return outcome;
  const log: SanitizeLog = outcome;
  const fmt = outputFormat(p.args.opts.get('output-format'));
  if (fmt === undefined || fmt === 'binary') return o.done(1);
  const status = log.sstat & 0x7;
  if (fmt === 'json') {
    o.out(
      jsonPrint({
        [dev.name]: {
          sprog: log.sprog,
          sstat: {
            global_erased: (log.sstat >> 8) & 1,
            no_cmplted_passes: (log.sstat >> 3) & 0x1f,
            status: `(${status}) ${SSTAT_TEXT[status] ?? 'Unknown'}`,
          },
          cdw10_info: int32(log.scdw10),
          time_over_write: int32(log.eto),
          time_block_erase: int32(log.etbe),
          time_crypto_erase: int32(log.etce),
          time_over_write_no_dealloc: int32(log.etond),
          time_block_erase_no_dealloc: int32(log.etbend),
          time_crypto_erase_no_dealloc: int32(log.etcend),
        },
      }),
    );
    return o.done(0);
  }
  const human = p.args.opts.get('human-readable') === true;
  let line = `Sanitize Progress                      (SPROG) :  ${log.sprog}`;
  if (human && status === SSTAT_IN_PROGRESS) line += `(${((log.sprog * 100) / 65536).toFixed(6)}%)`;
  o.out(`${line}\n`);
  // 2.3 masks SSTAT to bits 2:0 in normal output (Global Data Erased is invisible here).
  o.out(
    `Sanitize Status                        (SSTAT) :  ${status === 0 ? '0' : `0x${status.toString(16)}`}\n`,
  );
  if (human) o.out(`\t[2:0]\t${SSTAT_TEXT[status] ?? 'Unknown'}\n`);
  o.out(
    `Sanitize Command Dword 10 Information (SCDW10) :  ${log.scdw10 === 0 ? '0' : `0x${log.scdw10.toString(16)}`}\n`,
  );
  o.out(estimateLine('Estimated Time For Overwrite                   ', log.eto));
  o.out(estimateLine('Estimated Time For Block Erase                 ', log.etbe));
  o.out(estimateLine('Estimated Time For Crypto Erase                ', log.etce));
  o.out(estimateLine('Estimated Time For Overwrite (No-Deallocate)   ', log.etond));
  o.out(estimateLine('Estimated Time For Block Erase (No-Deallocate) ', log.etbend));
  o.out(estimateLine('Estimated Time For Crypto Erase (No-Deallocate)', log.etcend));
  return o.done(0);
}
