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
import { show } from './messages.js';
import { OS_RESOURCE_CLASSES, OS_TRAITS } from './os-names.js';

const CUSTOM = 'CUSTOM_';
/** Placement's limit on class and trait names. */
const MAX_NAME = 255;
const CUSTOM_RESOURCE_CLASS = /^CUSTOM_[A-Z0-9_]+$/;
/** DESIGN.md: custom traits match this. */
const CUSTOM_TRAIT = /^CUSTOM_[A-Z0-9_]{1,248}$/;

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

/** 'foo-bar' -> 'CUSTOM_FOO_BAR'; 'CUSTOM_X' and standard classes (PCI_DEVICE, ...) kept. */
export function normalizeResourceClass(value: string, where: string): string {
  const upper = nonEmpty(value, where, 'resource class').toUpperCase();
  if (STANDARD_RESOURCE_CLASSES.has(upper)) return upper;
  const name = upper.startsWith(CUSTOM) ? upper : toCustom(upper);
  if (!CUSTOM_RESOURCE_CLASS.test(name) || name.length > MAX_NAME) {
    throw new ConfigError(
      `${where}: ${show(value)} is not a valid resource class (${show(name)} must match ${CUSTOM_RESOURCE_CLASS.source} and be at most ${MAX_NAME} characters)`,
    );
  }
  return name;
}

/** 'foo' -> 'CUSTOM_FOO'; 'CUSTOM_X' kept (upper-cased); standard names (os-traits, Berth's own) kept as given. */
export function normalizeTrait(value: string, where: string): string {
  const text = nonEmpty(value, where, 'trait');
  if (STANDARD_TRAITS.has(text)) return text;
  const upper = text.toUpperCase();
  const name = upper.startsWith(CUSTOM) ? upper : toCustom(upper);
  if (!CUSTOM_TRAIT.test(name)) {
    throw new ConfigError(
      `${where}: ${show(value)} is not a valid trait (${show(name)} must match ${CUSTOM_TRAIT.source})`,
    );
  }
  return name;
}
