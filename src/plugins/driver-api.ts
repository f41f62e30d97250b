/**
 * What a driver package imports: `import { defineDriver, nvmeKit } from 'berth/driver'`.
 * The contract (driver API 3: `defineDriver`, `Driver`, the cleanup capability,
 * the host and cleanup contexts, the types a driver reports), the kits a
 * driver composes (`nvmeKit` and the NVMe config schema, the PCI driver), the
 * errors a driver throws and the helpers it parses its config section with.
 * The version-2 classes (`GenericDriver`, `NvmeDriver`, `PciDriver`) stay,
 * deprecated, until version 4. docs/drivers.md shows a vendor driver
 * published as its own npm package.
 */
export { ConfigError } from '../errors.js';
export {
  type ByteRange,
  type CleanupEvidence,
  type CleanupPolicy,
  type ReadBackEvidence,
  type SanitizeEvidence,
  type StorageTarget,
  VERIFY_MODES,
  type VerifyMode,
  type WriteEvidence,
} from './cleanup-evidence.js';
export type { CommandResult, CommandRunner, RunOptions } from './command-runner.js';
export {
  type ClearAction,
  type ClearStrategy,
  type DeviceSpecEntry,
  isValidPciAddress,
  matchDevice,
  normalizeResourceClass,
  normalizeTrait,
  parseBool,
  parseDeviceSpecs,
} from './device-spec/index.js';
export {
  type Cleanup,
  type CleanupContext,
  DRIVER_API_VERSION,
  type Driver,
  type DriverDefinition,
  defineDriver,
  type HostContext,
  instantiateDriver,
} from './driver.js';
export { type DriverClass, type DriverOptions, GenericDriver } from './driver-v2.js';
export { type NvmeConfig, nvmeConfigSchema } from './nvme/config.js';
export {
  type CleanupAction,
  CleanupFailedError,
  type NvmeCapabilities,
  NvmeCommandError,
  NvmeDriver,
  type NvmeKit,
  type NvmeKitDriver,
  type NvmeKitOptions,
  nvmeDriver,
  nvmeKit,
  policyCleanup,
  type ResolvedController,
  resolveCleanupAction,
  targetOf,
} from './nvme/index.js';
export {
  fallbackNqn,
  nvmeMediaIdentity,
  readNamespaceIdentity,
  readSubsysNqn,
} from './nvme/media-identity.js';
export { readDeviceSerialNumber } from './pci/device-serial-number.js';
export { PciDriver, pciDriver } from './pci/index.js';
export { dsnIdentity, mediaIdentityProblem, slotIdentity } from './pci/media-identity.js';
export type {
  CleanupPhase,
  CleanupProgress,
  DeviceType,
  DiscoveredDevice,
  DiscoveryResult,
  ExcludedDevice,
  FunctionKind,
  Health,
  MediaCondition,
  MediaIdentity,
  MediaIdentityKind,
  MediaRecord,
  NamespaceIdentity,
  PciFunction,
} from './types.js';
