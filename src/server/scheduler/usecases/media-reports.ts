/**
 * Use cases: what agents report of media, bound to their host, and the
 * operator's forgetting of a media (domain/media-reports.ts decides;
 * docs/media-identity.md, "Reports bound to their host").
 */

import { failedPrecondition, notFound } from '../../../errors.js';
import type { HostName } from '../../../identifiers.js';
import type { MediaRecord } from '../../../plugins/types.js';
import type { DeviceRecord } from '../domain/device-state.js';
import { agentReportsDirt, holdsMedia, type MediaState, mediaReported } from '../domain/media.js';
import {
  hostRecordsBoundBroken,
  judgeMediaReport,
  type MediaReportsTaken,
  type RefusedMediaReport,
  registrationRecordsBoundBroken,
} from '../domain/media-reports.js';
import { read, type UseCaseDeps } from './context.js';
import { write } from './unit.js';
import { FOR_UPDATE, type ReadUnit } from './unit-of-work.js';

/** Why `host` may not report `key` (judged on what `r` reads now), or null when it may. */
async function judge(r: ReadUnit, host: HostName, key: string, stored: MediaState | null) {
  const devices: readonly DeviceRecord[] = await r.devices({ mediaKey: key });
  const forgotten = stored !== null && (await r.mediaForgotten(key)) !== null;
  return judgeMediaReport(host, { stored, forgotten, devices });
}

/**
 * An agent's registration reports its journal's media records, seen on the
 * host now or not (a drive pulled out is still recorded): dirt and burns of
 * media this host holds are added to the scheduler's records (never removed
 * by a report), so they reach the media wherever it shows up. A record of
 * media another host holds is refused and returned; records that would change
 * nothing are not judged (a heartbeat repeats them). Past either bound
 * (MEDIA_RECORD_LIMITS) the whole call is refused, RESOURCE_EXHAUSTED, and
 * nothing is written: one unit.
 */
export async function reconcileMediaRecords(
  deps: UseCaseDeps,
  host: HostName,
  records: readonly MediaRecord[],
): Promise<MediaReportsTaken> {
  const tooMany = registrationRecordsBoundBroken(host, records.length);
  if (tooMany) throw tooMany;
  const relevant = records.filter((r) => r.burned || agentReportsDirt(r, 0));
  if (relevant.length === 0) return { changed: [], refused: [] };
  // Most heartbeats change nothing: look before taking locks.
  const looked = await read(deps, async (r) => {
    const news: MediaRecord[] = [];
    const refused: RefusedMediaReport[] = [];
    for (const rec of relevant) {
      const stored = await r.media(rec.key);
      if (stored && mediaReported(stored, rec, host, '') === stored) continue;
      const no = await judge(r, host, rec.key, stored);
      if (no) refused.push({ key: rec.key, reason: no.refusal, holder: no.holder });
      else news.push(rec);
    }
    return { news, refused };
  });
  if (looked.news.length === 0) return { changed: [], refused: looked.refused };
  return write(deps, async (tx) => {
    const now = tx.now();
    const refused = [...looked.refused];
    const writes: MediaState[] = [];
    let added = 0;
    for (const r of looked.news) {
      const stored = await tx.uow.media(r.key, FOR_UPDATE);
      const no = await judge(tx.uow, host, r.key, stored);
      if (no) {
        refused.push({ key: r.key, reason: no.refusal, holder: no.holder });
        continue;
      }
      const next = mediaReported(stored ?? reportedMedia(r, host, now), r, host, now);
      if (stored && next === stored) continue;
      if (!stored) added += 1;
      writes.push(next);
    }
    const overBound = hostRecordsBoundBroken(host, added && (await tx.uow.reportedMediaCount(host)), added);
    if (overBound) throw overBound;
    for (const m of writes) {
      await tx.uow.putMedia(m);
      tx.touchedMedia.add(m.key);
    }
    return { changed: writes.map((m) => m.key), refused };
  });
}

/** A media the scheduler first hears of from an agent's report (not seen as a device yet). */
const reportedMedia = (r: MediaRecord, host: string, now: string): MediaState => ({
  key: r.key,
  condition: 'clean',
  burned: false,
  burnReason: '',
  // Reported, not presented: a host presents a media by a device of it.
  custodians: [],
  holder: null,
  reason: '',
  host,
  address: r.lastAddress,
  cleanedAt: 0,
  updatedAt: now,
});

/** What forgetting a media did. */
export interface MediaForgotten {
  media: MediaState;
  /** Its devices no host saw any more, removed. */
  removed: DeviceRecord[];
  alreadyForgotten: boolean;
}

/**
 * An operator forgets a media that will never come back: its devices no host
 * sees are removed (with their removal in the event log), it is marked
 * forgotten with `note` (who, when, why), so the agents' journal records of it
 * are refused and no longer count against their host's bound. Its record of
 * dirt and burns stays, should it come back after all. Refused while a host
 * presents it or a device of it is allocated or being cleaned (MEDIA_PRESENT).
 */
export async function forgetMedia(deps: UseCaseDeps, key: string, note: string): Promise<MediaForgotten> {
  return write(deps, async (tx) => {
    const m = await tx.uow.media(key, FOR_UPDATE);
    if (!m) throw notFound('media', key);
    const devices = await tx.uow.devices({ mediaKey: key }, FOR_UPDATE);
    const busy = devices.filter((d) => d.present || holdsMedia(d) || IN_USE.has(d.deviceState));
    if (busy.length > 0 || m.holder) {
      const named = busy.map(
        (d) => `${d.host} ${d.address} (${d.present ? 'present, ' : ''}${d.deviceState})`,
      );
      throw failedPrecondition(
        'MEDIA_PRESENT',
        `media ${key} is not forgotten: ${named.length > 0 ? `${named.join(', ')} ${named.length === 1 ? 'is' : 'are'} its device(s)` : `it is held through ${m.holder!.host} ${m.holder!.address}`}; only media no host presents and nobody uses can be forgotten`,
        { media_key: key, ...(busy[0] ? { host: busy[0].host, address: busy[0].address } : {}) },
      );
    }
    const alreadyForgotten = (await tx.uow.mediaForgotten(key)) !== null;
    const now = tx.now();
    for (const d of devices) {
      await tx.uow.appendDeviceEvent({ ...d, updatedAt: now }, true);
      await tx.uow.deleteDevice(d.uuid);
    }
    if (!alreadyForgotten) await tx.uow.forgetMedia(key, note);
    return { media: m, removed: devices, alreadyForgotten };
  });
}

/** Device states in which a device is in use or being cleaned (`reserved` only says it is not offered). */
const IN_USE = new Set(['allocated', 'pending_cleaning', 'cleaning']);
