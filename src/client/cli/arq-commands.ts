/**
 * `berth arq create|bind|list|show|delete`: accelerator requests. Create makes
 * one ARQ per requested device of a profile; bind gives them to an instance on
 * a host (each to one device picked atomically); delete releases the devices
 * into cleanup (or burns a one-time-use one).
 */
import type { Command } from 'commander';
import type { AcceleratorRequest } from '../../gen/berth/scheduler/v1/accelerator_request.js';
import { UsageError } from '../usage-error.js';
import { clientOptions, withClient } from './connection.js';
import { collect } from './format.js';
import { type OutputFormat, printList, render, renderRecord, renderTable, uniquePrefixes } from './output.js';
import { resolveArqUuids } from './references.js';
import { type ArqView, arqView } from './views.js';

/** ARQs with a uuid prefix unique in the list (the commands accept it back); -o wide: full uuids. */
export function arqTable(rows: readonly ArqView[], wide = false): string {
  const short = uniquePrefixes(rows.map((a) => a.uuid));
  return renderTable(
    rows,
    [
      { header: 'uuid', get: (a) => short.get(a.uuid), only: 'table', fixed: true },
      { header: 'uuid', get: (a) => a.uuid, only: 'wide' },
      { header: 'profile', get: (a) => a.profile_name, shrink: true },
      { header: 'state', get: (a) => a.state },
      { header: 'instance', get: (a) => a.instance_uuid || '-', shrink: true },
      { header: 'host', get: (a) => a.host || '-', shrink: true },
      { header: 'address', get: (a) => a.device_address || '-', fixed: true },
      { header: 'managed', get: (a) => (a.attach_handle_info ? a.attach_handle_info.managed : '-') },
      { header: 'tag', get: (a) => a.tag || '-', shrink: true },
      { header: 'device', get: (a) => a.device_uuid || '-', only: 'wide' },
      { header: 'resource class', get: (a) => a.resource_class, only: 'wide' },
    ],
    { wide },
  );
}

function printArqs(format: OutputFormat, arqs: readonly AcceleratorRequest[]): void {
  const rows = arqs.map(arqView);
  printList(format, rows, 'accelerator requests', (wide) => arqTable(rows, wide));
}

export function registerArqCommands(program: Command): void {
  const arq = program
    .command('arq')
    .description('accelerator requests (ARQs): create from a profile, bind, delete');

  clientOptions(
    arq
      .command('create')
      .description('create ARQs from a profile, one per requested device')
      .requiredOption('--profile <name>', 'device profile')
      .option('--tag <tag>', 'device role tag, one per ARQ in creation order (repeatable)', collect)
      .option('--request-id <id>', 'idempotency key: a retry with the same id returns the same ARQs'),
  ).action(
    withClient(async (client, format, o: { profile: string; tag?: string[]; requestId?: string }) => {
      const res = await client.arqs.createAcceleratorRequests({
        profileName: o.profile,
        requestId: o.requestId ?? '',
        tags: o.tag ?? [],
      });
      printArqs(format, res.acceleratorRequests);
    }),
  );

  clientOptions(
    arq
      .command('bind')
      .description('bind ARQs to an instance on a host; retrying the same binding returns the same devices')
      .argument('<arq...>', 'ARQ uuids')
      .requiredOption('--instance <id>', 'instance uuid (or id)')
      .requiredOption('--host <host>', 'host the instance runs on')
      .option(
        '--tag <tag>',
        'role tag per ARQ, in the order given (repeatable); overrides the one given at creation',
        collect,
      ),
  ).action(
    withClient(
      async (client, format, uuids: string[], o: { instance: string; host: string; tag?: string[] }) => {
        const tags = o.tag ?? [];
        if (tags.length > uuids.length) {
          throw new UsageError(`--tag given ${tags.length} times for ${uuids.length} ARQ(s)`);
        }
        const arqs = await resolveArqUuids(client, uuids);
        const res = await client.arqs.bindAcceleratorRequests({
          bindings: arqs.map((u, i) => ({
            arqUuid: u,
            instanceUuid: o.instance,
            host: o.host,
            tag: tags[i] ?? '',
          })),
        });
        printArqs(format, res.acceleratorRequests);
      },
    ),
  );

  clientOptions(
    arq.command('list').description('list ARQs').option('--instance <id>', 'only the ARQs of this instance'),
  ).action(
    withClient(async (client, format, o: { instance?: string }) => {
      const res = await client.arqs.listAcceleratorRequests({ instanceUuid: o.instance ?? '' });
      printArqs(format, res.acceleratorRequests);
    }),
  );

  clientOptions(
    arq.command('show').description('show one ARQ with its attach handle').argument('<uuid>'),
  ).action(
    withClient(async (client, format, uuid: string) => {
      const [full] = await resolveArqUuids(client, [uuid]);
      const v = arqView((await client.arqs.getAcceleratorRequest({ uuid: full! })).acceleratorRequest!);
      console.log(render(format, v, () => renderRecord(v)));
    }),
  );

  clientOptions(
    arq
      .command('delete')
      .description('delete ARQs by uuid or all of an instance; their devices go to cleanup (or stay burned)')
      .argument('[uuid...]', 'ARQ uuids')
      .option('--instance <id>', 'delete every ARQ of this instance'),
  ).action(
    withClient(async (client, format, uuids: string[], o: { instance?: string }) => {
      if (uuids.length === 0 && !o.instance) throw new UsageError('give ARQ uuids or --instance');
      const res = await client.arqs.deleteAcceleratorRequests({
        uuids: await resolveArqUuids(client, uuids),
        instanceUuid: o.instance ?? '',
      });
      const v = { deleted_uuids: res.deletedUuids };
      console.log(
        render(format, v, () =>
          res.deletedUuids.length ? `deleted ${res.deletedUuids.join(', ')}` : 'nothing to delete',
        ),
      );
    }),
  );
}
