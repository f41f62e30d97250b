/**
 * The berth command line. Every command prints results on stdout and errors as
 * one line on stderr (`berth: <CODE>: <message> [reason]`), with exit codes:
 * 0 ok, 1 the server refused or failed, 2 usage or configuration error,
 * 3 the server could not be reached.
 */
import { Command, CommanderError } from 'commander';
import { ConfigError, isBerthError } from '../../errors.js';
import { BERTH_VERSION } from '../../version.js';
import { registerAgentCommands } from './agent-commands.js';
import { registerArqCommands } from './arq-commands.js';
import { registerDemoCommands } from './demo-commands.js';
import { registerDeviceCommands } from './device-commands.js';
import { registerHostCommands } from './host-commands.js';
import { registerInstanceCommands } from './instance-commands.js';
import { registerMigrationCommands } from './migration-commands.js';
import { registerProfileCommands } from './profile-commands.js';
import { registerSchedulerCommands } from './scheduler-commands.js';
import { registerUpCommands } from './up-commands.js';

export const EXIT = { ok: 0, failed: 1, usage: 2, unavailable: 3 } as const;

export function buildProgram(): Command {
  const program = new Command('berth')
    .description('Berth: PCI passthrough devices for virtual machines, scrubbed between tenants')
    .version(BERTH_VERSION)
    .showHelpAfterError()
    .exitOverride();
  registerAgentCommands(program);
  registerSchedulerCommands(program);
  registerUpCommands(program);
  registerDeviceCommands(program);
  registerHostCommands(program);
  registerProfileCommands(program);
  registerArqCommands(program);
  registerInstanceCommands(program);
  registerMigrationCommands(program);
  registerDemoCommands(program);
  return program;
}

export function errorExit(err: unknown): number {
  if (err instanceof CommanderError) {
    return err.exitCode === 0 ? EXIT.ok : EXIT.usage;
  }
  if (err instanceof ConfigError) {
    console.error(`berth: configuration error: ${err.message}`);
    return EXIT.usage;
  }
  if (isBerthError(err)) {
    console.error(`berth: ${err.code}: ${err.message}${err.reason ? ` [${err.reason}]` : ''}`);
    return err.code === 'UNAVAILABLE' || err.code === 'DEADLINE_EXCEEDED' ? EXIT.unavailable : EXIT.failed;
  }
  console.error(`berth: ${(err as Error).message ?? String(err)}`);
  return EXIT.failed;
}

export async function main(argv: string[]): Promise<void> {
  try {
    await buildProgram().parseAsync(argv);
  } catch (err) {
    process.exitCode = errorExit(err);
  }
}

await main(process.argv);
