/**
 * Direct I/O against real block devices (loop devices, as root) and the
 * fallback for file systems without O_DIRECT. The loop device is the oracle:
 * the kernel refuses misaligned O_DIRECT requests, so a read through our
 * buffers succeeding proves they are aligned, and `dd` checks what was written.
 */
import { execFileSync } from 'node:child_process';
import { constants, existsSync } from 'node:fs';
import { mkdtemp, open, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { attachLoop, detachLoop, loopAvailable } from '../../../test/helpers/loop.js';
import { alignedBuffer, openDirect, readAt, writeAt } from './direct-io.js';
import { firstNonZero, readBack, sampleRanges } from './read-back.js';
import { writeZeros } from './zero-writer.js';

const MIB = 1024 * 1024;

describe.skipIf(!loopAvailable('the direct I/O tests on a loop device'))(
  'direct I/O on a loop device',
  () => {
    let dir: string;
    let backing: string;
    let loop = '';
    const size = 48 * MIB;

    beforeAll(async () => {
      dir = await mkdtemp(join(tmpdir(), 'berth-dio-'));
      backing = join(dir, 'disk.img');
      await writeFile(backing, Buffer.alloc(size));
      const attached = attachLoop(backing);
      if (!attached.dev) throw new Error(attached.reason);
      loop = attached.dev;
    });
    afterAll(async () => {
      if (loop) detachLoop(loop);
      await rm(dir, { recursive: true, force: true });
    });

    it('the kernel refuses a misaligned buffer, and accepts ours', async () => {
      const fh = await open(loop, constants.O_RDONLY | constants.O_DIRECT);
      try {
        const misaligned = Buffer.alloc(MIB + 1).subarray(1);
        await expect(fh.read(misaligned, 0, MIB, 0)).rejects.toMatchObject({ code: 'EINVAL' });
        for (const bytes of [4096, MIB, 8 * MIB]) {
          const { bytesRead } = await fh.read(alignedBuffer(bytes), 0, bytes, 0);
          expect(bytesRead).toBe(bytes);
        }
      } finally {
        await fh.close();
      }
    });

    it('finds one tenant block anywhere, zeroes the device, and proves it with a full read-back', async () => {
      const opened = await openDirect(loop, 'read');
      expect(opened.direct).toBe(true);
      await opened.fh.close();
      const secret = Buffer.alloc(4096, 0x5a);
      const at = 31 * MIB + 40960;
      await writeAt(loop, at, secret);
      expect((await readAt(loop, at, 4096)).equals(secret)).toBe(true);
      const target = { name: 'loop', sizeBytes: size, blockSize: 512 };

      const dirty = await readBack(loop, target, 'full', { chunkBytes: 4 * MIB, depth: 3 });
      expect(dirty).toMatchObject({ nonZeroAt: at, direct: true });
      // The read-back's own request size (2 MiB): the chunks before the one with data were read and found clean.
      const byDefault = await readBack(loop, target, 'full');
      expect(byDefault).toMatchObject({ nonZeroAt: at, bytesRead: 30 * MIB, direct: true });
      // One byte, the device's last: the final request is checked too.
      const lastBlock = Buffer.alloc(4096);
      lastBlock[4095] = 1;
      await writeAt(loop, at, Buffer.alloc(4096));
      await writeAt(loop, size - 4096, lastBlock);
      expect(await readBack(loop, target, 'full')).toMatchObject({
        nonZeroAt: size - 1,
        bytesRead: size - 2 * MIB,
      });

      const written = await writeZeros(loop, target, { chunkBytes: 4 * MIB });
      expect(written).toMatchObject({ bytes: size, ranges: [[0, size]], direct: true });
      const clean = await readBack(loop, target, 'full');
      expect(clean).toMatchObject({ nonZeroAt: null, bytesRead: size, ranges: [[0, size]], direct: true });
      // The oracle: dd through the kernel, and the backing file itself.
      const viaDd = execFileSync('dd', [`if=${loop}`, 'bs=4M', 'iflag=direct', 'status=none'], {
        maxBuffer: size * 2,
      });
      expect(viaDd.length).toBe(size);
      expect(viaDd.every((b) => b === 0)).toBe(true);
      expect((await readFile(backing)).every((b) => b === 0)).toBe(true);
    });
  },
);

describe('the zero check', () => {
  it('finds the first non-zero byte wherever it is, and nothing past the length', () => {
    const length = 2 * MIB + 512;
    const buf = Buffer.alloc(length + 4096);
    expect(firstNonZero(buf, length)).toBe(-1);
    // The head, both sides of the 4 KiB shift and of its multiples, a lone high bit, the last byte.
    for (const at of [0, 1, 4095, 4096, 4097, 8191, 8192, 65536 + 3, MIB + 4095, 2 * MIB, length - 1]) {
      for (const value of [1, 0x80, 0xff]) {
        buf[at] = value;
        expect(firstNonZero(buf, length), `byte ${value} at ${at}`).toBe(at);
        buf[at] = 0;
      }
    }
    // Two non-zero bytes: the first is reported, also when the later one is in the head's shadow.
    buf[3 * 4096 + 7] = 9;
    buf[5] = 1;
    expect(firstNonZero(buf, length)).toBe(5);
    buf[5] = 0;
    expect(firstNonZero(buf, length)).toBe(3 * 4096 + 7);
    buf[3 * 4096 + 7] = 0;
    // Bytes after `length` (the rest of a reused buffer) are not the chunk's.
    buf[length] = 1;
    expect(firstNonZero(buf, length)).toBe(-1);
    // Lengths shorter than the shift, and a repeating non-zero pattern the self-compare would call equal.
    expect(firstNonZero(buf, 100)).toBe(-1);
    buf[99] = 2;
    expect(firstNonZero(buf, 100)).toBe(99);
    expect(firstNonZero(buf, 99)).toBe(-1);
    buf.fill(0x5a, 0, length);
    expect(firstNonZero(buf, length)).toBe(0);
    buf.fill(0, 0, 4096);
    expect(firstNonZero(buf, length)).toBe(4096);
  });
});

describe('read-back sampling', () => {
  it('reads everything of small targets', () => {
    expect(sampleRanges(64 * MIB, 512)).toEqual({ ranges: [[0, 64 * MIB]], strata: 0 });
  });

  it('covers first and last block and one chunk per region, at least 1%, differently each time', () => {
    const size = 10 * 1024 * MIB + 4096;
    const a = sampleRanges(size, 4096);
    const b = sampleRanges(size, 4096);
    expect(a.strata).toBeGreaterThanOrEqual(64);
    expect(a.ranges[0]![0]).toBe(0);
    expect(a.ranges.at(-1)![1]).toBe(size);
    const bytes = a.ranges.reduce((s, [x, y]) => s + (y - x), 0);
    expect(bytes).toBeGreaterThanOrEqual(size * 0.01);
    for (const [s, e] of a.ranges) {
      expect(s % 4096).toBe(0);
      expect(e % 4096).toBe(0);
    }
    // Every region got a chunk.
    for (let i = 0; i < a.strata; i++) {
      const lo = Math.floor((i * size) / a.strata);
      const hi = Math.floor(((i + 1) * size) / a.strata);
      expect(a.ranges.some(([s, e]) => s < hi && e > lo)).toBe(true);
    }
    expect(a.ranges).not.toEqual(b.ranges);
  });
});

describe('a regular file on tmpfs', () => {
  // tmpfs refuses O_DIRECT before Linux 6.6 (EINVAL: buffered fallback) and accepts it since.
  it.skipIf(!existsSync('/dev/shm'))('is read and written either way', async () => {
    const dir = await mkdtemp('/dev/shm/berth-dio-');
    try {
      const file = join(dir, 'ns');
      await writeFile(file, Buffer.alloc(MIB));
      const opened = await openDirect(file, 'read');
      await opened.fh.close();
      await writeAt(file, 8192, Buffer.alloc(512, 1));
      const r = await readBack(file, { name: 'ns', sizeBytes: MIB, blockSize: 512 }, 'full');
      expect(r).toMatchObject({ nonZeroAt: 8192, direct: opened.direct });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
