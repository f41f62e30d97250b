/**
 * The tenant's data, written by the host into the namespace backing files
 * before the guest boots and looked for there after it powers off. Every
 * 512-byte block starts with a marker naming the tenant and the block, then
 * pseudo-random bytes seeded by both, so a block that survived is recognised
 * exactly and a block copied elsewhere is still found by its marker.
 */
import { open } from 'node:fs/promises';

export const BLOCK = 512;
const MARKER = 'BERTH-TENANT-DATA';
const CHUNK = 1 << 20;

function fnv(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

/** Block `n` of `tenant`'s data. */
export function tenantBlock(tenant: string, n: number): Buffer {
  const b = Buffer.alloc(BLOCK);
  const head = b.write(`${MARKER} ${tenant} block ${n}\n`);
  let x = (fnv(tenant) ^ Math.imul(n + 1, 0x9e3779b1)) >>> 0 || 1;
  for (let i = head; i < BLOCK; i++) {
    // xorshift32
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    b[i] = x & 0xff;
  }
  return b;
}

/** Creates `file` of `sizeBytes` filled with the tenant's blocks. */
export async function writeTenantFile(file: string, sizeBytes: number, tenant: string): Promise<void> {
  if (sizeBytes % CHUNK !== 0) throw new Error(`sizeBytes ${sizeBytes} is not a whole number of MiB`);
  const fh = await open(file, 'w');
  try {
    const chunk = Buffer.alloc(CHUNK);
    for (let off = 0; off < sizeBytes; off += CHUNK) {
      for (let i = 0; i < CHUNK / BLOCK; i++)
        tenantBlock(tenant, (off + i * BLOCK) / BLOCK).copy(chunk, i * BLOCK);
      await fh.write(chunk, 0, CHUNK, off);
    }
  } finally {
    await fh.close();
  }
}

export interface BackingScan {
  sizeBytes: number;
  /** Bytes that are not zero, and the offset of the first. */
  nonZeroBytes: number;
  firstNonZero: number | null;
  /** Blocks holding the tenant marker anywhere, intact or not. */
  markedBlocks: number;
  /** Blocks exactly as the tenant wrote them, at their own offset. */
  intactBlocks: number;
}

/** Reads the whole backing file. */
export async function scanBackingFile(file: string, tenant: string): Promise<BackingScan> {
  const fh = await open(file, 'r');
  const marker = Buffer.from(MARKER);
  const scan: BackingScan = {
    sizeBytes: 0,
    nonZeroBytes: 0,
    firstNonZero: null,
    markedBlocks: 0,
    intactBlocks: 0,
  };
  try {
    const buf = Buffer.alloc(CHUNK);
    for (let off = 0; ; off += CHUNK) {
      const { bytesRead } = await fh.read(buf, 0, CHUNK, off);
      if (bytesRead === 0) break;
      scan.sizeBytes += bytesRead;
      for (let i = 0; i < bytesRead; i++) {
        if (buf[i] === 0) continue;
        scan.nonZeroBytes++;
        scan.firstNonZero ??= off + i;
      }
      for (let b = 0; b + BLOCK <= bytesRead; b += BLOCK) {
        const block = buf.subarray(b, b + BLOCK);
        if (block.includes(marker)) scan.markedBlocks++;
        if (block.equals(tenantBlock(tenant, (off + b) / BLOCK))) scan.intactBlocks++;
      }
    }
  } finally {
    await fh.close();
  }
  return scan;
}
