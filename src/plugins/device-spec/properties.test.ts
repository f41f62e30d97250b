/**
 * Properties over generated input. Run counts stay small here so the suite is
 * fast; FUZZ_RUNS=100000 runs the same properties at length.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../errors.js';
import {
  addressParts,
  anyPciFunction,
  deviceSpecInput,
  differingParts,
  exactGlobText,
  formatAddress,
  idMatching,
  neutralKeys,
  pciFunctionAt,
  propertyRuns,
  traitInput,
} from './arbitraries.support.js';
import { makeFunction, makeLookup } from './fixtures.support.js';
import { compileMatcher, matchDevice } from './match.js';
import { parseDeviceSpecs } from './parse.js';
import { normalizeTrait } from './placement-names.js';

const HEX4 = /^[0-9a-f]{4}$/;

describe('properties', () => {
  it('parseDeviceSpecs returns well-formed entries or throws ConfigError, never anything else', () => {
    fc.assert(
      fc.property(deviceSpecInput, fc.boolean(), anyPciFunction, (raw, cleanupKeys, fn) => {
        let entries: ReturnType<typeof parseDeviceSpecs>;
        try {
          entries = parseDeviceSpecs(raw, { section: 'nvme', cleanupKeys });
        } catch (error) {
          if (!(error instanceof ConfigError)) throw error;
          expect(error.message.startsWith('nvme.device_spec[')).toBe(true);
          return;
        }
        entries.forEach((entry, i) => {
          expect(entry.index).toBe(i);
          expect(entry.vendorId === null || HEX4.test(entry.vendorId)).toBe(true);
          expect(entry.productId === null || HEX4.test(entry.productId)).toBe(true);
          expect(entry.address !== null && entry.devname !== null).toBe(false);
          expect(entry.clearAction === 'zero' && entry.clearStrategy === 'crypto').toBe(false);
          if (!cleanupKeys) expect([entry.clearAction, entry.clearStrategy]).toEqual(['auto', 'auto']);
        });
        // Whatever parsed must also be safe to match with.
        matchDevice(entries, fn, makeLookup([fn]));
      }),
      { numRuns: propertyRuns(1000) },
    );
  });

  it('an exact address glob matches its function and no function differing in any field', () => {
    const scenario = addressParts.chain((parts) =>
      fc.record({
        parts: fc.constant(parts),
        glob: exactGlobText(parts),
        other: differingParts(parts),
        fn: pciFunctionAt(formatAddress(parts)),
        extra: neutralKeys,
      }),
    );
    fc.assert(
      fc.property(
        scenario.chain((s) =>
          fc.record({
            s: fc.constant(s),
            vendor: idMatching(s.fn.vendorId),
            product: idMatching(s.fn.productId),
          }),
        ),
        ({ s, vendor, product }) => {
          const raw: Record<string, unknown> = { ...s.extra, address: s.glob };
          if (vendor !== undefined) raw['vendor_id'] = vendor;
          if (product !== undefined) raw['product_id'] = product;
          const entries = parseDeviceSpecs([raw], { section: 'pci', cleanupKeys: false });
          const address = entries[0]!.address;
          expect(address).toMatchObject({ kind: 'glob', exact: true });
          const otherFn = makeFunction(formatAddress(s.other), {
            vendorId: s.fn.vendorId,
            productId: s.fn.productId,
          });
          expect(otherFn.address).not.toBe(s.fn.address);
          const lookup = makeLookup([s.fn, otherFn]);
          expect(matchDevice(entries, s.fn, lookup)).toBe(entries[0]);
          expect(matchDevice(entries, otherFn, lookup)).toBeNull();
        },
      ),
      { numRuns: propertyRuns(1000) },
    );
  });

  it('normalizeTrait yields a valid custom trait or throws ConfigError for custom input', () => {
    const standard = /^(?:COMPUTE|HW|OWNER|STORAGE|MISC)_[A-Z0-9_]+$/;
    fc.assert(
      fc.property(traitInput, (input) => {
        fc.pre(!standard.test(input.trim()));
        let trait: string;
        try {
          trait = normalizeTrait(input, 'pci.device_spec[0].traits[0]');
        } catch (error) {
          expect(error).toBeInstanceOf(ConfigError);
          return;
        }
        expect(trait).toMatch(/^CUSTOM_[A-Z0-9_]{1,248}$/);
      }),
      { numRuns: propertyRuns(2000) },
    );
  });
});

/**
 * A small host where specs and functions meet often: one domain, two buses,
 * two slots, PFs with VFs, netdevs; ids from a short list.
 */
const smallAddress = fc
  .record({
    bus: fc.constantFrom('3b', '3c'),
    slot: fc.constantFrom('00', '01'),
    fn: fc.integer({ min: 0, max: 7 }),
  })
  .map(({ bus, slot, fn }) => `0000:${bus}:${slot}.${fn}`);
const smallId = fc.constantFrom('8086', '15b3', '10de');
const smallHost = fc
  .uniqueArray(
    fc.record({
      address: smallAddress,
      vendorId: smallId,
      productId: smallId,
      pf: fc.boolean(),
      netdev: fc.constantFrom(null, 'eth0', 'eth1', 'ens0'),
      stray: fc.boolean(),
    }),
    { selector: (f) => f.address, minLength: 1, maxLength: 12 },
  )
  .map((specs) => {
    const fns = specs.map((s) =>
      makeFunction(s.address, {
        vendorId: s.vendorId,
        productId: s.productId,
        sriovTotalVfs: s.pf ? 8 : 0,
        netdevs: s.netdev === null ? [] : [s.netdev],
      }),
    );
    // The other functions on a PF's bus are its VFs; a "stray" one names a
    // function that is no PF as its physfn (matching must still ask).
    fns.forEach((f, i) => {
      const bus = f.address.slice(0, 7);
      const others = fns.filter((p) => p !== f && p.address.slice(0, 7) === bus);
      const pf = specs[i]!.stray ? others[0] : others.find((p) => p.sriovTotalVfs > 0);
      if (pf && f.sriovTotalVfs === 0) f.physfn = pf.address;
    });
    return fns;
  });
const smallIds = fc.record(
  {
    vendor_id: fc.constantFrom('8086', '15B3', '10de', '*', '0x8086'),
    product_id: fc.constantFrom('8086', '15b3', '*'),
  },
  { requiredKeys: [] },
);
/** An entry with an address, a devname or neither (both together do not parse). */
const smallEntry = fc
  .tuple(
    smallIds,
    fc.oneof(
      fc.constant({}),
      fc.record({ devname: fc.constantFrom('eth0', 'eth1', 'ens0', 'nope') }),
      fc.record({
        address: fc.oneof(
          smallAddress,
          fc.constantFrom('3b:00.*', '*:01.*', '0000:3c:*.*', ':00.', '*', '3b:01.7', '0001:3b:00.0'),
          fc.record(
            {
              domain: fc.constantFrom('0000', '.*'),
              bus: fc.constantFrom('3[bc]', '3b', '3c', '.*'),
              slot: fc.constantFrom('00', '0[01]', '01'),
              function: fc.constantFrom('[0-3]', '0', '1', '.*'),
            },
            { requiredKeys: [] },
          ),
        ),
      }),
    ),
  )
  .map(([ids, where]) => ({ ...ids, ...where }));

describe('compileMatcher', () => {
  it('decides as matchDevice for every function of a host', () => {
    fc.assert(
      fc.property(smallHost, fc.array(smallEntry, { maxLength: 6 }), (fns, raw) => {
        const entries = parseDeviceSpecs(raw, { section: 'pci', cleanupKeys: false });
        const lookup = makeLookup(fns);
        const match = compileMatcher(entries, lookup);
        for (const fn of fns) expect(match(fn)).toBe(matchDevice(entries, fn, lookup));
      }),
      { numRuns: propertyRuns(2000) },
    );
  });

  it('decides as matchDevice on any input that parses', () => {
    fc.assert(
      fc.property(deviceSpecInput, fc.array(anyPciFunction, { maxLength: 4 }), (raw, fns) => {
        let entries: ReturnType<typeof parseDeviceSpecs>;
        try {
          entries = parseDeviceSpecs(raw, { section: 'pci', cleanupKeys: false });
        } catch (error) {
          if (error instanceof ConfigError) return;
          throw error;
        }
        const lookup = makeLookup(fns);
        const match = compileMatcher(entries, lookup);
        for (const fn of fns) expect(match(fn)).toBe(matchDevice(entries, fn, lookup));
      }),
      { numRuns: propertyRuns(1000) },
    );
  });
});
