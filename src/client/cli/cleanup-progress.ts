/**
 * Following one device's cleanup from the scheduler's WatchCleanup stream, as
 * `berth device clean --wait` and the demo show it: a live progress bar
 * (phase, percent, bytes, ETA) when stdout is a terminal, plain
 * `phase=… percent=… bytes=…` lines when it is not (logs, CI, pipes), or JSON
 * lines with -o json. The outcome is the last event's phase; anything but
 * `succeeded` is a failure the caller reports.
 */
import { Bar, Presets } from 'cli-progress';
import { type CleanupEvent, CleanupPhase } from '../../gen/berth/agent/v1/agent.js';
import type { DeviceRef } from '../../gen/berth/scheduler/v1/device_service.js';
import type { SchedulerClient } from '../sdk.js';
import { cleanupEventView, formatBytes } from './client-common.js';

export type ProgressStyle = 'bar' | 'lines' | 'json';

export interface CleanupOutcome {
  succeeded: boolean;
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
  options: { write?: (line: string) => void } = {},
): Promise<CleanupOutcome> {
  const write = options.write ?? ((line: string) => process.stdout.write(`${line}\n`));
  let bar: Bar | undefined;
  let last: CleanupEvent | undefined;
  let events = 0;
  let lastLine = '';
  try {
    for await (const m of client.watchCleanup({ device, jobId, fromSequence: 0 })) {
      const e = m.event;
      if (!e) continue;
      last = e;
      events++;
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
        };
        if (!bar) {
          bar = new Bar(
            {
              format: '{phase} |{bar}| {percentage}% | {bytes} | ETA {eta_formatted}',
              stream: process.stdout,
              hideCursor: true,
              clearOnComplete: false,
              etaBuffer: 20,
            },
            Presets.shades_classic,
          );
          bar.start(100, Math.round(e.percent), payload);
        } else {
          bar.update(Math.round(e.percent), payload);
        }
      }
      if (TERMINAL.has(e.phase)) break;
    }
  } finally {
    bar?.stop();
  }
  const phase = last?.phase;
  if (phase === CleanupPhase.CLEANUP_PHASE_SUCCEEDED) {
    return { succeeded: true, last, reason: '', events };
  }
  let reason: string;
  if (!last) reason = 'the scheduler reported no cleanup for this device';
  else if (phase === CleanupPhase.CLEANUP_PHASE_FAILED)
    reason = `cleanup failed: ${last.message || 'no reason given'}`;
  else if (phase === CleanupPhase.CLEANUP_PHASE_INTERRUPTED)
    reason = `cleanup interrupted: ${last.message || 'the agent stopped while it ran'}`;
  else
    reason = `the progress stream ended before the cleanup finished (last phase ${cleanupEventView(last).phase})`;
  return { succeeded: false, last, reason, events };
}
