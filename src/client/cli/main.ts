#!/usr/bin/env node
/**
 * The berth command line. Every command prints results on stdout and errors as
 * one line on stderr (`berth: <CODE>: <message> [reason]`), with exit codes:
 * 0 ok, 1 the server refused or failed, 2 usage or configuration error,
 * 3 the server could not be reached, 130/143 stopped by SIGINT/SIGTERM before
 * it finished (a cleanup being followed, the demo).
 */
import { logVerbosity, setLogVerbosity } from '@grpc/grpc-js';
import { Command, CommanderError } from 'commander';
import { ConfigError, isBerthError } from '../../errors.js';
import { keepYoungGenerationSmall } from '../../server/agent/heap-tuning.js';
import { BERTH_VERSION } from '../../version.js';

type Register = (program: Command) => void;

/**
 * Command modules load on demand: `berth agent serve` loads the agent, not the
 * scheduler, the demo or the SDK (start-up time, and the agent's memory).
 * Without a known command (`berth`, `berth --help`) every module loads.
 */
const COMMANDS: Record<string, () => Promise<Register>> = {
  agent: async () => {
    // Before the agent's modules load: the agent's peak memory (heap-tuning.ts).
    keepYoungGenerationSmall();
    return (await import('./agent-commands.js')).registerAgentCommands;
  },
  scheduler: async () => (await import('./scheduler-commands.js')).registerSchedulerCommands,
  up: async () => (await import('./up-commands.js')).registerUpCommands,
  device: async () => (await import('./device-commands.js')).registerDeviceCommands,
  host: async () => (await import('./host-commands.js')).registerHostCommands,
  media: async () => (await import('./media-commands.js')).registerMediaCommands,
  cleanup: async () => (await import('./cleanup-commands.js')).registerCleanupCommands,
  profile: async () => (await import('./profile-commands.js')).registerProfileCommands,
  arq: async () => (await import('./arq-commands.js')).registerArqCommands,
  instance: async () => (await import('./instance-commands.js')).registerInstanceCommands,
  migration: async () => (await import('./migration-commands.js')).registerMigrationCommands,
  demo: async () => (await import('./demo-commands.js')).registerDemoCommands,
  health: async () => (await import('./health-commands.js')).registerHealthCommands,
  placement: async () => (await import('./placement-commands.js')).registerPlacementCommands,
  token: async () => (await import('./token-commands.js')).registerTokenCommands,
  config: async () => (await import('./config-commands.js')).registerConfigCommands,
};
// `sim` lives with `up`.
COMMANDS.sim = COMMANDS.up!;

export async function buildProgram(argv: readonly string[] = process.argv): Promise<Command> {
  const program = new Command('berth')
    .description('Berth: PCI passthrough devices for virtual machines, scrubbed between tenants')
    .version(BERTH_VERSION)
    .showHelpAfterError()
    .exitOverride();
  const first = argv[2];
  const load = first !== undefined ? COMMANDS[first] : undefined;
  const registers = load
    ? [await load()]
    : await Promise.all(
        Object.entries(COMMANDS)
          .filter(([k]) => k !== 'sim')
          .map(([, l]) => l()),
      );
  for (const register of registers) register(program);
  return program;
}

/**
 * Every error a command can end with, as one line on stderr and an exit code.
 * command-errors.ts (and the SDK behind it) loads here, on the way out, not at
 * start: `berth agent serve` never needs the scheduler's client.
 */
export async function errorExit(err: unknown): Promise<number> {
  const { EXIT_CODE, reportError } = await import('./command-errors.js');
  if (err instanceof CommanderError) {
    return err.exitCode === 0 ? EXIT_CODE.ok : EXIT_CODE.usage;
  }
  if (err instanceof ConfigError) {
    console.error(`berth: configuration error: ${err.message}`);
    return EXIT_CODE.usage;
  }
  if (isBerthError(err)) {
    console.error(`berth: ${err.code}: ${err.message}${err.reason ? ` [${err.reason}]` : ''}`);
    return err.code === 'UNAVAILABLE' || err.code === 'DEADLINE_EXCEEDED'
      ? EXIT_CODE.unavailable
      : EXIT_CODE.failed;
  }
  // The SDK's errors (client commands), usage errors, anything else.
  return reportError(err);
}

export async function main(argv: string[]): Promise<void> {
  // grpc-js logs its own errors on stderr ("No address added out of total 1
  // resolved"); the CLI reports every error itself, in one line.
  if (!process.env.GRPC_VERBOSITY) setLogVerbosity(logVerbosity.NONE);
  try {
    await (await buildProgram(argv)).parseAsync(argv);
  } catch (err) {
    process.exitCode = await errorExit(err);
  }
}

await main(process.argv);
