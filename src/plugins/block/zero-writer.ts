/**
 * Host-side zeroing of a block device: large aligned O_DIRECT writes of a
 * zero buffer, several in flight, then a flush (fdatasync) so the device's
 * volatile cache is on the media before anyone reads it back. This is the
 * "equivalent writer" DESIGN.md allows instead of `shred -n 0 -z`: it reports
 * exactly which bytes it wrote, honours the abort signal between requests, and
 * runs at the speed of `dd bs=4M oflag=direct` (bench/zeroing.ts).
 */
import type { ByteRange, WriteEvidence } from '../cleanup-evidence.js';
import {
  alignedBuffer,
  DEFAULT_CHUNK_BYTES,
  DEFAULT_DEPTH,
  openDirect,
  type PipelineOptions,
  pipeline,
} from './direct-io.js';

export interface ZeroWriteOptions extends PipelineOptions {
  onProgress?: (done: number, total: number) => void;
}

/** Writes zeros over `[0, sizeBytes)` of `path`; throws on any error or short write. */
export async function writeZeros(
  path: string,
  target: { name: string; sizeBytes: number },
  options: ZeroWriteOptions = {},
): Promise<WriteEvidence & { direct: boolean }> {
  const chunk = options.chunkBytes ?? DEFAULT_CHUNK_BYTES;
  // Every request writes from the same zero buffer: it is only ever read from.
  const zeros = alignedBuffer(chunk);
  const ranges: ByteRange[] = [[0, target.sizeBytes]];
  const { fh, direct } = await openDirect(path, 'write');
  let done = 0;
  try {
    await pipeline(
      ranges,
      async (buf, offset, length) => {
        const { bytesWritten } = await fh.write(buf, 0, length, offset);
        if (bytesWritten !== length) {
          throw new Error(
            `zeroing ${path}: short write at byte ${offset} (${bytesWritten} of ${length} bytes)`,
          );
        }
      },
      (_buf, _offset, length) => {
        done += length;
        options.onProgress?.(done, target.sizeBytes);
        return true;
      },
      { ...options, chunkBytes: chunk, depth: options.depth ?? DEFAULT_DEPTH, buffers: [zeros] },
    );
    await fh.datasync();
  } finally {
    await fh.close();
  }
  return { target: target.name, method: 'direct-write', ranges, bytes: done, direct };
}
