/**
 * Matching a PCI function against parsed device_spec entries, as Nova's
 * PciDeviceSpec.match / WhitelistPciAddress.match do:
 *
 * - vendor and product ids are compared with the function's own ids;
 * - an address (glob or regex) is matched against the function's address;
 * - when the address names exactly one function and that function is an
 *   SR-IOV PF (sriov_totalvfs > 0), a VF whose physfn is that PF matches too —
 *   and the PF itself still matches through its own address;
 * - a devname names the function behind the interface, plus its VFs when that
 *   function is a PF; an interface that does not resolve matches nothing.
 *
 * Whether the address names a PF is asked of `lookup` at match time (Nova reads
 * sysfs when it parses), so a PF that appears later is handled without a restart.
 */
import type { PciFunction } from '../types.js';
import { addressMatches, isValidPciAddress, singleAddressOf } from './address.js';
import type { DeviceSpecEntry, FunctionLookup } from './types.js';

function isPf(address: string, lookup: FunctionLookup): boolean {
  return (lookup.get(address)?.sriovTotalVfs ?? 0) > 0;
}

function locationMatches(entry: DeviceSpecEntry, fn: PciFunction, lookup: FunctionLookup): boolean {
  if (entry.devname !== null) {
    const resolved = lookup.netdevAddress(entry.devname)?.trim().toLowerCase() ?? null;
    if (resolved === null || !isValidPciAddress(resolved)) return false;
    if (fn.address === resolved) return true;
    return fn.physfn === resolved && isPf(resolved, lookup);
  }
  const spec = entry.address;
  if (spec === null) return true;
  if (addressMatches(spec, fn.address)) return true;
  const single = singleAddressOf(spec);
  return single !== null && fn.physfn !== null && fn.physfn === single && isPf(single, lookup);
}

/** Whether one entry matches the function. */
export function entryMatches(entry: DeviceSpecEntry, fn: PciFunction, lookup: FunctionLookup): boolean {
  if (entry.vendorId !== null && entry.vendorId !== fn.vendorId.toLowerCase()) return false;
  if (entry.productId !== null && entry.productId !== fn.productId.toLowerCase()) return false;
  return locationMatches(entry, fn, lookup);
}

/** The first entry that matches the function (order is the operator's priority), or null. */
export function matchDevice(
  entries: readonly DeviceSpecEntry[],
  fn: PciFunction,
  lookup: FunctionLookup,
): DeviceSpecEntry | null {
  return entries.find((entry) => entryMatches(entry, fn, lookup)) ?? null;
}

/** Where each field of a valid PCI address starts (`dddd:bb:ss.f`). */
const FIELD_AT = { domain: 0, bus: 5, slot: 8, function: 11 } as const;
const FIELD_END = { domain: 4, bus: 7, slot: 10, function: 12 } as const;
/** Ids as the reader gives them; anything else is lower-cased before comparing. */
const LOWER_ID = /^[0-9a-f]{4}$/;
const FIELDS = ['domain', 'bus', 'slot', 'function'] as const;

/** One entry's test, with what does not depend on the function worked out. */
type CompiledTest = (fn: PciFunction, validAddress: boolean) => boolean;

function compileLocation(entry: DeviceSpecEntry, lookup: FunctionLookup): CompiledTest {
  if (entry.devname !== null) {
    const resolved = lookup.netdevAddress(entry.devname)?.trim().toLowerCase() ?? null;
    if (resolved === null || !isValidPciAddress(resolved)) return () => false;
    const resolvedIsPf = isPf(resolved, lookup);
    return (fn) => fn.address === resolved || (resolvedIsPf && fn.physfn === resolved);
  }
  const spec = entry.address;
  if (spec === null) return () => true;
  const single = singleAddressOf(spec);
  // A VF of the single PF the address names matches too (its physfn is that PF).
  const pfOfVfs = single !== null && isPf(single, lookup) ? single : null;
  const viaPf = (fn: PciFunction) => pfOfVfs !== null && fn.physfn === pfOfVfs;
  if (spec.kind === 'glob') {
    // Parts are zero-padded to their field's width, so a field matches when
    // the address has that text at the field's position.
    const at: number[] = [];
    const text: string[] = [];
    for (const k of FIELDS) {
      if (spec[k] === '*') continue;
      at.push(FIELD_AT[k]);
      text.push(spec[k]);
    }
    return (fn, valid) => {
      if (valid) {
        let all = true;
        for (let i = 0; i < at.length && all; i++) all = fn.address.startsWith(text[i]!, at[i]);
        if (all) return true;
      }
      return viaPf(fn);
    };
  }
  // Regex fields are tested on the field's text alone (they are anchored at its start only).
  const tests = FIELDS.flatMap((k) => {
    const re = spec[k];
    return re === undefined ? [] : [{ from: FIELD_AT[k], to: FIELD_END[k], re }];
  });
  return (fn, valid) => {
    if (valid) {
      let all = true;
      for (let i = 0; i < tests.length && all; i++) {
        const t = tests[i]!;
        all = t.re.test(fn.address.slice(t.from, t.to));
      }
      if (all) return true;
    }
    return viaPf(fn);
  };
}

/**
 * matchDevice for every function of one discovery pass: the same decision
 * (the reference above, and a property test holds them together), with what
 * does not depend on the function worked out once — devnames resolved, the
 * single address an entry names and whether it is a PF looked up, glob fields
 * turned into position checks, the function's ids lower-cased once instead of
 * once per entry. `lookup` is asked here, at compile time, so a matcher
 * belongs to the pass whose lookup it was given.
 */
export function compileMatcher(
  entries: readonly DeviceSpecEntry[],
  lookup: FunctionLookup,
): (fn: PciFunction) => DeviceSpecEntry | null {
  const compiled = entries.map((entry) => ({
    entry,
    vendorId: entry.vendorId,
    productId: entry.productId,
    location: compileLocation(entry, lookup),
  }));
  return (fn) => {
    const vendor = LOWER_ID.test(fn.vendorId) ? fn.vendorId : fn.vendorId.toLowerCase();
    const product = LOWER_ID.test(fn.productId) ? fn.productId : fn.productId.toLowerCase();
    const valid = isValidPciAddress(fn.address);
    for (const c of compiled) {
      if (c.vendorId !== null && c.vendorId !== vendor) continue;
      if (c.productId !== null && c.productId !== product) continue;
      if (c.location(fn, valid)) return c.entry;
    }
    return null;
  };
}
