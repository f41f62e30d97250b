/**
 * Ctrl-C (SIGINT) and SIGTERM for commands that draw on the terminal or leave
 * something to undo (`device clean --wait`, `device watch-cleanup`, the demo).
 *
 * The first signal aborts the command's AbortSignal: the command unwinds
 * through its `finally` blocks — a progress bar stops, which shows the cursor
 * again and turns line wrap back on; the demo undoes what it injected — and
 * then says what it left running. A second signal does not wait: it restores
 * the terminal itself and exits at once.
 *
 * A progress bar hides the cursor (`ESC[?25l`) and turns line wrap off
 * (`ESC[?7l`); whatever ends the process, every bar that is still drawing is
 * stopped first (`registerBar`), and on a terminal the two settings are put
 * back (`ESC[?25h`, `ESC[?7h`).
 */

/** Exit codes of a command ended by a signal, as shells report them. */
export const SIGNAL_EXIT: Record<'SIGINT' | 'SIGTERM', number> = { SIGINT: 130, SIGTERM: 143 };

interface Stoppable {
  stop(): void;
}

const bars = new Set<Stoppable>();

/** Tracks a progress bar while it draws; returns what unregisters it. */
export function registerBar(bar: Stoppable): () => void {
  bars.add(bar);
  return () => bars.delete(bar);
}

/** Stops every bar still drawing and puts the cursor and line wrap back (on a terminal). */
export function restoreTerminal(): void {
  for (const b of [...bars]) {
    try {
      b.stop();
    } catch {
      // a bar that cannot stop must not keep the terminal broken: the escapes below still run
    }
  }
  bars.clear();
  if (process.stdout.isTTY) process.stdout.write('\u001b[?25h\u001b[?7h');
}

process.once('exit', () => {
  if (bars.size > 0) restoreTerminal();
});

export interface Interruption {
  /** Aborted at the first SIGINT or SIGTERM. */
  readonly signal: AbortSignal;
  /** Which signal came, once one did (read it when needed: it changes). */
  readonly received: 'SIGINT' | 'SIGTERM' | undefined;
}

/**
 * Runs `fn` with SIGINT and SIGTERM turned into an AbortSignal (see the
 * module comment). `onSignal` hears the first one (e.g. to say "undoing…").
 * The handlers are removed when `fn` settles.
 */
export async function interruptible<T>(
  fn: (interruption: Interruption) => Promise<T>,
  onSignal?: (signal: 'SIGINT' | 'SIGTERM') => void,
): Promise<T> {
  const abort = new AbortController();
  const state: { received: 'SIGINT' | 'SIGTERM' | undefined } = { received: undefined };
  const handler = (sig: 'SIGINT' | 'SIGTERM') => {
    if (state.received) {
      // The second signal: the user does not want to wait for the unwinding.
      restoreTerminal();
      process.stderr.write('berth: interrupted again: exiting now\n');
      process.exit(SIGNAL_EXIT[sig]);
    }
    state.received = sig;
    restoreTerminal();
    onSignal?.(sig);
    abort.abort(new Error(`interrupted by ${sig}`));
  };
  const onInt = () => handler('SIGINT');
  const onTerm = () => handler('SIGTERM');
  process.on('SIGINT', onInt);
  process.on('SIGTERM', onTerm);
  try {
    return await fn({
      signal: abort.signal,
      get received() {
        return state.received;
      },
    });
  } finally {
    process.removeListener('SIGINT', onInt);
    process.removeListener('SIGTERM', onTerm);
  }
}
