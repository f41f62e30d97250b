/** Errors of the NVMe driver's cleanup. */
import { BerthError } from '../../errors.js';
import { hex, type NvmeStatus } from './nvme-output.js';

/** An nvme-cli (or other tool) command that failed; carries the NVMe status when there is one. */
export class NvmeCommandError extends BerthError {
  readonly status: NvmeStatus | null;
  constructor(message: string, status: NvmeStatus | null) {
    super('INTERNAL', message, {
      reason: 'CLEANUP_FAILED',
      metadata: status ? { nvme_status: hex(status.value) } : {},
    });
    this.name = 'NvmeCommandError';
    this.status = status;
  }
}

/** A cleanup that ran but could not scrub or prove the device clean. */
export class CleanupFailedError extends BerthError {
  constructor(message: string, metadata: Record<string, string> = {}) {
    super('INTERNAL', message, { reason: 'CLEANUP_FAILED', metadata });
    this.name = 'CleanupFailedError';
  }
}
