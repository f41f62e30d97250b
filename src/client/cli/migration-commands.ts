/**
 * `berth migration plan|commit|abort`: live migration of an instance with
 * passthrough devices. Plan claims matching devices on the destination and
 * returns the source→destination address map and the destination XML; commit
 * releases the source devices; abort releases the destination claims.
 */
import type { Command } from 'commander';
import type { Migration } from '../../gen/berth/scheduler/v1/migration.js';
import { clientOptions, withClient } from './connection.js';
import { type OutputFormat, render, renderRecord } from './output.js';
import { migrationView } from './views.js';

function printMigration(format: OutputFormat, m: Migration): void {
  const v = migrationView(m);
  console.log(
    render(
      format,
      v,
      () =>
        renderRecord({
          uuid: v.uuid,
          instance_uuid: v.instance_uuid,
          source_host: v.source_host,
          destination_host: v.destination_host,
          state: v.state,
          pci_dev_map_src_dst: Object.entries(v.pci_dev_map_src_dst)
            .map(([s, d]) => `${s} -> ${d}`)
            .join(', '),
          readiness: v.readiness
            .map((r) => `${r.address} ${r.ready ? 'ready' : `not ready: ${r.reason}`}`)
            .join(', '),
          created_at: v.created_at,
        }) + (v.destination_xml ? `\n${v.destination_xml.trimEnd()}` : ''),
    ),
  );
}

export function registerMigrationCommands(program: Command): void {
  const migration = program.command('migration').description('live migrations of instances with devices');

  clientOptions(
    migration
      .command('plan')
      .description(
        'plan a live migration: claim devices on the destination, print the address map and the XML',
      )
      .argument('<instance>')
      .requiredOption('--to <host>', 'destination host')
      .option('--request-id <id>', 'idempotency key'),
  ).action(
    withClient(async (client, format, instance: string, o: { to: string; requestId?: string }) => {
      const res = await client.migrations.planLiveMigration({
        instanceUuid: instance,
        destinationHost: o.to,
        requestId: o.requestId ?? '',
      });
      printMigration(format, res.migration!);
    }),
  );

  clientOptions(
    migration
      .command('commit')
      .description(
        'commit a planned migration: the destination devices become the bindings, the source ones are released',
      )
      .argument('<migration>', 'migration uuid'),
  ).action(
    withClient(async (client, format, uuid: string) => {
      printMigration(format, (await client.migrations.commitMigration({ migrationUuid: uuid })).migration!);
    }),
  );

  clientOptions(
    migration
      .command('abort')
      .description("abort a planned migration: release the destination's claims")
      .argument('<migration>', 'migration uuid'),
  ).action(
    withClient(async (client, format, uuid: string) => {
      printMigration(format, (await client.migrations.abortMigration({ migrationUuid: uuid })).migration!);
    }),
  );
}
