/**
 * What every simulated command shares: its output buffers, the state file, and
 * nvme-cli 2.3's `parse_and_open()` — parse options, then open the device
 * positional, with the real tool's error text for each way that can fail.
 */
import { existsSync, readFileSync } from 'node:fs';
import { basename } from 'node:path';
import { type OptSpec, type ParsedArgs, parseArgs } from './args.js';
import { COMMAND_HELP } from './help-text.js';
import { settleSanitize } from './sanitize-engine.js';
import type { NvmeSimState, SimControllerState, SimFault, SimNamespaceState } from './state.js';
import { withStateLock } from './state.js';
import { statusLine } from './status.js';
import { controllerView, isAttached, snapshotOf } from './subsystem.js';

export interface CliResult {
  stdout: string;
  stderr: string;
  /** nvme-cli only ever exits 0 or 1. */
  code: 0 | 1;
  /** The `hang` fault: the caller must never exit (sleep until killed). */
  hang?: boolean;
}

export interface CliEnv {
  statePath: string | undefined;
  /** BERTH_NVME_SIM_FAST=1: the format confirmation pause lasts 100 ms instead of 10 s. */
  fast: boolean;
  now: () => number;
  env: NodeJS.ProcessEnv;
}

/** A resolved device argument: the controller, and the namespace if a block device was named. */
export interface Device {
  /** The argument as given; its basename is nvme-cli's `dev->name`. */
  path: string;
  name: string;
  ctrl: SimControllerState;
  ns?: SimNamespaceState;
}

export class Out {
  stdout = '';
  stderr = '';
  out(s: string): void {
    this.stdout += s;
  }
  err(s: string): void {
    this.stderr += s;
  }
  done(code: 0 | 1): CliResult {
    return { stdout: this.stdout, stderr: this.stderr, code };
  }
}

export function helpFor(cmd: string): string {
  return COMMAND_HELP[cmd] ?? '';
}

/** Parses options; on error returns the finished result (message, maybe help, exit 1). */
export function parseOrFail(
  o: Out,
  cmd: string,
  argv: string[],
  specs: OptSpec[],
): { args: ParsedArgs } | { result: CliResult } {
  const r = parseArgs(cmd, argv, specs);
  if (r.ok) return { args: r.args };
  o.err(r.message);
  if (r.help) o.err(helpFor(cmd));
  return { result: o.done(1) };
}

/**
 * Finds the controller / attached namespace whose devPath is `path`. A
 * namespace of a subsystem with several controllers is reached through the
 * first controller it is attached to (the kernel's multipath head picks a path).
 */
export function findDevice(state: NvmeSimState, path: string): Device | undefined {
  for (const own of state.controllers) {
    const ctrl = snapshotOf(state, own);
    if (ctrl.devPath === path) return { path, name: basename(path), ctrl };
    const ns = ctrl.namespaces.find((n) => isAttached(n, ctrl) && n.devPath === path);
    if (ns) return { path, name: basename(path), ctrl, ns };
  }
  return undefined;
}

/**
 * `parse_and_open()`'s device step: a missing positional is `<cmd>: Invalid
 * argument`; an unknown path is perror's `<path>: No such file or directory`,
 * or `<path> is not a block or character device` for an existing non-device
 * file; each followed by the command help.
 */
export function openDevice(o: Out, cmd: string, args: ParsedArgs, env: CliEnv): Device | CliResult {
  const path = args.positionals[0];
  if (path === undefined) {
    o.err(`${cmd}: Invalid argument\n${helpFor(cmd)}`);
    return o.done(1);
  }
  const state = env.statePath ? tryLoad(env.statePath) : undefined;
  const dev = state ? findDevice(state, path) : undefined;
  if (dev) return dev;
  // A detached namespace keeps its backing file, but like a real one it has no device node.
  const detached = state?.controllers.some((c) => c.namespaces.some((n) => n.devPath === path));
  o.err(
    !detached && existsSync(path)
      ? `${path} is not a block or character device\n`
      : `${path}: No such file or directory\n`,
  );
  o.err(helpFor(cmd));
  return o.done(1);
}

function tryLoad(statePath: string): NvmeSimState | undefined {
  try {
    return JSON.parse(readFileSync(statePath, 'utf8')) as NvmeSimState;
  } catch {
    return undefined;
  }
}

export function isDevice(x: Device | CliResult): x is Device {
  return (x as Device).ctrl !== undefined;
}

/**
 * Runs `fn` on the device's controller under the state lock, after letting a
 * finished sanitize complete. The device is re-resolved inside the lock (a
 * concurrent delete-ns may have removed the namespace meanwhile).
 */
export async function onController<T>(
  env: CliEnv,
  dev: Device,
  fn: (ctrl: SimControllerState, state: NvmeSimState) => { changed: boolean; result: T },
): Promise<T> {
  return withStateLock(env.statePath as string, (state) => {
    const own = state.controllers.find((c) => c.name === dev.ctrl.name);
    if (!own) throw new Error(`controller ${dev.ctrl.name} vanished from the state file`);
    const ctrl = controllerView(state, own);
    const settled = settleSanitize(ctrl, env.now());
    const r = fn(ctrl, state);
    return { changed: settled || r.changed, result: r.result };
  });
}

/**
 * Applies an injected fault for `cmd` at the moment the device command would be
 * sent. Returns the finished result, 'noop' (print the success text, do nothing),
 * or undefined (no fault).
 */
export function applyFault(o: Out, cmd: string, ctrl: SimControllerState): CliResult | 'noop' | undefined {
  const f: SimFault | undefined = ctrl.faults?.[cmd];
  if (!f) return undefined;
  if (f.mode === 'hang') return { ...o.done(1), hang: true };
  if (f.mode === 'error') {
    o.err(statusLine(f.status));
    return o.done(1);
  }
  if (f.mode === 'noop') return 'noop';
  return undefined;
}

/** `nvme_show_status()` for an NVMe status: stderr line, exit 1. */
export function nvmeError(o: Out, status: number): CliResult {
  o.err(statusLine(status));
  return o.done(1);
}
