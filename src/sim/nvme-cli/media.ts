/**
 * The simulated media: each namespace is a regular file, and every erasure the
 * simulator claims to do really rewrites those bytes. That is the point of the
 * simulator — a driver's read-back verification must be able to catch an
 * erasure that did not happen (see the `noop` fault).
 */
import { randomFillSync } from 'node:crypto';
import { closeSync, ftruncateSync, mkdirSync, openSync, readSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';

const CHUNK = 1 << 20;

export type Fill = { kind: 'zero' } | { kind: 'random' } | { kind: 'pattern'; pattern: number };

/** Overwrites `[offset, offset + length)` of `path` with `fill`, in 1 MiB chunks. */
export function fillRange(path: string, offset: number, length: number, fill: Fill): void {
  const fd = openSync(path, 'r+');
  try {
    const buf = Buffer.alloc(Math.min(CHUNK, Math.max(length, 1)));
    if (fill.kind === 'pattern') {
      for (let i = 0; i + 4 <= buf.length; i += 4) buf.writeUInt32LE(fill.pattern >>> 0, i);
    }
    let done = 0;
    while (done < length) {
      const n = Math.min(buf.length, length - done);
      if (fill.kind === 'random') randomFillSync(buf, 0, n);
      writeSync(fd, buf, 0, n, offset + done);
      done += n;
    }
  } finally {
    closeSync(fd);
  }
}

/** Fills the whole namespace file, first making sure it has its nominal size. */
export function fillWhole(path: string, sizeBytes: number, fill: Fill): void {
  const fd = openSync(path, 'a');
  try {
    ftruncateSync(fd, sizeBytes);
  } finally {
    closeSync(fd);
  }
  fillRange(path, 0, sizeBytes, fill);
}

/**
 * Creates a fresh backing file of `sizeBytes` (sparse, reads as zeroes). Any file
 * left at that path is truncated first: what a namespace holds comes from the
 * controller's media model (commands/ns-mgmt.ts), never from a stale file.
 */
export function createBackingFile(path: string, sizeBytes: number): void {
  mkdirSync(dirname(path), { recursive: true });
  const fd = openSync(path, 'w');
  try {
    ftruncateSync(fd, sizeBytes);
  } finally {
    closeSync(fd);
  }
}

/** Copies `length` bytes from `src` at `srcOffset` to `dst` at `dstOffset`, in 1 MiB chunks. */
export function copyRange(
  src: string,
  srcOffset: number,
  dst: string,
  dstOffset: number,
  length: number,
): void {
  const from = openSync(src, 'r');
  const to = openSync(dst, 'r+');
  try {
    const buf = Buffer.alloc(Math.min(CHUNK, Math.max(length, 1)));
    for (let done = 0; done < length; ) {
      const n = readSync(from, buf, 0, Math.min(buf.length, length - done), srcOffset + done);
      // Past the end of a sparse source: zeros.
      if (n < buf.length) buf.fill(0, n);
      const want = Math.min(buf.length, length - done);
      writeSync(to, buf, 0, want, dstOffset + done);
      done += want;
    }
  } finally {
    closeSync(from);
    closeSync(to);
  }
}

/** Zeroes a whole file instantly (truncate to 0, then back to its size: a sparse file of zeros). */
export function resetFile(path: string, sizeBytes: number): void {
  const fd = openSync(path, 'r+');
  try {
    ftruncateSync(fd, 0);
    ftruncateSync(fd, sizeBytes);
  } finally {
    closeSync(fd);
  }
}
