/**
 * Test support: fast-check arbitraries for device_spec inputs, shared by the property tests
 * (a few hundred runs each) and a long fuzz run (FUZZ_RUNS=100000). They lean
 * towards almost-valid input — known keys, hex-ish and regex-ish strings —
 * because purely random JSON rarely gets past the first check.
 */
import fc from 'fast-check';
import type { PciFunction } from '../types.js';
import { makeFunction } from './fixtures.support.js';

/** Runs per property: FUZZ_RUNS when set (the fuzz script), else `base`. */
export function propertyRuns(base: number): number {
  const fromEnv = Number(process.env['FUZZ_RUNS']);
  return Number.isInteger(fromEnv) && fromEnv > 0 ? fromEnv : base;
}

export const KNOWN_KEYS = [
  'vendor_id',
  'product_id',
  'address',
  'devname',
  'managed',
  'live_migratable',
  'one_time_use',
  'clear_action',
  'clear_strategy',
  'assume_clean',
  'resource_class',
  'traits',
  'physical_network',
  'trusted',
  'remote_managed',
] as const;

const fromChars = (chars: string, maxLength = 12) =>
  fc.string({ unit: fc.constantFrom(...chars.split('')), maxLength });

/** Strings that look like ids, address globs, booleans, enums, regexes or names. */
export const plausibleString: fc.Arbitrary<string> = fc.oneof(
  fromChars('0123456789abcdefABCDEFxX*', 6),
  fromChars('0123456789abcdefxX*:. ', 16),
  fc.constantFrom(
    'true',
    'no',
    ' Yes ',
    'on',
    '1',
    'maybe',
    'auto',
    'zero',
    'crypto',
    'sanitize',
    'block',
    '',
  ),
  fromChars('()[]{}|*+?\\^$.ab0-9:<>=!', 10),
  fromChars('abcdefghxyzABC_-. 0123456789é,/', 20),
  fc.string(),
);

/** Any JSON-ish value, weighted towards plausible strings. */
export const plausibleValue: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 4, arbitrary: plausibleString },
  { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 2 }) },
  { weight: 1, arbitrary: fc.array(plausibleString, { maxLength: 4 }) },
  {
    weight: 1,
    arbitrary: fc.dictionary(
      fc.oneof(fc.constantFrom('domain', 'bus', 'slot', 'function'), fc.string({ maxLength: 6 })),
      fc.oneof(plausibleString, fc.jsonValue({ maxDepth: 1 })),
      { maxKeys: 5 },
    ),
  },
);

/** An object that looks like a device_spec entry: mostly known keys, sometimes misspelt ones. */
export const entryLike: fc.Arbitrary<Record<string, unknown>> = fc.dictionary(
  fc.oneof(
    { weight: 15, arbitrary: fc.constantFrom(...KNOWN_KEYS) },
    { weight: 1, arbitrary: fc.string({ maxLength: 16 }) },
  ),
  plausibleValue,
  { maxKeys: 6 },
);

/** Anything parseDeviceSpecs might be handed: JSON values, JSON text, entries, lists of them. */
export const deviceSpecInput: fc.Arbitrary<unknown> = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }),
  fc.json({ maxDepth: 3 }),
  entryLike,
  entryLike.map((entry) => JSON.stringify(entry)),
  fc.array(
    fc.oneof(
      entryLike,
      entryLike.map((e) => JSON.stringify(e)),
      fc.jsonValue({ maxDepth: 2 }),
    ),
    {
      maxLength: 4,
    },
  ),
  fc.array(entryLike, { maxLength: 3 }).map((list) => JSON.stringify(list)),
);

export interface AddressParts {
  domain: number;
  bus: number;
  slot: number;
  function: number;
}

export const addressParts: fc.Arbitrary<AddressParts> = fc.record({
  domain: fc.integer({ min: 0, max: 0xffff }),
  bus: fc.integer({ min: 0, max: 0xff }),
  slot: fc.integer({ min: 0, max: 0x1f }),
  function: fc.integer({ min: 0, max: 7 }),
});

const hex = (value: number, width: number) => value.toString(16).padStart(width, '0');

/** The canonical sysfs form of an address. */
export function formatAddress(parts: AddressParts): string {
  return `${hex(parts.domain, 4)}:${hex(parts.bus, 2)}:${hex(parts.slot, 2)}.${hex(parts.function, 1)}`;
}

/** The same parts with one field changed to another in-range value. */
export const differingParts = (parts: AddressParts): fc.Arbitrary<AddressParts> =>
  fc
    .record({
      field: fc.constantFrom<keyof AddressParts>('domain', 'bus', 'slot', 'function'),
      delta: fc.integer({ min: 1, max: 0xfffe }),
    })
    .map(({ field, delta }) => {
      const size = { domain: 0x10000, bus: 0x100, slot: 0x20, function: 8 }[field];
      return { ...parts, [field]: (parts[field] + (delta % (size - 1)) + 1) % size };
    });

/** An exact glob for `parts`, written any way an operator might: case, padding, 0x, spaces. */
export const exactGlobText = (parts: AddressParts): fc.Arbitrary<string> =>
  fc
    .record({
      upper: fc.boolean(),
      padding: fc.constantFrom('minimal', 'full', 'extra'),
      prefix: fc.boolean(),
      spaces: fc.boolean(),
    })
    .map(({ upper, padding, prefix, spaces }) => {
      const write = (value: number, width: number) => {
        const digits =
          padding === 'minimal' ? value.toString(16) : hex(value, width + (padding === 'extra' ? 2 : 0));
        return upper ? (prefix ? '0X' : '') + digits.toUpperCase() : (prefix ? '0x' : '') + digits;
      };
      const sep = spaces ? ' ' : '';
      const parts4 = [
        write(parts.domain, 4),
        write(parts.bus, 2),
        write(parts.slot, 2),
        write(parts.function, 1),
      ];
      return `${sep}${parts4[0]}${sep}:${sep}${parts4[1]}${sep}:${sep}${parts4[2]}${sep}.${sep}${parts4[3]}${sep}`;
    });

/** How an id may be written so that it still means `id`: absent, "*", or the id in any case / 0x form. */
export const idMatching = (id: string): fc.Arbitrary<string | undefined> =>
  fc.constantFrom(undefined, '*', id, id.toUpperCase(), `0x${id}`, ` ${id} `, id.replace(/^0+(?=.)/, ''));

/** Optional valid keys that do not affect matching. */
export const neutralKeys: fc.Arbitrary<Record<string, unknown>> = fc.record(
  {
    managed: fc.constantFrom(true, false, 'yes', 'off', 1),
    live_migratable: fc.constantFrom(true, 'false', 'On'),
    one_time_use: fc.constantFrom(false, 'y', 'N'),
    resource_class: fc.constantFrom('gpu', 'CUSTOM_X', 'PCI_DEVICE'),
    traits: fc.constantFrom(['fast'], 'a,b', [] as string[], ['HW_GPU_API_CUDA']),
    physical_network: fc.constantFrom('physnet1'),
    trusted: fc.constantFrom(true, 'no'),
  },
  { requiredKeys: [] },
);

/** A PCI function with random ids at the given address. */
export const pciFunctionAt = (address: string): fc.Arbitrary<PciFunction> =>
  fc
    .record({
      vendorId: fc.integer({ min: 0, max: 0xffff }).map((v) => hex(v, 4)),
      productId: fc.integer({ min: 0, max: 0xffff }).map((v) => hex(v, 4)),
    })
    .map((ids) => makeFunction(address, ids));

/** Any PCI function (plain, PF or VF shape), for "matching never throws" runs. */
export const anyPciFunction: fc.Arbitrary<PciFunction> = fc
  .record({
    address: addressParts.map(formatAddress),
    physfn: fc.option(addressParts.map(formatAddress)),
    sriovTotalVfs: fc.constantFrom(0, 0, 8),
    vendorId: fc.integer({ min: 0, max: 0xffff }).map((v) => hex(v, 4)),
    productId: fc.integer({ min: 0, max: 0xffff }).map((v) => hex(v, 4)),
    netdevs: fc.array(fc.constantFrom('eth0', 'eth1', 'enp59s0f0'), { maxLength: 2 }),
  })
  .map(({ address, ...rest }) => makeFunction(address, rest));

/** Inputs for normalizeTrait: arbitrary text, Placement-ish text, and CUSTOM_ forms. */
export const traitInput: fc.Arbitrary<string> = fc.oneof(
  fc.string(),
  fc.string({ unit: 'grapheme', maxLength: 30 }),
  fromChars('abcxyzABCXYZ_-. 0129é/ß', 40),
  fromChars('ab_-', 300),
  fromChars('ABZ_09', 250).map((s) => `CUSTOM_${s}`),
  fromChars('abz_-09', 30).map((s) => `custom_${s}`),
);
