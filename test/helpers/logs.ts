/**
 * A logger whose JSON lines a test can read and wait for: the servers'
 * own account of what they did (a refused registration, a broken link) is
 * the signal a negative check waits on before asserting that nothing else
 * happened.
 */
import { type Logger, pino } from 'pino';
import { waitFor } from './wait.js';

/** One parsed pino line: `msg`, `level` (30 info, 40 warn, 50 error) and the bindings. */
export type LogLine = { msg: string; level: number } & Record<string, unknown>;

export interface CapturedLogs {
  logger: Logger;
  /** Every line so far, parsed. */
  readonly lines: LogLine[];
  /** Lines for which `match` holds. */
  matching(match: (l: LogLine) => boolean): LogLine[];
  /** Waits until `count` lines (default 1) match; returns them. */
  waitFor(
    match: (l: LogLine) => boolean,
    options?: { count?: number; timeoutMs?: number; what?: string },
  ): Promise<LogLine[]>;
}

/** A pino logger at `level` (default debug) that keeps its lines. */
export function captureLogs(level = 'debug'): CapturedLogs {
  const lines: LogLine[] = [];
  const logger = pino({ level }, { write: (s: string) => void lines.push(JSON.parse(s) as LogLine) });
  const matching = (match: (l: LogLine) => boolean) => lines.filter(match);
  return {
    logger,
    lines,
    matching,
    async waitFor(match, { count = 1, timeoutMs = 20_000, what = 'a log line' } = {}) {
      await waitFor(() => matching(match).length >= count, timeoutMs, `${count} × ${what}`);
      return matching(match);
    },
  };
}
