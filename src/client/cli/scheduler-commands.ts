/** `berth scheduler serve`. */
import type { Command } from 'commander';
import { Scheduler } from '../../server/scheduler/scheduler.js';

export function registerSchedulerCommands(program: Command): void {
  const scheduler = program.command('scheduler').description('the central scheduler');
  scheduler
    .command('serve')
    .description('run the scheduler (SQLite store, one file)')
    .requiredOption('--db <file>', 'SQLite database file (created if missing)')
    .option('--listen <addr>', 'listen address host:port', '127.0.0.1:7070')
    .action(async (o: { db: string; listen: string }) => {
      const s = await Scheduler.start({ db: o.db, listen: o.listen });
      const stop = () => void s.stop().then(() => process.exit(0));
      process.once('SIGTERM', stop);
      process.once('SIGINT', stop);
      console.log(JSON.stringify({ event: 'listening', endpoint: s.address }));
    });
}
