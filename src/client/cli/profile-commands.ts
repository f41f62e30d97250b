/**
 * `berth profile create|list|show|delete`: device profiles, the request groups
 * ARQs are created from. A profile comes from flags (one request group), from a
 * YAML/JSON file (`--file`, any number of groups, the snake_case shape
 * `-o json` prints), or both: flags then override the file's name and
 * description and add their group.
 */
import type { Command } from 'commander';
import { z } from 'zod';
import {
  LiveMigratable,
  liveMigratableToJSON,
  type Profile,
  type RequestGroup,
} from '../../gen/berth/scheduler/v1/profile.js';
import { UsageError } from '../usage-error.js';
import { clientOptions, withClient } from './connection.js';
import { collect, parseEnum, readDocument } from './format.js';
import { printList, render, renderRecord, renderTable } from './output.js';
import { type ProfileView, profileView } from './views.js';

const LIVE_MIGRATABLE_VALUES = [
  LiveMigratable.LIVE_MIGRATABLE_UNSPECIFIED,
  LiveMigratable.LIVE_MIGRATABLE_YES,
  LiveMigratable.LIVE_MIGRATABLE_NO,
] as const;

function parseLiveMigratable(flag: string, v: string | boolean | undefined): LiveMigratable {
  if (v === undefined || v === '' || v === 'unset' || v === 'unspecified') {
    return LiveMigratable.LIVE_MIGRATABLE_UNSPECIFIED;
  }
  if (v === true) return LiveMigratable.LIVE_MIGRATABLE_YES;
  if (v === false) return LiveMigratable.LIVE_MIGRATABLE_NO;
  return parseEnum(flag, v, 'LIVE_MIGRATABLE_', liveMigratableToJSON, LIVE_MIGRATABLE_VALUES.slice(1));
}

const groupSchema = z
  .object({
    resource_class: z.string().optional(),
    vendor_id: z.string().optional(),
    product_id: z.string().optional(),
    required_traits: z.array(z.string()).optional(),
    forbidden_traits: z.array(z.string()).optional(),
    live_migratable: z.union([z.string(), z.boolean()]).optional(),
    count: z.number().int().min(0).optional(),
  })
  .strict();

const profileFileSchema = z
  .object({
    name: z.string().optional(),
    description: z.string().optional(),
    groups: z.array(groupSchema).optional(),
  })
  // uuid and created_at (as `profile show -o json` prints them) are accepted and ignored.
  .extend({ uuid: z.string().optional(), created_at: z.unknown().optional() })
  .strict();

interface CreateFlags {
  file?: string;
  description?: string;
  resourceClass?: string;
  vendorId?: string;
  productId?: string;
  trait?: string[];
  forbidTrait?: string[];
  liveMigratable?: string;
  count?: string;
}

function groupFromFile(g: z.infer<typeof groupSchema>, i: number): RequestGroup {
  return {
    resourceClass: g.resource_class ?? '',
    vendorId: g.vendor_id ?? '',
    productId: g.product_id ?? '',
    requiredTraits: g.required_traits ?? [],
    forbiddenTraits: g.forbidden_traits ?? [],
    liveMigratable: parseLiveMigratable(`groups[${i}].live_migratable`, g.live_migratable),
    count: g.count ?? 1,
  };
}

/** Builds the profile from the file and the flags; usage errors name the flag or the file's field. */
export async function profileFromInput(name: string | undefined, o: CreateFlags): Promise<Profile> {
  let fromFile: z.infer<typeof profileFileSchema> = {};
  if (o.file) {
    const parsed = profileFileSchema.safeParse(await readDocument(o.file));
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      throw new UsageError(`--file ${o.file}: ${issue.path.join('.') || '(document)'}: ${issue.message}`);
    }
    fromFile = parsed.data;
  }
  const groups = (fromFile.groups ?? []).map(groupFromFile);
  const flagGroup = o.resourceClass || o.vendorId || o.productId || o.trait?.length;
  if (flagGroup) {
    let count = 1;
    if (o.count !== undefined) {
      count = Number(o.count);
      if (!Number.isInteger(count) || count < 1)
        throw new UsageError(`--count: ${o.count} is not a positive integer`);
    }
    groups.push({
      resourceClass: o.resourceClass ?? '',
      vendorId: o.vendorId ?? '',
      productId: o.productId ?? '',
      requiredTraits: o.trait ?? [],
      forbiddenTraits: o.forbidTrait ?? [],
      liveMigratable: parseLiveMigratable('--live-migratable', o.liveMigratable),
      count,
    });
  } else if (o.forbidTrait?.length || o.liveMigratable || o.count) {
    throw new UsageError(
      '--forbid-trait, --live-migratable and --count qualify a group: give --resource-class, --vendor-id/--product-id or --trait too',
    );
  }
  const profileName = name ?? fromFile.name;
  if (!profileName) throw new UsageError('give the profile a name (argument, or name: in --file)');
  if (groups.length === 0) {
    throw new UsageError(
      'a profile needs a request group: --resource-class, --vendor-id/--product-id, --trait, or groups: in --file',
    );
  }
  return {
    name: profileName,
    uuid: '',
    description: o.description ?? fromFile.description ?? '',
    groups,
    createdAt: undefined,
  };
}

function groupSummary(g: ProfileView['groups'][number]): string {
  const what = g.resource_class || `${g.vendor_id || '*'}:${g.product_id || '*'}`;
  const parts = [`${g.count}x ${what}`];
  if (g.required_traits.length) parts.push(`+${g.required_traits.join(',+')}`);
  if (g.forbidden_traits.length) parts.push(`!${g.forbidden_traits.join(',!')}`);
  if (g.live_migratable !== 'unset') parts.push(`live_migratable=${g.live_migratable}`);
  return parts.join(' ');
}

export const profileRecord = (v: ProfileView) =>
  renderRecord({ ...v, groups: v.groups.map(groupSummary).join('; ') });

export function registerProfileCommands(program: Command): void {
  const profile = program.command('profile').description('device profiles: what an ARQ asks for');

  clientOptions(
    profile
      .command('create')
      .description(
        'create a profile from flags (one group) and/or --file (YAML/JSON); creating the same profile again returns it',
      )
      .argument('[name]', 'profile name (or name: in --file)')
      .option(
        '-f, --file <file>',
        'YAML/JSON: {name, description, groups: [{resource_class, vendor_id, product_id, required_traits, forbidden_traits, live_migratable: yes|no, count}]}',
      )
      .option('--description <text>', 'free text')
      .option('--resource-class <rc>', 'group: resource class, e.g. CUSTOM_PCI_8086_154C')
      .option('--vendor-id <hex>', 'group: vendor id, e.g. 8086')
      .option('--product-id <hex>', 'group: product id, e.g. 154c')
      .option('--trait <trait>', 'group: required trait (repeatable)', collect)
      .option('--forbid-trait <trait>', 'group: forbidden trait (repeatable)', collect)
      .option(
        '--live-migratable <yes|no>',
        'group: bind only live-migratable (yes) or only non-migratable (no) devices',
      )
      .option('--count <n>', 'group: number of devices', undefined),
  ).action(
    withClient(async (client, format, name: string | undefined, o: CreateFlags) => {
      const p = await profileFromInput(name, o);
      const v = profileView((await client.profiles.createProfile({ profile: p })).profile!);
      console.log(render(format, v, () => profileRecord(v)));
    }),
  );

  clientOptions(profile.command('list').description('list profiles')).action(
    withClient(async (client, format) => {
      const rows = (await client.profiles.listProfiles({})).profiles.map(profileView);
      printList(format, rows, 'profiles', (wide) =>
        renderTable(
          rows,
          [
            { header: 'name', get: (p) => p.name, shrink: true },
            { header: 'groups', get: (p) => p.groups.map(groupSummary).join('; '), shrink: true },
            { header: 'description', get: (p) => p.description || '-', shrink: true },
            { header: 'uuid', get: (p) => p.uuid, only: 'wide' },
            { header: 'created', get: (p) => p.created_at, only: 'wide' },
          ],
          { wide },
        ),
      );
    }),
  );

  clientOptions(
    profile.command('show').description('show a profile').argument('<name>', 'name or uuid'),
  ).action(
    withClient(async (client, format, name: string) => {
      const v = profileView((await client.profiles.getProfile({ name })).profile!);
      console.log(render(format, v, () => profileRecord(v)));
    }),
  );

  clientOptions(profile.command('delete').description('delete a profile (admin)').argument('<name>')).action(
    withClient(async (client, format, name: string) => {
      await client.profiles.deleteProfile({ name });
      const v = { deleted: name };
      console.log(render(format, v, () => `profile ${name} deleted`));
    }),
  );
}
