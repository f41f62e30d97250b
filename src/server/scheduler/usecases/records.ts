/**
 * The steps the use cases share inside a unit of work: look a row up or fail
 * with NOT_FOUND, write a device (generation, time, event log), idempotency
 * keys, cleanup jobs and the release path of a held device.
 */

import { randomUUID } from 'node:crypto';
import {
  BerthError,
  failedPrecondition,
  invalidArgument,
  notFound,
  type RecordKind,
} from '../../../errors.js';
import type { Arq } from '../domain/arq.js';
import type { CleanupJob } from '../domain/cleanup.js';
import { type DeviceRecord, release } from '../domain/device-state.js';
import type { HostRecord } from '../domain/host.js';
import type { DeviceRef } from '../domain/inventory.js';
import type { MigrationRecord } from '../domain/migration.js';
import type { Profile } from '../domain/profile.js';
import type { Tx } from './context.js';
import { FOR_UPDATE, type ReadOptions, type ReadUnit } from './unit-of-work.js';

/** The row, or NOT_FOUND naming it. */
async function must<T>(kind: RecordKind, id: string, row: Promise<T | null>): Promise<T> {
  const found = await row;
  if (found === null) throw notFound(kind, id);
  return found;
}

// --- hosts -----------------------------------------------------------------

export const mustHost = (r: ReadUnit, name: string, opts?: ReadOptions): Promise<HostRecord> =>
  must('host', name, r.host(name, opts));

/** The host as the API shows it: with the number of its devices. */
export async function withCount(r: ReadUnit, h: HostRecord): Promise<HostRecord> {
  return { ...h, deviceCount: await r.deviceCount(h.name) };
}

export async function writeHost(tx: Tx, h: HostRecord): Promise<HostRecord> {
  await tx.uow.putHost(h);
  return withCount(tx.uow, h);
}

// --- devices ---------------------------------------------------------------

export const mustDevice = (r: ReadUnit, ref: DeviceRef, opts?: ReadOptions): Promise<DeviceRecord> =>
  must('device', 'uuid' in ref ? ref.uuid : `${ref.host} ${ref.address}`, r.device(ref, opts));

/**
 * The one place a device is written: bumps the generation, stamps the time
 * and appends to the event log. A transition that changed nothing writes nothing.
 */
export async function writeDevice(
  tx: Tx,
  prev: DeviceRecord | null,
  next: DeviceRecord,
): Promise<DeviceRecord> {
  if (
    prev &&
    JSON.stringify({ ...next, generation: prev.generation, updatedAt: prev.updatedAt }) ===
      JSON.stringify(prev)
  ) {
    return prev;
  }
  const rec: DeviceRecord = { ...next, generation: (prev?.generation ?? 0) + 1, updatedAt: tx.now() };
  await tx.uow.putDevice(rec, prev ? prev.generation : null);
  await tx.uow.appendDeviceEvent(rec);
  // The media of what was written is settled before the unit ends (usecases/media.ts).
  for (const key of [prev?.media?.key, rec.media?.key]) if (key) tx.touchedMedia.add(key);
  return rec;
}

/** ABORTED (nothing changed) when the caller's expected generation is stale. */
export function checkGeneration(d: DeviceRecord, expected: number | undefined): void {
  if (expected !== undefined && expected !== d.generation) {
    throw new BerthError(
      'ABORTED',
      `device ${d.uuid} is at generation ${d.generation}, not ${expected}; re-read and retry`,
      {
        reason: 'GENERATION_CONFLICT',
        metadata: { device_uuid: d.uuid, generation: String(d.generation) },
      },
    );
  }
}

// --- idempotency keys ------------------------------------------------------

/** The stored result for an idempotency key, or null; INVALID_ARGUMENT if reused differently. */
export async function idempotent<T>(
  r: ReadUnit,
  key: string | undefined,
  fingerprint: unknown,
): Promise<T | null> {
  if (!key) return null;
  const row = await r.idempotencyKey(key);
  if (!row) return null;
  if (row.fingerprint !== JSON.stringify(fingerprint)) {
    throw invalidArgument(
      'request_id',
      `request id "${key.split(':').slice(1).join(':')}" was used for a different request`,
    );
  }
  return JSON.parse(row.result) as T;
}

/**
 * A request id replayed after what it made is gone (deleted ARQs, a cleanup job
 * retention removed): the retry must not silently make it again, and must not
 * answer NOT_FOUND about an id the caller never named.
 */
export function requestIdSpent(key: string, made: string): BerthError {
  const id = key.split(':').slice(1).join(':');
  return failedPrecondition(
    'REQUEST_ID_SPENT',
    `request id "${id}" already made ${made}, which no longer exists; send the request again with a new request id`,
    { request_id: id },
  );
}

export async function remember(
  tx: Tx,
  key: string | undefined,
  fingerprint: unknown,
  result: unknown,
): Promise<void> {
  if (!key) return;
  await tx.uow.putIdempotencyKey(
    key,
    { fingerprint: JSON.stringify(fingerprint), result: JSON.stringify(result) },
    tx.now(),
  );
}

// --- cleanup jobs ----------------------------------------------------------

export const mustJob = (r: ReadUnit, jobId: string, opts?: ReadOptions): Promise<CleanupJob> =>
  must('cleanup job', jobId, r.cleanupJob(jobId, opts));

export async function writeJob(tx: Tx, j: CleanupJob): Promise<CleanupJob> {
  await tx.uow.putCleanupJob(j);
  return j;
}

/** A new queued cleanup job of `d`; its host's backlog is dispatched once the unit committed. */
export function createJob(tx: Tx, d: DeviceRecord, jobId: string, origin: CleanupJob['origin']) {
  tx.queuedOn.add(d.host);
  return writeJob(tx, {
    jobId,
    deviceUuid: d.uuid,
    host: d.host,
    address: d.address,
    action: d.cleanupAction ?? '',
    state: 'queued',
    origin,
    message: '',
    lastSequence: 0,
    createdAt: tx.now(),
    dispatchedAt: null,
    finishedAt: null,
  });
}

export async function finishJob(
  tx: Tx,
  jobId: string,
  state: CleanupJob['state'],
  message: string,
): Promise<CleanupJob | undefined> {
  const j = await tx.uow.cleanupJob(jobId, FOR_UPDATE);
  if (!j) return undefined;
  return writeJob(tx, { ...j, state, message, finishedAt: tx.now() });
}

/** Release a held device; a device that now needs cleaning gets a queued job. */
export async function releaseHeld(
  tx: Tx,
  d: DeviceRecord,
  holder: { arqUuid: string } | { migrationUuid: string },
): Promise<DeviceRecord> {
  const jobId = randomUUID();
  const next = await writeDevice(tx, d, release(d, holder, jobId));
  if (next.deviceState === 'pending_cleaning') await createJob(tx, next, jobId, 'release');
  return next;
}

// --- profiles --------------------------------------------------------------

export const mustProfile = (r: ReadUnit, nameOrUuid: string, opts?: ReadOptions): Promise<Profile> =>
  must('profile', nameOrUuid, r.profile(nameOrUuid, opts));

// --- ARQs and migrations ---------------------------------------------------

export const mustArq = (r: ReadUnit, uuid: string, opts?: ReadOptions): Promise<Arq> =>
  must('accelerator request', uuid, r.arq(uuid, opts));

export async function writeArq(tx: Tx, a: Arq): Promise<Arq> {
  await tx.uow.putArq(a);
  return a;
}

export const mustMigration = (r: ReadUnit, uuid: string, opts?: ReadOptions): Promise<MigrationRecord> =>
  must('migration', uuid, r.migration(uuid, opts));

export async function writeMigration(tx: Tx, m: MigrationRecord): Promise<MigrationRecord> {
  await tx.uow.putMigration(m);
  return m;
}
