/**
 * The PCIe Device Serial Number (extended capability ID 0003h) of a function,
 * read from its sysfs `config` file the way lspci reads it: the extended
 * capability list starts at 0x100, each header holds the ID (bits 15:0) and the
 * next offset (bits 31:20, low two bits reserved); the serial's lower dword is
 * at +4, the upper at +8, printed most significant byte first.
 *
 * The list comes from the device: a loop, a pointer into the standard space, a
 * header of all ones (a function gone while we read) or a short file (a
 * conventional function's 256 bytes, a non-root reader's 64) end the walk with
 * no serial, never an error or an endless loop. A serial of all zeros or all
 * ones is no serial either.
 */
import { closeSync, openSync, readSync } from 'node:fs';
import path from 'node:path';
import { parsePciAddress } from '../../identifiers.js';

const EXTENDED_START = 0x100;
const EXTENDED_END = 0x1000;
const DSN_ID = 0x0003;
/** A header every dword of the extended space is the most a list can hold. */
const MAX_HEADERS = (EXTENDED_END - EXTENDED_START) / 4;

/** Reads `length` bytes at `offset`; null when fewer are there. */
export type ConfigReader = (offset: number, length: number) => Buffer | null;

/** `01-23-45-67-89-ab-cd-ef` from the two dwords, as lspci's cap_dsn prints them. */
function format(lower: number, upper: number): string {
  const bytes = Buffer.alloc(8);
  bytes.writeUInt32BE(upper >>> 0, 0);
  bytes.writeUInt32BE(lower >>> 0, 4);
  return [...bytes].map((b) => b.toString(16).padStart(2, '0')).join('-');
}

/** The serial the extended capability list holds, or null (none, or a list that is not one). */
export function findDeviceSerialNumber(read: ConfigReader): string | null {
  const seen = new Set<number>();
  let at = EXTENDED_START;
  for (let n = 0; n < MAX_HEADERS && at !== 0; n++) {
    if (at < EXTENDED_START || at > EXTENDED_END - 4 || at % 4 !== 0 || seen.has(at)) return null;
    seen.add(at);
    const header = read(at, 4)?.readUInt32LE(0);
    if (header === undefined || header === 0 || header === 0xffffffff) return null;
    if ((header & 0xffff) === DSN_ID) {
      if (at + 12 > EXTENDED_END) return null;
      const body = read(at + 4, 8);
      if (!body) return null;
      const lower = body.readUInt32LE(0);
      const upper = body.readUInt32LE(4);
      if ((lower === 0 && upper === 0) || (lower === 0xffffffff && upper === 0xffffffff)) return null;
      return format(lower, upper);
    }
    at = (header >>> 20) & ~3;
  }
  return null;
}

/**
 * The DSN of the function at `address` under `sysfsRoot`, or null: no such
 * capability, a config space that cannot be read (a function gone, a
 * non-root reader), or garbage. A few small positioned reads, so a real
 * device's config space is not read whole.
 */
export function readDeviceSerialNumber(sysfsRoot: string, address: string): string | null {
  parsePciAddress('address', address);
  let fd: number;
  try {
    fd = openSync(path.join(sysfsRoot, 'bus', 'pci', 'devices', address, 'config'), 'r');
  } catch {
    return null;
  }
  try {
    return findDeviceSerialNumber((offset, length) => {
      const buf = Buffer.alloc(length);
      try {
        return readSync(fd, buf, 0, length, offset) === length ? buf : null;
      } catch {
        return null;
      }
    });
  } finally {
    closeSync(fd);
  }
}
