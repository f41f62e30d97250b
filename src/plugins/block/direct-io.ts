/**
 * Large aligned direct I/O on block devices, the building block of both the
 * read-back and the zero writer.
 *
 * O_DIRECT moves data between the device and our memory without the page
 * cache, so a read-back sees the media, not a page the kernel cached before an
 * admin command (sanitize, write-zeroes) changed the media behind its back, and
 * a write reaches the device instead of waiting in the cache. The kernel wants
 * the memory, the file offset and the length aligned to the device's logical
 * block size. Node's Buffers are not guaranteed to be page-aligned; the backing
 * store of a WebAssembly.Memory is (V8 maps it with mmap), so that is where the
 * buffers live. A misaligned buffer would fail every read with EINVAL — the
 * loop-device test (direct-io.test.ts) proves they are aligned.
 *
 * Requests are pipelined: `depth` of them are in flight at once, each on its
 * own buffer, so the device never waits while we compare the previous chunk.
 */
import { constants } from 'node:fs';
import { type FileHandle, open, stat } from 'node:fs/promises';
import type { ByteRange } from '../cleanup-evidence.js';

/**
 * One request's size: large enough that per-request overhead vanishes. The
 * writer's; the read-back uses smaller ones, so that what it checks is still
 * in the CPU's cache (read-back.ts).
 */
export const DEFAULT_CHUNK_BYTES = 8 * 1024 * 1024;
/** Requests in flight at once. */
export const DEFAULT_DEPTH = 2;

const WASM_PAGE = 65536;

/** The one part of the WebAssembly JS API used here (Node has it; this project's type libraries do not declare it). */
const { Memory: WasmMemory } = (
  globalThis as unknown as {
    WebAssembly: { Memory: new (d: { initial: number; maximum: number }) => { buffer: ArrayBuffer } };
  }
).WebAssembly;

/**
 * A zero-filled Buffer of `bytes` whose memory starts on a page boundary (a
 * WebAssembly.Memory's backing store), so it can be used for O_DIRECT.
 */
export function alignedBuffer(bytes: number): Buffer {
  if (!Number.isSafeInteger(bytes) || bytes <= 0) throw new RangeError(`alignedBuffer: ${bytes} bytes`);
  const pages = Math.ceil(bytes / WASM_PAGE);
  const memory = new WasmMemory({ initial: pages, maximum: pages });
  return Buffer.from(memory.buffer, 0, bytes);
}

export interface OpenedDevice {
  fh: FileHandle;
  /** False when the file system refused O_DIRECT on a regular file (tmpfs); never for a block device. */
  direct: boolean;
}

/**
 * Opens `path` for direct I/O. A block device must accept O_DIRECT; a regular
 * file (the simulator's namespaces) on a file system that refuses it (tmpfs:
 * EINVAL) is opened buffered, where the page cache is the file's only truth.
 */
export async function openDirect(path: string, mode: 'read' | 'write'): Promise<OpenedDevice> {
  const flags = mode === 'read' ? constants.O_RDONLY : constants.O_WRONLY;
  try {
    return { fh: await open(path, flags | constants.O_DIRECT), direct: true };
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EINVAL') throw e;
    if ((await stat(path)).isBlockDevice()) throw e;
    return { fh: await open(path, flags), direct: false };
  }
}

/** Splits ranges into requests of at most `chunk` bytes, in order. */
export function* chunksOf(ranges: readonly ByteRange[], chunk: number): Generator<ByteRange> {
  for (const [start, end] of ranges) {
    for (let off = start; off < end; off += chunk) yield [off, Math.min(end, off + chunk)];
  }
}

export interface PipelineOptions {
  chunkBytes?: number;
  depth?: number;
  signal?: AbortSignal;
}

/**
 * Runs `io(buffer, offset, length)` over every chunk of `ranges` with `depth`
 * requests in flight, then hands each completed chunk, in order, to `done`
 * (which returns false to stop early). Every request is settled before this
 * returns or throws, so the caller may close the file right after.
 */
export async function pipeline(
  ranges: readonly ByteRange[],
  io: (buffer: Buffer, offset: number, length: number) => Promise<void>,
  done: (buffer: Buffer, offset: number, length: number) => boolean,
  options: PipelineOptions & { buffers?: Buffer[] } = {},
): Promise<void> {
  const chunk = options.chunkBytes ?? DEFAULT_CHUNK_BYTES;
  const depth = Math.max(1, options.depth ?? DEFAULT_DEPTH);
  const buffers = options.buffers ?? Array.from({ length: depth }, () => alignedBuffer(chunk));
  const chunks = chunksOf(ranges, chunk);
  const inflight: { p: Promise<void>; buf: Buffer; offset: number; length: number }[] = [];
  let next = 0;
  const issue = (): boolean => {
    const c = chunks.next();
    if (c.done) return false;
    const [offset, end] = c.value;
    const buf = buffers[next++ % buffers.length]!;
    const p = io(buf, offset, end - offset);
    // A rejection is handled where the request is awaited; never leave it unobserved meanwhile.
    p.catch(() => {});
    inflight.push({ p, buf, offset, length: end - offset });
    return true;
  };
  try {
    while (inflight.length < depth && issue()) {
      // fill the pipeline
    }
    while (inflight.length > 0) {
      options.signal?.throwIfAborted();
      const head = inflight.shift()!;
      await head.p;
      if (!done(head.buf, head.offset, head.length)) return;
      issue();
    }
  } finally {
    await Promise.allSettled(inflight.map((r) => r.p));
  }
}

/** Writes `data` at `offset` with direct I/O and flushes it to the media. */
export async function writeAt(path: string, offset: number, data: Buffer): Promise<void> {
  const buf = alignedBuffer(data.length);
  data.copy(buf);
  const { fh } = await openDirect(path, 'write');
  try {
    const { bytesWritten } = await fh.write(buf, 0, data.length, offset);
    if (bytesWritten !== data.length) {
      throw new Error(`${path}: short write at byte ${offset} (${bytesWritten} of ${data.length} bytes)`);
    }
    await fh.datasync();
  } finally {
    await fh.close();
  }
}

/** Reads `length` bytes at `offset` with direct I/O (from the media, not the page cache). */
export async function readAt(path: string, offset: number, length: number): Promise<Buffer> {
  const buf = alignedBuffer(length);
  const { fh } = await openDirect(path, 'read');
  try {
    const { bytesRead } = await fh.read(buf, 0, length, offset);
    if (bytesRead !== length) {
      throw new Error(`${path}: short read at byte ${offset} (${bytesRead} of ${length} bytes)`);
    }
    return Buffer.from(buf.subarray(0, length));
  } finally {
    await fh.close();
  }
}
