/**
 * Resource class and trait names "the Placement way", as Nova's
 * pci_placement_translator does with the `resource_class` and `traits` tags:
 * a name that is already a standard one (os-resource-classes, os-traits: the
 * lists in os-names.ts) or already CUSTOM_ is kept (upper-cased), anything else
 * becomes CUSTOM_ + the name upper-cased with every run of non-alphanumerics
 * turned into one `_` (os_resource_classes / os_traits normalize_name).
 * Departures (docs/nova-device-spec.md): names are trimmed; Berth's own trait
 * names are standard too; and unlike Nova, which hands an invalid CUSTOM_ name
 * on to Placement to be refused at runtime, an invalid result is a ConfigError
 * at start.
 */
import { ConfigError } from '../../errors.js';
import { isResourceClass, isTrait, type ResourceClass, type Trait } from '../../identifiers.js';
import { show } from './messages.js';
import { OS_RESOURCE_CLASSES, OS_TRAITS } from './os-names.js';

const CUSTOM = 'CUSTOM_';

/** os_resource_classes.STANDARDS: kept as they are. */
const STANDARD_RESOURCE_CLASSES: ReadonlySet<string> = new Set(OS_RESOURCE_CLASSES);

/** The traits Berth sets itself (DESIGN.md "Resource classes and traits"): standard to Berth, though not in os-traits. */
export const BERTH_TRAITS: readonly string[] = [
  'OWNER_BERTH',
  'HW_NVME_CES',
  'HW_NVME_BES',
  'HW_NVME_WZS',
  'HW_PCI_LIVE_MIGRATABLE',
  'HW_ONE_TIME_USE',
];

/**
 * Kept exactly as written (case included), as os_traits.check_traits keeps
 * them: os-traits' names and Berth's own. A lower-case `hw_foo` or an unknown
 * `HW_FOO` is not standard (as in Nova) and becomes CUSTOM_HW_FOO.
 */
const STANDARD_TRAITS: ReadonlySet<string> = new Set([...OS_TRAITS, ...BERTH_TRAITS]);

function nonEmpty(value: unknown, where: string, what: string): string {
  if (typeof value !== 'string')
    throw new ConfigError(`${where}: ${show(value)} is not a ${what} name string`);
  const text = value.trim();
  if (text === '') throw new ConfigError(`${where}: ${show(value)} is an empty ${what} name`);
  return text;
}

/** Placement's normalize_name: upper-case, runs of non-alphanumerics to `_`, CUSTOM_ prefix. */
function toCustom(upper: string): string {
  return CUSTOM + upper.replace(/[^0-9A-Za-z]+/g, '_').toUpperCase();
}

/**
 * 'foo-bar' -> 'CUSTOM_FOO_BAR'; 'CUSTOM_X' and standard classes (PCI_DEVICE, ...) kept.
 * The result is held to the one rule for Placement names (src/identifiers.ts).
 */
export function normalizeResourceClass(value: string, where: string): ResourceClass {
  const upper = nonEmpty(value, where, 'resource class').toUpperCase();
  const name = STANDARD_RESOURCE_CLASSES.has(upper) || upper.startsWith(CUSTOM) ? upper : toCustom(upper);
  if (!isResourceClass(name)) {
    throw new ConfigError(
      `${where}: ${show(value)} is not a valid resource class (${show(name)} must match ^CUSTOM_[A-Z0-9_]+$ and be at most 255 characters)`,
    );
  }
  return name;
}

/**
 * 'foo' -> 'CUSTOM_FOO'; 'CUSTOM_X' kept (upper-cased); standard names (os-traits, Berth's own) kept as given.
 * The result is held to the one rule for Placement names (src/identifiers.ts).
 */
export function normalizeTrait(value: string, where: string): Trait {
  const text = nonEmpty(value, where, 'trait');
  const upper = text.toUpperCase();
  const name = STANDARD_TRAITS.has(text) ? text : upper.startsWith(CUSTOM) ? upper : toCustom(upper);
  if (!isTrait(name)) {
    throw new ConfigError(
      `${where}: ${show(value)} is not a valid trait (${show(name)} must match ^CUSTOM_[A-Z0-9_]{1,248}$)`,
    );
  }
  return name;
}
