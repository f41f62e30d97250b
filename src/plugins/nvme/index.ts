/** The generic NVMe driver; built in under the name `nvme`. */
import { nvmeDriver } from './nvme-driver.js';

export { type ResolvedController, targetOf } from './controller.js';
export { CleanupFailedError, NvmeCommandError } from './errors.js';
export { type NvmeKit, type NvmeKitOptions, nvmeKit } from './kit.js';
export { NvmeDriver } from './legacy-driver.js';
export { type NvmeKitDriver, nvmeDriver, policyCleanup } from './nvme-driver.js';
export { type CleanupAction, type NvmeCapabilities, resolveCleanupAction } from './policy.js';
export default nvmeDriver;
