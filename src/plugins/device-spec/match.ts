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
