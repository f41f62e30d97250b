/** Use cases: cleanup jobs, from an operator's request to the agent's last progress event. */

import { randomUUID } from 'node:crypto';
import { certificateHash, decodeCertificate } from '../../../erasure/certificate.js';
import { invalidArgument } from '../../../errors.js';
import type { HostName } from '../../../identifiers.js';
import { endsCleanup } from '../../../plugins/types.js';
import { certificateRecord, checkCleanupCertificate } from '../domain/certificate.js';
import type { CleanupBacklogEntry, CleanupEvent, CleanupJob } from '../domain/cleanup.js';
import {
  cleanupDispatched,
  cleanupFailed,
  cleanupImpossible,
  cleanupInterrupted,
  cleanupStarted,
  cleanupSucceeded,
  cleanupUncertified,
  type DeviceRecord,
  operatorClean,
} from '../domain/device-state.js';
import type { DeviceRef } from '../domain/inventory.js';
import { mediaKeyOf } from '../domain/media.js';
import { read, type Tx, type UseCaseDeps } from './context.js';
import { recordMediaCleaned } from './media.js';
import {
  createJob,
  finishJob,
  idempotent,
  mustDevice,
  mustJob,
  remember,
  requestIdSpent,
  writeDevice,
  writeJob,
} from './records.js';
import { write } from './unit.js';
import { FOR_UPDATE } from './unit-of-work.js';

const WORKING_PHASES = new Set(['preparing', 'sanitizing', 'namespace_reset', 'zeroing', 'verifying']);

/**
 * Operator CleanDevice: error → pending_cleaning under a new queued job.
 * A retry with the same requestId returns the same job.
 */
export async function requestClean(
  deps: UseCaseDeps,
  ref: DeviceRef,
  opts: { requestId?: string; agentCanClean: boolean },
): Promise<{ device: DeviceRecord; job: CleanupJob }> {
  return write(deps, async (tx) => {
    const d = await mustDevice(tx.uow, ref, FOR_UPDATE);
    const key = opts.requestId ? `clean:${opts.requestId}` : undefined;
    const seen = await idempotent<{ jobId: string }>(tx.uow, key, { device: d.uuid });
    if (seen) {
      const job = await tx.uow.cleanupJob(seen.jobId);
      if (!job) throw requestIdSpent(key!, `cleanup job ${seen.jobId}`);
      return { device: d, job };
    }
    const jobId = randomUUID();
    const next = await writeDevice(tx, d, operatorClean(d, jobId, opts.agentCanClean));
    const job = await createJob(tx, next, jobId, 'operator');
    await remember(tx, key, { device: d.uuid }, { jobId });
    return { device: next, job };
  });
}

/**
 * pending_cleaning and cleaning devices (of one host, or all) with their jobs.
 * A job whose media another device holds (allocated: a controller of the same
 * NVM subsystem, or the same drive under another address) says what it waits
 * for: a cleanup of shared media never starts under a running tenant.
 */
export async function cleanupBacklog(deps: UseCaseDeps, host?: HostName): Promise<CleanupBacklogEntry[]> {
  return read(deps, async (r) => {
    // cleaning devices too: a broken progress stream is re-attached by job id
    // (after an agent restart, its registration has already moved them to error).
    const devices = await r.devices({
      ...(host ? { host } : {}),
      states: ['pending_cleaning', 'cleaning'],
    });
    const out: CleanupBacklogEntry[] = [];
    for (const device of devices) {
      const job = device.cleanupJobId ? await r.cleanupJob(device.cleanupJobId) : null;
      if (!job) continue;
      const key = mediaKeyOf(device);
      const holder =
        key && device.deviceState === 'pending_cleaning'
          ? (await r.devices({ mediaKey: key, state: 'allocated' })).find((d) => d.uuid !== device.uuid)
          : undefined;
      out.push({
        device,
        job,
        waitsFor: holder
          ? `its media ${key} is held through ${holder.host} ${holder.address} (instance ${holder.instanceUuid ?? 'of a migration claim'})`
          : null,
      });
    }
    return out;
  });
}

export async function markCleanupDispatched(deps: UseCaseDeps, jobId: string): Promise<CleanupJob> {
  return write(deps, async (tx) => {
    const job = await mustJob(tx.uow, jobId, FOR_UPDATE);
    cleanupDispatched(await mustDevice(tx.uow, { uuid: job.deviceUuid }), jobId);
    if (job.state !== 'queued' && job.state !== 'dispatched') return job;
    return writeJob(tx, { ...job, state: 'dispatched', dispatchedAt: tx.now() });
  });
}

/**
 * Record one progress event and apply it to the device: the first working
 * phase → cleaning, succeeded/failed/interrupted → available/error. A repeated
 * sequence is ignored (applied: false); an event of a job that is no longer the
 * device's is recorded but changes no device.
 */
export async function applyCleanupEvent(
  deps: UseCaseDeps,
  ev: CleanupEvent,
): Promise<{ device: DeviceRecord; job: CleanupJob; applied: boolean }> {
  if (!Number.isInteger(ev.sequence) || ev.sequence < 1) {
    throw invalidArgument('event.sequence', `${ev.sequence} is not a positive integer`);
  }
  return write(deps, async (tx) => {
    const job = await mustJob(tx.uow, ev.jobId, FOR_UPDATE);
    const device = await mustDevice(tx.uow, { uuid: job.deviceUuid }, FOR_UPDATE);
    if (ev.address !== job.address) {
      throw invalidArgument(
        'event.address',
        `"${ev.address}" is not job ${job.jobId}'s device ${job.address}`,
      );
    }
    if (!(await tx.uow.addCleanupEvent(ev))) return { device, job, applied: false };
    let nextJob: CleanupJob = { ...job, lastSequence: Math.max(job.lastSequence, ev.sequence) };
    if (endsCleanup(ev.phase)) {
      nextJob = {
        ...nextJob,
        state: ev.phase,
        message: ev.message,
        finishedAt: ev.time,
      };
    } else if (WORKING_PHASES.has(ev.phase) && !endsCleanup(job.state)) {
      nextJob = { ...nextJob, state: 'running' };
    }
    let next = device;
    // Only the device's current job may move it; a late event of an old job is history.
    if (device.cleanupJobId === ev.jobId) {
      const now = tx.now();
      if (ev.phase === 'succeeded') {
        next = cleanupSucceeded(device, ev.jobId, ev.action, now, ev.proof ?? null);
        // Believed only with a valid erasure certificate, chained to the media's last one here.
        if (next.deviceState === 'available') next = await certified(tx, job, device, ev, next);
      } else if (ev.phase === 'failed') next = cleanupFailed(device, ev.jobId, ev.message, now);
      else if (ev.phase === 'interrupted') next = cleanupInterrupted(device, ev.jobId, ev.message, now);
      else if (WORKING_PHASES.has(ev.phase)) next = cleanupStarted(device, ev.jobId, now);
      next = await writeDevice(tx, device, next);
      if (ev.phase === 'succeeded' && next.deviceState === 'available')
        await recordMediaCleaned(tx, next, ev.time);
      if (ev.phase === 'succeeded' && next.deviceState === 'error') {
        nextJob = { ...nextJob, state: 'failed', message: next.errorReason };
      }
    }
    return { device: next, job: await writeJob(tx, nextJob), applied: true };
  });
}

/**
 * The device after a success, given its certificate: `next` (available) when
 * the certificate is valid — stored, in the same unit —, in error with the
 * reason when it is missing, forged, edited, out of order or signed by a key
 * that is not the host's.
 */
async function certified(
  tx: Tx,
  job: CleanupJob,
  device: DeviceRecord,
  ev: CleanupEvent,
  next: DeviceRecord,
): Promise<DeviceRecord> {
  const now = tx.now();
  let mediaKey = mediaKeyOf(device);
  if (!mediaKey && ev.certificate) {
    try {
      mediaKey = decodeCertificate(ev.certificate).claims.media.key;
    } catch {
      // refused below, with the reason
    }
  }
  // The agent's registration may have brought this very certificate first (it sends those not
  // yet stored): then it is checked against the link before it, not against itself.
  const known = ev.certificate ? await tx.uow.certificate(certificateHash(ev.certificate.trim())) : null;
  const check = checkCleanupCertificate(ev.certificate, {
    job,
    device,
    action: ev.action,
    proof: ev.proof,
    keys: await tx.uow.agentKeys(job.host),
    agentJobId: ev.agentJobId,
    last: known
      ? await tx.uow.certificateAt(known.mediaKey, known.seq - 1)
      : mediaKey
        ? await tx.uow.lastCertificate(mediaKey, FOR_UPDATE)
        : null,
  });
  if (!check.ok) return cleanupUncertified(device, ev.jobId, check.reason, now);
  await tx.uow.putCertificate(certificateRecord(check.cert, ev.certificate!, device.uuid, now));
  return next;
}

/** The job cannot run (agent cannot clean): pending_cleaning → error. */
export async function failCleanup(
  deps: UseCaseDeps,
  jobId: string,
  reason: string,
): Promise<{ device: DeviceRecord; job: CleanupJob }> {
  return write(deps, async (tx) => {
    const job = await mustJob(tx.uow, jobId, FOR_UPDATE);
    const d = await mustDevice(tx.uow, { uuid: job.deviceUuid }, FOR_UPDATE);
    const device = await writeDevice(tx, d, cleanupImpossible(d, jobId, reason, tx.now()));
    return { device, job: (await finishJob(tx, jobId, 'failed', reason))! };
  });
}

export async function getCleanupJob(deps: UseCaseDeps, jobId: string): Promise<CleanupJob> {
  return read(deps, (r) => mustJob(r, jobId));
}

export async function latestCleanupJob(deps: UseCaseDeps, deviceUuid: string): Promise<CleanupJob | null> {
  return read(deps, (r) => r.latestCleanupJob(deviceUuid));
}

export async function cleanupEvents(
  deps: UseCaseDeps,
  jobId: string,
  afterSequence = 0,
): Promise<CleanupEvent[]> {
  return read(deps, (r) => r.cleanupEvents(jobId, afterSequence));
}
