/**
 * What one agent's inventory may hold, and how fast it may change (invariant
 * 10: one host cannot break the fleet). Checked where the scheduler receives
 * an agent's inventory; a device beyond a bound is not stored, an update beyond
 * the host's inflow budget is refused until the budget refills, and the reason
 * names the limit. The bounds keep a device record a few KiB, so a 500-device
 * page of ListDevices stays far under the clients' 4 MiB message limit
 * whatever any agent sends, and what one host can make the scheduler store
 * and log (device rows, events) in any minute is bounded.
 */

import type { DeviceFacts } from './device-state.js';

export const INVENTORY_LIMITS = {
  /** Devices one host may report. */
  devicesPerHost: 8192,
  /** Attributes of one device, and the size of each key and value (UTF-16 code units). */
  attributesPerDevice: 32,
  attributeKeyLength: 64,
  attributeValueLength: 1024,
  /** Traits of one device, and the length of each. */
  traitsPerDevice: 64,
  traitLength: 255,
  /** IOMMU group peers of one device. */
  iommuGroupPeersPerDevice: 256,
  /** Every other string of a device (driver, resource class, reasons, …). */
  fieldLength: 1024,
  /** Attributes and traits of one device together. */
  deviceExtrasBytes: 8192,
  /** Namespaces a device's media identity may list. */
  mediaNamespaces: 1024,
  /** A device's media identity and its agent's record together (JSON). */
  mediaBytes: 131_072,
} as const;

const L = INVENTORY_LIMITS;

/** Why a device the agent reported breaks a bound (naming it), or null when it is within them. */
export function inventoryBoundBroken(d: DeviceFacts): string | null {
  const attrs = Object.entries(d.attributes);
  if (attrs.length > L.attributesPerDevice) {
    return `${attrs.length} attributes, more than the limit of ${L.attributesPerDevice} (attributesPerDevice)`;
  }
  for (const [k, v] of attrs) {
    if (k.length > L.attributeKeyLength) {
      return `attribute key of ${k.length} characters, over the limit of ${L.attributeKeyLength} (attributeKeyLength)`;
    }
    if (v.length > L.attributeValueLength) {
      return `attribute ${JSON.stringify(k)} of ${v.length} characters, over the limit of ${L.attributeValueLength} (attributeValueLength)`;
    }
  }
  if (d.traits.length > L.traitsPerDevice) {
    return `${d.traits.length} traits, more than the limit of ${L.traitsPerDevice} (traitsPerDevice)`;
  }
  const longTrait = d.traits.find((t) => t.length > L.traitLength);
  if (longTrait !== undefined) {
    return `a trait of ${longTrait.length} characters, over the limit of ${L.traitLength} (traitLength)`;
  }
  if (d.iommuGroupPeers.length > L.iommuGroupPeersPerDevice) {
    return `${d.iommuGroupPeers.length} IOMMU group peers, more than the limit of ${L.iommuGroupPeersPerDevice} (iommuGroupPeersPerDevice)`;
  }
  for (const [name, v] of Object.entries(d)) {
    if (typeof v === 'string' && v.length > L.fieldLength) {
      return `field ${name} of ${v.length} characters, over the limit of ${L.fieldLength} (fieldLength)`;
    }
  }
  const media = mediaBoundBroken(d);
  if (media) return media;
  const extras = attrs.reduce((n, [k, v]) => n + k.length + v.length, 0) + d.traits.join('').length;
  if (extras > L.deviceExtrasBytes) {
    return `attributes and traits of ${extras} characters together, over the limit of ${L.deviceExtrasBytes} (deviceExtrasBytes)`;
  }
  return null;
}

function mediaBoundBroken(d: DeviceFacts): string | null {
  const n = d.media?.namespaces.length ?? 0;
  if (n > L.mediaNamespaces) {
    return `a media identity listing ${n} namespaces, more than the limit of ${L.mediaNamespaces} (mediaNamespaces)`;
  }
  for (const [name, v] of [...Object.entries(d.media ?? {}), ...Object.entries(d.agentMedia ?? {})]) {
    if (typeof v === 'string' && v.length > L.fieldLength) {
      return `media field ${name} of ${v.length} characters, over the limit of ${L.fieldLength} (fieldLength)`;
    }
  }
  const bytes = JSON.stringify([d.media, d.agentMedia]).length;
  if (bytes > L.mediaBytes) {
    return `a media identity and record of ${bytes} characters, over the limit of ${L.mediaBytes} (mediaBytes)`;
  }
  return null;
}

/** What one host may store and send, all hosts alike (docs/operator-guide.md "Limits"). */
export interface HostInflowLimits {
  /** Bytes of device facts (their JSON) one host may have stored. */
  storedBytes: number;
  /** Bytes of device facts one host may send per second, sustained (snapshots and changes alike). */
  bytesPerSecond: number;
  /** How much of it may come at once (a host's snapshot after its agent restarts). */
  burstBytes: number;
  /** The largest inventory message the scheduler decodes from an agent. */
  messageBytes: number;
}

export const HOST_INFLOW_LIMITS: HostInflowLimits = {
  // A 4,368-function host reports about 2.5 MiB.
  storedBytes: 8 << 20,
  bytesPerSecond: 64 << 10,
  burstBytes: 16 << 20,
  messageBytes: 24 << 20,
};

/** The size a device's facts count for against the host's budgets. */
export const factsBytes = (d: DeviceFacts): number => JSON.stringify(d).length;

/**
 * A host's inflow budget: a token bucket of bytes, full at start, refilled at
 * `bytesPerSecond` up to `burstBytes`. Pure: the caller gives the time.
 */
export class InflowBudget {
  private tokens: number;
  private at: number;

  constructor(
    private readonly limits: Pick<HostInflowLimits, 'bytesPerSecond' | 'burstBytes'>,
    now: number,
  ) {
    this.tokens = limits.burstBytes;
    this.at = now;
  }

  private refill(now: number): void {
    const elapsed = Math.max(0, now - this.at) / 1000;
    this.tokens = Math.min(this.limits.burstBytes, this.tokens + elapsed * this.limits.bytesPerSecond);
    this.at = now;
  }

  /** Spends `bytes` if the budget holds them now; false (nothing spent) if not. */
  take(bytes: number, now: number): boolean {
    this.refill(now);
    if (bytes > this.tokens) return false;
    this.tokens -= bytes;
    return true;
  }

  /** Milliseconds until `bytes` (at most the burst) can be spent. */
  waitMs(bytes: number, now: number): number {
    this.refill(now);
    const short = Math.min(bytes, this.limits.burstBytes) - this.tokens;
    return short <= 0 ? 0 : Math.ceil((short / this.limits.bytesPerSecond) * 1000);
  }
}
