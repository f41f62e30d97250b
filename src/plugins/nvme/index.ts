/** The generic NVMe driver; built in under the name `nvme`. */
import { NvmeDriver } from './nvme-driver.js';

export { CleanupFailedError, NvmeCommandError, NvmeDriver, type ResolvedController } from './nvme-driver.js';
export { type CleanupAction, type NvmeCapabilities, resolveCleanupAction } from './policy.js';
export default NvmeDriver;
