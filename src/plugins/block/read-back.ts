/**
 * Reading a scrubbed target back: the proof that a zeroing took. nvme-cli exits
 * 0 for commands that erased nothing (firmware bugs, a mis-targeted namespace,
 * a range skipped), so the zero path reads the device itself.
 *
 * `full` (the default) reads every byte with aligned direct reads, several in
 * flight, each chunk checked for zeros as it arrives.
 * `sample` (only by the operator's explicit `verify: sample`) reads a
 * representative sample in the sense of NIST SP 800-88: the first and the last
 * block, and one randomly placed chunk in each of N equal regions of the target
 * (region-stratified, with a fresh cryptographic random offset per region and
 * per cleanup), N chosen so that at least SAMPLE_FRACTION of the target is read
 * and N ≥ SAMPLE_MIN_STRATA. Targets up to SAMPLE_FULL_BELOW bytes are read
 * completely either way.
 */
import { randomInt } from 'node:crypto';
import {
  type ByteRange,
  mergeRanges,
  type ReadBackEvidence,
  rangeBytes,
  SAMPLE_FRACTION,
  SAMPLE_MIN_STRATA,
  type VerifyMode,
} from '../cleanup-evidence.js';
import { openDirect, type PipelineOptions, pipeline } from './direct-io.js';

/** A sample reads everything of targets this small. */
export const SAMPLE_FULL_BELOW = 64 * 1024 * 1024;
/** The chunk read in each region of a sample. */
const SAMPLE_CHUNK = 1024 * 1024;

/**
 * One read-back request, and how many are in flight: 2 MiB × 2, the same 4 MiB
 * of buffers as the 1 MiB × 4 of stop 46. A request of more than 1 MiB (256
 * pages) takes the kernel's multi-bio direct-I/O path, which releases the
 * pinned pages at completion instead of in the reading thread, and half the
 * requests are half the thread-pool round trips: the read-back's CPU per byte
 * fell by a quarter (bench/README.md "readback, second pass"), and on two
 * shared cores that CPU is what the loop device's copy waits for.
 */
const READ_CHUNK_BYTES = 2 * 1024 * 1024;
/** Read-back requests in flight at once. */
const READ_DEPTH = 2;

/**
 * The check reads the chunk once: the first SHIFT bytes against zeros, then
 * the chunk against itself SHIFT bytes on (buf[i + SHIFT] === buf[i] for every
 * i and a zero head make every byte zero, by induction over SHIFT-sized
 * steps). Both of memcmp's streams walk the same cache lines, where a compare
 * against a zero buffer as large as the chunk streamed twice the bytes.
 */
const SHIFT = 4096;
const ZEROS = Buffer.alloc(SHIFT);

/** Index of the first non-zero byte of buf[0, length), or -1. */
export function firstNonZero(buf: Buffer, length: number): number {
  const head = Math.min(SHIFT, length);
  const clean =
    buf.compare(ZEROS, 0, head, 0, head) === 0 &&
    (length <= SHIFT || buf.compare(buf, 0, length - SHIFT, SHIFT, length) === 0);
  if (clean) return -1;
  for (let i = 0; i < length; i++) if (buf[i] !== 0) return i;
  throw new Error('firstNonZero: the compare found a difference that the scan did not');
}

const alignDown = (n: number, a: number) => n - (n % a);

/**
 * The ranges a `sample` of a target reads: everything for small targets, else
 * first block, last block, and one random chunk per region. Returns the merged
 * ranges and the number of regions.
 */
export function sampleRanges(sizeBytes: number, blockSize: number): { ranges: ByteRange[]; strata: number } {
  if (sizeBytes <= SAMPLE_FULL_BELOW) return { ranges: [[0, sizeBytes]], strata: 0 };
  const chunk = Math.max(
    blockSize,
    alignDown(Math.min(SAMPLE_CHUNK, sizeBytes / SAMPLE_MIN_STRATA), blockSize),
  );
  const strata = Math.min(
    Math.floor(sizeBytes / chunk),
    Math.max(SAMPLE_MIN_STRATA, Math.ceil((sizeBytes * SAMPLE_FRACTION) / chunk)),
  );
  const ranges: ByteRange[] = [
    [0, blockSize],
    [sizeBytes - blockSize, sizeBytes],
  ];
  for (let i = 0; i < strata; i++) {
    const start = alignDown(Math.floor((i * sizeBytes) / strata), blockSize);
    const end = alignDown(Math.floor(((i + 1) * sizeBytes) / strata), blockSize);
    const room = end - start - chunk;
    const offset = room <= 0 ? start : start + randomInt(0, room / blockSize + 1) * blockSize;
    ranges.push([offset, Math.min(end, offset + chunk)]);
  }
  return { ranges: mergeRanges(ranges), strata };
}

export interface ReadBackOptions extends PipelineOptions {
  /** Called with bytes read so far and the total that will be read. */
  onProgress?: (done: number, total: number) => void;
}

/**
 * Reads `target` back (all of it, or a sample) and reports where the first
 * non-zero byte is. Throws on an I/O error or a short read: a target that
 * cannot be read is not proven clean.
 */
export async function readBack(
  path: string,
  target: { name: string; sizeBytes: number; blockSize: number },
  mode: VerifyMode,
  options: ReadBackOptions = {},
): Promise<ReadBackEvidence> {
  const { ranges, strata } =
    mode === 'full'
      ? { ranges: [[0, target.sizeBytes]] as ByteRange[], strata: 0 }
      : sampleRanges(target.sizeBytes, target.blockSize);
  const total = rangeBytes(ranges);
  const { fh, direct } = await openDirect(path, 'read');
  let done = 0;
  let nonZeroAt: number | null = null;
  try {
    await pipeline(
      ranges,
      async (buf, offset, length) => {
        const { bytesRead } = await fh.read(buf, 0, length, offset);
        if (bytesRead !== length) {
          throw new Error(
            `read-back of ${path}: short read at byte ${offset} (${bytesRead} of ${length} bytes)`,
          );
        }
      },
      (buf, offset, length) => {
        const at = firstNonZero(buf, length);
        if (at >= 0) {
          nonZeroAt = offset + at;
          return false;
        }
        done += length;
        options.onProgress?.(done, total);
        return true;
      },
      { ...options, chunkBytes: options.chunkBytes ?? READ_CHUNK_BYTES, depth: options.depth ?? READ_DEPTH },
    );
  } finally {
    await fh.close();
  }
  return {
    target: target.name,
    mode,
    ranges: nonZeroAt === null ? ranges : [],
    bytesRead: nonZeroAt === null ? total : done,
    strata,
    direct,
    nonZeroAt,
  };
}
