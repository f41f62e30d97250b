/** How drivers run host tools: execFile semantics, argument arrays only, never a shell. */

export interface RunOptions {
  /** Kill the process (and its group) after this many milliseconds. */
  timeoutMs?: number;
  /** Kill the process (and its group) when this fires. */
  signal?: AbortSignal;
  /** Extra environment; LC_ALL=C is always set. */
  env?: Record<string, string>;
  /** Called with each chunk of stderr as it arrives (shred --verbose progress). */
  onStderr?: (chunk: string) => void;
  onStdout?: (chunk: string) => void;
}

export interface CommandResult {
  /** Exit code, null when killed by a signal. */
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  /** True when the timeout or the abort signal ended the process. */
  timedOut: boolean;
  aborted: boolean;
}

export interface CommandRunner {
  /**
   * Runs `file` with `args`. Resolves with the result whatever the exit code;
   * rejects only when the program cannot be started (ENOENT, EACCES), with an
   * Error whose `code` is the errno name.
   */
  run(file: string, args: readonly string[], options?: RunOptions): Promise<CommandResult>;
}
