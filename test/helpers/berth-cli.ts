/**
 * Runs the real `bin/berth` as a child process for the CLI's end-to-end tests,
 * with BERTH_CONFIG pointed at a file of the test's own (so a developer's real
 * client configuration is never read or written) and BERTH_ENDPOINT/BERTH_TOKEN
 * removed from the environment.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { join } from 'node:path';

export const BERTH = join(process.cwd(), 'bin/berth');

export interface Result {
  code: number;
  stdout: string;
  stderr: string;
}

export function cliEnv(configPath: string, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, BERTH_CONFIG: configPath, ...extra };
  if (!('BERTH_ENDPOINT' in extra)) delete env.BERTH_ENDPOINT;
  if (!('BERTH_TOKEN' in extra)) delete env.BERTH_TOKEN;
  return env;
}

/** Runs `bin/berth args…` to completion; never rejects (the exit code is the result). */
export function berth(args: string[], env: NodeJS.ProcessEnv, timeoutMs = 60_000): Promise<Result> {
  return new Promise((resolve) => {
    execFile(BERTH, args, { env, timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
      const code = err
        ? typeof (err as { code?: unknown }).code === 'number'
          ? (err as { code: number }).code
          : -1
        : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

/** A long-running `bin/berth` (watch, up) whose output the test reads while it runs. */
export interface Running {
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  /** Resolves when stdout matches, rejects on exit or timeout first. */
  waitFor: (pattern: RegExp, timeoutMs?: number) => Promise<void>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/**
 * Starts `bin/berth args…` (or `options.bin`: another berth, e.g. an installed
 * one; `options.detached`: in its own process group, so its children can be
 * ended with it).
 */
export function start(
  args: string[],
  env: NodeJS.ProcessEnv,
  options: { bin?: string; detached?: boolean } = {},
): Running {
  const child = spawn(options.bin ?? BERTH, args, {
    env,
    detached: options.detached ?? false,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout!.setEncoding('utf8').on('data', (d: string) => {
    out += d;
  });
  child.stderr!.setEncoding('utf8').on('data', (d: string) => {
    err += d;
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  const waitFor = (pattern: RegExp, timeoutMs = 30_000) =>
    new Promise<void>((resolve, reject) => {
      const timer = setInterval(() => {
        if (pattern.test(out)) done(resolve);
      }, 50);
      const deadline = setTimeout(
        () =>
          done(() => reject(new Error(`timed out waiting for ${pattern}; stdout:\n${out}\nstderr:\n${err}`))),
        timeoutMs,
      );
      const onExit = () =>
        done(() =>
          pattern.test(out)
            ? resolve()
            : reject(new Error(`exited before ${pattern}; stdout:\n${out}\nstderr:\n${err}`)),
        );
      void exited.then(onExit);
      function done(f: () => void) {
        clearInterval(timer);
        clearTimeout(deadline);
        f();
      }
    });
  return { child, stdout: () => out, stderr: () => err, waitFor, exited };
}

/** Stops a started process if it still runs (SIGKILL after a grace period). */
export async function stop(r: Running | undefined): Promise<void> {
  if (!r || r.child.exitCode !== null || r.child.signalCode !== null) return;
  r.child.kill('SIGTERM');
  const t = setTimeout(() => r.child.kill('SIGKILL'), 10_000);
  await r.exited;
  clearTimeout(t);
}

export const parseJson = <T>(r: Result): T => {
  try {
    return JSON.parse(r.stdout) as T;
  } catch {
    throw new Error(`not JSON (exit ${r.code}):\n${r.stdout}\nstderr:\n${r.stderr}`);
  }
};
