/**
 * nvme-cli as the NVMe kit runs it: every command through the host context's
 * runner, a failure thrown with the NVMe status text and hex (callers never
 * look at exit codes), a timeout per command, a cleanup's abort signal applied.
 */
import type { CommandResult, RunOptions } from '../command-runner.js';
import type { CleanupContext, HostContext } from '../driver.js';
import type { RunNvme } from './controller.js';
import { NvmeCommandError } from './errors.js';
import { type IdCtrl, parseIdCtrl, parseNvmeVersion, toolFailure } from './nvme-output.js';

/** Per-command bound for read-only commands (id-ctrl, version) run outside a cleanup. */
export const IDENTIFY_TIMEOUT_MS = 30_000;

type ToolOptions = Pick<RunOptions, 'signal' | 'timeoutMs' | 'onStderr' | 'onStdout'>;

/**
 * Runs a tool and returns its result when it exited 0. Anything else throws
 * NvmeCommandError: a program that cannot start, a timeout or abort (an abort
 * rethrows the signal's reason), and a non-zero exit with the NVMe status text
 * and hex from stderr.
 */
export async function runTool(
  ctx: HostContext,
  file: string,
  args: readonly string[],
  options: ToolOptions,
  label: string,
): Promise<CommandResult> {
  const what = `${label} ${args.slice(0, 2).join(' ')}`;
  let r: CommandResult;
  try {
    r = await ctx.runner.run(file, args, options);
  } catch (e) {
    const code = (e as { code?: string }).code ?? (e as Error).message;
    throw new NvmeCommandError(`${what}: '${file}' cannot be run (${code})`, null);
  }
  if (r.aborted) options.signal?.throwIfAborted();
  if (r.aborted || r.timedOut) {
    throw new NvmeCommandError(`${what}: did not finish within ${options.timeoutMs} ms and was killed`, null);
  }
  if (r.code !== 0) {
    const { status, detail } = toolFailure(r);
    throw new NvmeCommandError(`${what} failed: ${detail}`, status);
  }
  return r;
}

/** nvme-cli at the path a driver's section names (`nvme_cli`). */
export class NvmeTool {
  /** nvme-cli's version as `checkHost` found it. */
  version: string | null = null;

  constructor(readonly file: string) {}

  /** Runs nvme-cli (runTool): resolves on exit 0, throws NvmeCommandError otherwise. */
  run(ctx: HostContext, args: readonly string[], options: ToolOptions = {}): Promise<CommandResult> {
    return runTool(ctx, this.file, args, options, 'nvme');
  }

  /** nvme-cli bound to a cleanup's abort signal, for the cleanup steps. */
  runner(ctx: CleanupContext): RunNvme {
    return (args, timeoutMs = IDENTIFY_TIMEOUT_MS) => this.run(ctx, args, { signal: ctx.signal, timeoutMs });
  }

  /** `nvme id-ctrl <dev> -o json`, parsed and normalised. */
  async identify(ctx: HostContext, ctrlDev: string, signal?: AbortSignal): Promise<IdCtrl> {
    const r = await this.run(ctx, ['id-ctrl', ctrlDev, '-o', 'json'], {
      timeoutMs: IDENTIFY_TIMEOUT_MS,
      ...(signal ? { signal } : {}),
    });
    return parseIdCtrl(r.stdout);
  }

  /** Checks that nvme-cli runs and reports a version; the agent refuses to start otherwise. */
  async checkHost(ctx: HostContext): Promise<void> {
    let result: CommandResult;
    try {
      result = await ctx.runner.run(this.file, ['version'], { timeoutMs: IDENTIFY_TIMEOUT_MS });
    } catch (e) {
      const code = (e as { code?: string }).code ?? (e as Error).message;
      throw new Error(
        `nvme-cli not usable: '${this.file}' cannot be run (${code}); install nvme-cli or set nvme.nvme_cli`,
        { cause: e },
      );
    }
    const version = result.code === 0 ? parseNvmeVersion(result.stdout) : null;
    if (version === null) {
      const why = result.timedOut
        ? `'version' did not finish within ${IDENTIFY_TIMEOUT_MS} ms`
        : `'version' exited ${result.code ?? result.signal} and printed ${JSON.stringify((result.stdout + result.stderr).slice(0, 200))}`;
      throw new Error(`nvme-cli not usable: '${this.file}' ${why}`);
    }
    this.version = version;
    ctx.logger.info({ nvmeCli: this.file, version }, 'nvme-cli found');
  }
}
