/**
 * zeroing: the NVMe driver's zero path for a controller without Write Zeroes
 * (WZS-less, no sanitize: the locked-in action is `shred`, i.e. `shred -n 0 -z`
 * on the namespace's block device) on a 2 GiB loop device, versus
 * `dd if=/dev/zero of=<dev> bs=4M oflag=direct conv=fsync` on the same device.
 *
 * The driver runs for real (NvmeDriver.cleanup, against the nvme-cli
 * simulator for the controller commands) with the namespace's device node
 * pointed at the loop device. Zeroing time runs from the driver's first
 * `zeroing` progress event to its first `verifying` event; the read-back
 * (the driver's proof, sampled for namespaces over 256 MiB) is timed
 * separately, and a full read-back of the device is timed for reference.
 * Without root or losetup it falls back to a plain file and says so.
 * Goal: driver zeroing throughput ≥ 90 % of dd's.
 */
import { execFile, execFileSync } from 'node:child_process';
import { rm, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { NvmeDriver } from '../src/plugins/nvme/nvme-driver.js';
import { readBackZeroes } from '../src/plugins/nvme/read-back.js';
import { makeTestHost, writeTenantData } from '../src/plugins/nvme/test-host.js';
import type { CleanupProgress } from '../src/plugins/types.js';
import { emit, median, nowMs, parseArgs, round, tempDir } from './lib.js';

const run = promisify(execFile);
const MiB = 1 << 20;

function attachLoop(file: string): { dev: string | null; reason: string } {
  if (process.getuid?.() !== 0) return { dev: null, reason: 'not root' };
  try {
    return { dev: execFileSync('losetup', ['-f', '--show', file], { encoding: 'utf8' }).trim(), reason: '' };
  } catch (e) {
    return { dev: null, reason: `losetup failed: ${(e as Error).message.split('\n')[0]}` };
  }
}

async function dd(target: string, sizeBytes: number): Promise<number> {
  const t0 = nowMs();
  await run(
    'dd',
    [
      'if=/dev/zero',
      `of=${target}`,
      'bs=4M',
      `count=${sizeBytes / (4 * MiB)}`,
      'oflag=direct',
      'conv=fsync,notrunc',
      'status=none',
    ],
    { timeout: 300_000 },
  );
  return nowMs() - t0;
}

async function main() {
  const { quick } = parseArgs();
  const sizeBytes = quick ? 64 * MiB : 2048 * MiB;
  const rounds = quick ? 1 : 3;
  const dir = await tempDir('/var/tmp', 'berth-bench-zero-');
  const host = await makeTestHost({
    controller: { sanicap: 0, oncs: 0x57 },
    namespaces: [{ nsid: 1, sizeBytes: 1 * MiB }],
  });
  const backing = join(dir.path, 'namespace.img');
  execFileSync('truncate', ['-s', String(sizeBytes), backing]);
  const loop = attachLoop(backing);
  const target = loop.dev ?? backing;
  try {
    const driver = new NvmeDriver({
      config: { device_spec: [{ vendor_id: '144d' }], nvme_cli: host.nvmeCli },
    });
    const [device] = (await driver.discover(host.ctx)).devices;
    if (device?.cleanupAction !== 'shred')
      throw new Error(`expected the shred action, got ${device?.cleanupAction}`);
    await rm(join(host.devRoot, 'nvme0n1'), { force: true });
    await symlink(target, join(host.devRoot, 'nvme0n1'));
    await host.builder.setNvmeNamespaces('nvme0', [{ nsid: 1, sizeBytes }]);

    const ddMs: number[] = [];
    const zeroMs: number[] = [];
    const verifyMs: number[] = [];
    for (let r = 0; r < rounds; r++) {
      ddMs.push(await dd(target, sizeBytes));
      // Tenant data at the start, middle and end, so the read-back has something to miss.
      await writeTenantData(target, sizeBytes);
      const marks: { at: number; p: CleanupProgress }[] = [];
      const ctx = host.cleanupCtx();
      const t0 = nowMs();
      await driver.cleanup(device, { ...ctx, progress: (p) => marks.push({ at: nowMs(), p }) });
      const end = nowMs();
      const zeroStart = marks.find((m) => m.p.phase === 'zeroing')?.at ?? t0;
      const verifyStart = marks.find((m) => m.p.phase === 'verifying')?.at ?? end;
      zeroMs.push(verifyStart - zeroStart);
      verifyMs.push(end - verifyStart);
    }
    const full = await (async () => {
      const t0 = nowMs();
      const r = await readBackZeroes(target, sizeBytes, 512, { fullReadMaxBytes: Number.MAX_SAFE_INTEGER });
      return { ms: nowMs() - t0, zero: r.firstNonZero === null };
    })();
    const mbps = (ms: number) => sizeBytes / MiB / (ms / 1000);
    const value = mbps(median(zeroMs));
    const baseline = mbps(median(ddMs));
    const ratio = value / baseline;
    emit({
      name: 'zeroing',
      value,
      baseline,
      ratio,
      goal: 'driver zeroing throughput >= 0.9 x dd bs=4M oflag=direct conv=fsync',
      pass: ratio >= 0.9 && full.zero,
      unit: 'MiB/s',
      target: loop.dev ? `loop device ${loop.dev} on ${dir.path}` : `plain file (${loop.reason})`,
      size_mib: sizeBytes / MiB,
      action: device.cleanupAction,
      zero_ms: zeroMs.map(Math.round),
      dd_ms: ddMs.map(Math.round),
      driver_readback_ms: verifyMs.map(Math.round),
      driver_readback: sizeBytes > 256 * MiB ? 'sampled (first, last + 256 random blocks)' : 'full',
      full_readback_ms: Math.round(full.ms),
      full_readback_mib_s: round(mbps(full.ms), 1),
      verified_zero: full.zero,
      quick,
    });
  } finally {
    if (loop.dev) execFileSync('losetup', ['-d', loop.dev]);
    await host.dispose();
    await dir.cleanup();
  }
}

await main();
