/**
 * What a driver package imports: `import { NvmeDriver } from 'berth/driver'`.
 * The contract (GenericDriver, the host and cleanup contexts, the types a
 * driver reports), the built-in drivers to extend, the errors a driver throws
 * and the helpers it parses its config section with. docs/drivers.md shows a
 * vendor driver published as its own npm package.
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
  type CleanupContext,
  DRIVER_API_VERSION,
  type DriverClass,
  type DriverOptions,
  GenericDriver,
  type HostContext,
} from './driver.js';
export {
  type CleanupAction,
  CleanupFailedError,
  type NvmeCapabilities,
  NvmeCommandError,
  NvmeDriver,
  type ResolvedController,
  resolveCleanupAction,
} from './nvme/index.js';
export {
  fallbackNqn,
  nvmeMediaIdentity,
  readNamespaceIdentity,
  readSubsysNqn,
} from './nvme/media-identity.js';
export { readDeviceSerialNumber } from './pci/device-serial-number.js';
export { PciDriver } from './pci/index.js';
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
