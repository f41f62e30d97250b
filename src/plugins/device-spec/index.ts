/**
 * Device specifications: which PCI functions a driver manages, with the keys
 * and semantics of Nova's `[pci] device_spec` (DESIGN.md "Device
 * specifications"). The PCI and NVMe drivers each parse their own section.
 */
export { isValidPciAddress } from './address.js';
export { compileMatcher, entryMatches, matchDevice } from './match.js';
export { deviceSpecListSchema, exactAddress, parseBool, parseDeviceSpecs } from './parse.js';
export { normalizeResourceClass, normalizeTrait } from './placement-names.js';
export { deviceSpecInputSchema } from './schema.js';
export type {
  AddressGlob,
  AddressRegex,
  ClearAction,
  ClearStrategy,
  DeviceSpecEntry,
  FunctionLookup,
  ParseOptions,
} from './types.js';
