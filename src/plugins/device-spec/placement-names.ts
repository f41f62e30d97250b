/**
 * Resource class and trait names "the Placement way", as Nova's
 * pci_placement_translator does with the `resource_class` and `traits` tags:
 * a name that is already a standard one or already CUSTOM_ is kept (upper-cased),
 * anything else becomes CUSTOM_ + the name upper-cased with every run of
 * non-alphanumerics turned into one `_` (os_resource_classes / os_traits
 * normalize_name). Unlike Nova, which hands an invalid CUSTOM_ name on to
 * Placement to be refused at runtime, an invalid result is a ConfigError at start.
 */
import { ConfigError } from '../../errors.js';
import { show } from './messages.js';

const CUSTOM = 'CUSTOM_';
/** Placement's limit on class and trait names. */
const MAX_NAME = 255;
const CUSTOM_RESOURCE_CLASS = /^CUSTOM_[A-Z0-9_]+$/;
/** DESIGN.md: custom traits match this. */
const CUSTOM_TRAIT = /^CUSTOM_[A-Z0-9_]{1,248}$/;

/** os_resource_classes.STANDARDS (1.1.0): kept as they are. */
const STANDARD_RESOURCE_CLASSES: ReadonlySet<string> = new Set([
  'VCPU',
  'MEMORY_MB',
  'DISK_GB',
  'PCI_DEVICE',
  'SRIOV_NET_VF',
  'NUMA_SOCKET',
  'NUMA_CORE',
  'NUMA_THREAD',
  'NUMA_MEMORY_MB',
  'IPV4_ADDRESS',
  'VGPU',
  'VGPU_DISPLAY_HEAD',
  'NET_BW_EGR_KILOBIT_PER_SEC',
  'NET_BW_IGR_KILOBIT_PER_SEC',
  'PCPU',
  'MEM_ENCRYPTION_CONTEXT',
  'FPGA',
  'PGPU',
  'NET_PACKET_RATE_KILOPACKET_PER_SEC',
  'NET_PACKET_RATE_EGR_KILOPACKET_PER_SEC',
  'NET_PACKET_RATE_IGR_KILOPACKET_PER_SEC',
]);

/**
 * Standard trait namespaces (os_traits' top-level modules, plus Berth's own
 * OWNER_BERTH and HW_* traits). Nova keeps a name only when it is exactly a
 * known standard trait, case included; without the full os_traits list we keep
 * any upper-case name in these namespaces. A lower-case `hw_foo` is not
 * standard (as in Nova) and becomes CUSTOM_HW_FOO.
 */
const STANDARD_TRAIT = /^(?:COMPUTE|HW|OWNER|STORAGE|MISC)_[A-Z0-9_]+$/;

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

/** 'foo' -> 'CUSTOM_FOO'; 'CUSTOM_X' kept (upper-cased); standard names (HW_*, OWNER_*, COMPUTE_*, ...) kept as given. */
export function normalizeTrait(value: string, where: string): string {
  const text = nonEmpty(value, where, 'trait');
  if (STANDARD_TRAIT.test(text) && text.length <= MAX_NAME) return text;
  const upper = text.toUpperCase();
  const name = upper.startsWith(CUSTOM) ? upper : toCustom(upper);
  if (!CUSTOM_TRAIT.test(name)) {
    throw new ConfigError(
      `${where}: ${show(value)} is not a valid trait (${show(name)} must match ${CUSTOM_TRAIT.source})`,
    );
  }
  return name;
}
