/**
 * A census of an NVMe device's media: every allocated namespace of its NVM
 * subsystem, attached or not, with its size, and the subsystem's capacity —
 * read from the controller itself with nvme-cli, not from what sysfs shows.
 *
 * The agent takes it around every NVMe cleanup and judges the driver's
 * evidence against it (src/server/agent/cleanup-judge.ts): coverage is the
 * agent's, never the driver's word. Drivers use the same listing to know what
 * they must cover. Everything fails closed: a command that cannot run, times
 * out, exits non-zero or prints something unexpected is an error, never an
 * empty list.
 *
 * 1. sysfs: the function's controller (live), and the block devices it shows;
 *    on a subsystem, the namespaces any of its controllers reaches (every one
 *    must be listed through this controller too, or the census fails).
 * 2. `id-ctrl`: OACS (namespace management), NN, TNVMCAP and UNVMCAP (2.3
 *    prints them as strings with the locale's separators; "0" is unknown).
 * 3. `list-ns` (active on this controller) and, with namespace management,
 *    `list-ns --all` (allocated in the subsystem, attached or not).
 * 4. `id-ns -n N` for each allocated nsid (`--force`, CNS 11h, with namespace
 *    management, so a detached one reports its size too).
 * 5. Only when asked and when it matters (capacity not accounted for by
 *    UNVMCAP 0): whether namespace management really works, asked without
 *    changing anything — `delete-ns` of an nsid above NN (decision 17).
 */

import { parsePciAddress } from '../../identifiers.js';
import type { CensusNamespace, MediaCensus, NamespaceManagement } from '../cleanup-evidence.js';
import type { CommandRunner } from '../command-runner.js';
import { readPciFunction } from '../pci/sysfs-reader.js';
import type { WriteCounters } from '../types.js';
import { CleanupFailedError } from './errors.js';
import {
  hex,
  isNotImplemented,
  parseIdCtrl,
  parseIdCtrlCapacity,
  parseIdNs,
  parseNsidList,
  parseNvmeStatus,
} from './nvme-output.js';
import { readNvmeController, readSubsystemNamespaces } from './sysfs-nvme.js';
import { readWriteCounters } from './write-counters.js';

/** Per-command bound: identify-like commands answer in milliseconds. */
const CENSUS_COMMAND_TIMEOUT_MS = 30_000;
const OACS_NS_MANAGEMENT = 1 << 3;

export interface CensusOptions {
  sysfsRoot: string;
  devRoot: string;
  runner: CommandRunner;
  /** nvme-cli: the path the driver's config section names (`nvme_cli`). */
  nvmeCli: string;
  signal?: AbortSignal;
  timeoutMs?: number;
  /** Ask whether namespace management works when the capacity is not otherwise accounted for. */
  probe?: boolean;
  /** Also read the controller's write counters (`smart-log`), last: the census after a cleanup. */
  counters?: boolean;
}

/** A census with the controller's write counters, when it was asked for them. */
export interface NvmeCensus extends MediaCensus {
  writeCounters?: WriteCounters;
}

/** Why a census could not be taken. */
export class CensusError extends CleanupFailedError {
  constructor(message: string) {
    super(message);
    this.name = 'CensusError';
  }
}

const safe = (v: bigint, what: string): number => {
  if (v > BigInt(Number.MAX_SAFE_INTEGER))
    throw new CensusError(`${what} of ${v} bytes is too large to count`);
  return Number(v);
};

/** Takes the census of the NVMe device at `address` (a driver's report: parsed here) through its controller. */
export async function takeNvmeCensus(address: string, o: CensusOptions): Promise<NvmeCensus> {
  const fn = await readPciFunction(o.sysfsRoot, parsePciAddress('address', address));
  if (!fn) throw new CensusError(`${address}: the PCI function is gone`);
  const name = fn.nvmeControllers[0];
  if (name === undefined) {
    throw new CensusError(
      `${address}: no NVMe controller to ask (bound to ${fn.kernelDriver ?? 'no driver'}, not nvme)`,
    );
  }
  const ctrl = await readNvmeController(o.sysfsRoot, name);
  if (!ctrl) throw new CensusError(`${address}: controller ${name} is gone`);
  if (ctrl.state !== 'live')
    throw new CensusError(`${address}: controller ${name} is '${ctrl.state}', not live`);
  const dev = `${o.devRoot}/${name}`;
  const run = async (args: string[]): Promise<string> => {
    const what = `nvme ${args.filter((a) => a !== dev).join(' ')}`;
    let r: Awaited<ReturnType<CommandRunner['run']>>;
    try {
      r = await o.runner.run(o.nvmeCli, args, {
        timeoutMs: o.timeoutMs ?? CENSUS_COMMAND_TIMEOUT_MS,
        env: { LC_ALL: 'C' },
        ...(o.signal ? { signal: o.signal } : {}),
      });
    } catch (e) {
      const code = (e as { code?: string }).code ?? (e as Error).message;
      throw new CensusError(`${what} on ${name}: '${o.nvmeCli}' cannot be run (${code})`);
    }
    if (r.aborted) throw new CensusError(`${what} on ${name}: aborted`);
    if (r.timedOut) {
      throw new CensusError(
        `${what} on ${name}: did not finish within ${o.timeoutMs ?? CENSUS_COMMAND_TIMEOUT_MS} ms`,
      );
    }
    if (r.code !== 0) {
      const status = parseNvmeStatus(r.stderr);
      const detail = status
        ? `NVMe status ${status.text} (${hex(status.value)})`
        : r.stderr.trim().split('\n').at(-1) || `exit ${r.code ?? r.signal}`;
      throw Object.assign(new CensusError(`${what} on ${name} failed: ${detail}`), { status });
    }
    return r.stdout;
  };
  const parsed = <T>(what: string, f: () => T): T => {
    try {
      return f();
    } catch (e) {
      throw new CensusError(`${name}: ${what}: ${(e as Error).message}`);
    }
  };

  const idText = await run(['id-ctrl', dev, '-o', 'json']);
  const id = parsed('id-ctrl', () => parseIdCtrl(idText));
  const cap = parsed('id-ctrl', () => parseIdCtrlCapacity(idText));
  const nsManagement = (id.oacs & OACS_NS_MANAGEMENT) !== 0;
  const active = await listNs(run, dev, false);
  const allocated = nsManagement ? await listNs(run, dev, true) : active;
  const missing = active.filter((n) => !allocated.includes(n));
  if (missing.length > 0) {
    throw new CensusError(
      `${name}: list-ns shows nsid ${missing.join(', ')} active but list-ns --all does not list it as allocated`,
    );
  }
  const unlisted = ctrl.namespaces.filter((n) => !active.includes(n.nsid));
  if (unlisted.length > 0) {
    throw new CensusError(
      `${name}: sysfs shows ${unlisted.map((n) => `${n.name} (nsid ${n.nsid})`).join(', ')}, which nvme list-ns does not list as active`,
    );
  }
  // A namespace another controller of the subsystem reaches (the kernel shows its head) that this
  // one does not list as allocated (attached only to the other, and no list-ns --all here): its
  // blocks cannot be counted, nor covered, through this controller. Fail closed.
  const elsewhere = ctrl.subsystem
    ? readSubsystemNamespaces(o.sysfsRoot, ctrl.subsystem).filter((h) => !allocated.includes(h.nsid))
    : [];
  if (elsewhere.length > 0) {
    throw new CensusError(
      `${name}: ${ctrl.subsystem} shows ${elsewhere.map((n) => `${n.name} (nsid ${n.nsid})`).join(', ')}, reached through another controller of the subsystem, which ${name} does not list as allocated${nsManagement ? '' : ' (no namespace management: no list-ns --all)'}: it cannot be covered through ${name}`,
    );
  }
  const namespaces: CensusNamespace[] = [];
  for (const nsid of [...allocated].sort((a, b) => a - b)) {
    const text = await run([
      'id-ns',
      dev,
      '-n',
      String(nsid),
      ...(nsManagement ? ['--force'] : []),
      '-o',
      'json',
    ]);
    const ns = parsed(`id-ns -n ${nsid}`, () => parseIdNs(text));
    if (ns.nsze === 0) {
      throw new CensusError(`${name}: namespace ${nsid} is listed as allocated but id-ns reports no size`);
    }
    namespaces.push({
      nsid,
      sizeBytes: safe(BigInt(ns.nsze) * BigInt(ns.blockSize), `namespace ${nsid}`),
      blockSize: ns.blockSize,
      attached: active.includes(nsid),
      name: ctrl.namespaces.find((n) => n.nsid === nsid)?.name ?? '',
    });
  }
  const totalCapacity = cap.tnvmcap === 0n ? null : safe(cap.tnvmcap, 'TNVMCAP');
  const unallocatedCapacity = totalCapacity === null ? null : safe(cap.unvmcap, 'UNVMCAP');
  let namespaceManagement: NamespaceManagement = nsManagement ? 'not-asked' : 'unsupported';
  if (nsManagement && o.probe && !(totalCapacity !== null && unallocatedCapacity === 0)) {
    namespaceManagement = await probeNamespaceManagement(run, dev, id.nn);
  }
  const census: NvmeCensus = {
    controller: name,
    totalCapacity,
    unallocatedCapacity,
    namespaces,
    namespaceManagement,
  };
  if (o.counters) {
    // After everything else: nothing Berth does after this read writes to the media.
    try {
      census.writeCounters = await readWriteCounters(run, dev, ctrl);
    } catch (e) {
      if (e instanceof CensusError) throw e;
      throw new CensusError(`${name}: smart-log: ${(e as Error).message}`);
    }
  }
  return census;
}

async function listNs(
  run: (args: string[]) => Promise<string>,
  dev: string,
  all: boolean,
): Promise<number[]> {
  const text = await run(['list-ns', dev, ...(all ? ['--all'] : []), '-o', 'json']);
  try {
    return parseNsidList(text);
  } catch (e) {
    throw new CensusError(`list-ns${all ? ' --all' : ''}: ${(e as Error).message}`);
  }
}

/**
 * Whether namespace management works, asked without changing anything:
 * deleting an nsid above NN, which cannot exist. Invalid Command Opcode means
 * it does not (QEMU); any other answer, success included, means it does. With
 * NN at FFFFFFFEh or above no nsid is harmless to name: assumed to work (fail
 * closed).
 */
async function probeNamespaceManagement(
  run: (args: string[]) => Promise<string>,
  dev: string,
  nn: number,
): Promise<NamespaceManagement> {
  if (nn >= 0xfffffffe) return 'works';
  try {
    await run(['delete-ns', dev, '-n', String(nn + 1)]);
  } catch (e) {
    const status = (e as { status?: ReturnType<typeof parseNvmeStatus> }).status;
    if (status && isNotImplemented(status)) return 'refused';
    if (status) return 'works';
    throw e;
  }
  return 'works';
}
