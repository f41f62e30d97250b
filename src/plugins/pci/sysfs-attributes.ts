/**
 * The primitives of reading sysfs: small attributes read with one
 * open/read/close into a reused buffer, optional attributes and links that fall
 * back instead of failing, and the parsers of their values. Shared by the PCI
 * reader (sysfs-reader.ts) and the NVMe reader (src/plugins/nvme/sysfs-nvme.ts).
 *
 * Hot-unplug can remove a device while it is read; "gone" errors (isGone) are
 * never a failure, only an absence.
 */
import { closeSync, openSync, readdirSync, readlinkSync, readSync } from 'node:fs';

/** Errors that mean "the file or the device is not there (any more)". */
const GONE_CODES = new Set(['ENOENT', 'ENOTDIR', 'ENODEV', 'ENXIO']);

export function errCode(e: unknown): string | undefined {
  return typeof e === 'object' && e !== null && 'code' in e
    ? String((e as { code: unknown }).code)
    : undefined;
}

export function isGone(e: unknown): boolean {
  const code = errCode(e);
  return code !== undefined && GONE_CODES.has(code);
}

/**
 * One reusable buffer for attribute reads. PCI attributes are a line of text
 * well under a page; sysfs never returns more than a page per attribute.
 */
const scratch = Buffer.alloc(4096);

/**
 * Reads a small attribute with open/read/close (Node's readFileSync adds an
 * fstat and a second read). Returns undefined when the file or its device is
 * gone; throws other errors.
 */
export function readAttr(file: string): string | undefined {
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch (e) {
    if (isGone(e)) return undefined;
    throw e;
  }
  try {
    const n = readSync(fd, scratch, 0, scratch.length, 0);
    return scratch.toString('latin1', 0, n).trim();
  } catch (e) {
    if (isGone(e)) return undefined;
    throw e;
  } finally {
    closeSync(fd);
  }
}

/**
 * An optional attribute; undefined on any error. Some sysfs attributes return
 * EIO/EINVAL/EACCES on particular hardware, and none of the optional ones is
 * worth failing discovery over.
 */
export function readOptional(file: string): string | undefined {
  try {
    return readAttr(file);
  } catch {
    return undefined;
  }
}

export function readlinkOptional(file: string): string | undefined {
  try {
    return readlinkSync(file);
  } catch {
    return undefined;
  }
}

export function readdirOptional(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

/** `0x8086` → `8086`; undefined when it is not at most `digits` hex digits. */
export function hexAttr(raw: string | undefined, digits: number): string | undefined {
  if (raw === undefined) return undefined;
  const m = /^(?:0x)?([0-9a-fA-F]+)$/.exec(raw);
  if (!m) return undefined;
  const v = m[1]!.toLowerCase();
  if (v.length > digits) return undefined;
  return v.padStart(digits, '0');
}

export function intAttr(raw: string | undefined, fallback: number): number {
  if (raw === undefined || !/^-?\d+$/.test(raw)) return fallback;
  return Number.parseInt(raw, 10);
}

/** A link target's last component (path.basename without its checks: targets never end in `/`). */
export function lastComponent(target: string): string {
  return target.slice(target.lastIndexOf('/') + 1);
}

export function numericSuffix(name: string, prefix: string): number {
  return Number.parseInt(name.slice(prefix.length), 10);
}
