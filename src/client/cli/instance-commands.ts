/**
 * `berth instance xml|metadata|set-devices`: what the hypervisor and the guest
 * need. The table form of `xml` is the hostdev XML itself (ready to paste into
 * a domain) and of `metadata` the metadata document; -o json wraps them with
 * the structured data.
 */
import type { Command } from 'commander';
import { z } from 'zod';
import type { Disk, Nic } from '../../gen/berth/scheduler/v1/instance.js';
import { UsageError } from '../usage-error.js';
import { clientOptions, withClient } from './connection.js';
import { readDocument } from './format.js';
import { render } from './output.js';
import { hostdevView } from './views.js';

const nicSchema = z
  .object({
    mac: z.string(),
    address: z.string().optional(),
    tag: z.string().optional(),
    vlan: z.number().int().min(0).optional(),
    model: z.string().optional(),
    devname: z.string().optional(),
  })
  .strict();
const diskSchema = z
  .object({
    serial: z.string().optional(),
    bus: z.string(),
    address: z.string().optional(),
    path: z.string().optional(),
    tag: z.string().optional(),
  })
  .strict();
const devicesFileSchema = z
  .object({ nics: z.array(nicSchema).optional(), disks: z.array(diskSchema).optional() })
  .strict();

/** The NICs and disks of a set-devices file, in the request's shape. */
export async function instanceDevicesFromFile(path: string): Promise<{ nics: Nic[]; disks: Disk[] }> {
  const parsed = devicesFileSchema.safeParse(await readDocument(path));
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new UsageError(`--file ${path}: ${issue.path.join('.') || '(document)'}: ${issue.message}`);
  }
  return {
    nics: (parsed.data.nics ?? []).map((n) => ({
      mac: n.mac,
      address: n.address ?? '',
      tag: n.tag ?? '',
      vlan: n.vlan,
      model: n.model ?? '',
      devname: n.devname,
    })),
    disks: (parsed.data.disks ?? []).map((d) => ({
      serial: d.serial ?? '',
      bus: d.bus,
      address: d.address ?? '',
      path: d.path ?? '',
      tag: d.tag ?? '',
    })),
  };
}

export function registerInstanceCommands(program: Command): void {
  const instance = program
    .command('instance')
    .description("an instance's passthrough devices: libvirt XML, metadata, NIC/disk registration");

  clientOptions(
    instance
      .command('xml')
      .description("the instance's <hostdev> elements (table: the XML itself; json: {xml, hostdevs})")
      .argument('<instance>'),
  ).action(
    withClient(async (client, format, id: string) => {
      const res = await client.instances.getInstanceXml({ instanceUuid: id });
      const v = { instance_uuid: id, xml: res.xml, hostdevs: res.hostdevs.map(hostdevView) };
      console.log(render(format, v, () => res.xml.trimEnd()));
    }),
  );

  clientOptions(
    instance
      .command('metadata')
      .description('the device-role metadata document (table: the document; json: the document parsed)')
      .argument('<instance>'),
  ).action(
    withClient(async (client, format, id: string) => {
      const res = await client.instances.getDeviceMetadata({ instanceUuid: id });
      const doc = JSON.parse(res.json) as unknown;
      console.log(render(format, doc, () => JSON.stringify(doc, null, 2)));
    }),
  );

  clientOptions(
    instance
      .command('set-devices')
      .description("register the instance's NICs and disks (replaces what was registered)")
      .argument('<instance>')
      .requiredOption(
        '-f, --file <file>',
        'YAML/JSON: {nics: [{mac, address, tag, vlan, model, devname}], disks: [{serial, bus, address, path, tag}]}',
      ),
  ).action(
    withClient(async (client, format, id: string, o: { file: string }) => {
      const { nics, disks } = await instanceDevicesFromFile(o.file);
      await client.instances.setInstanceDevices({ instanceUuid: id, nics, disks });
      const v = { instance_uuid: id, nics: nics.length, disks: disks.length };
      console.log(
        render(format, v, () => `instance ${id}: ${nics.length} NIC(s), ${disks.length} disk(s) registered`),
      );
    }),
  );
}
