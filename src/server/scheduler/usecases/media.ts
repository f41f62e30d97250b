/**
 * Media within a unit (docs/media-identity.md). Every read-write unit settles,
 * before it ends, each media whose devices it wrote (./unit.ts): the pure
 * decision is domain/media.ts `settleMedia`; this module reads the media's
 * record and devices under lock, writes what it decided, and queues the
 * cleanup of media holding data that nobody cleans.
 */

import { randomUUID } from 'node:crypto';
import { type DeviceRecord, mediaNeedsCleaning } from '../domain/device-state.js';
import {
  firstSight,
  type MediaState,
  mediaCleaned,
  mediaKeyOf,
  mediaReported,
  settleMedia,
} from '../domain/media.js';
import type { Tx } from './context.js';
import { createJob, writeDevice } from './records.js';
import { FOR_UPDATE, NAMES_PER_QUERY } from './unit-of-work.js';

/**
 * Settles every media this unit touched, including ones settling itself
 * touches (never twice). The media rows and their devices are read under lock
 * NAMES_PER_QUERY keys at a time, in key order: a burst of 1,024 functions
 * was two queries per function (decision 87). Each media is then settled
 * alone, as before.
 */
export async function settleTouchedMedia(tx: Tx): Promise<void> {
  const done = new Set<string>();
  for (;;) {
    const keys = [...tx.touchedMedia].filter((k) => !done.has(k)).sort();
    if (keys.length === 0) return;
    for (const k of keys) done.add(k);
    for (let i = 0; i < keys.length; i += NAMES_PER_QUERY) {
      const chunk = keys.slice(i, i + NAMES_PER_QUERY);
      // The media rows first (on a shared database, binds on two hosts of one
      // media meet here), then their devices: asked for together, in that
      // order, two statements (one round trip where the backend can): the
      // devices' read starts once the media's locks are held, and sees what
      // their holders committed (the port's rule, decision 95).
      const [media, held] = await Promise.all([
        tx.uow.mediaByKeys(chunk, FOR_UPDATE),
        tx.uow.devices({ mediaKeys: chunk }, FOR_UPDATE),
      ]);
      const stored = new Map(media.map((m) => [m.key, m]));
      const devices = new Map<string, DeviceRecord[]>();
      for (const d of held) {
        const key = mediaKeyOf(d)!;
        const list = devices.get(key);
        if (list) list.push(d);
        else devices.set(key, [d]);
      }
      for (const key of chunk) await settleKey(tx, key, stored.get(key) ?? null, devices.get(key) ?? []);
    }
  }
}

const changed = (a: MediaState, b: MediaState) =>
  JSON.stringify({ ...a, updatedAt: '' }) !== JSON.stringify({ ...b, updatedAt: '' });

/** Settles one media, from its record and its devices as read under lock. */
async function settleKey(
  tx: Tx,
  key: string,
  stored: MediaState | null,
  devices: DeviceRecord[],
): Promise<void> {
  const now = tx.now();
  const reports = tx.agentReports.get(key) ?? [];
  const first = devices.find((d) => d.present) ?? devices[0];
  const reportOf = (d: DeviceRecord) =>
    reports.find((r) => r.host === d.host && r.address === d.address)?.record ?? null;
  let media = stored ?? (first ? firstSight(first, reportOf(first), now) : null);
  if (!media) return;
  // What the agents' journals say of it, for media Berth can clean (dirt) or burns.
  for (const r of reports) {
    const d = devices.find((x) => x.host === r.host && x.address === r.address);
    if (d?.supportsCleaning || r.record.burned) media = mediaReported(media, r.record, r.host, now);
  }
  const s = settleMedia(media, devices, now);
  const byUuid = new Map(devices.map((d) => [d.uuid, d]));
  for (const next of s.devices) {
    if (next.uuid === s.toClean?.uuid) continue;
    await writeDevice(tx, byUuid.get(next.uuid)!, next);
  }
  if (s.toClean) {
    const prev = byUuid.get(s.toClean.uuid)!;
    const jobId = randomUUID();
    const next = await writeDevice(tx, prev, mediaNeedsCleaning(s.toClean, jobId));
    if (next.deviceState === 'pending_cleaning') await createJob(tx, next, jobId, 'media');
  }
  // A job that waited for the media's other device to let go can go now.
  for (const d of devices) if (d.deviceState === 'pending_cleaning') tx.queuedOn.add(d.host);
  if (!stored || changed(stored, s.media)) await tx.uow.putMedia(s.media);
}

/** A cleanup of `d` was accepted: its media is clean as of the agent's time `at` (ISO 8601). */
export async function recordMediaCleaned(tx: Tx, d: DeviceRecord, at: string): Promise<void> {
  const key = mediaKeyOf(d);
  if (!key) return;
  const m = await tx.uow.media(key, FOR_UPDATE);
  const base = m ?? firstSight(d, null, tx.now());
  await tx.uow.putMedia(mediaCleaned(base, Date.parse(at) || 0, tx.now()));
  tx.touchedMedia.add(key);
}
