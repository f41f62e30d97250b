/** `berth host list|show|delete`: the hosts whose agents registered with the scheduler. */
import type { Command } from 'commander';
import { ago, clientOptions, type HostView, hostView, withClient } from './client-common.js';
import { printList, render, renderRecord, renderTable } from './output.js';

export function hostTable(rows: readonly HostView[], wide = false): string {
  return renderTable(
    rows,
    [
      { header: 'name', get: (h) => h.name, shrink: true },
      { header: 'status', get: (h) => (h.connected ? 'connected' : 'disconnected') },
      { header: 'endpoint', get: (h) => h.endpoint, shrink: true },
      { header: 'devices', get: (h) => h.device_count },
      { header: 'drivers', get: (h) => h.drivers },
      { header: 'version', get: (h) => h.agent_version },
      { header: 'last seen', get: (h) => ago(h.last_seen), only: 'table' },
      { header: 'last seen', get: (h) => h.last_seen, only: 'wide' },
      { header: 'features', get: (h) => h.features, only: 'wide' },
      { header: 'boot id', get: (h) => h.boot_id, only: 'wide' },
      { header: 'followed by', get: (h) => h.followed_by, only: 'wide' },
    ],
    { wide },
  );
}

export function registerHostCommands(program: Command): void {
  const host = program.command('host').description('hosts: the agents registered with the scheduler');

  clientOptions(host.command('list').description('list hosts')).action(
    withClient(async (client, format) => {
      const rows = (await client.hosts.listHosts({})).hosts.map(hostView);
      printList(format, rows, 'hosts', (wide) => hostTable(rows, wide));
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

  clientOptions(
    host
      .command('delete')
      .description(
        'remove a host and its devices (admin): refused while its agent is connected or a device is in use or holds tenant data',
      )
      .argument('<name>'),
  ).action(
    withClient(async (client, format, name: string) => {
      const { removedDeviceUuids } = await client.hosts.deleteHost({ name });
      const v = { deleted: name, removed_device_uuids: removedDeviceUuids };
      console.log(
        render(format, v, () => `host ${name} deleted with ${removedDeviceUuids.length} device(s)`),
      );
    }),
  );
}
