/**
 * `berth media forget KEY`: an operator forgets a media that will never come
 * back (destroyed, returned to its vendor). DeviceService.ForgetMedia; see
 * docs/operator-guide.md ("Forgetting a media").
 */
import type { Command } from 'commander';
import { clientOptions, withClient } from './connection.js';
import { render } from './output.js';
import { deviceName } from './views.js';

export function registerMediaCommands(program: Command): void {
  const media = program
    .command('media')
    .description('media: what tenant data lives on (NVMe subsystems, cards), by key');

  clientOptions(
    media
      .command('forget')
      .description(
        'forget a media that will never come back (admin): its devices no host sees are removed, and agents reporting it are refused; refused while a host presents it or it is in use',
      )
      .argument(
        '<key>',
        'the media key, e.g. nvme:nqn.2014-08.org.example:ssd-1 (berth device show prints it)',
      )
      .requiredOption('--reason <text>', 'why, for the log (e.g. "destroyed, ticket 1234")'),
  ).action(
    withClient(async (client, format, key: string, o: { reason: string }) => {
      const r = await client.devices.forgetMedia({ mediaKey: key, reason: o.reason });
      const v = {
        media_key: r.mediaKey,
        already_forgotten: r.alreadyForgotten,
        burned: r.burned,
        dirty: r.dirty,
        removed_devices: r.removedDevices.map(deviceName),
      };
      console.log(
        render(format, v, () => {
          if (r.alreadyForgotten) return `media ${key} was forgotten already`;
          const removed =
            v.removed_devices.length > 0 ? `; devices removed: ${v.removed_devices.join(', ')}` : '';
          const was = [r.burned ? 'burned' : '', r.dirty ? 'may hold tenant data' : ''].filter(Boolean);
          return `media ${key} forgotten${was.length > 0 ? ` (it was ${was.join(' and ')}: so it stays, should it come back)` : ''}${removed}`;
        }),
      );
    }),
  );
}
