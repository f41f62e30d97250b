/**
 * Tenant data followed by the media it lives on (DESIGN invariants 11–13,
 * docs/media-identity.md), in one pure module.
 *
 * Devices that report the same media key reach the same media (the
 * controllers of one NVM subsystem, on one host or several; a drive seen
 * again at another address or on another host). The scheduler keeps one
 * `MediaState` per key — its own account, beside the agents' journals — and
 * after every unit that touched a key it settles that key's devices with
 * `settleMedia`: at most one of them holds the media at a time, the others
 * are kept out of the pool with a reason, dirt and burns recorded under the
 * key reach every device that shows up with it, and media nobody is cleaning
 * gets a cleanup before it is offered.
 */

import { BerthError } from '../../../errors.js';
import type { MediaIdentity, MediaRecord } from '../../../plugins/types.js';
import { type DeviceRecord, mediaSettled } from './device-state.js';

/** What the scheduler knows of the data on a media. */
export type MediaCondition = 'clean' | 'held' | 'dirty';

/** Who holds a media while one of its devices is allocated. */
export interface MediaHolder {
  deviceUuid: string;
  host: string;
  address: string;
  arqUuid: string | null;
  instanceUuid: string | null;
  migrationUuid: string | null;
}

/** The scheduler's record of one media (store table `media`). */
export interface MediaState {
  key: string;
  condition: MediaCondition;
  /**
   * A one-time-use device of this media was handed out, or its history is
   * unknown (custody); only an operator's release clears it.
   */
  burned: boolean;
  /** Why it is burned when no binding burned it (custody unknown, decision 62); '' otherwise. */
  burnReason: string;
  /**
   * Custody (DESIGN invariant 15): the hosts that last reported a device of
   * it present, sorted. A host that reports it while none of these does any
   * more took it over: what happened between is unknown. [] = none known.
   */
  custodians: string[];
  /** While held: the allocated device. */
  holder: MediaHolder | null;
  /** While dirty: why, in words (shown in reasons and logs). */
  reason: string;
  /** Where a device of this media was last seen. */
  host: string;
  address: string;
  /**
   * The agent's clock (ms) at the last cleanup of this media the scheduler
   * accepted; an agent's report of dirt no newer than it is stale. 0 = never.
   */
  cleanedAt: number;
  updatedAt: string;
}

/** Device states in which a device is being cleaned of its media's data, or failed to be. */
const CLEANING = new Set(['pending_cleaning', 'cleaning', 'error']);

/**
 * The device holds its media: allocated (seen by the last discovery or not: a
 * tenant may still run), or, while its host still sees it, being cleaned of
 * it or failed to be. A device its host no longer sees (the drive moved to
 * another slot or host) cannot clean the media: another device of it does.
 */
export const holdsMedia = (d: DeviceRecord): boolean =>
  d.deviceState === 'allocated' || (d.present && CLEANING.has(d.deviceState));

/** The media key of a device, or null for a device whose agent reports none. */
export const mediaKeyOf = (d: { media: { key: string } | null }): string | null => d.media?.key || null;

/** Whether an agent's journal record says the media holds tenant data, newer than the last accepted cleanup. */
export function agentReportsDirt(r: MediaRecord | null, cleanedAt: number): boolean {
  if (!r) return false;
  return (r.condition === 'held' || r.condition === 'dirty') && r.since > cleanedAt;
}

/**
 * The record of a media seen for the first time, through `d`, whose agent's
 * journal says `agent` of it. A device that is cleaned and that Berth never
 * cleaned is dirty (unknown provenance) unless its agent's journal says it
 * cleaned it or the operator declared it clean (device_spec assume_clean).
 */
export function firstSight(d: DeviceRecord, agent: MediaRecord | null, now: string): MediaState {
  const key = mediaKeyOf(d)!;
  const vouched = agent?.condition === 'clean' || agent?.condition === 'declared_clean';
  const dirty = d.supportsCleaning && !vouched;
  return {
    key,
    condition: dirty ? 'dirty' : 'clean',
    burned: d.burned || (agent?.burned ?? false),
    burnReason: agent?.burned && agent.reason ? `the agent of host ${d.host}: ${agent.reason}` : '',
    custodians: [],
    holder: null,
    reason: dirty
      ? agent
        ? agent.reason
          ? `the agent of host ${d.host}: ${agent.reason}`
          : `its agent's journal says it is ${agent.condition.replace('_', ' ')}`
        : 'Berth never cleaned it (unknown provenance)'
      : '',
    host: d.host,
    address: d.address,
    cleanedAt: 0,
    updatedAt: now,
  };
}

/** A cleanup of `d` was accepted: its media is clean as of the agent's `at` (ms). */
export function mediaCleaned(m: MediaState, at: number, now: string): MediaState {
  return {
    ...m,
    condition: 'clean',
    reason: '',
    holder: null,
    cleanedAt: Math.max(m.cleanedAt, at),
    updatedAt: now,
  };
}

/**
 * An agent reported its journal's record of a media: with a device of it in
 * its inventory, or at registration (seen on that host or not). Dirt newer
 * than the last accepted cleanup, and a burn, are added; nothing is removed.
 */
export function mediaReported(m: MediaState, r: MediaRecord, host: string, now: string): MediaState {
  const dirt = agentReportsDirt(r, m.cleanedAt) && m.condition === 'clean';
  if (!dirt && (m.burned || !r.burned)) return m;
  const burns = r.burned && !m.burned;
  return {
    ...m,
    burned: m.burned || r.burned,
    ...(burns && r.reason ? { burnReason: `the agent of host ${host}: ${r.reason}` } : {}),
    ...(dirt
      ? {
          condition: 'dirty' as const,
          reason: `the agent of host ${host} records it ${r.condition} since ${new Date(r.since).toISOString()}${r.reason ? `: ${r.reason}` : ''}`,
        }
      : {}),
    updatedAt: now,
  };
}

/** An operator released the media's burn (ReleaseDevice). */
export const mediaUnburned = (m: MediaState, now: string): MediaState =>
  m.burned ? { ...m, burned: false, burnReason: '', updatedAt: now } : m;

/**
 * What tells two media that claim one key apart ('' when nothing does): a
 * cloned NQN or serial puts two drives under one key (docs/media-identity.md).
 * The controllers of one subsystem agree on its serial and model, and on the
 * identifiers of each namespace both of them see (compared when `namespaces`).
 */
export function identityDifference(a: MediaIdentity, b: MediaIdentity, namespaces = true): string {
  if (a.kind !== b.kind) return `kind ${a.kind} and ${b.kind}`;
  if (a.serial !== b.serial) return `serial ${a.serial || '(none)'} and ${b.serial || '(none)'}`;
  if (a.model !== b.model) return `model ${a.model || '(none)'} and ${b.model || '(none)'}`;
  if (!namespaces) return '';
  for (const x of a.namespaces) {
    const y = b.namespaces.find((n) => n.nsid === x.nsid);
    if (!y) continue;
    for (const f of ['nguid', 'eui64', 'uuid'] as const) {
      if (x[f] && y[f] && x[f] !== y[f]) return `namespace ${x.nsid}'s ${f} ${x[f]} and ${y[f]}`;
    }
  }
  return '';
}

/** Two present devices of one key whose identities differ: two media claiming one key, and why. */
function clonedKey(devices: readonly DeviceRecord[]): string {
  const present = devices.filter((d) => d.present && d.media);
  for (let i = 0; i < present.length; i++) {
    for (let j = i + 1; j < present.length; j++) {
      const [a, b] = [present[i]!, present[j]!];
      // Namespace identifiers only within one host: its controllers are re-read together, while
      // another host's record of a namespace a cleanup re-created may lag a discovery behind.
      const differ = identityDifference(a.media!, b.media!, a.host === b.host);
      if (differ) {
        return `two different media claim key ${a.media!.key}: ${where(a)} and ${where(b)} differ in ${differ} (a cloned NQN or serial); neither is offered or cleaned until one of them is removed (pulled, or left out of device_spec), and the one left is scrubbed (or held for an operator's release) before its offer`;
      }
    }
  }
  return '';
}

const where = (d: { host: string; address: string }) => `${d.host} ${d.address}`;

/** What settling a media decided: the media record and the devices to rewrite. */
export interface MediaSettlement {
  media: MediaState;
  /** Devices whose record changes (mediaReason, burned): already transformed. */
  devices: DeviceRecord[];
  /** A device to move to pending_cleaning, because its media holds data nobody is cleaning. */
  toClean: DeviceRecord | null;
}

/**
 * Settles one media after a unit changed it or its devices: derives the
 * media's condition from its devices, spreads the burn to each of them, and
 * gives every device the reason its media keeps it out of the pool ('' when
 * none). Two devices of one media allocated at once (a race between hosts
 * that only a shared database can lose) is ABORTED, so the unit runs again.
 */
export function settleMedia(m: MediaState, devices: readonly DeviceRecord[], now: string): MediaSettlement {
  const allocated = devices.filter((d) => d.deviceState === 'allocated');
  if (allocated.length > 1) {
    throw new BerthError(
      'ABORTED',
      `media ${m.key} is allocated through ${allocated.map(where).join(' and ')} at once; retry`,
      { reason: 'CONCURRENT_UPDATE', metadata: { media_key: m.key } },
    );
  }
  let next: MediaState = { ...m };
  // Dirt means something only for media Berth can clean; a device that is not
  // cleaned goes from tenant to tenant as it is (only its burn is followed).
  const cleanable = devices.some((d) => d.supportsCleaning);
  const holder = allocated[0];
  if (holder) {
    next = {
      ...next,
      condition: 'held',
      reason: '',
      holder: {
        deviceUuid: holder.uuid,
        host: holder.host,
        address: holder.address,
        arqUuid: holder.arqUuid,
        instanceUuid: holder.instanceUuid,
        migrationUuid: holder.migrationUuid,
      },
    };
  } else if (next.condition === 'held') {
    // Its holder let go (or is gone): the data it left stays until a cleanup says otherwise.
    const was = next.holder;
    const notCleaned = devices.some((d) => d.uuid === was?.deviceUuid && !d.supportsCleaning);
    next = notCleaned
      ? { ...next, condition: 'clean', holder: null, reason: '' }
      : {
          ...next,
          condition: 'dirty',
          holder: null,
          reason: was ? `held through ${where(was)} until its release` : 'held until its release',
        };
  }
  // Custody (DESIGN invariant 15): hosts that present it now, none of which
  // did last time, took it over; two media under one key are never guessed.
  const presentHosts = [...new Set(devices.filter((d) => d.present).map((d) => d.host))].sort();
  const prior = next.custodians;
  let unknown = '';
  if (presentHosts.length > 0) {
    if (prior.length > 0 && !presentHosts.some((h) => prior.includes(h))) {
      unknown = `custody changed: ${presentHosts.join(' and ')} reports it after ${prior.join(' and ')} did, and what happened to it between is unknown`;
    }
    next = { ...next, custodians: presentHosts };
  }
  const clone = clonedKey(devices);
  if (clone) unknown = clone;
  if (unknown) {
    // Cleaned media is scrubbed with proof; a one-time-use device Berth does not clean is held.
    if (cleanable && next.condition === 'clean') next = { ...next, condition: 'dirty', reason: unknown };
    else if (!cleanable && devices.some((d) => d.oneTimeUse) && !next.burned) {
      next = { ...next, burned: true, burnReason: unknown };
    }
  }
  if (next.condition === 'dirty' && devices.length > 0 && !cleanable) {
    next = { ...next, condition: 'clean', reason: '' };
  }
  const busy = devices.filter(holdsMedia);
  if (busy.length > 0 && next.condition === 'clean' && cleanable) {
    next = { ...next, condition: 'dirty', reason: `${where(busy[0]!)} is ${busy[0]!.deviceState}` };
  }
  next.burned = next.burned || devices.some((d) => d.burned);
  const seen = devices.find((d) => d.present);
  if (seen) next = { ...next, host: seen.host, address: seen.address };

  // Media holding data that no device of it is cleaning (first seen dirty, dirt
  // reported by an agent or remembered from another address): the first
  // present, healthy device that can clean it does.
  let toClean: DeviceRecord | null = null;
  if (next.condition === 'dirty' && busy.length === 0 && !clone) {
    toClean =
      devices.find(
        (d) =>
          d.present &&
          d.health === 'healthy' &&
          d.deviceState === 'available' &&
          d.supportsCleaning &&
          d.cleanupAction,
      ) ?? null;
  }
  const out: DeviceRecord[] = [];
  for (const d of devices) {
    const reason = d.uuid === toClean?.uuid ? '' : mediaReasonFor(d, next, busy, clone);
    const settled = mediaSettled(d, reason, d.burned || next.burned);
    if (settled !== d) out.push(settled);
  }
  if (JSON.stringify({ ...next, updatedAt: m.updatedAt }) !== JSON.stringify(m)) next.updatedAt = now;
  return { media: next, devices: out, toClean };
}

/** Why `d`'s media keeps it out of the pool, '' when it does not. */
function mediaReasonFor(
  d: DeviceRecord,
  m: MediaState,
  busy: readonly DeviceRecord[],
  clone: string,
): string {
  const other = busy.find((b) => b.uuid !== d.uuid);
  if (other) {
    return `its media ${m.key} is ${other.deviceState === 'allocated' ? 'held' : other.deviceState.replace('_', ' ')} through ${where(other)}`;
  }
  if (holdsMedia(d)) return '';
  if (clone) return clone;
  if (m.burned && m.burnReason) {
    return `its media ${m.key} is held for an operator's release (berth device release): ${m.burnReason}`;
  }
  if (m.condition === 'dirty')
    return `its media ${m.key} may hold tenant data (${m.reason}) and is cleaned first`;
  return '';
}
