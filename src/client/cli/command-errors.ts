/**
 * How a CLI command fails: the exit codes main.ts defines, the errors a command
 * throws when it ran but did not get what it should or was interrupted, and the
 * one-line error report (`berth: <CODE>: <message> [<REASON>]`).
 */
import { isBerthError } from '../../errors.js';
import { BerthClientError } from '../sdk.js';
import { UsageError } from '../usage-error.js';

/** Exit codes, as main.ts defines them (kept here so commands need not import main.ts, which runs the CLI). */
export const EXIT_CODE = { ok: 0, failed: 1, usage: 2, unavailable: 3 } as const;

/**
 * A command that ran but did not get what it should (a failed cleanup, a demo
 * step): exit 1 with the message already worded for the operator.
 */
export class CommandFailed extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'CommandFailed';
  }
}

/** A command stopped by a signal before it finished: one line, exit 130 (SIGINT) or 143 (SIGTERM). */
export class CommandInterrupted extends Error {
  constructor(
    message: string,
    readonly exitCode: number,
  ) {
    super(message);
    this.name = 'CommandInterrupted';
  }
}

/** A one-line message ends without a stop when something follows it (no `….;`). */
const openEnded = (message: string) => message.replace(/[\s.;:,]+$/, '');

/** grpc-js's connection messages, on one line and without their empty notes. */
export function oneLine(message: string): string {
  return message
    .replace(/\s*Resolution note:\s*$/, '')
    .replace(/\s*\n\s*/g, ' ')
    .trim();
}

/**
 * The error line: `berth: <CODE>: <message> [<REASON>]` (the reason when it
 * says more than the code), field violations appended when the message lacks
 * them, then a hint on what to do when there is one.
 */
export function errorLine(err: BerthClientError, hint?: string): string {
  const extra = err.fieldViolations
    .map((v) => `${v.field}: ${v.description}`)
    .filter((v) => !err.message.includes(v));
  const message = oneLine(err.message);
  const reason = err.reason && err.reason !== err.codeName ? ` [${err.reason}]` : '';
  const tail = `${reason}${extra.length ? ` (${extra.join('; ')})` : ''}${hint ? `; ${hint}` : ''}`;
  return `berth: ${err.codeName}: ${tail ? openEnded(message) : message}${tail}`;
}

/** Reports an error on stderr as one line and returns the exit code for it. */
export function reportError(err: unknown, hint?: string): number {
  if (err instanceof BerthClientError) {
    console.error(errorLine(err, hint));
    return err.codeName === 'UNAVAILABLE' || err.codeName === 'DEADLINE_EXCEEDED'
      ? EXIT_CODE.unavailable
      : EXIT_CODE.failed;
  }
  if (isBerthError(err)) {
    const reason = err.reason ? ` [${err.reason}]` : '';
    const tail = `${reason}${hint ? `; ${hint}` : ''}`;
    console.error(`berth: ${err.code}: ${tail ? openEnded(err.message) : err.message}${tail}`);
    return err.code === 'UNAVAILABLE' ? EXIT_CODE.unavailable : EXIT_CODE.failed;
  }
  if (err instanceof UsageError) {
    console.error(`berth: usage: ${err.message}`);
    return EXIT_CODE.usage;
  }
  if (err instanceof CommandInterrupted) {
    console.error(`berth: ${err.message}`);
    return err.exitCode;
  }
  const msg = (err as Error)?.message ?? String(err);
  console.error(`berth: ${msg.split('\n')[0]}`);
  return EXIT_CODE.failed;
}
