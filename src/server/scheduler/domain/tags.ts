/**
 * Device role tags (specs/device-role-tagging.txt): Nova's rules are 1-60
 * characters with no `,` or `/` (they separate tags in Nova's boot syntax), and
 * a tag is unique within (instance, metadata device type): `nic`, `disk`, and
 * `passthrough` — every accelerator device, PCI or NVMe, is one `passthrough`
 * entry, so they share one scope.
 */

import { BerthError, type FieldViolation } from '../../../errors.js';

export interface TaggedItem {
  /** Request field path, for the error. */
  field: string;
  /** nic, disk, accelerator ... */
  deviceType: string;
  tag: string;
}

/** Every duplicate (instance-scoped) tag of a device type, as field violations. */
export function duplicateTags(items: readonly TaggedItem[]): FieldViolation[] {
  const seen = new Map<string, string>();
  const out: FieldViolation[] = [];
  for (const it of items) {
    if (it.tag === '') continue;
    const key = `${it.deviceType}\u0000${it.tag}`;
    const first = seen.get(key);
    if (first === undefined) seen.set(key, it.field);
    else {
      out.push({
        field: it.field,
        description: `tag "${it.tag}" is already used by ${first} for a ${it.deviceType} of this instance`,
      });
    }
  }
  return out;
}

/** Throw INVALID_ARGUMENT if a tag repeats within a device type. */
export function assertUniqueTags(items: readonly TaggedItem[]): void {
  const dups = duplicateTags(items);
  const [first] = dups;
  if (first) {
    throw new BerthError('INVALID_ARGUMENT', dups.map((v) => `${v.field}: ${v.description}`).join('; '), {
      fieldViolations: dups,
    });
  }
}
