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
import type { MediaRow } from './media-schema.js';
import {
  countersFromText,
  judgedByCounters,
  withCounters,
  writeCountersChange,
} from './media-write-counters.js';

/** Uninformative records of media not seen for this long are pruned at start. */
export const PRUNE_AFTER_MS = 90 * 24 * 3600 * 1000;
/** `last_seen` is written at most this often per record (a discovery every few seconds must not write). */
const SEEN_RESOLUTION_MS = 24 * 3600 * 1000;

/** A journal record with why it is in its condition (for messages and logs). */
export interface StoredMedia extends MediaRecord {
  /** ms since the epoch: when a discovery last saw it (to a day). */
  lastSeen: number;
  /** Why it is dirty, or burned without a binding (custody unknown); '' otherwise. */
  reason: string;
  /** ms since the epoch: when its custody broke (absent from a discovery, or the host restarted); 0 = unbroken. */
  custodyBrokenAt: number;
  /** Why its custody broke ('' while unbroken). */
  custodyBreak: string;
  /** A held record: the project that owns the instance, when RecordBinding named one. */
  projectId?: string;
}

/** A device as a discovery pass reports it, for the ledger. */
export interface SeenMedia {
  address: string;
  key: string;
  /** The device is cleaned by Berth (a driver that cleans it, with a locked-in action or not yet). */
  cleanable: boolean;
  /** Its device_spec entry says assume_clean. */
  assumeClean: boolean;
  /** Its device_spec entry says one_time_use. */
  oneTimeUse: boolean;
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
  /** Media a discovery looked for and no longer sees: their custody broke now. */
  lost: { key: string; lastAddress: string }[];
  /** Media seen again after their custody broke: of unknown history, now dirty (cleaned) or burned (one-time use). */
  regained: {
    key: string;
    address: string;
    brokeAt: number;
    why: string;
    condition: MediaCondition;
    burned: boolean;
  }[];
  /** One-time-use media seen with no record: held for an operator (burned), or taken as unused (assume_clean, or an upgrade). */
  unrecorded: { key: string; address: string; held: boolean; why: string }[];
}

/** Which records a discovery pass looked for: their media, not seen, left custody. */
export interface Lookout {
  /** Every record (a full pass), or those of these keys (a partial one). */
  keys: ReadonlySet<string> | 'all';
  /** Keys a failed driver's devices reach: not looked for (their devices keep their last state). */
  except: ReadonlySet<string>;
}

/** A hold the journal recorded by address, before media identities. */
export interface LegacyHold {
  address: string;
  arqUuid: string;
  instanceUuid: string;
  since: number;
}

const fromRow = (r: MediaRow): StoredMedia => ({
  key: r.key,
  condition: r.condition,
  burned: r.burned === 1,
  since: r.since,
  lastAddress: r.last_address,
  arqUuid: r.arq_uuid,
  instanceUuid: r.instance_uuid,
  lastSeen: r.last_seen,
  reason: r.reason,
  custodyBrokenAt: r.custody_broken_at ?? 0,
  custodyBreak: r.custody_break ?? '',
  ...withCounters(countersFromText(r.write_counters)),
  ...(r.project_id ? { projectId: r.project_id } : {}),
});

const iso = (ms: number) => new Date(ms).toISOString();

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
  /** The journal predates custody: the first full discovery takes unrecorded one-time-use media as unused. */
  private adopting = false;

  /**
   * @param vouching the journal is new: until its first full discovery ends,
   * `assume_clean` vouches for the media it finds (decision 62). Media first
   * seen after that came from elsewhere or was never in Berth's sight: its
   * history is unknown whatever the entry says, so it is cleaned (or held)
   * first — a drive carried in from another host is not declared clean by the
   * entry that vouched for the drives the operator installed.
   */
  constructor(
    private readonly db: Database.Database,
    private vouching = false,
  ) {}

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
    for (const r of this.db.prepare(`SELECT * FROM media`).all() as MediaRow[])
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

  /**
   * At the agent's start, before its first discovery: a boot id other than
   * the one the journal last ran under means the host was off (or the
   * journal was carried to another machine), and what happened to its
   * hardware meanwhile is unknown, so the custody of every record whose
   * custody is unbroken breaks now, durably. A journal with no boot id yet
   * (new, or from before custody) takes this one. Returns the previous boot
   * id and how many records broke.
   */
  startCustody(bootId: string, now = Date.now()): { previous: string; broken: number } {
    const row = this.db.prepare(`SELECT boot_id, adopt_unrecorded FROM custody WHERE id = 1`).get() as
      | { boot_id: string; adopt_unrecorded: number }
      | undefined;
    const previous = row?.boot_id ?? '';
    this.adopting = row?.adopt_unrecorded === 1;
    if (previous === bootId) return { previous, broken: 0 };
    const why = `the host started again (boot id ${previous}, now ${bootId}): it was off, and its hardware may have been moved or used elsewhere meanwhile`;
    const broken = this.db
      .transaction(() => {
        this.db
          .prepare(`INSERT INTO custody (id, boot_id, adopt_unrecorded) VALUES (1, ?, 0)
                    ON CONFLICT (id) DO UPDATE SET boot_id = excluded.boot_id`)
          .run(bootId);
        if (previous === '') return 0;
        return this.db
          .prepare(`UPDATE media SET custody_broken_at = ?, custody_break = ? WHERE custody_broken_at = 0`)
          .run(now, why).changes;
      })
      .immediate();
    if (broken > 0) this.read();
    return { previous, broken };
  }

  private write(r: StoredMedia): void {
    this.db
      .prepare(
        `INSERT INTO media (key, condition, burned, since, last_address, arq_uuid, instance_uuid, last_seen, reason,
           custody_broken_at, custody_break, write_counters, project_id)
         VALUES (@key, @condition, @burned, @since, @lastAddress, @arqUuid, @instanceUuid, @lastSeen, @reason,
           @custodyBrokenAt, @custodyBreak, @writeCounters, @projectId)
         ON CONFLICT (key) DO UPDATE SET condition = excluded.condition, burned = excluded.burned,
           since = excluded.since, last_address = excluded.last_address, arq_uuid = excluded.arq_uuid,
           instance_uuid = excluded.instance_uuid, last_seen = excluded.last_seen, reason = excluded.reason,
           custody_broken_at = excluded.custody_broken_at, custody_break = excluded.custody_break,
           write_counters = excluded.write_counters, project_id = excluded.project_id`,
      )
      .run({
        ...r,
        burned: r.burned ? 1 : 0,
        // Counters mean something only beside a clean record.
        writeCounters:
          r.writeCounters && judgedByCounters(r.condition) ? JSON.stringify(r.writeCounters) : '',
        // The project belongs to the binding: only beside one.
        projectId: r.arqUuid ? (r.projectId ?? '') : '',
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
   * says assume_clean; not cleaned: no record, unless one-time use: burned,
   * of unknown use, unless assume_clean vouches it unused), media whose
   * custody broke is of unknown history when seen again (dirty if cleaned,
   * burned if one-time use), media the pass looked for (`lookout`) and did not
   * see leaves custody (the break is recorded), a record seen at another
   * address follows it there, and holds recorded by address before media
   * identities move onto the media found at that address. Media a
   * function was known by before it was identified (its slot's record) passes
   * its held, dirty or burned state on to the identity found now.
   */
  observe(seen: SeenMedia[], legacy: LegacyHold[], now = Date.now(), lookout?: Lookout): ObserveResult {
    const result: ObserveResult = {
      created: [],
      declared: [],
      moved: [],
      migrated: [],
      countersMoved: [],
      changed: [],
      consumedLegacy: [],
      lost: [],
      regained: [],
      unrecorded: [],
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
    const adopting = this.adopting && lookout?.keys === 'all';
    const vouching = this.vouching;
    if (lookout?.keys === 'all') this.vouching = false;
    for (const [key, list] of byKey) {
      list.sort((a, b) => (a.address < b.address ? -1 : a.address > b.address ? 1 : 0));
      const addresses = list.map((s) => s.address);
      const cleanable = list.some((s) => s.cleanable);
      const declared = vouching && list.filter((s) => s.cleanable).every((s) => s.assumeClean);
      // A one-time-use media Berth does not clean is held when its use is unknown; one it cleans is
      // scrubbed with proof instead (Nova's clean-one-time-use: a scrub is what returns it).
      const oneTimeUse = !cleanable && list.some((s) => s.oneTimeUse);
      // assume_clean vouches "unused" for a one-time-use media with no record (decision 62).
      const vouchedUnused = vouching && list.filter((s) => s.oneTimeUse).every((s) => s.assumeClean);
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
        if (!cleanable && !oneTimeUse && !slot) continue;
        const unknownUse = oneTimeUse && !vouchedUnused && !adopting;
        const useWhy = unknownUse
          ? 'one-time-use media seen with no record of it (a lost journal, or a device from elsewhere): whether it was used is unknown'
          : '';
        let created: StoredMedia = {
          key,
          condition: cleanable ? (declared ? 'declared_clean' : 'dirty') : 'not_cleanable',
          burned: unknownUse,
          since: now,
          lastAddress: addresses[0]!,
          arqUuid: '',
          instanceUuid: '',
          lastSeen: now,
          reason: cleanable && !declared ? 'never cleaned by Berth (unknown provenance)' : useWhy,
          custodyBrokenAt: 0,
          custodyBreak: '',
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
        if (oneTimeUse) {
          result.unrecorded.push({
            key,
            address: addresses[0]!,
            held: created.burned,
            why: unknownUse
              ? useWhy
              : adopting
                ? 'the journal predates custody and kept no record of unused one-time-use media'
                : 'assume_clean in its device_spec entry vouches that it is unused',
          });
        }
        result.created.push({
          key,
          address: addresses[0]!,
          condition: created.condition,
          inheritedFrom: slot?.key ?? null,
        });
        continue;
      }
      let r = rec;
      if (r.custodyBrokenAt > 0) {
        // Seen again after a gap in custody: what happened to it meanwhile is unknown.
        const gap = `its custody broke at ${iso(r.custodyBrokenAt)} (${r.custodyBreak}); what happened to it since is unknown`;
        r = {
          ...r,
          condition: cleanable && r.condition !== 'held' ? 'dirty' : r.condition,
          burned: r.burned || oneTimeUse,
          since: now,
          reason: cleanable || oneTimeUse ? gap : r.reason,
          custodyBrokenAt: 0,
          custodyBreak: '',
        };
        if (cleanable || oneTimeUse) {
          result.regained.push({
            key,
            address: addresses[0]!,
            brokeAt: rec.custodyBrokenAt,
            why: rec.custodyBreak,
            condition: r.condition,
            burned: r.burned,
          });
        }
      }
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
      // A one-time-use media keeps its record (unused, once released): without one it is of unknown use.
      if (r !== rec)
        next.set(
          key,
          !cleanable && !oneTimeUse && !isInformative(r) && r.condition === 'not_cleanable' ? null : r,
        );
    }
    // Media this pass looked for and did not see: pulled, moved, or its host rebuilt.
    if (lookout) {
      const keys = lookout.keys === 'all' ? [...this.records.keys()] : [...lookout.keys];
      for (const key of keys) {
        if (byKey.has(key) || lookout.except.has(key)) continue;
        const rec = current(key);
        if (!rec || rec.custodyBrokenAt > 0) continue;
        next.set(key, {
          ...rec,
          custodyBrokenAt: now,
          custodyBreak: `a discovery no longer saw it at ${rec.lastAddress} (pulled, moved, or its host rebuilt)`,
        });
        result.lost.push({ key, lastAddress: rec.lastAddress });
      }
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
        custodyBrokenAt: 0,
        custodyBreak: '',
      };
      next.set(s.key, rec?.condition === 'held' ? rec : held);
      result.migrated.push({ address: h.address, key: s.key, arqUuid: h.arqUuid });
      result.consumedLegacy.push(h.address);
    }
    const adopted = adopting;
    if (next.size === 0 && result.consumedLegacy.length === 0 && !adopted) return result;
    this.transact((put, del) => {
      if (adopted) this.db.prepare(`UPDATE custody SET adopt_unrecorded = 0 WHERE id = 1`).run();
      for (const [key, r] of next) {
        if (r) put(r);
        else if (this.records.has(key)) del(key);
      }
      for (const address of result.consumedLegacy) {
        this.db.prepare(`DELETE FROM held_devices WHERE address = ?`).run(address);
      }
    });
    if (adopted) this.adopting = false;
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
    binding: { arqUuid: string; instanceUuid: string; projectId?: string },
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
      custodyBrokenAt: 0,
      custodyBreak: '',
      ...(binding.projectId ? { projectId: binding.projectId } : {}),
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
      // A proven cleanup of the media, here: what it held before no longer matters.
      custodyBrokenAt: 0,
      custodyBreak: '',
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
      custodyBrokenAt: rec?.custodyBrokenAt ?? 0,
      custodyBreak: rec?.custodyBreak ?? '',
    };
    this.transact((put) => put(r));
    return r;
  }

  /**
   * ReleaseDevice: the operator clears the burn. Unchanged (no write) when not
   * burned. The record stays (unused now): a one-time-use media without one
   * is of unknown use at its next sight.
   */
  release(key: string, now = Date.now()): StoredMedia | undefined {
    const rec = this.records.get(key);
    if (!rec?.burned) return rec;
    const r: StoredMedia = {
      ...rec,
      burned: false,
      since: now,
      reason: rec.condition === 'dirty' ? rec.reason : '',
    };
    this.transact((put) => put(r));
    return r;
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
    projectId: worse.projectId,
    reason: worse === b ? b.reason || `recorded under ${b.key} before it was identified` : a.reason,
    burned: a.burned || b.burned,
    since: worse === b ? b.since : now,
  };
}
