/**
 * Tenant data on the simulated media, for tests that check the central
 * promise from outside Berth: plant recognisable bytes where a tenant could
 * have written them — anywhere in any namespace (attached or detached), or in
 * the unallocated capacity (where a namespace the tenant created, wrote and
 * deleted left them) — and later list every place they are still readable.
 *
 * "Readable" is what a next tenant could reach through the controller: every
 * namespace, and the unallocated capacity when namespace management works
 * (a new namespace shows the media's old bytes in this simulator). A
 * controller whose namespace management is refused (QEMU: 0x4001) gives no
 * tenant a way to write or read there.
 */
import { open, readFile } from 'node:fs/promises';
import { loadState, type SimControllerState } from './state.js';
import { snapshotOf } from './subsystem.js';

/** The marker every planted write starts with and repeats. */
export const TENANT_MARK = 'TENANT-DATA:';

export interface TenantWrite {
  /** Index into the controller's namespaces (attached or not), or the unallocated capacity. */
  where: number | 'unallocated';
  /** Where in it, as a fraction in [0, 1). */
  at: number;
  /** Bytes to write, at least the marker's length. */
  length: number;
}

const OACS_NS_MGMT = 1 << 3;

/** Whether a tenant could create and delete namespaces on this controller. */
export function namespaceManagementWorks(ctrl: SimControllerState): boolean {
  const refused = (cmd: string) => ctrl.faults?.[cmd]?.mode === 'error';
  return (ctrl.oacs & OACS_NS_MGMT) !== 0 && !refused('create-ns') && !refused('delete-ns');
}

/** The media ranges no namespace occupies. */
export function unallocatedExtents(ctrl: SimControllerState): [number, number][] {
  const used = ctrl.namespaces
    .filter((n) => n.mediaOffset !== undefined)
    .map((n) => [n.mediaOffset!, n.mediaOffset! + n.sizeBytes] as const)
    .sort((a, b) => a[0] - b[0]);
  const free: [number, number][] = [];
  let at = 0;
  for (const [s, e] of used) {
    if (s > at) free.push([at, s]);
    at = Math.max(at, e);
  }
  if (ctrl.tnvmcapBytes > at) free.push([at, ctrl.tnvmcapBytes]);
  return free;
}

/** The controller as commands see it: on a subsystem with several controllers, the subsystem's media. */
function controller(statePath: string, name: string): SimControllerState {
  const state = loadState(statePath);
  const c = state.controllers.find((x) => x.name === name);
  if (!c) throw new Error(`no simulated controller ${name} in ${statePath}`);
  return snapshotOf(state, c);
}

const payload = (length: number) =>
  Buffer.from(TENANT_MARK.repeat(Math.ceil(length / TENANT_MARK.length))).subarray(0, length);

/**
 * Writes each `TenantWrite` onto the controller's media (through the files the
 * block devices are) and returns where, as `<file>@<offset>`. A write that
 * has no place (unallocated capacity on a full controller) is skipped.
 */
export async function plantTenantData(
  statePath: string,
  ctrlName: string,
  writes: TenantWrite[],
): Promise<string[]> {
  const ctrl = controller(statePath, ctrlName);
  const placed: string[] = [];
  for (const w of writes) {
    const length = Math.max(TENANT_MARK.length, w.length);
    let file: string;
    let offset: number;
    if (w.where === 'unallocated') {
      const free = unallocatedExtents(ctrl).filter(([s, e]) => e - s >= length);
      if (!ctrl.mediaPath || free.length === 0) continue;
      // Valid start offsets per extent; `at` picks one across all of them.
      const room = free.map(([s, e]) => e - s - length + 1);
      let pick = Math.floor(w.at * room.reduce((a, b) => a + b, 0));
      let i = 0;
      while (pick >= room[i]!) pick -= room[i++]!;
      file = ctrl.mediaPath;
      offset = free[i]![0] + pick;
    } else {
      const ns = ctrl.namespaces[w.where % ctrl.namespaces.length];
      if (!ns || ns.sizeBytes < length) continue;
      file = ns.devPath;
      offset = Math.floor(w.at * (ns.sizeBytes - length));
    }
    const fh = await open(file, 'r+');
    try {
      await fh.write(payload(length), 0, length, offset);
    } finally {
      await fh.close();
    }
    placed.push(`${file}@${offset}`);
  }
  return placed;
}

/** One write near the start, one in the middle and one near the end of every namespace, plus one unallocated. */
export function spreadTenantWrites(namespaces: number): TenantWrite[] {
  const writes: TenantWrite[] = [];
  for (let i = 0; i < namespaces; i++) {
    for (const at of [0.001, 0.5, 0.999]) writes.push({ where: i, at, length: 4096 });
  }
  writes.push({ where: 'unallocated', at: 0.5, length: 4096 });
  return writes;
}

function marksIn(buf: Buffer, base: number, name: string, out: string[]): void {
  const at = buf.indexOf(TENANT_MARK);
  if (at >= 0) out.push(`${name}@${base + at}`);
}

/**
 * Every place on the controller's media where a next tenant could read
 * planted bytes: each namespace (attached or detached), and the unallocated
 * capacity when namespace management works. Empty means clean.
 */
export async function readableTenantData(statePath: string, ctrlName: string): Promise<string[]> {
  const ctrl = controller(statePath, ctrlName);
  const found: string[] = [];
  for (const ns of ctrl.namespaces) {
    marksIn(await readFile(ns.devPath), 0, ns.devPath, found);
  }
  if (ctrl.mediaPath && namespaceManagementWorks(ctrl)) {
    const fh = await open(ctrl.mediaPath, 'r');
    try {
      for (const [s, e] of unallocatedExtents(ctrl)) {
        const buf = Buffer.alloc(e - s);
        await fh.read(buf, 0, buf.length, s);
        marksIn(buf, s, `${ctrl.mediaPath} (unallocated)`, found);
      }
    } finally {
      await fh.close();
    }
  }
  return found;
}
