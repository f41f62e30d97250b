/**
 * Helpers for configuration error messages. Every message names where the
 * mistake is (entry and key) and shows the offending value, so an operator can
 * fix the file without reading code. Rendering a value must itself never throw.
 */

import { show as showValue } from '../../errors.js';
import { JsonFloat } from './python-values.js';

/** A value as error messages show it (errors.ts `show`); a float of a device_spec as it was written. */
export const show = (value: unknown): string => (value instanceof JsonFloat ? value.text : showValue(value));

/** Levenshtein distance, small strings only (config keys). */
function distance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let diagonal = row[0]!;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const above = row[j]!;
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      row[j] = Math.min(above + 1, row[j - 1]! + 1, diagonal + cost);
      diagonal = above;
    }
  }
  return row[b.length]!;
}

/**
 * The known key closest to a misspelt one, when it is close enough to be a
 * plausible typo (case, `-` for `_`, or at most a third of the letters off).
 */
export function closest(key: string, known: readonly string[]): string | null {
  if (key.length > 64) return null;
  const folded = key.toLowerCase().replace(/-/g, '_');
  let best: string | null = null;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const candidate of known) {
    const d = distance(folded, candidate);
    if (d < bestDistance) {
      best = candidate;
      bestDistance = d;
    }
  }
  return best !== null && bestDistance <= Math.max(1, Math.floor(best.length / 3)) ? best : null;
}

/** `where.key` for an ordinary key; a strange or huge key is shown quoted and shortened instead. */
export function keyPath(where: string, key: string): string {
  return /^[A-Za-z0-9_-]{1,64}$/.test(key) ? `${where}.${key}` : `${where}[${show(key)}]`;
}
