/** Use case: a device used outside Berth (Nova's one-time-use devices) is cleaned through the normal path. */

import { randomUUID } from 'node:crypto';
import type { CleanupJob } from '../domain/cleanup.js';
import { type DeviceRecord, usedOutsideBerth } from '../domain/device-state.js';
import type { DeviceRef } from '../domain/inventory.js';
import type { UseCaseDeps } from './context.js';
import { createJob, mustDevice, writeDevice } from './records.js';
import { write } from './unit.js';
import { FOR_UPDATE } from './unit-of-work.js';

/**
 * The device's owner outside Berth says a tenant used it (`why`): an
 * available device Berth cleans gets a queued cleanup job (origin
 * placement), one it cannot clean goes to error; in any other state nothing
 * changes and `job` is null (the device's state says why).
 */
export async function scrubUsedOutsideBerth(
  deps: UseCaseDeps,
  ref: DeviceRef,
  why: string,
): Promise<{ device: DeviceRecord; job: CleanupJob | null }> {
  return write(deps, async (tx) => {
    const d = await mustDevice(tx.uow, ref, FOR_UPDATE);
    const jobId = randomUUID();
    const next = usedOutsideBerth(d, jobId, why);
    if (next === d) return { device: d, job: null };
    const device = await writeDevice(tx, d, next);
    const job =
      device.deviceState === 'pending_cleaning' ? await createJob(tx, device, jobId, 'placement') : null;
    return { device, job };
  });
}
