/** `berth host list|show|delete`: the hosts whose agents registered with the scheduler. */
import type { Command } from 'commander';
import { clientOptions, withClient } from './connection.js';
import { ago } from './format.js';
import { printList, render, renderRecord, renderTable } from './output.js';
import { listAllHosts } from './references.js';
import { type HostView, hostView } from './views.js';

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
      const rows = (await listAllHosts(client)).map(hostView);
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
      .command('keys')
      .description("the keys hosts' agents sign erasure certificates with (current and retired)")
      .argument('[name]', 'one host')
      .option('--save <file>', 'write them as a JWK Set, for berth cleanup verify --keys'),
  ).action(
    withClient(async (client, format, name: string | undefined, o: { save?: string }) => {
      const { keys } = await client.certificates.listAgentKeys({ host: name ?? '' });
      const rows = keys.map((k) => ({
        host: k.host,
        key_id: k.keyId,
        pinned_at: k.pinnedAt?.toISOString() ?? '',
        retired_at: k.retiredAt?.toISOString() ?? '',
        jwk: k.jwk,
      }));
      if (o.save) {
        const { writeFile } = await import('node:fs/promises');
        const { publishedKeySet } = await import('../../erasure/verify.js');
        await writeFile(o.save, publishedKeySet(keys));
      }
      printList(format, rows, 'keys', (wide) =>
        renderTable(
          rows,
          [
            { header: 'host', get: (r) => r.host },
            { header: 'key id', get: (r) => r.key_id },
            { header: 'pinned', get: (r) => r.pinned_at },
            { header: 'retired', get: (r) => r.retired_at || '-' },
            { header: 'jwk', get: (r) => r.jwk, only: 'wide' },
          ],
          { wide },
        ),
      );
    }),
  );

  clientOptions(
    host
      .command('rotate-key')
      .description(
        'pin a new erasure certificate signing key for a host (admin); the old one stays, retired, for the certificates it signed',
      )
      .argument('<name>')
      .requiredOption(
        '--public-key <file>',
        'the new public key: what berth agent signing-key --rotate printed',
      ),
  ).action(
    withClient(async (client, format, name: string, o: { publicKey: string }) => {
      const { readFile } = await import('node:fs/promises');
      const publicKey = (await readFile(o.publicKey, 'utf8')).trim();
      const r = await client.certificates.rotateAgentKey({ host: name, publicKey });
      const v = { host: name, key_id: r.key?.keyId ?? '', retired_key_id: r.retired?.keyId ?? '' };
      console.log(
        render(
          format,
          v,
          () =>
            `host ${name} now signs with key ${v.key_id}${v.retired_key_id ? ` (key ${v.retired_key_id} retired)` : ''}`,
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
