/**
 * The `address` key of a device_spec entry, with Nova's semantics
 * (nova/pci/devspec.py: PciAddressGlobSpec, PciAddressRegexSpec):
 *
 * - a glob string `[[[domain]:]bus]:][slot][.[function]]` whose parts are hex,
 *   `*`, or empty (= `*`); the `domain:bus:slot` fields fill from the right, so
 *   `"0a"` alone is the slot; each part is range-checked and zero-padded. As in
 *   Nova, a part is stripped first, but a function part that is only blanks
 *   (`"0a:00. "`) is refused, not read as `*`;
 * - or an object of Python regular expressions per field (python-regex.ts),
 *   matched from the start of the device's lower-case field (Python `re.match`:
 *   anchored at the start only).
 */
import { ConfigError } from '../../errors.js';
import { isPciAddress, pciAddressParts } from '../../identifiers.js';
import { keyPath, show } from './messages.js';
import { compilePythonMatch } from './python-regex.js';
import { pyStrip, pythonHex } from './python-values.js';
import type { AddressGlob, AddressRegex } from './types.js';

/** A full, lower-case PCI address as sysfs names it: 0000:3b:00.1 (the driver API's name for isPciAddress). */
export const isValidPciAddress = isPciAddress;

/** The four fields of a valid address, or null. */
export function splitAddress(
  address: string,
): { domain: string; bus: string; slot: string; function: string } | null {
  return isPciAddress(address) ? pciAddressParts(address) : null;
}

/**
 * A hex number as Nova reads it with Python's int(text, 16) (optional `0x`,
 * spaces around it), range-checked against `max` and zero-padded to `width`;
 * or what is wrong with it. Python also reads a sign, `_` separators and
 * non-ASCII digits: Berth refuses those (docs/nova-device-spec.md), since no
 * real id is written that way and a negative one would match nothing.
 */
export function hexValue(text: string, max: number, width: number): { value: string } | { problem: string } {
  const read = pythonHex(text);
  if (read === null) return { problem: 'not hex' };
  if ('unusual' in read) {
    return { problem: `written with ${read.unusual}, which Berth refuses; write plain hex digits` };
  }
  const value = hexInRange(read.digits, max, width);
  if (value === null) return { problem: `greater than the maximum ${max.toString(16)}` };
  return { value };
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

/** One part, stripped as Python strips; blank is `*` unless `blankIsAny` is false (the function part, as in Nova). */
function globPart(part: string, rule: FieldRule, where: string, raw: string, blankIsAny = true): string {
  const text = pyStrip(part);
  if (text === '*' || (text === '' && blankIsAny)) return '*';
  if (text === '') {
    throw new ConfigError(
      `${where}: ${show(raw)} has a blank ${rule.name} after the "."; leave nothing after the "." or write "*" for any ${rule.name}`,
    );
  }
  const read = hexValue(text, rule.max, rule.width);
  if ('problem' in read) {
    const problem = read.problem === 'not hex' ? 'which is not hex or "*"' : read.problem;
    throw new ConfigError(`${where}: ${show(raw)} has ${rule.name} ${show(text)}, ${problem}`);
  }
  return read.value;
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
    // Nova: an empty function part is any, a blank one is int(' ', 16), an error.
    function: func === '' ? '*' : globPart(func, FUNCTION, where, raw, false),
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
    const compiled = compilePythonMatch(source);
    if ('error' in compiled) throw new ConfigError(`${where}.${key}: ${show(source)} ${compiled.error}`);
    spec[key] = compiled.regexp;
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
