/**
 * Test support: PCI functions and a FunctionLookup over an in-memory host, so
 * matching is exercised without sysfs. Used by the tests and the property runs.
 */
import type { PciFunction } from '../types.js';
import type { FunctionLookup } from './types.js';

/** A plain function at `address`, overridable field by field. */
export function makeFunction(address: string, overrides: Partial<PciFunction> = {}): PciFunction {
  return {
    address,
    vendorId: '8086',
    productId: '1572',
    classCode: '020000',
    kernelDriver: null,
    physfn: null,
    virtfns: [],
    sriovTotalVfs: 0,
    sriovNumVfs: 0,
    iommuGroup: null,
    numaNode: -1,
    netdevs: [],
    nvmeControllers: [],
    ...overrides,
  };
}

/** A lookup over the given functions; netdevs resolve through each function's `netdevs`. */
export function makeLookup(functions: readonly PciFunction[]): FunctionLookup {
  const byAddress = new Map(functions.map((fn) => [fn.address, fn]));
  return {
    get: (address) => byAddress.get(address),
    netdevAddress: (name) => functions.find((fn) => fn.netdevs.includes(name))?.address ?? null,
  };
}
