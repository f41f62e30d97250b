/**
 * Between the inventory and the journal's record of media: what a discovery
 * tells the ledger of each device, and the record each device carries.
 */
import type { DiscoveredDevice, MediaRecord } from '../../plugins/types.js';
import type { MediaLedger, SeenMedia, StoredMedia } from './media-ledger.js';
import { isInformative } from './media-ledger.js';

/** At most this many media records go with a registration (the newest first): the scheduler's bound. */
export const MAX_REPORTED_MEDIA = 4096;

/** What the ledger needs of the devices of a discovery pass (those with a media identity). */
export function seenMedia(devices: readonly DiscoveredDevice[], host: string): SeenMedia[] {
  const out: SeenMedia[] = [];
  for (const d of devices) {
    if (!d.media) continue;
    out.push({
      address: d.address,
      key: d.media.key,
      cleanable: d.supportsCleaning,
      assumeClean: d.assumeClean === true,
      slotPrefix: `pci-slot:${host}:${d.address}:${d.vendorId}:${d.productId}:`,
      ...(d.writeCounters ? { counters: d.writeCounters } : {}),
    });
  }
  return out;
}

export function publicRecord(r: StoredMedia): MediaRecord {
  return {
    key: r.key,
    condition: r.condition,
    burned: r.burned,
    since: r.since,
    lastAddress: r.lastAddress,
    arqUuid: r.arqUuid,
    instanceUuid: r.instanceUuid,
    ...(r.writeCounters ? { writeCounters: r.writeCounters } : {}),
  };
}

/**
 * What the journal says of a device's media. A device without a stored
 * record: not cleaned and never burned (nothing to keep), or cleaned but not
 * recorded (a journal that could not be written): dirty, never clean by default.
 * `since` 0 says no record holds it.
 */
export function recordFor(d: DiscoveredDevice, ledger: MediaLedger): MediaRecord | undefined {
  if (!d.media) return undefined;
  const r = ledger.get(d.media.key);
  if (r) return publicRecord(r);
  return {
    key: d.media.key,
    condition: d.supportsCleaning ? 'dirty' : 'not_cleanable',
    burned: false,
    since: 0,
    lastAddress: d.address,
    arqUuid: '',
    instanceUuid: '',
  };
}

/** The devices with their records: copies, a driver's records are never changed. */
export function withRecords(devices: readonly DiscoveredDevice[], ledger: MediaLedger): DiscoveredDevice[] {
  return devices.map(({ writeCounters: _, ...d }) => {
    // The counters read now were judged (observe); the inventory does not keep them: they change with every write.
    const mediaRecord = recordFor(d, ledger);
    return mediaRecord ? { ...d, mediaRecord } : d;
  });
}

const rank = (r: MediaRecord) => (r.burned || r.condition === 'held' ? 0 : 1);

/**
 * The records a registration carries: every held, dirty or burned media,
 * on this host now or not (held and burned first, then dirty, each newest
 * first), at most MAX_REPORTED_MEDIA; and how
 * many were left out.
 */
export function reportedMedia(ledger: MediaLedger): { records: MediaRecord[]; leftOut: number } {
  const all = ledger
    .all()
    .filter(isInformative)
    // Held and burned first (the scheduler must never miss one), then dirt, each newest first.
    .sort((a, b) => rank(a) - rank(b) || b.since - a.since || (a.key < b.key ? -1 : 1));
  return {
    records: all.slice(0, MAX_REPORTED_MEDIA).map(publicRecord),
    leftOut: Math.max(0, all.length - MAX_REPORTED_MEDIA),
  };
}
