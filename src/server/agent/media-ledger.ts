/**
 * The agent's record of media (docs/media-identity.md, DESIGN invariants 9,
 * 11 and 13): per media key, the condition of the data on it — clean, held
 * (handed to a guest, not cleaned since), dirty (never cleaned by Berth, or
 * its last cleanup not proven), declared clean (never cleaned, but the
 * operator's device_spec says so) or not cleanable — whether it is burned, and
 * where it was last seen. Held, dirty and burned follow the media: a drive put
 * back in another slot, or reached through another controller, is found by
 * its key, not by an address.
 *
 * One table in the agent's journal (SQLite, synchronous FULL): every change is
 * durable before the call that made it returns. The records are also kept in
 * memory (this process is the journal's only writer), so a discovery pass
 * costs no query and writes only what changed.
 *
 * Records that carry nothing a next tenant could be hurt by (clean or declared
 * clean, not burned) of media not seen for PRUNE_AFTER_MS are pruned at start:
 * such media coming back is of unknown provenance again, so it is cleaned
 * first (or declared clean again). Held, dirty and burned records are never
 * pruned; a function that is not cleaned and not burned keeps no record.
 */
import type Database from 'better-sqlite3';
import type { MediaCondition, MediaRecord, WriteCounters } from '../../plugins/types.js';

/** Uninformative records of media not seen for this long are pruned at start. */
export const PRUNE_AFTER_MS = 90 * 24 * 3600 * 1000;
/** `last_seen` is written at most this often per record (a discovery every few seconds must not write). */
const SEEN_RESOLUTION_MS = 24 * 3600 * 1000;

export const MEDIA_MIGRATION = `
  CREATE TABLE media (
    key TEXT PRIMARY KEY,
    condition TEXT NOT NULL CHECK (condition IN ('clean','held','dirty','declared_clean','not_cleanable')),
    burned INTEGER NOT NULL DEFAULT 0 CHECK (burned IN (0, 1)),
    since INTEGER NOT NULL,
    last_address TEXT NOT NULL,
    arq_uuid TEXT NOT NULL DEFAULT '',
    instance_uuid TEXT NOT NULL DEFAULT '',
    last_seen INTEGER NOT NULL,
    reason TEXT NOT NULL DEFAULT ''
  );
  ALTER TABLE cleanup_jobs ADD COLUMN media_key TEXT NOT NULL DEFAULT '';`;

/**
 * The write counters a clean (or declared clean) record was made with, as
 * JSON ('' = none): decision 64.
 */
export const MEDIA_COUNTERS_MIGRATION = `ALTER TABLE media ADD COLUMN write_counters TEXT NOT NULL DEFAULT '';`;

/** A journal record with why it is in its condition (for messages and logs). */
export interface StoredMedia extends MediaRecord {
  /** ms since the epoch: when a discovery last saw it (to a day). */
  lastSeen: number;
  /** Why it is dirty ('' otherwise). */
  reason: string;
}

/** A device as a discovery pass reports it, for the ledger. */
export interface SeenMedia {
  address: string;
  key: string;
  /** The device is cleaned by Berth (a driver that cleans it, with a locked-in action or not yet). */
  cleanable: boolean;
  /** Its device_spec entry says assume_clean. */
  assumeClean: boolean;
  /**
   * `pci-slot:<host>:<address>:<vendor>:<product>:`: a record under this
   * prefix is what this function was known by before it was identified (an
   * NVMe device a guest held when the agent first saw it).
   */
  slotPrefix: string;
  /** The write counters read at this discovery, when the driver could read them (NVMe). */
  counters?: WriteCounters;
}

/** What a discovery pass changed in the ledger, for the agent's log. */
export interface ObserveResult {
  /** Media seen for the first time, with the condition given them. */
  created: { key: string; address: string; condition: MediaCondition; inheritedFrom: string | null }[];
  /** Media declared clean now (assume_clean), not cleaned before its first offer: the agent logs each once. */
  declared: { key: string; address: string }[];
  /** Media seen at another address than its record's. */
  moved: { key: string; from: string; to: string; condition: MediaCondition }[];
  /** Holds recorded by address (a journal from before media identities) moved onto the media found there. */
  migrated: { address: string; key: string; arqUuid: string }[];
  /** The addresses of those holds: their address rows are gone, in the same transaction. */
  consumedLegacy: string[];
  /** Clean media whose write counters moved since its record: dirty now, with the reason. */
  countersMoved: { key: string; address: string; reason: string }[];
  /** Keys whose record changed (the inventory shows the new one). */
  changed: string[];
}

/** A hold the journal recorded by address, before media identities. */
export interface LegacyHold {
  address: string;
  arqUuid: string;
  instanceUuid: string;
  since: number;
}

interface Row {
  key: string;
  condition: MediaCondition;
  burned: number;
  since: number;
  last_address: string;
  arq_uuid: string;
  instance_uuid: string;
  last_seen: number;
  reason: string;
  /** Absent in a journal read before MEDIA_COUNTERS_MIGRATION (the operator's dry run). */
  write_counters?: string;
}

/** Counters kept as JSON: anything that is not what was written reads as none. */
function countersFromText(text: string | undefined): WriteCounters | undefined {
  if (!text) return undefined;
  try {
    const c = JSON.parse(text) as WriteCounters;
    const digits = (v: unknown) => typeof v === 'string' && /^\d+$/.test(v);
    return typeof c.controller === 'string' &&
      Number.isInteger(c.cntlid) &&
      Number.isFinite(c.at) &&
      [c.dataUnitsWritten, c.hostWriteCommands, c.powerCycles, c.powerOnHours].every(digits)
      ? c
      : undefined;
  } catch {
    return undefined;
  }
}

const COUNTER_NAMES = [
  ['dataUnitsWritten', 'Data Units Written'],
  ['hostWriteCommands', 'Host Write Commands'],
  ['powerCycles', 'Power Cycles'],
  ['powerOnHours', 'Power On Hours'],
] as const;

/**
 * Why counters read now say a clean media may hold data it did not hold at
 * its record (null when they do not): Data Units Written or Host Write
 * Commands grew (someone wrote to it), or any counter went down (a firmware
 * reset, a wrapped counter, or another drive with a cloned identity: its
 * history is unknown). Power Cycles and Power On Hours growing are not dirt.
 */
export function writeCountersChange(recorded: WriteCounters, now: WriteCounters): string | null {
  const through = `read through ${now.controller} (cntlid ${now.cntlid})`;
  const lower = COUNTER_NAMES.filter(([f]) => BigInt(now[f]) < BigInt(recorded[f]));
  if (lower.length > 0) {
    const what = lower.map(([f, name]) => `${name} ${recorded[f]} → ${now[f]}`).join(', ');
    return `its write counters went down since it was recorded clean (${what}, ${through}): a counter reset by firmware, a wrapped counter or another drive with the same identity; its history is unknown`;
  }
  const grew = COUNTER_NAMES.slice(0, 2).filter(([f]) => BigInt(now[f]) > BigInt(recorded[f]));
  if (grew.length === 0) return null;
  const what = grew.map(([f, name]) => `${name} ${recorded[f]} → ${now[f]}`).join(', ');
  return `it was written since it was recorded clean (${what}, ${through})`;
}

const fromRow = (r: Row): StoredMedia => ({
  key: r.key,
  condition: r.condition,
  burned: r.burned === 1,
  since: r.since,
  lastAddress: r.last_address,
  arqUuid: r.arq_uuid,
  instanceUuid: r.instance_uuid,
  lastSeen: r.last_seen,
  reason: r.reason,
  ...withCounters(countersFromText(r.write_counters)),
});

const withCounters = (c: WriteCounters | undefined) => (c ? { writeCounters: c } : {});

/** Whether a record's condition is one the write counters are judged by. */
const judgedByCounters = (c: MediaCondition) => c === 'clean' || c === 'declared_clean';

/** What a next tenant could be hurt by: the record must never be lost. */
export function isInformative(r: MediaRecord): boolean {
  return r.burned || r.condition === 'held' || r.condition === 'dirty';
}

/** How bad a condition is for a next tenant (the worse one wins when two records merge). */
const SEVERITY: Record<MediaCondition, number> = {
  clean: 0,
  declared_clean: 1,
  not_cleanable: 2,
  dirty: 3,
  held: 4,
};

export class MediaLedger {
  private readonly records = new Map<string, StoredMedia>();

  constructor(private readonly db: Database.Database) {}

  /** Reads every record, pruning the uninformative ones not seen for PRUNE_AFTER_MS. Returns how many were pruned. */
  load(now = Date.now()): number {
    const pruned = this.db
      .prepare(
        `DELETE FROM media WHERE burned = 0 AND condition IN ('clean','declared_clean','not_cleanable') AND last_seen < ?`,
      )
      .run(now - PRUNE_AFTER_MS).changes;
    this.read();
    return pruned;
  }

  /** Reads every record as the file has them (no write: a read-only journal too). */
  read(): void {
    this.records.clear();
    for (const r of this.db.prepare(`SELECT * FROM media`).all() as Row[])
      this.records.set(r.key, fromRow(r));
  }

  get(key: string): StoredMedia | undefined {
    return this.records.get(key);
  }

  all(): StoredMedia[] {
    return [...this.records.values()];
  }

  get size(): number {
    return this.records.size;
  }

  private write(r: StoredMedia): void {
    this.db
      .prepare(
        `INSERT INTO media (key, condition, burned, since, last_address, arq_uuid, instance_uuid, last_seen, reason,
           write_counters)
         VALUES (@key, @condition, @burned, @since, @lastAddress, @arqUuid, @instanceUuid, @lastSeen, @reason,
           @writeCounters)
         ON CONFLICT (key) DO UPDATE SET condition = excluded.condition, burned = excluded.burned,
           since = excluded.since, last_address = excluded.last_address, arq_uuid = excluded.arq_uuid,
           instance_uuid = excluded.instance_uuid, last_seen = excluded.last_seen, reason = excluded.reason,
           write_counters = excluded.write_counters`,
      )
      .run({
        ...r,
        burned: r.burned ? 1 : 0,
        // Counters mean something only beside a clean record.
        writeCounters:
          r.writeCounters && judgedByCounters(r.condition) ? JSON.stringify(r.writeCounters) : '',
      });
  }

  private remove(key: string): void {
    this.db.prepare(`DELETE FROM media WHERE key = ?`).run(key);
  }

  /**
   * Runs `fn` in one immediate transaction; the in-memory records follow only
   * when it commits (a failed write leaves them as the file has them).
   */
  private transact<T>(fn: (put: (r: StoredMedia) => void, del: (key: string) => void) => T): T {
    const puts = new Map<string, StoredMedia | null>();
    const result = this.db
      .transaction(() => {
        puts.clear();
        return fn(
          (r) => {
            this.write(r);
            puts.set(r.key, r);
          },
          (key) => {
            this.remove(key);
            puts.set(key, null);
          },
        );
      })
      .immediate();
    for (const [key, r] of puts) {
      if (r) this.records.set(key, r);
      else this.records.delete(key);
    }
    return result;
  }

  /**
   * A discovery pass: media seen for the first time gets its condition
   * (unknown provenance: dirty, unless every device_spec entry that reaches it
   * says assume_clean; not cleaned: no record), a record seen at another
   * address follows it there, and holds recorded by address before media
   * identities move onto the media found at that address. Media a
   * function was known by before it was identified (its slot's record) passes
   * its held, dirty or burned state on to the identity found now.
   */
  observe(seen: SeenMedia[], legacy: LegacyHold[], now = Date.now()): ObserveResult {
    const result: ObserveResult = {
      created: [],
      declared: [],
      moved: [],
      migrated: [],
      countersMoved: [],
      changed: [],
      consumedLegacy: [],
    };
    const byKey = new Map<string, SeenMedia[]>();
    for (const s of seen) {
      const list = byKey.get(s.key);
      if (list) list.push(s);
      else byKey.set(s.key, [s]);
    }
    // Decide without writing first, so a pass where nothing changed opens no transaction.
    const next = new Map<string, StoredMedia | null>();
    // Slot records (usually none) are looked through only for media seen for the first time.
    const slots = [...this.records.values()].filter((r) => r.key.startsWith('pci-slot:'));
    const current = (key: string) => (next.has(key) ? (next.get(key) ?? undefined) : this.records.get(key));
    for (const [key, list] of byKey) {
      list.sort((a, b) => (a.address < b.address ? -1 : a.address > b.address ? 1 : 0));
      const addresses = list.map((s) => s.address);
      const cleanable = list.some((s) => s.cleanable);
      const declared = list.filter((s) => s.cleanable).every((s) => s.assumeClean);
      const rec = current(key);
      if (!rec) {
        // What this function was known by before it was identified.
        const slot =
          key.startsWith('pci-slot:') || slots.length === 0
            ? undefined
            : slots.find(
                (r) =>
                  list.some((s) => r.key.startsWith(s.slotPrefix)) && (!next.has(r.key) || next.get(r.key)),
              );
        if (!cleanable && !slot) continue;
        let created: StoredMedia = {
          key,
          condition: cleanable ? (declared ? 'declared_clean' : 'dirty') : 'not_cleanable',
          burned: false,
          since: now,
          lastAddress: addresses[0]!,
          arqUuid: '',
          instanceUuid: '',
          lastSeen: now,
          reason: cleanable && !declared ? 'never cleaned by Berth (unknown provenance)' : '',
        };
        if (slot) {
          created = merge(created, slot, now);
          next.set(slot.key, null);
        }
        // Declared clean: what it has counted so far is what the operator declared clean.
        const first = list.find((s) => s.counters)?.counters;
        if (first && created.condition === 'declared_clean') created = { ...created, writeCounters: first };
        next.set(key, created);
        if (created.condition === 'declared_clean') result.declared.push({ key, address: addresses[0]! });
        result.created.push({
          key,
          address: addresses[0]!,
          condition: created.condition,
          inheritedFrom: slot?.key ?? null,
        });
        continue;
      }
      let r = rec;
      if (cleanable && r.condition === 'not_cleanable') {
        r = {
          ...r,
          condition: declared ? 'declared_clean' : 'dirty',
          since: now,
          reason: declared ? '' : 'never cleaned by Berth (it was not cleaned where it was seen before)',
        };
        if (declared) result.declared.push({ key, address: addresses[0]! });
      } else if (!cleanable && (r.condition === 'clean' || r.condition === 'declared_clean')) {
        // Not cleaned here: what happens to it now is not tracked, so it is never "clean" again without a cleanup.
        r = { ...r, condition: 'not_cleanable', since: now, reason: '' };
      }
      if (judgedByCounters(r.condition)) r = this.judgeCounters(r, list, now, result);
      if (!addresses.includes(r.lastAddress)) {
        result.moved.push({ key, from: r.lastAddress, to: addresses[0]!, condition: r.condition });
        r = { ...r, lastAddress: addresses[0]! };
      }
      if (now - r.lastSeen >= SEEN_RESOLUTION_MS) r = { ...r, lastSeen: now };
      if (r !== rec)
        next.set(key, !cleanable && !isInformative(r) && r.condition === 'not_cleanable' ? null : r);
    }
    // Holds recorded by address: onto the media found at that address now; never lost.
    for (const h of legacy) {
      const s = seen.find((x) => x.address === h.address);
      if (!s) continue;
      const rec = current(s.key);
      const held: StoredMedia = {
        key: s.key,
        condition: 'held',
        burned: rec?.burned ?? false,
        since: h.since,
        lastAddress: h.address,
        arqUuid: h.arqUuid,
        instanceUuid: h.instanceUuid,
        lastSeen: now,
        reason: '',
      };
      next.set(s.key, rec?.condition === 'held' ? rec : held);
      result.migrated.push({ address: h.address, key: s.key, arqUuid: h.arqUuid });
      result.consumedLegacy.push(h.address);
    }
    if (next.size === 0 && result.consumedLegacy.length === 0) return result;
    this.transact((put, del) => {
      for (const [key, r] of next) {
        if (r) put(r);
        else if (this.records.has(key)) del(key);
      }
      for (const address of result.consumedLegacy) {
        this.db.prepare(`DELETE FROM held_devices WHERE address = ?`).run(address);
      }
    });
    result.changed = [...next.keys()];
    return result;
  }

  /**
   * A clean (or declared clean) record against the write counters read now
   * through each controller that reaches it: dirty when any moved since the
   * record (writeCountersChange). A record made without counters (before
   * this version, or declared clean before a first read) takes the first
   * ones read as its own. Counters compare only with those of the same
   * controller (cntlid), and only when read after the record's.
   */
  private judgeCounters(r: StoredMedia, seen: SeenMedia[], now: number, result: ObserveResult): StoredMedia {
    for (const s of seen) {
      const c = s.counters;
      if (!c) continue;
      const recorded = r.writeCounters;
      if (!recorded) return { ...r, writeCounters: c };
      if (c.cntlid !== recorded.cntlid || c.at < recorded.at) continue;
      const reason = writeCountersChange(recorded, c);
      if (!reason) continue;
      result.countersMoved.push({ key: r.key, address: s.address, reason });
      const { writeCounters: _, ...rest } = r;
      return { ...rest, condition: 'dirty', since: now, arqUuid: '', instanceUuid: '', reason };
    }
    return r;
  }

  /**
   * RecordBinding's write: the media is handed to a guest for `arqUuid`. The
   * caller has checked it may be (`bindRefusal`). Cleaned media becomes held;
   * a one-time-use device's media is burned. Returns the record (unchanged for
   * the same binding again).
   */
  hold(
    key: string,
    address: string,
    binding: { arqUuid: string; instanceUuid: string },
    opts: { cleanable: boolean; oneTimeUse: boolean },
    now = Date.now(),
  ): StoredMedia {
    const rec = this.records.get(key);
    const same = rec !== undefined && rec.arqUuid === binding.arqUuid;
    const condition: MediaCondition = opts.cleanable ? 'held' : (rec?.condition ?? 'not_cleanable');
    const burned = (rec?.burned ?? false) || opts.oneTimeUse;
    if (rec && same && rec.condition === condition && rec.burned === burned) return rec;
    const r: StoredMedia = {
      key,
      condition,
      burned,
      since: same && rec ? rec.since : now,
      lastAddress: address,
      arqUuid: binding.arqUuid,
      instanceUuid: binding.instanceUuid,
      lastSeen: now,
      reason: '',
    };
    this.transact((put) => put(r));
    return r;
  }

  /**
   * A cleanup the agent judged clean ended: the media holds no tenant data.
   * The burn stays. `counters`: the write counters read right after it, which
   * the record is judged against from now on.
   */
  markClean(key: string, address: string, now = Date.now(), counters?: WriteCounters): StoredMedia {
    const rec = this.records.get(key);
    const r: StoredMedia = {
      key,
      condition: 'clean',
      burned: rec?.burned ?? false,
      since: now,
      lastAddress: address,
      arqUuid: '',
      instanceUuid: '',
      lastSeen: now,
      reason: '',
      ...withCounters(counters),
    };
    this.transact((put) => put(r));
    return r;
  }

  /** A cleanup failed or was cut short: the media may hold anything it held before. */
  markDirty(key: string, address: string, reason: string, now = Date.now()): StoredMedia {
    const rec = this.records.get(key);
    const r: StoredMedia = {
      key,
      condition: 'dirty',
      burned: rec?.burned ?? false,
      since: now,
      lastAddress: address || rec?.lastAddress || '',
      arqUuid: '',
      instanceUuid: '',
      lastSeen: now,
      reason,
    };
    this.transact((put) => put(r));
    return r;
  }

  /** ReleaseDevice: the operator clears the burn. Unchanged (no write) when not burned. */
  release(key: string, now = Date.now()): StoredMedia | undefined {
    const rec = this.records.get(key);
    if (!rec?.burned) return rec;
    const r: StoredMedia = { ...rec, burned: false, since: now };
    // A released one-time-use device that is not cleaned keeps no record: nothing is left to follow.
    const keep = isInformative(r) || r.condition === 'clean' || r.condition === 'declared_clean';
    this.transact((put, del) => (keep ? put(r) : del(key)));
    return keep ? r : { ...r, condition: 'not_cleanable', arqUuid: '', instanceUuid: '' };
  }
}

/** Two records of what may be one media: the worse condition (with its binding), either burn. */
function merge(a: StoredMedia, b: StoredMedia, now: number): StoredMedia {
  const worse = SEVERITY[b.condition] > SEVERITY[a.condition] ? b : a;
  return {
    ...a,
    condition: worse.condition,
    arqUuid: worse.arqUuid,
    instanceUuid: worse.instanceUuid,
    reason: worse === b ? b.reason || `recorded under ${b.key} before it was identified` : a.reason,
    burned: a.burned || b.burned,
    since: worse === b ? b.since : now,
  };
}
