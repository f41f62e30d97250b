/**
 * Parsing and validation of `device_spec` lists with the semantics of Nova's
 * `[pci] device_spec` (nova/pci/whitelist.py and nova/pci/devspec.py), so an
 * operator's existing entries mean the same here. Everything is checked once,
 * at agent start; every mistake is a ConfigError naming the entry, the key and
 * the value, and no input can make this module throw anything else.
 */
import { z } from 'zod';
import { ConfigError } from '../../errors.js';
import { hexValue, parseAddressGlob, parseAddressRegex, singleAddressOf } from './address.js';
import { closest, keyPath, show } from './messages.js';
import { normalizeResourceClass, normalizeTrait } from './placement-names.js';
import { JsonFloat, parsePythonJson, pyStrip } from './python-values.js';
import { ASSUME_CLEAN_KEYS, CLEANUP_KEYS, HOST_KEYS, NOVA_KEYS } from './schema.js';
import type { ClearAction, ClearStrategy, DeviceSpecEntry, ParseOptions } from './types.js';

const CLEAR_ACTIONS: readonly ClearAction[] = ['auto', 'sanitize', 'zero'];
const CLEAR_STRATEGIES: readonly ClearStrategy[] = ['auto', 'crypto', 'block'];

/** oslo.utils strutils.bool_from_string(strict=True) vocabulary. */
const TRUE_STRINGS: ReadonlySet<string> = new Set(['1', 't', 'true', 'on', 'y', 'yes']);
const FALSE_STRINGS: ReadonlySet<string> = new Set(['0', 'f', 'false', 'off', 'n', 'no']);

/** Linux dev_valid_name(): 1-15 bytes, not . or .., no '/', ':', whitespace or NUL. It also keeps the sysfs path safe. */
const INTERFACE_NAME = /^[^/:\s\0]{1,15}$/;

/**
 * oslo's strict boolean parsing: JSON true/false, the integers 1 and 0 (oslo
 * stringifies them; a float such as 1.0 in a JSON string entry is "1.0" to it,
 * and refused), and the strings 1 t true on y yes / 0 f false off n no,
 * stripped as Python strips, in any case. Anything else is a ConfigError naming
 * `where` and the value.
 */
export function parseBool(value: unknown, where: string): boolean {
  if (typeof value === 'boolean') return value;
  if (value === 1 || value === 0) return value === 1;
  if (value instanceof JsonFloat) {
    throw new ConfigError(
      `${where}: ${value.text} is a JSON float, not a boolean (use true/false, yes/no, on/off, 1/0, t/f, y/n)`,
    );
  }
  if (typeof value === 'string') {
    const text = pyStrip(value).toLowerCase();
    if (TRUE_STRINGS.has(text)) return true;
    if (FALSE_STRINGS.has(text)) return false;
  }
  throw new ConfigError(
    `${where}: ${show(value)} is not a boolean (use true/false, yes/no, on/off, 1/0, t/f, y/n)`,
  );
}

/** A plain mapping (JSON object / YAML map); class instances, arrays and null are not. */
function isRecord(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/**
 * vendor_id / product_id: `*` = any, else hex up to ffff normalised to 4
 * lower-case digits. As in Nova, only vendor_id is stripped before the `*`
 * test (`strip`): a product_id " * " is not `*`, and not hex either.
 */
function parseId(value: unknown, where: string, strip: boolean): string | null {
  if (typeof value !== 'string') {
    // YAML reads an unquoted 8086 as a number and 0x10de as 4318: refuse rather than guess.
    throw new ConfigError(
      `${where}: ${show(value)} is not a hex id of up to 4 digits; write it as a quoted string ("8086") or "*"`,
    );
  }
  const text = strip ? pyStrip(value) : value;
  if (text === '*') return null;
  const read = hexValue(text, 0xffff, 4);
  if ('problem' in read) {
    const unusual = read.problem.startsWith('written with') ? ` (${read.problem})` : '';
    throw new ConfigError(`${where}: ${show(value)} is not a hex id of up to 4 digits${unusual}`);
  }
  return read.value;
}

function parseEnum<T extends string>(value: unknown, allowed: readonly T[], where: string): T {
  const text = typeof value === 'string' ? value.trim().toLowerCase() : null;
  const found = allowed.find((option) => option === text);
  if (found === undefined)
    throw new ConfigError(`${where}: ${show(value)} is not one of ${allowed.join(', ')}`);
  return found;
}

function parseTraits(value: unknown, where: string): string[] {
  let items: unknown[];
  if (typeof value === 'string') {
    // Nova's form: one comma-separated string; "" means none.
    items = value.trim() === '' ? [] : value.split(',');
  } else if (Array.isArray(value)) {
    items = value;
  } else {
    throw new ConfigError(
      `${where}: ${show(value)} is not a list of trait names or a comma-separated string`,
    );
  }
  const traits: string[] = [];
  items.forEach((item, i) => {
    const trait = normalizeTrait(item as string, `${where}[${i}]`);
    if (!traits.includes(trait)) traits.push(trait);
  });
  return traits;
}

function parseEntry(raw: Record<string, unknown>, index: number, source: string, options: ParseOptions) {
  const known: readonly string[] = options.cleanupKeys
    ? [...NOVA_KEYS, ...HOST_KEYS, ...CLEANUP_KEYS, ...ASSUME_CLEAN_KEYS]
    : [...NOVA_KEYS, ...HOST_KEYS, ...ASSUME_CLEAN_KEYS];
  for (const key of Object.keys(raw)) {
    if (known.includes(key)) continue;
    let hint = '';
    if (CLEANUP_KEYS.includes(key)) {
      hint = `; ${CLEANUP_KEYS.join(', ')} are only accepted by drivers that clean devices (nvme), not in ${options.section}`;
    } else {
      const suggestion = closest(key, known);
      hint =
        suggestion === null ? `; known keys: ${known.join(', ')}` : `; did you mean ${show(suggestion)}?`;
    }
    throw new ConfigError(`${keyPath(source, key)}: unknown key (value ${show(raw[key])})${hint}`);
  }

  const at = (key: string) => `${source}.${key}`;
  const has = (key: string) => Object.hasOwn(raw, key);
  const entry: DeviceSpecEntry = {
    index,
    source,
    vendorId: has('vendor_id') ? parseId(raw['vendor_id'], at('vendor_id'), true) : null,
    productId: has('product_id') ? parseId(raw['product_id'], at('product_id'), false) : null,
    address: null,
    devname: null,
    managed: has('managed') ? parseBool(raw['managed'], at('managed')) : true,
    liveMigratable: has('live_migratable') ? parseBool(raw['live_migratable'], at('live_migratable')) : false,
    oneTimeUse: has('one_time_use') ? parseBool(raw['one_time_use'], at('one_time_use')) : false,
    clearAction: has('clear_action')
      ? parseEnum(raw['clear_action'], CLEAR_ACTIONS, at('clear_action'))
      : 'auto',
    clearStrategy: has('clear_strategy')
      ? parseEnum(raw['clear_strategy'], CLEAR_STRATEGIES, at('clear_strategy'))
      : 'auto',
    assumeClean: has('assume_clean') ? parseBool(raw['assume_clean'], at('assume_clean')) : false,
    resourceClass: null,
    traits: has('traits') ? parseTraits(raw['traits'], at('traits')) : [],
    attributes: {},
  };

  if (has('address')) {
    const address = raw['address'];
    if (typeof address === 'string') entry.address = parseAddressGlob(address, at('address'));
    else if (isRecord(address)) entry.address = parseAddressRegex(address, at('address'));
    else {
      throw new ConfigError(
        `${at('address')}: ${show(address)} is neither a PCI address glob string nor an object of regular expressions {domain, bus, slot, function}`,
      );
    }
  }

  if (has('devname')) {
    const devname = raw['devname'];
    if (typeof devname !== 'string' || !INTERFACE_NAME.test(devname) || devname === '.' || devname === '..') {
      throw new ConfigError(`${at('devname')}: ${show(devname)} is not a network interface name`);
    }
    if (has('address')) {
      throw new ConfigError(
        `${source}: devname ${show(devname)} and address ${show(raw['address'])} cannot be used together; use one of them`,
      );
    }
    entry.devname = devname;
  }

  // Devices that are cleaned (nvme-secure-cleanup.txt): the host's driver must own
  // the controller again after the guest (libvirt's managed mode), and they hold
  // their tenant's data, so they do not follow a live migration.
  if (options.cleanupKeys && entry.liveMigratable) {
    throw new ConfigError(
      `${at('live_migratable')}: true is not accepted in ${options.section}: a device that is cleaned holds its tenant's data and does not follow a live migration (nvme-secure-cleanup.txt puts NVMe migration out of scope)`,
    );
  }
  if (options.cleanupKeys && !entry.managed) {
    throw new ConfigError(
      `${at('managed')}: false is not accepted in ${options.section}: cleanup needs the host's nvme driver to own the controller once the guest is gone, which libvirt's managed mode gives (nvme-secure-cleanup.txt)`,
    );
  }

  // In a driver that cleans nothing, assume_clean vouches only that a one-time-use device is unused.
  if (!options.cleanupKeys && entry.assumeClean && !entry.oneTimeUse) {
    throw new ConfigError(
      `${at('assume_clean')}: true vouches for nothing in ${options.section} without one_time_use: true: it declares media Berth has no record of clean in drivers that clean devices (nvme), and a one-time-use device unused`,
    );
  }

  if (entry.clearAction === 'zero' && entry.clearStrategy === 'crypto') {
    throw new ConfigError(
      `${source}: clear_action "zero" cannot be combined with clear_strategy "crypto" (zeroing overwrites blocks; a crypto erase is a sanitize strategy)`,
    );
  }

  if (has('resource_class')) {
    const rc = raw['resource_class'];
    if (typeof rc !== 'string') {
      throw new ConfigError(`${at('resource_class')}: ${show(rc)} is not a resource class name string`);
    }
    // As in Nova, an empty resource_class means "not set".
    entry.resourceClass = rc.trim() === '' ? null : normalizeResourceClass(rc, at('resource_class'));
  }

  if (has('physical_network')) {
    const physnet = raw['physical_network'];
    if (typeof physnet !== 'string' || physnet.trim() === '') {
      throw new ConfigError(`${at('physical_network')}: ${show(physnet)} is not a physical network name`);
    }
    entry.attributes['physical_network'] = physnet.trim();
  }
  for (const key of ['trusted', 'remote_managed']) {
    if (has(key)) entry.attributes[key] = String(parseBool(raw[key], at(key)));
  }
  parseHostKeys(raw, entry, at);
  return entry;
}

/**
 * `allow_no_iommu` / `allow_host_device`: true only for an entry that names
 * one function by its full address — the operator confirms it for that
 * function, never for whatever a wildcard, a pattern or an interface name
 * happens to match.
 */
function parseHostKeys(
  raw: Record<string, unknown>,
  entry: DeviceSpecEntry,
  at: (key: string) => string,
): void {
  for (const [key, field] of [
    ['allow_no_iommu', 'allowNoIommu'],
    ['allow_host_device', 'allowHostDevice'],
  ] as const) {
    if (!Object.hasOwn(raw, key) || !parseBool(raw[key], at(key))) continue;
    if (entry.address === null || singleAddressOf(entry.address) === null) {
      throw new ConfigError(
        `${at(key)}: true needs the entry to name one function by its full address (address: "0000:3d:00.0"), not ${
          entry.address === null
            ? entry.devname
              ? 'devname'
              : 'vendor and product ids alone'
            : 'a wildcard or a pattern'
        }: the operator confirms it for that function only`,
      );
    }
    entry[field] = true;
  }
}

/** The one address an entry names (an exact address glob, or an all-hex regex object), else null. */
export function exactAddress(entry: DeviceSpecEntry): string | null {
  return entry.address === null ? null : singleAddressOf(entry.address);
}

/**
 * Parses a driver's device_spec: absent (undefined/null) is an empty list; one
 * entry or a list of entries; any entry may be a JSON string (as in nova.conf,
 * read as Python's json reads it) holding an object or, as Nova also allows, a
 * list of objects. Entries keep their order: the first matching entry wins.
 */
export function parseDeviceSpecs(raw: unknown, options: ParseOptions): DeviceSpecEntry[] {
  const base = `${options.section}.device_spec`;
  if (raw === undefined || raw === null) return [];
  // One entry is a list of one, so messages always say [index].
  const items = Array.isArray(raw) ? raw : [raw];
  const entries: DeviceSpecEntry[] = [];
  items.forEach((item, i) => {
    const where = `${base}[${i}]`;
    let value: unknown = item;
    if (typeof item === 'string') {
      try {
        value = parsePythonJson(item);
      } catch (error) {
        throw new ConfigError(`${where}: ${show(item)} is not a JSON object (${(error as Error).message})`);
      }
    }
    if (isRecord(value)) {
      entries.push(parseEntry(value, entries.length, where, options));
    } else if (typeof item === 'string' && Array.isArray(value)) {
      value.forEach((inner, j) => {
        if (!isRecord(inner)) {
          throw new ConfigError(`${where}[${j}]: ${show(inner)} is not an object of device_spec keys`);
        }
        entries.push(parseEntry(inner, entries.length, `${where}[${j}]`, options));
      });
    } else {
      throw new ConfigError(`${where}: ${show(item)} is not an object of device_spec keys`);
    }
  });
  return entries;
}

/**
 * `device_spec` in a driver's section schema: parsed with Nova's semantics into
 * entries (every mistake a ConfigError naming `<section>.device_spec[i].<key>`).
 */
export function deviceSpecListSchema(section: string, cleanupKeys: boolean) {
  return z
    .unknown()
    .optional()
    .transform((raw) => parseDeviceSpecs(raw, { section, cleanupKeys }));
}
