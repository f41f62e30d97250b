/**
 * A command on a pseudo-terminal (util-linux `script`), as an operator runs
 * it: its stdout is a TTY (progress bars are drawn), and Ctrl-C typed into
 * the terminal (`ctrlC()`) reaches it as SIGINT through the line discipline.
 *
 * The command runs under a small shell that, after it ends, prints
 * `[pty-exit CODE]` and waits for a line on the terminal: `script` may drop
 * the last bytes a process wrote when its child exits at once, so the test
 * reads everything up to that marker and only then lets the shell end.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { SCRIPT_BIN } from './prerequisites.js';

const quote = (s: string) => `'${s.replaceAll("'", "'\\''")}'`;

// The shell's own SIGINT runs `:` (a handler, not SIG_IGN, so the command does not inherit it).
const WRAPPER = 'trap : INT; "$@"; code=$?; printf "\\n[pty-exit %s]\\n" "$code"; read _';

export interface Pty {
  child: ChildProcess;
  /** Everything the terminal showed so far (escape sequences included). */
  output(): string;
  /** Types Ctrl-C. */
  ctrlC(): void;
  /** Resolves when the output matches. */
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<void>;
  /** The command's exit code (once it printed the marker); then the terminal is closed. */
  result(timeoutMs?: number): Promise<number>;
  /** Pid of the process under the terminal whose command line contains `part`. */
  pidOf(part: string): number | undefined;
}

/** Direct children of `pid` (Linux /proc). */
function children(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8')
      .trim()
      .split(/\s+/)
      .filter(Boolean)
      .map(Number);
  } catch {
    return [];
  }
}

export function runInPty(argv: string[], env: NodeJS.ProcessEnv): Pty {
  const command = `exec sh -c ${quote(WRAPPER)} sh ${argv.map(quote).join(' ')}`;
  const child = spawn(SCRIPT_BIN, ['-qec', command, '/dev/null'], { env, stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.setEncoding('utf8').on('data', (d: string) => {
    out += d;
  });
  child.stderr!.setEncoding('utf8').on('data', (d: string) => {
    out += d;
  });
  child.stdin!.on('error', () => {});
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const waitFor = (pattern: RegExp, timeoutMs = 60_000) =>
    new Promise<void>((resolve, reject) => {
      const check = () => {
        if (pattern.test(out)) {
          cleanup();
          resolve();
        }
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`timed out waiting for ${pattern} on the terminal; it showed:\n${out}`));
      }, timeoutMs);
      const onExit = () => {
        cleanup();
        if (pattern.test(out)) resolve();
        else reject(new Error(`the terminal closed before ${pattern}; it showed:\n${out}`));
      };
      const cleanup = () => {
        clearTimeout(timer);
        child.stdout!.off('data', check);
        child.off('exit', onExit);
      };
      child.stdout!.on('data', check);
      child.once('exit', onExit);
      check();
    });
  return {
    child,
    output: () => out,
    ctrlC: () => child.stdin!.write('\u0003'),
    waitFor,
    async result(timeoutMs = 60_000) {
      await waitFor(/\[pty-exit \d+\]/, timeoutMs);
      const code = Number(/\[pty-exit (\d+)\]/.exec(out)![1]);
      child.stdin!.write('\n');
      await exited;
      return code;
    },
    pidOf(part: string) {
      const queue = child.pid ? [child.pid] : [];
      while (queue.length > 0) {
        const pid = queue.shift()!;
        try {
          const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
          if (pid !== child.pid && cmd.includes(part)) return pid;
        } catch {
          continue;
        }
        queue.push(...children(pid));
      }
      return undefined;
    },
  };
}

/**
 * Whether the terminal is left as a progress bar found it: after the last
 * "cursor hidden" (ESC[?25l) the cursor is shown again (ESC[?25h), and after
 * the last "line wrap off" (ESC[?7l) it is on again (ESC[?7h).
 */
export function terminalRestored(output: string): { cursor: boolean; wrap: boolean } {
  const after = (off: string, on: string) => {
    const i = output.lastIndexOf(off);
    return i < 0 || output.indexOf(on, i) > i;
  };
  return { cursor: after('\u001b[?25l', '\u001b[?25h'), wrap: after('\u001b[?7l', '\u001b[?7h') };
}
