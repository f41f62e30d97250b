/**
 * The real CommandRunner: spawns host tools (nvme-cli, shred) with argument
 * arrays only — never through a shell, so nothing a caller passes can be
 * interpreted as shell syntax.
 *
 * Why a process group: nvme-cli wrappers, shred and test scripts may fork
 * children. Killing only the direct child leaves a grandchild holding the
 * device (or the stdout pipe, which would keep us waiting forever). Each child
 * is therefore started as the leader of its own process group (`detached`)
 * and a timeout or abort signals the whole group: SIGTERM first, SIGKILL after
 * a grace period.
 */
import { spawn } from 'node:child_process';
import type { CommandResult, CommandRunner, RunOptions } from './command-runner.js';

export interface ExecRunnerOptions {
  /** Time between SIGTERM and SIGKILL for the process group. Default 2000 ms. */
  killGraceMs?: number;
  /**
   * Cap on the bytes kept of each of stdout and stderr. The tail is kept (the
   * end of the output carries the error status and the final progress line);
   * streaming callbacks still see everything. Default 4 MiB.
   */
  maxOutputBytes?: number;
}

/** An Error from a program that could not be started, with the errno name in `code`. */
export interface SpawnError extends Error {
  code: string;
}

/** Keeps at most `cap` characters of the most recent output. */
class TailBuffer {
  private chunks: string[] = [];
  private length = 0;
  private truncated = false;

  constructor(private readonly cap: number) {}

  push(chunk: string): void {
    this.chunks.push(chunk);
    this.length += chunk.length;
    if (this.length > this.cap * 2) this.compact();
  }

  private compact(): void {
    const all = this.chunks.join('');
    if (all.length > this.cap) {
      this.chunks = [all.slice(all.length - this.cap)];
      this.length = this.cap;
      this.truncated = true;
    } else {
      this.chunks = [all];
      this.length = all.length;
    }
  }

  toString(): string {
    this.compact();
    const text = this.chunks[0] ?? '';
    return this.truncated ? `[...truncated]\n${text}` : text;
  }
}

export class ExecRunner implements CommandRunner {
  private readonly killGraceMs: number;
  private readonly maxOutputBytes: number;

  constructor(options: ExecRunnerOptions = {}) {
    this.killGraceMs = options.killGraceMs ?? 2000;
    this.maxOutputBytes = options.maxOutputBytes ?? 4 * 1024 * 1024;
  }

  run(file: string, args: readonly string[], options: RunOptions = {}): Promise<CommandResult> {
    const { timeoutMs, signal, onStdout, onStderr } = options;
    return new Promise<CommandResult>((resolve, reject) => {
      if (signal?.aborted) {
        // Never start a destructive tool for a job that is already cancelled.
        resolve({ code: null, signal: null, stdout: '', stderr: '', timedOut: false, aborted: true });
        return;
      }
      const child = spawn(file, [...args], {
        shell: false,
        detached: true,
        stdio: ['ignore', 'pipe', 'pipe'],
        // LC_ALL=C last so a caller cannot override it: nvme-cli formats
        // capacities and shred its progress with the locale's separators.
        env: { ...process.env, ...options.env, LC_ALL: 'C' },
      });
      const stdout = new TailBuffer(this.maxOutputBytes);
      const stderr = new TailBuffer(this.maxOutputBytes);
      let timedOut = false;
      let aborted = false;
      // 'close' (all pipes shut), not 'exit': a grandchild still holding the
      // pipe is still running and must still be reachable by the timeout.
      let closed = false;
      let spawnFailed = false;
      let timer: NodeJS.Timeout | undefined;
      let killTimer: NodeJS.Timeout | undefined;

      const signalGroup = (sig: NodeJS.Signals): void => {
        if (child.pid === undefined) return;
        try {
          process.kill(-child.pid, sig);
        } catch {
          // ESRCH: the group is already gone.
        }
      };
      const terminate = (): void => {
        signalGroup('SIGTERM');
        // The group may outlive the leader (a grandchild ignoring SIGTERM), so
        // the SIGKILL goes out after the grace period even if the leader exited.
        killTimer ??= setTimeout(() => signalGroup('SIGKILL'), this.killGraceMs);
        killTimer.unref?.();
      };
      const onAbort = (): void => {
        if (closed) return;
        aborted = true;
        terminate();
      };

      child.stdout.setEncoding('utf8');
      child.stderr.setEncoding('utf8');
      child.stdout.on('data', (chunk: string) => {
        stdout.push(chunk);
        onStdout?.(chunk);
      });
      child.stderr.on('data', (chunk: string) => {
        stderr.push(chunk);
        onStderr?.(chunk);
      });

      child.on('error', (err: NodeJS.ErrnoException) => {
        // 'error' without a pid means the program never started.
        if (child.pid === undefined && !spawnFailed) {
          spawnFailed = true;
          cleanupListeners();
          const e = new Error(`cannot run '${file}': ${err.code ?? err.message}`, {
            cause: err,
          }) as SpawnError;
          e.code = err.code ?? 'UNKNOWN';
          reject(e);
        }
      });
      // 'close' waits for the stdio pipes, so all output has been collected.
      child.on('close', (code, sig) => {
        closed = true;
        if (spawnFailed) return;
        cleanupListeners();
        if (timedOut || aborted) {
          // Make sure stragglers in the group die even though the pipes closed.
          signalGroup('SIGKILL');
        }
        resolve({
          code,
          signal: sig,
          stdout: stdout.toString(),
          stderr: stderr.toString(),
          timedOut,
          aborted,
        });
      });

      function cleanupListeners(): void {
        if (timer) clearTimeout(timer);
        if (killTimer) clearTimeout(killTimer);
        signal?.removeEventListener('abort', onAbort);
      }

      if (timeoutMs !== undefined && timeoutMs > 0) {
        timer = setTimeout(() => {
          if (closed) return;
          timedOut = true;
          terminate();
        }, timeoutMs);
      }
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }
}
