/** `berth host list|show`: the hosts whose agents registered with the scheduler. */
import type { Command } from 'commander';
import { clientOptions, type HostView, hostView, withClient } from './client-common.js';
import { render, renderRecord, renderTable } from './output.js';

export function hostTable(rows: readonly HostView[]): string {
  return renderTable(rows, [
    { header: 'Name', get: (h) => h.name },
    { header: 'Endpoint', get: (h) => h.endpoint },
    { header: 'Connected', get: (h) => h.connected },
    { header: 'Devices', get: (h) => h.device_count },
    { header: 'Drivers', get: (h) => h.drivers },
    { header: 'Agent Version', get: (h) => h.agent_version },
    { header: 'Last Seen', get: (h) => h.last_seen },
  ]);
}

export function registerHostCommands(program: Command): void {
  const host = program.command('host').description('hosts: the agents registered with the scheduler');

  clientOptions(host.command('list').description('list hosts')).action(
    withClient(async (client, format) => {
      const rows = (await client.hosts.listHosts({})).hosts.map(hostView);
      console.log(render(format, rows, () => hostTable(rows)));
    }),
  );

  clientOptions(host.command('show').description('show one host').argument('<name>')).action(
    withClient(async (client, format, name: string) => {
      const v = hostView((await client.hosts.getHost({ name })).host!);
      console.log(
        render(format, v, () =>
          renderRecord({ ...v, features: v.features.join(', '), drivers: v.drivers.join(', ') }),
        ),
      );
    }),
  );
}
