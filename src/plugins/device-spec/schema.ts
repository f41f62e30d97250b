/**
 * The shape of a `device_spec` entry as a zod schema: the keys an entry takes
 * (parse.ts refuses any other, suggesting the closest) and the types an editor
 * checks through schema/agent-config.schema.json. The values are parsed with
 * Nova's semantics by parse.ts (hex ids normalised, address globs and regex
 * objects, oslo booleans), run as the transform of `deviceSpecListSchema` (parse.ts).
 */
import { z } from 'zod';

const bool = z
  .union([z.boolean(), z.literal(0), z.literal(1), z.string()])
  .describe('true/false, or 1 t true on y yes / 0 f false off n no (any case)');
const hexId = z.string().describe('hex, up to 4 digits (quote it: "8086"), or "*" for any');
const fieldRegex = z
  .string()
  .max(256)
  .describe("a Python regular expression (Nova's re.match), matched from the start of the field");

/** Nova's keys ([pci] device_spec), accepted by every driver. */
export const novaEntryShape = {
  vendor_id: hexId,
  product_id: hexId,
  address: z
    .union([
      z.string().describe('a glob [[[domain]:]bus]:][slot][.[function]]; parts may be * or empty'),
      z
        .strictObject({ domain: fieldRegex, bus: fieldRegex, slot: fieldRegex, function: fieldRegex })
        .partial(),
    ])
    .describe('which functions: a glob string, or an object of regular expressions per field'),
  devname: z.string().max(15).describe('a network interface whose PCI function this names; not with address'),
  managed: bool.describe('libvirt detaches/reattaches the device (default true)'),
  live_migratable: bool.describe('the device may follow its guest in a live migration (default false)'),
  one_time_use: bool.describe('reserved forever after its first allocation (default false)'),
  resource_class: z.string().describe('override; normalised the Placement way (foo → CUSTOM_FOO)'),
  traits: z
    .union([z.array(z.string()), z.string()])
    .describe('extra traits: a list, or one comma-separated string'),
  physical_network: z.string().describe('carried as a device attribute'),
  trusted: bool.describe('carried as a device attribute'),
  remote_managed: bool.describe('carried as a device attribute'),
};

/**
 * Berth's own keys, for every driver: the operator's confirmation that one
 * function, named by its full address, is offered although nothing isolates it
 * from the host or the host uses it (src/plugins/host-use.ts).
 */
export const hostEntryShape = {
  allow_no_iommu: bool.describe(
    'offer the function this entry names by its full address although it has no IOMMU group (default false)',
  ),
  allow_host_device: bool.describe(
    'offer the function this entry names by its full address although the host uses it: a mounted disk, an interface with an address or a route (default false)',
  ),
};

/** The keys of drivers that clean devices (NVMe). */
export const cleanupEntryShape = {
  clear_action: z.enum(['auto', 'sanitize', 'zero']).describe('NVMe: what scrubs the device (default auto)'),
  clear_strategy: z.enum(['auto', 'crypto', 'block']).describe('NVMe: how a sanitize erases (default auto)'),
};

/**
 * The operator's word for media Berth has no record of, in every driver: a
 * cleaned device is offered without a first cleanup; a one-time-use device
 * is taken as unused instead of held for a release (decision 62). Elsewhere
 * it vouches for nothing, so it is refused.
 */
export const assumeCleanShape = {
  assume_clean: bool.describe(
    'media Berth has no record of is taken as clean: a device that is cleaned is offered without a first cleanup, a one-time-use device as unused; the agent logs it (default false: cleaned first, or held for an operator)',
  ),
};

export const NOVA_KEYS: readonly string[] = Object.keys(novaEntryShape);
export const HOST_KEYS: readonly string[] = Object.keys(hostEntryShape);
export const CLEANUP_KEYS: readonly string[] = Object.keys(cleanupEntryShape);
export const ASSUME_CLEAN_KEYS: readonly string[] = Object.keys(assumeCleanShape);

/** One entry's input shape (for the JSON Schema). */
export function deviceSpecEntrySchema(cleanupKeys: boolean) {
  return z
    .strictObject(
      cleanupKeys
        ? { ...novaEntryShape, ...hostEntryShape, ...cleanupEntryShape, ...assumeCleanShape }
        : { ...novaEntryShape, ...hostEntryShape, ...assumeCleanShape },
    )
    .partial();
}

/** What `device_spec:` accepts: an entry, a list of entries, and (as in nova.conf) entries as JSON strings. */
export function deviceSpecInputSchema(cleanupKeys: boolean) {
  const entry = deviceSpecEntrySchema(cleanupKeys);
  const asJson = z.string().describe('an entry (or a list of entries) as a JSON string, as in nova.conf');
  return z
    .union([entry, z.array(z.union([entry, asJson])), asJson])
    .describe(
      "which devices the driver manages, with the keys of Nova's [pci] device_spec; the first match wins",
    );
}
