/**
 * The host's side of the hotplug scenario: while the guest follows its
 * agent's inventory, plug an NVMe controller into an empty `pcie-root-port`
 * from QEMU's monitor (QMP `device_add`), then pull it (`device_del`), and
 * time each from the moment the command is sent to the moment the guest's
 * record of the agent's event about it reaches the results file. The time
 * includes the kernel's hotplug, the uevent, udevadm, the agent's re-read
 * (with its `nvme id-ctrl`), WatchInventory, buf curl in the guest and the
 * serial port: everything between the operator's hand and the inventory.
 */
import { closeSync, openSync, readSync, writeFileSync } from 'node:fs';
import type { GuestRecord, InventoryRecord } from './protocol.js';
import { openQmp } from './qemu.js';

export interface HotplugTimings {
  /** ms from sending `device_add` to the guest's first record of an event adding the device. */
  addedMs: number | null;
  /** …to the first record showing it healthy with its locked-in cleanup action (identified). */
  identifiedMs: number | null;
  /** ms from sending `device_del` to the guest's record of its removal. */
  removedMs: number | null;
  /** What went wrong on the host's side ('' when nothing did). */
  error: string;
}

/** Reads a growing JSON-lines file from where the last call stopped. */
function follower(file: string) {
  let offset = 0;
  let tail = '';
  const buf = Buffer.alloc(1 << 20);
  return (): GuestRecord[] => {
    let fd: number;
    try {
      fd = openSync(file, 'r');
    } catch {
      return [];
    }
    const out: GuestRecord[] = [];
    try {
      for (;;) {
        const n = readSync(fd, buf, 0, buf.length, offset);
        if (n <= 0) break;
        offset += n;
        const lines = (tail + buf.toString('utf8', 0, n)).split(/\r?\n/);
        tail = lines.pop()!;
        for (const l of lines) {
          try {
            if (l.trim()) out.push(JSON.parse(l) as GuestRecord);
          } catch {
            // not a record (the guest writes nothing else there, but a line may be cut by a crash)
          }
        }
      }
    } finally {
      closeSync(fd);
    }
    return out;
  };
}

export async function driveHotplug(o: {
  qmpSocket: string;
  resultsLog: string;
  /** Where the timings are written (the work dir), so a kept run can be read again. */
  out: string;
  port: string;
  drive: string;
  serial: string;
  timeoutMs: number;
}): Promise<HotplugTimings> {
  const t: HotplugTimings = { addedMs: null, identifiedMs: null, removedMs: null, error: '' };
  const next = follower(o.resultsLog);
  const deadline = Date.now() + o.timeoutMs;
  /** Polls the results every 5 ms until `test` accepts a record (its arrival time), or the guest ends. */
  const until = async (test: (r: GuestRecord) => boolean): Promise<number> => {
    for (;;) {
      const now = Date.now();
      for (const r of next()) {
        if (test(r)) return now;
        if (r.type === 'done') throw new Error('the guest finished first');
      }
      if (now > deadline) throw new Error(`timed out after ${o.timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 5));
    }
  };
  let qmp: Awaited<ReturnType<typeof openQmp>> | null = null;
  try {
    await until((r) => r.type === 'hotplug-ready');
    qmp = await openQmp(o.qmpSocket);
    let sent = Date.now();
    await qmp.command('device_add', {
      driver: 'nvme',
      id: 'c-hot',
      bus: o.port,
      serial: o.serial,
      drive: o.drive,
    });
    const inv = (r: GuestRecord): r is InventoryRecord => r.type === 'inventory';
    let added = false;
    const identified = await until((r) => {
      if (!inv(r) || r.kind === 'removed') return false;
      if (!added) {
        added = true;
        t.addedMs = Date.now() - sent;
      }
      return r.device?.health === 'HEALTH_HEALTHY' && typeof r.device.cleanupAction === 'string';
    });
    t.identifiedMs = identified - sent;
    // Let the device settle (the guest's block layer, the agent's journal) before pulling it.
    await new Promise((r) => setTimeout(r, 1_000));
    sent = Date.now();
    await qmp.command('device_del', { id: 'c-hot' });
    t.removedMs = (await until((r) => inv(r) && r.kind === 'removed')) - sent;
  } catch (e) {
    t.error = (e as Error).message;
  } finally {
    qmp?.close();
    writeFileSync(o.out, `${JSON.stringify(t)}\n`);
  }
  return t;
}
