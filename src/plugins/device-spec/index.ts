/**
 * Device specifications: which PCI functions a driver manages, with the keys
 * and semantics of Nova's `[pci] device_spec` (DESIGN.md "Device
 * specifications"). The PCI and NVMe drivers each parse their own section.
 */
export { isValidPciAddress } from './address.js';
export { compileMatcher, matchDevice } from './match.js';
export { deviceSpecListSchema, exactAddress, parseBool, parseDeviceSpecs } from './parse.js';
export { normalizeResourceClass, normalizeTrait } from './placement-names.js';
export { deviceSpecInputSchema } from './schema.js';
export type {
  ClearAction,
  ClearStrategy,
  DeviceSpecEntry,
  FunctionLookup,
} from './types.js';
