/**
 * Between the inventory and the journal's record of media: what a discovery
 * tells the ledger of each device, the record each device carries, and what
 * a pass changed, in the log.
 */
import type { Logger } from 'pino';
import type { DiscoveredDevice, MediaRecord } from '../../plugins/types.js';
import { MEDIA_RECORD_LIMITS } from '../scheduler/domain/media-reports.js';
import type { MediaLedger, ObserveResult, SeenMedia, StoredMedia } from './media-ledger.js';
import { isInformative } from './media-ledger.js';

/** At most this many media records go with a registration (the newest first): the scheduler's bound. */
export const MAX_REPORTED_MEDIA = MEDIA_RECORD_LIMITS.perRegistration;

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
      oneTimeUse: d.oneTimeUse,
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
    reason: r.reason,
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
    reason: '',
  };
}

/**
 * The devices with their records: copies, a driver's records are never changed.
 * The record is set on the fresh copy, not spread into a second one: V8 gives
 * each spread copy of a record that grew a property after its literal (the
 * drivers set `media` so) a hidden class of its own, ~2.5 KiB a device that the
 * inventory keeps (bench/README.md, "Regressions, stop 45").
 */
export function withRecords(devices: readonly DiscoveredDevice[], ledger: MediaLedger): DiscoveredDevice[] {
  return devices.map(({ writeCounters: _, ...d }) => {
    // The counters read now were judged (observe); the inventory does not keep them: they change with every write.
    const mediaRecord = recordFor(d, ledger);
    if (mediaRecord) d.mediaRecord = mediaRecord;
    return d;
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

/** What a discovery pass changed in the journal's record of media, in the agent's log. */
export function logObserved(logger: Logger, o: ObserveResult, devices: readonly DiscoveredDevice[]): void {
  const at = (address: string) => devices.find((d) => d.address === address);
  for (const c of o.created) {
    const d = at(c.address);
    logger.info(
      {
        media: c.key,
        kind: d?.media?.kind,
        address: c.address,
        condition: c.condition,
        ...(d?.media?.serial ? { serial: d.media.serial } : {}),
        ...(c.inheritedFrom ? { inheritedFrom: c.inheritedFrom } : {}),
      },
      c.condition === 'dirty'
        ? `media ${c.key} seen for the first time at ${c.address}: never cleaned by Berth, it is cleaned before its first offer`
        : `media ${c.key} seen for the first time at ${c.address}`,
    );
  }
  for (const x of o.declared) {
    const entry = at(x.address)?.attributes.device_spec ?? 'its device_spec entry';
    logger.info(
      { media: x.key, address: x.address, deviceSpec: entry },
      `media ${x.key} at ${x.address} declared clean by device_spec entry ${entry} (assume_clean), not cleaned before its first offer`,
    );
  }
  for (const m of o.moved) {
    logger.warn(
      { media: m.key, from: m.from, to: m.to, condition: m.condition },
      `media ${m.key}, last seen at ${m.from}, is now at ${m.to} (${m.condition})`,
    );
  }
  for (const c of o.countersMoved) {
    logger.warn(
      { media: c.key, address: c.address, reason: c.reason },
      `media ${c.key} at ${c.address}, recorded clean, is dirty now: ${c.reason}; it is cleaned before it is offered`,
    );
  }
  for (const l of o.lost) {
    logger.warn(
      { media: l.key, lastAddress: l.lastAddress },
      `media ${l.key}, last seen at ${l.lastAddress}, is gone: its custody broke, it is of unknown history if it comes back`,
    );
  }
  for (const g of o.regained) {
    logger.warn(
      { media: g.key, address: g.address, custodyBrokeAt: new Date(g.brokeAt).toISOString(), why: g.why },
      `media ${g.key} is back at ${g.address} after its custody broke (${g.why}): ${g.burned ? 'held for an operator’s release' : 'scrubbed before it is offered'}`,
    );
  }
  for (const u of o.unrecorded) {
    logger[u.held ? 'warn' : 'info'](
      { media: u.key, address: u.address, held: u.held },
      `one-time-use media ${u.key} at ${u.address} has no record: ${u.held ? `held for an operator’s release (${u.why})` : `taken as unused (${u.why})`}`,
    );
  }
  for (const h of o.migrated) {
    logger.info(
      { address: h.address, media: h.key, arqUuid: h.arqUuid },
      `the hold of ${h.address} for ARQ ${h.arqUuid}, recorded by address, now follows its media ${h.key}`,
    );
  }
}
