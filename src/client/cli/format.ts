/**
 * How values read on a terminal, and back: enum names, ages, byte counts; and
 * what commands read from their arguments (enum flags, --file documents,
 * repeated options).
 */
import { readFile } from 'node:fs/promises';
import { parse as parseYaml } from 'yaml';
import { UsageError } from '../usage-error.js';

/** `DEVICE_STATE_PENDING_CLEANING` → `pending_cleaning`. */
export function shortEnum(full: string, prefix: string): string {
  if (full === `${prefix}UNSPECIFIED`) return '';
  return (full.startsWith(prefix) ? full.slice(prefix.length) : full).toLowerCase();
}

/**
 * `pending_cleaning` (or `PENDING_CLEANING`, `pending-cleaning`, or the proto
 * name `DEVICE_STATE_PENDING_CLEANING` as buf curl prints it) → the enum
 * value, or a usage error listing the names.
 */
export function parseEnum<E extends number>(
  flag: string,
  value: string,
  prefix: string,
  toJSON: (v: E) => string,
  values: readonly E[],
): E {
  let want = value.trim().toLowerCase().replace(/-/g, '_');
  if (want.startsWith(prefix.toLowerCase())) want = want.slice(prefix.length);
  for (const v of values) {
    if (shortEnum(toJSON(v), prefix) === want && want !== '') return v;
  }
  const names = values.map((v) => shortEnum(toJSON(v), prefix)).filter((n) => n !== '');
  throw new UsageError(`${flag}: expected one of ${names.join(', ')}, got ${JSON.stringify(value)}`);
}

/** Reads a YAML or JSON file (JSON is valid YAML); a missing or malformed file is a usage error. */
export async function readDocument(path: string): Promise<unknown> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new UsageError(`--file ${path}: ${(err as Error).message}`);
  }
  try {
    return parseYaml(text) as unknown;
  } catch (err) {
    throw new UsageError(`--file ${path}: not YAML or JSON: ${(err as Error).message.split('\n')[0]}`);
  }
}

/** Collects a repeatable option into an array. */
export const collect = (value: string, previous: string[] = []) => [...previous, value];

/** `12s ago`, `5m ago`, `3h ago`, `2d ago` (or `never`). */
export function ago(when: Date | string | null | undefined, now = Date.now()): string {
  if (!when) return 'never';
  const s = Math.max(0, Math.round((now - new Date(when).getTime()) / 1000));
  if (s < 120) return `${s}s ago`;
  if (s < 7200) return `${Math.round(s / 60)}m ago`;
  if (s < 172_800) return `${Math.round(s / 3600)}h ago`;
  return `${Math.round(s / 86_400)}d ago`;
}

/** Bytes as the progress line and table show them (binary units). */
export function formatBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(1)} ${units[i]}`;
}
