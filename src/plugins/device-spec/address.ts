/**
 * The `address` key of a device_spec entry, with Nova's semantics
 * (nova/pci/devspec.py: PciAddressGlobSpec, PciAddressRegexSpec):
 *
 * - a glob string `[[[domain]:]bus]:][slot][.[function]]` whose parts are hex,
 *   `*`, or empty (= `*`); the `domain:bus:slot` fields fill from the right, so
 *   `"0a"` alone is the slot; each part is range-checked and zero-padded;
 * - or an object of regular expressions per field, matched from the start of
 *   the device's lower-case field (Python `re.match`: anchored at the start only).
 */
import { ConfigError } from '../../errors.js';
import { keyPath, show } from './messages.js';
import type { AddressGlob, AddressRegex } from './types.js';

const PCI_ADDRESS = /^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$/;

/** A full, lower-case PCI address as sysfs names it: 0000:3b:00.1. */
export function isValidPciAddress(address: string): boolean {
  return typeof address === 'string' && PCI_ADDRESS.test(address);
}

/** The four fields of a valid address, or null. */
export function splitAddress(
  address: string,
): { domain: string; bus: string; slot: string; function: string } | null {
  if (!isValidPciAddress(address)) return null;
  return {
    domain: address.slice(0, 4),
    bus: address.slice(5, 7),
    slot: address.slice(8, 10),
    function: address.slice(11, 12),
  };
}

/**
 * Parses a hex number the way the operator means it: optional surrounding
 * space and `0x` prefix (Python's int(x, 16), which Nova uses, accepts both),
 * then hex digits. Returns the digits without leading zeros, or null when the
 * text is not hex. Signs and `_` separators, which Python also tolerates, are
 * refused: no real id is written that way.
 */
export function parseHexDigits(text: string): string | null {
  const match = /^(?:0[xX])?([0-9a-fA-F]+)$/.exec(text.trim());
  if (!match) return null;
  return match[1]!.toLowerCase().replace(/^0+(?=.)/, '');
}

/** Zero-padded lower-case hex of a value no greater than `max`, or null when out of range. */
export function hexInRange(digits: string, max: number, width: number): string | null {
  if (digits.length > 8) return null;
  const value = Number.parseInt(digits, 16);
  return value <= max ? digits.padStart(width, '0') : null;
}

interface FieldRule {
  name: 'domain' | 'bus' | 'slot' | 'function';
  max: number;
  width: number;
}

const DOMAIN: FieldRule = { name: 'domain', max: 0xffff, width: 4 };
const BUS: FieldRule = { name: 'bus', max: 0xff, width: 2 };
const SLOT: FieldRule = { name: 'slot', max: 0x1f, width: 2 };
const FUNCTION: FieldRule = { name: 'function', max: 0x7, width: 1 };

function globPart(part: string, rule: FieldRule, where: string, raw: string): string {
  const text = part.trim();
  if (text === '' || text === '*') return '*';
  const digits = parseHexDigits(text);
  if (digits === null) {
    throw new ConfigError(`${where}: ${show(raw)} has ${rule.name} ${show(text)}, which is not hex or "*"`);
  }
  const value = hexInRange(digits, rule.max, rule.width);
  if (value === null) {
    throw new ConfigError(
      `${where}: ${show(raw)} has ${rule.name} ${show(text)}, greater than the maximum ${rule.max.toString(16)}`,
    );
  }
  return value;
}

/** Parses the glob form; `where` is e.g. 'pci.device_spec[0].address'. */
export function parseAddressGlob(raw: string, where: string): AddressGlob {
  const dot = raw.indexOf('.');
  const dbs = dot === -1 ? raw : raw.slice(0, dot);
  const func = dot === -1 ? '' : raw.slice(dot + 1);
  const fields = dbs.split(':');
  if (fields.length > 3) {
    throw new ConfigError(
      `${where}: ${show(raw)} has ${fields.length} ":"-separated fields before the ".", at most 3 (domain:bus:slot)`,
    );
  }
  while (fields.length < 3) fields.unshift('*');
  const glob: AddressGlob = {
    kind: 'glob',
    domain: globPart(fields[0]!, DOMAIN, where, raw),
    bus: globPart(fields[1]!, BUS, where, raw),
    slot: globPart(fields[2]!, SLOT, where, raw),
    function: globPart(func, FUNCTION, where, raw),
    exact: false,
  };
  glob.exact = [glob.domain, glob.bus, glob.slot, glob.function].every((part) => part !== '*');
  return glob;
}

const REGEX_KEYS = ['domain', 'bus', 'slot', 'function'] as const;

/**
 * A field's regular expression is at most this long. A PCI field is 1-4 hex
 * digits, so no sensible pattern comes near it; the bound keeps compiling and
 * matching cheap (a 200,000-way alternation used to pass parsing and overflow
 * the stack at its first match), and against subjects of at most 4 characters
 * even a backtracking pattern has little to try.
 */
export const MAX_FIELD_REGEX_LENGTH = 256;

/** Parses the object-of-regexes form; `where` is e.g. 'pci.device_spec[0].address'. */
export function parseAddressRegex(raw: Record<string, unknown>, where: string): AddressRegex {
  for (const key of Object.keys(raw)) {
    if (!(REGEX_KEYS as readonly string[]).includes(key)) {
      throw new ConfigError(
        `${keyPath(where, key)}: unknown key (value ${show(raw[key])}); an address object takes domain, bus, slot and function`,
      );
    }
  }
  const spec: AddressRegex = { kind: 'regex', singleAddress: null };
  const sources: string[] = [];
  for (const key of REGEX_KEYS) {
    if (!Object.hasOwn(raw, key)) continue;
    const source = raw[key];
    if (typeof source !== 'string') {
      throw new ConfigError(`${where}.${key}: ${show(source)} is not a regular expression string`);
    }
    if (source.length > MAX_FIELD_REGEX_LENGTH) {
      throw new ConfigError(
        `${where}.${key}: ${show(source)} is ${source.length} characters long; a field's regular expression may have at most ${MAX_FIELD_REGEX_LENGTH}`,
      );
    }
    try {
      // Compile alone first: only a pattern with balanced groups can be wrapped
      // without changing its meaning (`a)|(b` would otherwise become valid).
      new RegExp(source);
      const re = new RegExp(`^(?:${source})`);
      // V8 compiles a pattern at its first use: use it now, so nothing fails later.
      re.test('0000');
      spec[key] = re;
    } catch (error) {
      throw new ConfigError(
        `${where}.${key}: ${show(source)} is not a valid regular expression (${(error as Error).message})`,
      );
    }
    sources.push(source);
  }
  if (sources.length === 4 && sources.every((s) => /^[0-9a-fA-F]+$/.test(s))) {
    const candidate = `${sources[0]}:${sources[1]}:${sources[2]}.${sources[3]}`;
    spec.singleAddress = isValidPciAddress(candidate) ? candidate : null;
  }
  return spec;
}

/** Whether a full address matches the spec (no PF/VF logic here). */
export function addressMatches(spec: AddressGlob | AddressRegex, address: string): boolean {
  const fields = splitAddress(address);
  if (fields === null) return false;
  if (spec.kind === 'glob') {
    return REGEX_KEYS.every((key) => spec[key] === '*' || spec[key] === fields[key]);
  }
  return REGEX_KEYS.every((key) => spec[key] === undefined || spec[key].test(fields[key]));
}

/** The one address an exact glob (or an all-hex regex object) names, else null. */
export function singleAddressOf(spec: AddressGlob | AddressRegex): string | null {
  if (spec.kind === 'regex') return spec.singleAddress;
  return spec.exact ? `${spec.domain}:${spec.bus}:${spec.slot}.${spec.function}` : null;
}
