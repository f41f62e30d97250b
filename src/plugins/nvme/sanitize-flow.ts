/**
 * The sanitize actions (sanitize-crypto, sanitize-block), recording what the
 * agent's judge needs to tell *this* sanitize from an old log entry
 * (notes/nvme-cli.md §1.3, §2):
 *
 * 1. Read the Sanitize Status log. A sanitize already running is followed, not
 *    restarted (a new one would fail with Sanitize In Progress, 0x1d).
 * 2. Arm the log: write one random canary block to each namespace, flushed to
 *    the media. Any write clears Global Data Erased (SSTAT bit 8), so after
 *    this the log must say GDE = 0, and only a sanitize that completes after
 *    our command can set it back to 1. Read the log again.
 * 3. Send the sanitize (SANACT 4 crypto / 2 block; never no-dealloc).
 * 4. Poll the log until it ends, recording every change: "in progress" seen
 *    after the command, or GDE 0 → 1, is the proof the operation ran; a
 *    "completed" that was already there proves nothing.
 * 5. Read the canaries back: a canary that survived means the media was not
 *    erased, whatever the log says.
 *
 * The driver does not decide: it returns SanitizeEvidence; the agent judges.
 */
import { randomBytes, randomInt } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { readAt, writeAt } from '../block/direct-io.js';
import type { SanitizeCanary, SanitizeEvidence, SanitizeLogSnapshot } from '../cleanup-evidence.js';
import type { CleanupContext } from '../driver.js';
import { nsDevPath, type ResolvedController, type RunNvme } from './controller.js';
import { CleanupFailedError, NvmeCommandError } from './errors.js';
import {
  isSanitizeInProgress,
  parseSanitizeLog,
  SANITIZE_COMPLETED,
  SANITIZE_COMPLETED_DEALLOC,
  SANITIZE_FAILED,
  SANITIZE_IN_PROGRESS,
  SANITIZE_NEVER,
  type SanitizeLog,
} from './nvme-output.js';

/** Per-command bound for the sanitize command and log reads. */
const COMMAND_TIMEOUT_MS = 30_000;

export interface SanitizeOptions {
  run: RunNvme;
  pollIntervalMs: number;
}

const snapshot = (log: SanitizeLog): SanitizeLogSnapshot => ({
  status: log.status,
  globalErased: log.globalErased,
  sprog: log.sprog,
  scdw10: log.scdw10,
  at: Date.now(),
});

const describeLog = (log: SanitizeLog) =>
  `(${log.status}) ${log.statusText}${log.globalErased ? ' [global data erased]' : ''}`;

/** Writes one random block at a random LBA of every namespace; a namespace that refuses is noted, not fatal. */
async function writeCanaries(
  r: ResolvedController,
  ctx: CleanupContext,
): Promise<{ canaries: (SanitizeCanary & { data: Buffer })[]; problems: string[] }> {
  const canaries: (SanitizeCanary & { data: Buffer })[] = [];
  const problems: string[] = [];
  for (const ns of r.ctrl.namespaces) {
    ctx.signal.throwIfAborted();
    const blocks = Math.floor(ns.sizeBytes / ns.lbaSize);
    if (blocks < 1) continue;
    const offset = randomInt(0, Math.min(blocks, 2 ** 47)) * ns.lbaSize;
    const data = randomBytes(ns.lbaSize);
    try {
      await writeAt(nsDevPath(r, ns), offset, data);
      canaries.push({ target: ns.name, offset, length: ns.lbaSize, unchangedAfter: false, data });
    } catch (e) {
      problems.push(`no canary on ${ns.name}: ${(e as Error).message}`);
    }
  }
  return { canaries, problems };
}

export async function runSanitize(
  r: ResolvedController,
  action: 'sanitize-crypto' | 'sanitize-block',
  ctx: CleanupContext,
  options: SanitizeOptions,
): Promise<{ evidence: SanitizeEvidence; notes: string[] }> {
  const { run } = options;
  const readLog = async () =>
    parseSanitizeLog((await run(['sanitize-log', r.ctrlDev, '-o', 'json'], COMMAND_TIMEOUT_MS)).stdout);
  const step = (message: string, percent?: number) =>
    ctx.progress({
      phase: 'sanitizing',
      step: 'sanitize-log',
      message,
      ...(percent === undefined ? {} : { percent }),
    });
  const sanact = action === 'sanitize-crypto' ? 4 : 2;
  const notes: string[] = [];

  const before = await readLog();
  step(`before: ${describeLog(before)}`);
  let armed: SanitizeLog | null = null;
  let canaries: (SanitizeCanary & { data: Buffer })[] = [];
  let commandSent = false;
  if (before.status === SANITIZE_IN_PROGRESS) {
    step('a sanitize is already running: following it');
  } else {
    const written = await writeCanaries(r, ctx);
    canaries = written.canaries;
    notes.push(...written.problems);
    if (canaries.length > 0) {
      armed = await readLog();
      step(`armed with ${canaries.length} canary block(s): ${describeLog(armed)}`);
    }
    ctx.progress({
      phase: 'sanitizing',
      step: 'sanitize',
      percent: 0,
      message: `nvme sanitize -a ${sanact}`,
    });
    try {
      // Never -d (no-deallocate): with NDI set the controller would reject it, and we want deallocation anyway.
      await run(['sanitize', r.ctrlDev, '-a', String(sanact)], COMMAND_TIMEOUT_MS);
      commandSent = true;
    } catch (e) {
      if (!(e instanceof NvmeCommandError && e.status && isSanitizeInProgress(e.status))) throw e;
      // Someone started one between our log read and our command: follow it.
      step('a sanitize started meanwhile: following it');
    }
  }

  const after: SanitizeLogSnapshot[] = [];
  let polls = 0;
  let best = 0;
  for (;;) {
    const log = await readLog();
    polls++;
    const prev = after.at(-1);
    if (
      !prev ||
      prev.status !== log.status ||
      prev.globalErased !== log.globalErased ||
      prev.scdw10 !== log.scdw10
    ) {
      after.push(snapshot(log));
    }
    if (log.status === SANITIZE_COMPLETED || log.status === SANITIZE_COMPLETED_DEALLOC) {
      step(describeLog(log), 100);
      break;
    }
    if (log.status === SANITIZE_FAILED) {
      throw new CleanupFailedError(
        `${r.fn.address}: sanitize failed on ${r.ctrl.name}: (3) ${log.statusText}`,
        {
          sstat: String(log.status),
        },
      );
    }
    if (log.status === SANITIZE_NEVER) {
      throw new CleanupFailedError(
        `${r.fn.address}: the sanitize log of ${r.ctrl.name} says it was never sanitized after the sanitize command: nothing was erased`,
      );
    }
    if (log.status !== SANITIZE_IN_PROGRESS) {
      throw new CleanupFailedError(
        `${r.fn.address}: unknown sanitize status (${log.status}) ${log.statusText}`,
      );
    }
    best = Math.max(best, Math.min(99.99, (log.sprog / 65536) * 100));
    ctx.progress({ phase: 'sanitizing', step: 'sanitize-log', percent: Math.round(best * 100) / 100 });
    await sleep(options.pollIntervalMs, undefined, { signal: ctx.signal });
  }

  // The media, not the log: did the blocks we wrote survive?
  const checked: SanitizeCanary[] = [];
  for (const c of canaries) {
    const ns = r.ctrl.namespaces.find((n) => n.name === c.target)!;
    const now = await readAt(nsDevPath(r, ns), c.offset, c.length);
    checked.push({
      target: c.target,
      offset: c.offset,
      length: c.length,
      unchangedAfter: now.equals(c.data),
    });
  }
  return {
    evidence: {
      controller: r.ctrl.name,
      sanact,
      before: snapshot(before),
      armed: armed ? snapshot(armed) : null,
      commandSent,
      after,
      polls,
      canaries: checked,
    },
    notes,
  };
}
