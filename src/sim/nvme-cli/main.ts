/**
 * nvme-sim: a stand-in for nvme-cli 2.3 (`/usr/sbin/nvme` on Debian 12) over
 * simulated controllers whose state lives in the JSON file named by
 * BERTH_NVME_SIM_STATE. `runCli()` is the whole program as a function (argv in,
 * stdout/stderr/exit code out) so tests can call it directly; executed as a
 * script, it prints the result and exits with the code (or, for the `hang`
 * fault, sleeps until killed).
 */
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { CliEnv, CliResult } from './context.js';
import { GENERAL_HELP } from './help-text.js';

export type { CliEnv, CliResult } from './context.js';

type Handler = (argv: string[], env: CliEnv) => Promise<CliResult>;

/** Sub-commands, loaded lazily so each invocation only compiles what it runs (startup time matters). */
const COMMANDS: Record<string, () => Promise<Handler>> = {
  'id-ctrl': async () => (await import('./commands/identify.js')).idCtrl,
  'id-ns': async () => (await import('./commands/identify.js')).idNs,
  list: async () => (await import('./commands/identify.js')).list,
  'list-ns': async () => (await import('./commands/identify.js')).listNs,
  sanitize: async () => (await import('./commands/sanitize.js')).sanitize,
  'sanitize-log': async () => (await import('./commands/sanitize.js')).sanitizeLog,
  'smart-log': async () => (await import('./commands/smart.js')).smartLog,
  'write-zeroes': async () => (await import('./commands/media.js')).writeZeroes,
  format: async () => (await import('./commands/media.js')).format,
  'create-ns': async () => (await import('./commands/ns-mgmt.js')).createNs,
  'delete-ns': async () => (await import('./commands/ns-mgmt.js')).deleteNs,
  'attach-ns': async () => (await import('./commands/ns-mgmt.js')).attachNs,
  'detach-ns': async () => (await import('./commands/ns-mgmt.js')).detachNs,
  'ns-rescan': async () => {
    const m = await import('./commands/ns-mgmt.js');
    return (argv, env) => m.simpleCtrlCommand('ns-rescan', argv, env);
  },
  reset: async () => {
    const m = await import('./commands/ns-mgmt.js');
    return (argv, env) => m.simpleCtrlCommand('reset', argv, env);
  },
};

export const VERSION_TEXT = 'nvme version 2.3 (git 2.3)\nlibnvme version 1.3 (git 1.3)\n';

/** Builds the environment from process.env (state path, BERTH_NVME_SIM_FAST). */
export function cliEnvFrom(env: NodeJS.ProcessEnv): CliEnv {
  return {
    statePath: env.BERTH_NVME_SIM_STATE || undefined,
    fast: env.BERTH_NVME_SIM_FAST === '1',
    now: Date.now,
    env,
  };
}

/** Runs one nvme command line (without the program name). */
export async function runCli(argv: string[], env: CliEnv = cliEnvFrom(process.env)): Promise<CliResult> {
  const [cmd, ...rest] = argv;
  if (cmd === undefined || cmd === 'help' || cmd === '--help' || cmd === '-h') {
    const topic = cmd === 'help' ? rest[0] : undefined;
    if (topic && COMMANDS[topic]) {
      // The real tool opens the man page here; the argconfig help is the closest offline equivalent.
      const { COMMAND_HELP } = await import('./help-text.js');
      return { stdout: COMMAND_HELP[topic] ?? '', stderr: '', code: 0 };
    }
    return { stdout: GENERAL_HELP, stderr: '', code: 0 };
  }
  if (cmd === 'version') return { stdout: VERSION_TEXT, stderr: '', code: 0 };
  const load = COMMANDS[cmd];
  if (!load) return { stdout: `ERROR: Invalid sub-command '${cmd}'\n${GENERAL_HELP}`, stderr: '', code: 1 };
  return (await load())(rest, env);
}

function isMain(): boolean {
  const entry = process.argv[1];
  if (!entry) return false;
  try {
    return realpathSync(entry) === realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
}

if (isMain()) {
  let result: CliResult;
  try {
    result = await runCli(process.argv.slice(2));
  } catch (err) {
    // A simulator bug, not an nvme-cli behaviour: say so loudly, exit like a failed command.
    result = { stdout: '', stderr: `nvme-sim internal error: ${(err as Error).stack ?? err}\n`, code: 1 };
  }
  if (result.stdout) process.stdout.write(result.stdout);
  if (result.stderr) process.stderr.write(result.stderr);
  if (result.hang) {
    // The `hang` fault: like a command stuck in the kernel, only a signal ends it.
    setInterval(() => {}, 1 << 30);
  } else {
    process.exitCode = result.code;
  }
}
