/**
 * `berth arq create|bind|list|show|delete`: accelerator requests. Create makes
 * one ARQ per requested device of a profile; bind gives them to an instance on
 * a host (each to one device picked atomically); delete releases the devices
 * into cleanup (or burns a one-time-use one).
 */
import type { Command } from 'commander';
import type { AcceleratorRequest } from '../../gen/berth/scheduler/v1/accelerator_request.js';
import { type ArqView, arqView, clientOptions, collect, UsageError, withClient } from './client-common.js';
import { type OutputFormat, render, renderRecord, renderTable } from './output.js';

export function arqTable(rows: readonly ArqView[]): string {
  return renderTable(rows, [
    { header: 'UUID', get: (a) => a.uuid },
    { header: 'Profile', get: (a) => a.profile_name },
    { header: 'State', get: (a) => a.state },
    { header: 'Instance', get: (a) => a.instance_uuid },
    { header: 'Host', get: (a) => a.host },
    { header: 'Device Address', get: (a) => a.device_address },
    { header: 'Managed', get: (a) => (a.attach_handle_info ? a.attach_handle_info.managed : '') },
    { header: 'Tag', get: (a) => a.tag },
  ]);
}

function printArqs(format: OutputFormat, arqs: readonly AcceleratorRequest[]): void {
  const rows = arqs.map(arqView);
  console.log(render(format, rows, () => arqTable(rows)));
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
        const res = await client.arqs.bindAcceleratorRequests({
          bindings: uuids.map((u, i) => ({
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
      const v = arqView((await client.arqs.getAcceleratorRequest({ uuid })).acceleratorRequest!);
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
      const res = await client.arqs.deleteAcceleratorRequests({ uuids, instanceUuid: o.instance ?? '' });
      const v = { deleted_uuids: res.deletedUuids };
      console.log(
        render(format, v, () =>
          res.deletedUuids.length ? `deleted ${res.deletedUuids.join(', ')}` : 'nothing to delete',
        ),
      );
    }),
  );
}
