/**
 * zeroing + readback: the NVMe driver's host-side zero path (the `shred`
 * action: a controller without Write Zeroes and without sanitize) on a loop
 * device, against dd on the same device in the same run:
 *
 * - zeroing: the driver's direct writer (first `zeroing` progress event to the
 *   first `verifying` event) vs `dd if=/dev/zero of=<loop> bs=4M oflag=direct
 *   conv=fsync` (both end with a flush);
 * - readback: the driver's full read-back (`verify: full`, the default: first
 *   `verifying` event to the end of the driver's cleanup; the agent's census
 *   after it is reported apart, `census_and_judge_ms`) vs `dd if=<loop> of=/dev/null
 *   bs=4M iflag=direct`.
 *
 * The driver runs for real (the nvme driver's cleanup against the nvme-cli simulator
 * for the controller commands, its evidence judged by the agent's judge) with
 * the namespace's device node pointed at the loop device. The backing file is
 * written in full first (no sparse extents to allocate), one unmeasured round
 * warms both sides, then the measured rounds alternate which side goes first.
 * Values are medians. Without root or losetup it runs on a plain file and says so.
 * Goals: both ≥ 0.9× dd.
 */
import { execFile, execFileSync } from 'node:child_process';
import { rm, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { instantiateDriver } from '../src/plugins/driver.js';
import { nvmeDriver } from '../src/plugins/nvme/nvme-driver.js';
import type { CleanupProgress } from '../src/plugins/types.js';
import { attachLoop, detachLoop } from '../test/helpers/loop.js';
import { cleanAndJudge, makeTestHost, writeTenantData } from '../test/helpers/nvme-host.js';
import { emit, median, nowMs, parseArgs, round, tempDir } from './lib.js';

const run = promisify(execFile);
const MiB = 1 << 20;

async function timed(file: string, args: string[]): Promise<number> {
  const t0 = nowMs();
  await run(file, args, { timeout: 600_000 });
  return nowMs() - t0;
}

const ddWrite = (target: string, sizeBytes: number) =>
  timed('dd', [
    'if=/dev/zero',
    `of=${target}`,
    'bs=4M',
    `count=${sizeBytes / (4 * MiB)}`,
    'oflag=direct',
    'conv=fsync,notrunc',
    'status=none',
  ]);

const ddRead = (target: string, sizeBytes: number) =>
  timed('dd', [
    `if=${target}`,
    'of=/dev/null',
    'bs=4M',
    `count=${sizeBytes / (4 * MiB)}`,
    'iflag=direct',
    'status=none',
  ]);

async function main() {
  const { quick } = parseArgs();
  const sizeBytes = quick ? 64 * MiB : 2048 * MiB;
  const rounds = quick ? 2 : 5;
  const dir = await tempDir('/var/tmp', 'berth-bench-zero-');
  const host = await makeTestHost({
    controller: { sanicap: 0, oncs: 0x57, oacs: 0x16 },
    // The simulator's namespace has the real size: the agent's census asks it (id-ns).
    namespaces: [{ nsid: 1, sizeBytes }],
  });
  const backing = join(dir.path, 'namespace.img');
  // Pre-allocated: every block of the backing file written once, so no run pays for allocation.
  execFileSync('dd', [
    'if=/dev/zero',
    `of=${backing}`,
    'bs=4M',
    `count=${sizeBytes / (4 * MiB)}`,
    'conv=fsync',
    'status=none',
  ]);
  const loop = attachLoop(backing);
  const target = loop.dev ?? backing;
  try {
    const driver = instantiateDriver(nvmeDriver, {
      device_spec: [{ vendor_id: '144d' }],
      nvme_cli: host.nvmeCli,
    });
    const [device] = (await driver.discover(host.ctx)).devices;
    if (device?.cleanupAction !== 'shred')
      throw new Error(`expected the shred action, got ${device?.cleanupAction}`);
    await rm(join(host.devRoot, 'nvme0n1'), { force: true });
    await symlink(target, join(host.devRoot, 'nvme0n1'));
    await host.builder.setNvmeNamespaces('nvme0', [{ nsid: 1, sizeBytes }]);

    const driverRound = async () => {
      // Tenant data at the start, a third, the middle and the end: the read-back must find none of it.
      await writeTenantData(target, sizeBytes);
      const marks: { at: number; p: CleanupProgress }[] = [];
      const ctx = host.cleanupCtx();
      const { verdict, cleanupEndedAt } = await cleanAndJudge(driver, device, {
        ...ctx,
        progress: (p) => {
          marks.push({ at: nowMs(), p });
        },
      });
      const end = nowMs();
      if (!verdict.ok) throw new Error(`the driver's cleanup was not proven: ${verdict.reason}`);
      const zeroStart = marks.find((m) => m.p.phase === 'zeroing')!.at;
      const verifyStart = marks.find((m) => m.p.phase === 'verifying')!.at;
      // The read-back ends with the driver's cleanup; the agent's census after it
      // (nvme-cli runs, not the read-back) and the judge are reported apart.
      return {
        zero: verifyStart - zeroStart,
        read: cleanupEndedAt - verifyStart,
        censusAndJudge: end - cleanupEndedAt,
        proof: verdict.proof,
      };
    };
    const ddRound = async () => ({
      write: await ddWrite(target, sizeBytes),
      read: await ddRead(target, sizeBytes),
    });

    // Warm-up: both sides once, unmeasured.
    await ddRound();
    await driverRound();

    const ours: Awaited<ReturnType<typeof driverRound>>[] = [];
    const dds: Awaited<ReturnType<typeof ddRound>>[] = [];
    for (let r = 0; r < rounds; r++) {
      if (r % 2 === 0) {
        dds.push(await ddRound());
        ours.push(await driverRound());
      } else {
        ours.push(await driverRound());
        dds.push(await ddRound());
      }
    }
    const mbps = (ms: number) => sizeBytes / MiB / (ms / 1000);
    const common = {
      unit: 'MiB/s',
      target: loop.dev ? `loop device ${loop.dev} on ${dir.path}` : `plain file (${loop.reason})`,
      size_mib: sizeBytes / MiB,
      rounds,
      order: 'alternating (dd first in even rounds), after one warm-up round each',
      quick,
    };
    const zero = mbps(median(ours.map((o) => o.zero)));
    const zeroBase = mbps(median(dds.map((d) => d.write)));
    emit({
      name: 'zeroing',
      value: round(zero, 1),
      baseline: round(zeroBase, 1),
      ratio: round(zero / zeroBase, 3),
      goal: 'driver direct-write zeroing >= 0.9 x dd if=/dev/zero bs=4M oflag=direct conv=fsync',
      pass: zero / zeroBase >= 0.9,
      ...common,
      driver_ms: ours.map((o) => Math.round(o.zero)),
      dd_ms: dds.map((d) => Math.round(d.write)),
    });
    const read = mbps(median(ours.map((o) => o.read)));
    const readBase = mbps(median(dds.map((d) => d.read)));
    emit({
      name: 'readback',
      value: round(read, 1),
      baseline: round(readBase, 1),
      ratio: round(read / readBase, 3),
      goal: 'driver full read-back (verify: full) >= 0.9 x dd of=/dev/null bs=4M iflag=direct',
      pass:
        read / readBase >= 0.9 &&
        ours.every((o) => o.proof.readBack === 'full' && o.proof.bytesRead === sizeBytes),
      ...common,
      driver_ms: ours.map((o) => Math.round(o.read)),
      dd_ms: dds.map((d) => Math.round(d.read)),
      // The census after the cleanup and the judge, not in the value (until 2026-11-28 it was).
      census_and_judge_ms: ours.map((o) => Math.round(o.censusAndJudge)),
      bytes_read_per_round: ours[0]!.proof.bytesRead,
    });
  } finally {
    if (loop.dev) detachLoop(loop.dev);
    await host.dispose();
    await dir.cleanup();
  }
}

await main();
