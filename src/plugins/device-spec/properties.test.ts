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
} from './arbitraries.js';
import { makeFunction, makeLookup } from './fixtures.js';
import { matchDevice } from './match.js';
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
