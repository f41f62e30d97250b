/**
 * Following one device's cleanup from the scheduler's WatchCleanup stream, as
 * `berth device clean --wait` and the demo show it: a live progress bar
 * (phase, percent, bytes, time left) when stdout is a terminal, plain
 * `phase=… percent=… bytes=…` lines when it is not (logs, CI, pipes), or JSON
 * lines with -o json. The outcome is the last event's phase; anything but
 * `succeeded` is a failure the caller reports.
 *
 * A follower is never silent for long: when no event has come for
 * WAIT_NOTICE_MS it says what it is waiting for (the agent is not connected,
 * the cleanup is not dispatched yet, the agent reports no progress), asked of
 * the scheduler, and says it again whenever that changes.
 */
import { Bar, Presets } from 'cli-progress';
import { type CleanupEvent, CleanupPhase } from '../../gen/berth/agent/v1/agent.js';
import { DeviceState, deviceStateToJSON } from '../../gen/berth/scheduler/v1/device.js';
import type { DeviceRef } from '../../gen/berth/scheduler/v1/device_service.js';
import type { SchedulerClient } from '../sdk.js';
import { ago, formatBytes, shortEnum } from './format.js';
import { registerBar } from './interrupt.js';
import { cleanupEventView } from './views.js';

export type ProgressStyle = 'bar' | 'lines' | 'json';

/** After this long without an event, the follower says what it waits for. */
export const WAIT_NOTICE_MS = 1_500;

/** What a cleanup follower is waiting for, from the device's and its host's state. */
export async function explainWait(
  client: SchedulerClient,
  device: DeviceRef,
  idleMs: number,
): Promise<string> {
  const d = (await client.devices.getDevice({ device })).device!;
  const name = `${d.host}/${d.address}`;
  const state = shortEnum(deviceStateToJSON(d.deviceState), 'DEVICE_STATE_');
  const host = (await client.hosts.getHost({ name: d.host })).host;
  if (!host?.connected) {
    return `waiting for the agent of ${d.host}: it is not connected (last seen ${ago(host?.lastSeen)}); ${name} stays ${state} and reserved until it is back`;
  }
  if (d.deviceState === DeviceState.DEVICE_STATE_PENDING_CLEANING) {
    return `waiting for the agent of ${d.host} to start cleaning ${name} (${state})`;
  }
  if (d.deviceState === DeviceState.DEVICE_STATE_CLEANING) {
    return `waiting for progress: the agent of ${d.host} reported nothing on ${name} for ${Math.round(idleMs / 1000)}s`;
  }
  return `waiting for the cleanup of ${name} (${state})`;
}

/** `3m04s`, `42s`: the time left at the current rate, or `--` before there is a rate. */
export function timeLeft(percent: number, elapsedMs: number): string {
  if (!(percent > 0 && percent < 100) || elapsedMs <= 0) return percent >= 100 ? '0s' : '--';
  const s = Math.round(((elapsedMs / percent) * (100 - percent)) / 1000);
  return s >= 60 ? `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s` : `${s}s`;
}

export interface CleanupOutcome {
  succeeded: boolean;
  /** The follower was stopped (Ctrl-C) before the cleanup ended; the cleanup goes on. */
  interrupted: boolean;
  /** The last event (terminal when the stream ended normally). */
  last: CleanupEvent | undefined;
  /** Why it did not succeed, worded for the operator. */
  reason: string;
  events: number;
}

const TERMINAL = new Set([
  CleanupPhase.CLEANUP_PHASE_SUCCEEDED,
  CleanupPhase.CLEANUP_PHASE_FAILED,
  CleanupPhase.CLEANUP_PHASE_INTERRUPTED,
]);

/** One plain progress line: stable key=value pairs, easy to grep. */
export function progressLine(e: CleanupEvent): string {
  const v = cleanupEventView(e);
  const parts = [
    `phase=${v.phase}`,
    `percent=${Math.round(v.percent)}`,
    `bytes=${v.bytes_done}/${v.bytes_total}`,
    `action=${v.action}`,
  ];
  if (v.step) parts.push(`step=${v.step}`);
  if (v.message) parts.push(`message=${JSON.stringify(v.message)}`);
  return parts.join(' ');
}

/** The style for stdout: a bar only on a terminal. */
export function defaultProgressStyle(json: boolean): ProgressStyle {
  if (json) return 'json';
  return process.stdout.isTTY ? 'bar' : 'lines';
}

/**
 * Streams the cleanup of `device` (a specific job when `jobId` is given) until
 * a terminal phase, rendering each event. The stream ends by itself after the
 * terminal event; a caller that wants to stop earlier (Ctrl-C) exits the process.
 */
export async function followCleanup(
  client: SchedulerClient,
  device: DeviceRef,
  jobId: string,
  style: ProgressStyle,
  options: {
    write?: (line: string) => void;
    waiting?: (line: string) => void;
    /** Stops following (the iteration ends; the outcome says `interrupted`). */
    signal?: AbortSignal;
  } = {},
): Promise<CleanupOutcome> {
  const write = options.write ?? ((line: string) => process.stdout.write(`${line}\n`));
  const waiting = options.waiting ?? ((line: string) => process.stderr.write(`berth: ${line}\n`));
  let bar: Bar | undefined;
  let last: CleanupEvent | undefined;
  let events = 0;
  let lastLine = '';
  const startedAt = Date.now();
  let lastEventAt = startedAt;
  let said = '';
  let asking = false;
  const watchdog = setInterval(() => {
    const idle = Date.now() - lastEventAt;
    if (idle < WAIT_NOTICE_MS || asking || (last && TERMINAL.has(last.phase))) return;
    asking = true;
    void explainWait(client, device, idle)
      .then(
        (why) => {
          // Times in the wording change every second; say it again only when the situation does.
          const situation = why.replace(/\d+[smhd]\b/g, '#');
          if (situation !== said && Date.now() - lastEventAt >= WAIT_NOTICE_MS) {
            said = situation;
            waiting(why);
          }
        },
        () => undefined,
      )
      .finally(() => {
        asking = false;
      });
  }, 250);
  let unregister: (() => void) | undefined;
  // A broken stream (the scheduler restarted) is opened again after the last event shown.
  const stream = client.watchCleanupResuming(
    { device, jobId, fromSequence: 0 },
    {
      ...(options.signal ? { signal: options.signal } : {}),
      onRetry: ({ error, delayMs, attempt }) => {
        if (attempt === 1 || attempt % 10 === 0) {
          waiting(
            `lost the scheduler (${error.codeName}: ${error.message}); following again in ${(delayMs / 1000).toFixed(1)} s`,
          );
        }
      },
      onResumed: ({ attempts }) => waiting(`following the cleanup again (after ${attempts} attempts)`),
    },
  );
  try {
    for await (const m of stream) {
      const e = m.event;
      if (!e) continue;
      last = e;
      events++;
      lastEventAt = Date.now();
      said = '';
      if (style === 'json') {
        write(JSON.stringify(cleanupEventView(e, m.deviceUuid)));
      } else if (style === 'lines') {
        const line = progressLine(e);
        if (line !== lastLine) write(line);
        lastLine = line;
      } else {
        const phase = cleanupEventView(e).phase;
        const payload = {
          phase: phase.padEnd(15),
          bytes: e.bytesTotal > 0 ? `${formatBytes(e.bytesDone)}/${formatBytes(e.bytesTotal)}` : '-',
          left: timeLeft(e.percent, Date.now() - startedAt),
        };
        if (!bar) {
          bar = new Bar(
            {
              // Our own estimate: cli-progress's ETA shows "NFs" until the percentage moves.
              format: '{phase} |{bar}| {percentage}% | {bytes} | ETA {left}',
              stream: process.stdout,
              hideCursor: true,
              clearOnComplete: false,
              etaBuffer: 20,
            },
            Presets.shades_classic,
          );
          bar.start(100, Math.round(e.percent), payload);
          unregister = registerBar(bar);
        } else {
          bar.update(Math.round(e.percent), payload);
        }
      }
      if (TERMINAL.has(e.phase)) break;
    }
  } finally {
    clearInterval(watchdog);
    bar?.stop();
    unregister?.();
  }
  const phase = last?.phase;
  if (phase === CleanupPhase.CLEANUP_PHASE_SUCCEEDED) {
    return { succeeded: true, interrupted: false, last, reason: '', events };
  }
  const interrupted = options.signal?.aborted === true;
  let reason: string;
  if (interrupted) reason = 'stopped following; the cleanup goes on on the host';
  else if (!last) reason = 'the scheduler reported no cleanup for this device';
  else if (phase === CleanupPhase.CLEANUP_PHASE_FAILED)
    reason = `cleanup failed: ${last.message || 'no reason given'}`;
  else if (phase === CleanupPhase.CLEANUP_PHASE_INTERRUPTED)
    reason = `cleanup interrupted: ${last.message || 'the agent stopped while it ran'}`;
  else
    reason = `the progress stream ended before the cleanup finished (last phase ${cleanupEventView(last).phase})`;
  return { succeeded: false, interrupted, last, reason, events };
}
