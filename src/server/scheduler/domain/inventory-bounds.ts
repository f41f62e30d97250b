/**
 * What one agent's inventory may hold (invariant 10: one host cannot break the
 * fleet). Checked where the scheduler receives an agent's inventory; a device
 * beyond a bound is not stored, and the reason names the limit. The bounds keep
 * a device record a few KiB, so a 500-device page of ListDevices stays far
 * under the clients' 4 MiB message limit whatever any agent sends.
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
  const extras = attrs.reduce((n, [k, v]) => n + k.length + v.length, 0) + d.traits.join('').length;
  if (extras > L.deviceExtrasBytes) {
    return `attributes and traits of ${extras} characters together, over the limit of ${L.deviceExtrasBytes} (deviceExtrasBytes)`;
  }
  return null;
}
