/**
 * The simulated kernel in a process of its own, for bench/hotplug.ts: a real
 * kernel does not write sysfs in the scheduler's process, so the builder does
 * not either, and its time is neither the scheduler's nor held against it.
 *
 * Builds the host given by the first line on stdin (a SimHostSpec as JSON)
 * under argv[2], logging later changes' uevents to argv[3], and prints
 * `{"ready":true}`. Then answers each further line on stdin (`{"op":"setNumVfs","pfs":[...],"numVfs":n}`,
 * `{"op":"addFunction","spec":{...}}`, `{"op":"removeFunction","address":"..."}`)
 * with one line: `start` and `end` of the change, and for each function whose
 * uevents it wrote, `changed`: when its change began (the end of the previous
 * append, or the start). Times are CLOCK_MONOTONIC in ms (`monoMs`), the same
 * clock in every process of the host.
 */
import { createInterface } from 'node:readline';
import {
  buildSysfs,
  type SimFunctionSpec,
  type SimHostSpec,
  type SimUevent,
} from '../src/sim/sysfs/index.js';
import { monoMs } from './lib.js';

/** One request to the child. */
export type KernelRequest =
  | { op: 'setNumVfs'; pfs: string[]; numVfs: number }
  | { op: 'addFunction'; spec: SimFunctionSpec }
  | { op: 'removeFunction'; address: string };

/** The child's answer: the change's span, and when each function's own change began. */
export interface KernelReply {
  start: number;
  end: number;
  changed: Record<string, number>;
  error?: string;
}

/** The PCI function an event is about (the last part of its devpath), or null. */
function pciAddress(e: SimUevent): string | null {
  return e.subsystem === 'pci' ? (e.devpath.split('/').at(-1) ?? null) : null;
}

async function main() {
  const [root, log] = process.argv.slice(2);
  const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  const first = await lines.next();
  if (first.done) return;
  const spec = JSON.parse(first.value as string) as SimHostSpec;
  const sysfs = await buildSysfs(root!, spec, { ueventLog: log! });
  let mark = 0;
  let changed: Record<string, number> = {};
  sysfs.onUevents = (events) => {
    for (const e of events) {
      const a = pciAddress(e);
      if (a !== null && changed[a] === undefined) changed[a] = mark;
    }
    mark = monoMs();
  };
  process.stdout.write(`${JSON.stringify({ ready: true })}\n`);
  for (let r = await lines.next(); !r.done; r = await lines.next()) {
    const req = JSON.parse(r.value as string) as KernelRequest;
    changed = {};
    const start = monoMs();
    mark = start;
    let error: string | undefined;
    try {
      if (req.op === 'setNumVfs') for (const pf of req.pfs) await sysfs.setNumVfs(pf, req.numVfs);
      else if (req.op === 'addFunction') await sysfs.addFunction(req.spec);
      else await sysfs.removeFunction(req.address);
    } catch (err) {
      error = String(err);
    }
    const reply: KernelReply = { start, end: monoMs(), changed, ...(error ? { error } : {}) };
    process.stdout.write(`${JSON.stringify(reply)}\n`);
  }
}

await main();
