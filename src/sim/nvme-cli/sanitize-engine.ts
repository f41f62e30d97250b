/**
 * Sanitize as a background operation, the way real controllers run it: the
 * admin command returns at once, SSTAT says "in progress" and SPROG grows with
 * time, and only when the operation finishes is the media actually rewritten.
 *
 * Completion happens exactly once, by whichever comes first under the state
 * lock: any later nvme-sim invocation noticing the deadline has passed
 * ({@link settleSanitize}), or the detached worker process started with the
 * sanitize ({@link spawnSanitizeWorker}), which sleeps until the deadline so the
 * data is gone even if nobody ever polls.
 */
import { spawn } from 'node:child_process';
import { statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { fillWhole, resetFile } from './media.js';
import type { SimControllerState } from './state.js';

// SSTAT 0: never sanitized.
export const SSTAT_COMPLETED = 1;
export const SSTAT_IN_PROGRESS = 2;
export const SSTAT_FAILED = 3;
export const SSTAT_GLOBAL_ERASED = 0x100;

export const SANACT_EXIT_FAILURE = 1;
export const SANACT_BLOCK_ERASE = 2;
export const SANACT_OVERWRITE = 3;
export const SANACT_CRYPTO_ERASE = 4;

/** SPROG when no sanitize is running. */
export const SPROG_IDLE = 0xffff;

export function sanitizeStatus(ctrl: SimControllerState): number {
  return ctrl.sanitize.sstat & 0x7;
}

export function sanitizeRunning(ctrl: SimControllerState): boolean {
  return sanitizeStatus(ctrl) === SSTAT_IN_PROGRESS;
}

/** A failed sanitize blocks media access until recovered (new sanitize, or Exit Failure Mode if AUSE). */
export function sanitizeFailedLocked(ctrl: SimControllerState): boolean {
  return sanitizeStatus(ctrl) === SSTAT_FAILED && !ctrl.sanitize.failureCleared;
}

/** SPROG for "now": numerator over 65536 of the elapsed fraction, capped below 65536. */
export function currentSprog(ctrl: SimControllerState, now: number): number {
  if (!sanitizeRunning(ctrl)) return ctrl.sanitize.sprog;
  const started = ctrl.sanitize.startedAt ?? now;
  const frac = ctrl.sanitize.durationMs <= 0 ? 1 : (now - started) / ctrl.sanitize.durationMs;
  return Math.max(0, Math.min(0xffff, Math.floor(frac * 65536)));
}

/**
 * Finishes the running sanitize: rewrites every namespace (crypto erase: random
 * bytes, since the old key is gone; block erase: zeroes; overwrite: the pattern)
 * or, with the `sanitize-fails` fault, leaves the data and reports failure.
 */
export function completeSanitize(ctrl: SimControllerState): void {
  const s = ctrl.sanitize;
  const cdw10 = s.cdw10 ?? 0;
  if (s.failing || ctrl.faults?.['sanitize']?.mode === 'sanitize-fails') {
    s.sstat = SSTAT_FAILED;
  } else {
    for (const ns of ctrl.namespaces) {
      if (s.action === SANACT_CRYPTO_ERASE) fillWhole(ns.devPath, ns.sizeBytes, { kind: 'random' });
      else if (s.action === SANACT_OVERWRITE) {
        fillWhole(ns.devPath, ns.sizeBytes, { kind: 'pattern', pattern: s.ovrpat ?? 0 });
      } else fillWhole(ns.devPath, ns.sizeBytes, { kind: 'zero' });
    }
    // The unallocated capacity too: sanitize is subsystem-wide.
    if (ctrl.mediaPath) resetFile(ctrl.mediaPath, ctrl.tnvmcapBytes);
    const passes = s.action === SANACT_OVERWRITE ? (cdw10 >> 4) & 0xf || 16 : 0;
    s.sstat = SSTAT_COMPLETED | (Math.min(passes, 31) << 3) | SSTAT_GLOBAL_ERASED;
    s.erasedMtimes = mediaMtimes(ctrl);
  }
  s.sprog = SPROG_IDLE;
  delete s.startedAt;
  delete s.failing;
}

/** mtime of every file that holds user data on the controller: namespaces and the media. */
export function mediaMtimes(ctrl: SimControllerState): Record<string, number> {
  const out: Record<string, number> = {};
  for (const p of [...ctrl.namespaces.map((n) => n.devPath), ...(ctrl.mediaPath ? [ctrl.mediaPath] : [])]) {
    try {
      out[p] = statSync(p).mtimeMs;
    } catch {
      // A namespace file that is gone holds nothing.
    }
  }
  return out;
}

/**
 * SSTAT as the log reports it now: Global Data Erased (bit 8) is cleared once
 * anything was written since the last sanitize completed (a file whose mtime
 * moved, a namespace that was created since). The NVMe specification clears
 * GDE on any write; tenants write through the block device, which the
 * simulator only sees as file changes.
 */
export function reportedSstat(ctrl: SimControllerState): number {
  const s = ctrl.sanitize;
  if (!(s.sstat & SSTAT_GLOBAL_ERASED) || s.erasedMtimes === undefined) return s.sstat;
  const now = mediaMtimes(ctrl);
  const keys = Object.keys(now);
  const unchanged =
    keys.length === Object.keys(s.erasedMtimes).length && keys.every((k) => s.erasedMtimes?.[k] === now[k]);
  return unchanged ? s.sstat : s.sstat & ~SSTAT_GLOBAL_ERASED;
}

/** Completes the sanitize if its deadline has passed. Returns whether the state changed. */
export function settleSanitize(ctrl: SimControllerState, now: number): boolean {
  if (!sanitizeRunning(ctrl)) return false;
  const started = ctrl.sanitize.startedAt ?? now;
  if (now < started + ctrl.sanitize.durationMs) return false;
  completeSanitize(ctrl);
  return true;
}

/**
 * The worker's command line: built (dist/, the package), plain node on the JS
 * beside this module; from source (an in-process test in a checkout), the .ts
 * beside it through the tsx loader, a development dependency.
 */
function sanitizeWorkerArgs(): string[] {
  if (import.meta.url.endsWith('.js'))
    return [fileURLToPath(new URL('./sanitize-worker.js', import.meta.url))];
  const tsx = createRequire(import.meta.url).resolve('tsx/esm');
  return ['--import', tsx, fileURLToPath(new URL('./sanitize-worker.ts', import.meta.url))];
}

/** Starts the detached process that completes the sanitize at its deadline. */
export function spawnSanitizeWorker(statePath: string, ctrlName: string, startedAt: number): void {
  const args = sanitizeWorkerArgs();
  const child = spawn(process.execPath, [...args, statePath, ctrlName, String(startedAt)], {
    detached: true,
    stdio: 'ignore',
  });
  child.on('error', () => {
    // The polling path still completes the sanitize; a missing worker only delays it.
  });
  child.unref();
}
