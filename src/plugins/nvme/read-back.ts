/**
 * Read-back of a namespace's block device: the only proof a zeroing worked.
 * nvme-cli exits 0 for commands that erased nothing (a firmware bug, a
 * mis-targeted namespace, a "noop" simulator fault), so the zero path reads the
 * device itself. Small namespaces are read completely; big ones are sampled
 * (first and last block plus random blocks), which catches a command that did
 * nothing or stopped early without reading terabytes.
 */
import { randomInt } from 'node:crypto';
import { open } from 'node:fs/promises';

export interface ReadBackOptions {
  /** Namespaces up to this size are read completely. Default 256 MiB. */
  fullReadMaxBytes?: number;
  /** Random blocks sampled beyond the first and last. Default 256. */
  samples?: number;
  signal?: AbortSignal;
  /** Called with bytes read so far and the total that will be read. */
  onProgress?: (done: number, total: number) => void;
}

export interface ReadBackResult {
  bytesRead: number;
  /** Byte offset of the first non-zero byte, or null when everything read was zero. */
  firstNonZero: number | null;
  full: boolean;
}

const CHUNK = 1024 * 1024;

/** A page of zeros to compare against: Buffer.compare is a native memcmp. */
const ZEROS = Buffer.alloc(64 * 1024);

function firstNonZeroIn(buf: Buffer, length: number): number {
  // Compare 64 KiB at a time with memcmp (the usual all-zero case costs next to
  // nothing); only a window that differs is scanned byte by byte. Reading 8
  // bytes at a time as BigInts kept the read-back CPU-bound at ~130 MiB/s.
  for (let off = 0; off < length; off += ZEROS.length) {
    const end = Math.min(length, off + ZEROS.length);
    if (buf.compare(ZEROS, 0, end - off, off, end) === 0) continue;
    for (let i = off; i < end; i++) if (buf[i] !== 0) return i;
  }
  return -1;
}

/** Block offsets to sample: first, last, then random distinct blocks. */
export function sampleBlocks(totalBlocks: number, samples: number): number[] {
  const picks = new Set<number>([0, totalBlocks - 1]);
  const want = Math.min(totalBlocks, samples + 2);
  while (picks.size < want) picks.add(randomInt(0, Math.min(totalBlocks, 2 ** 48 - 1)));
  return [...picks].sort((a, b) => a - b);
}

/** Reads `sizeBytes` of `devPath` (whole or sampled in `blockSize` units) and reports any non-zero byte. */
export async function readBackZeroes(
  devPath: string,
  sizeBytes: number,
  blockSize: number,
  options: ReadBackOptions = {},
): Promise<ReadBackResult> {
  const fullMax = options.fullReadMaxBytes ?? 256 * 1024 * 1024;
  const full = sizeBytes <= fullMax;
  const fh = await open(devPath, 'r');
  try {
    const ranges: [offset: number, length: number][] = [];
    if (full) {
      for (let off = 0; off < sizeBytes; off += CHUNK) ranges.push([off, Math.min(CHUNK, sizeBytes - off)]);
    } else {
      const blocks = Math.floor(sizeBytes / blockSize);
      for (const b of sampleBlocks(blocks, options.samples ?? 256)) ranges.push([b * blockSize, blockSize]);
    }
    const total = ranges.reduce((s, [, l]) => s + l, 0);
    const buf = Buffer.alloc(Math.max(CHUNK, blockSize));
    let done = 0;
    for (const [offset, length] of ranges) {
      options.signal?.throwIfAborted();
      const { bytesRead } = await fh.read(buf, 0, length, offset);
      if (bytesRead !== length) {
        throw new Error(
          `read-back of ${devPath}: short read at byte ${offset} (${bytesRead} of ${length} bytes)`,
        );
      }
      const at = firstNonZeroIn(buf, length);
      if (at >= 0) return { bytesRead: done + at, firstNonZero: offset + at, full };
      done += length;
      options.onProgress?.(done, total);
    }
    return { bytesRead: done, firstNonZero: null, full };
  } finally {
    await fh.close();
  }
}
