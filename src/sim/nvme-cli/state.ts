/**
 * The simulator's persistent state: one JSON file describing every simulated
 * controller (identify data, namespaces, sanitize status, injected faults).
 *
 * Every nvme-sim invocation is a separate short-lived process, and two of them
 * may run at once (a sanitize-log poll while a write-zeroes runs, the detached
 * sanitize worker finishing while a command starts), so all read-modify-write
 * cycles go through {@link withStateLock}: an exclusive lock file plus an atomic
 * temp-file + rename write. This module is on the hot path of every command, so
 * it deliberately imports nothing but node built-ins (the zod schema lives in
 * `state-file.ts`, used by test/harness code).
 */
import { closeSync, openSync, readFileSync, renameSync, statSync, unlinkSync, writeFileSync } from 'node:fs';

/** Faults injected per command name (`sanitize`, `write-zeroes`, `id-ctrl`, ...). */
export type SimFault =
  /** Fail with this NVMe status (e.g. 0x4002), printed the way libnvme 1.3 prints it. */
  | { mode: 'error'; status: number }
  /** Never return: the process sleeps until killed (driver timeout paths). */
  | { mode: 'hang' }
  /** Only meaningful for `sanitize`: the operation runs, then ends with SSTAT 3 and data left in place. */
  | { mode: 'sanitize-fails' }
  /** Exit 0 and print the success text without doing anything: the "erasure that erases nothing". */
  | { mode: 'noop' }
  /**
   * Only meaningful for `write-zeroes`: succeed and zero the requested blocks
   * except the namespace bytes [offset, offset + length), which keep their data.
   */
  | { mode: 'skip-range'; offset: number; length: number };

export interface SimNamespaceState {
  nsid: number;
  /** A regular file holding the namespace's data (the "block device" the driver passes). */
  devPath: string;
  sizeBytes: number;
  lbaSize: number;
  /**
   * Attached (active) — to this controller; on a subsystem with several
   * controllers, to at least one of them (`attachedTo` says which). Detached
   * namespaces are allocated but inactive.
   */
  attached: boolean;
  /** On a subsystem with several controllers: the ids (cntlid) of the controllers it is attached to. */
  attachedTo?: number[];
  /** Where the namespace sits on the controller's media (see SimControllerState.mediaPath). */
  mediaOffset?: number;
  /**
   * Identifiers (hex, '' = none) that differ from the defaults derived from
   * the serial and nsid (src/sim/nvme-identity.ts), which sysfs shows too.
   */
  nguid?: string;
  eui64?: string;
  uuid?: string;
}

export interface SimSanitizeState {
  /** SSTAT: bits 2:0 status (0 never, 1 ok, 2 in progress, 3 failed, 4 ok-with-dealloc), bits 7:3 passes, bit 8 global erased. */
  sstat: number;
  /** SPROG while in progress (numerator over 65536); 0xFFFF otherwise. */
  sprog: number;
  /** Epoch ms when the running sanitize started. */
  startedAt?: number;
  /** How long a sanitize takes on this controller. */
  durationMs: number;
  /** SANACT of the running / most recent sanitize. */
  action?: number;
  /** CDW10 of the most recent sanitize (reported as `cdw10_info`). */
  cdw10?: number;
  /** Overwrite pattern (CDW11) of the most recent overwrite sanitize. */
  ovrpat?: number;
  /** The running sanitize was started with the `sanitize-fails` fault on the controller that sent it. */
  failing?: boolean;
  /** Set once an Exit Failure Mode sanitize cleared a failed (unrestricted) sanitize. */
  failureCleared?: boolean;
  /**
   * mtime of every media file when the last sanitize completed. Any write since
   * (a file whose mtime differs) clears Global Data Erased, as the NVMe
   * specification says any write does. Absent: the bit is taken as stored.
   */
  erasedMtimes?: Record<string, number>;
}

/**
 * The SMART / Health log's counters (commands/smart.ts): 128-bit counters as
 * decimal strings.
 */
export interface SimSmartState {
  dataUnitsRead: string;
  dataUnitsWritten: string;
  hostReadCommands: string;
  hostWriteCommands: string;
  powerCycles: string;
  powerOnHours: string;
  unsafeShutdowns: string;
  /** Each media file's mtime (ms) at the previous look: a file that changed since was written. */
  seen?: Record<string, number>;
}

/** What a drive that was never asked shows (the defaults of a new simulated controller). */
export const NEW_SMART: SimSmartState = {
  dataUnitsRead: '0',
  dataUnitsWritten: '0',
  hostReadCommands: '0',
  hostWriteCommands: '0',
  powerCycles: '1',
  powerOnHours: '0',
  unsafeShutdowns: '0',
};

export interface SimControllerState {
  /** Kernel name, e.g. 'nvme0'. */
  name: string;
  /** Path of the controller character device as the driver passes it, e.g. '<simroot>/dev/nvme0'. */
  devPath: string;
  pciAddress: string;
  vid: number;
  ssvid: number;
  /**
   * The SUBNQN the controller reports in id-ctrl; absent or '' = none (nvme-cli then omits it, and
   * the kernel's subsysnqn is its fallback built from vid, ssvid, sn and mn: subsystem.ts subnqnOf).
   */
  subnqn?: string;
  /** The model is on the kernel's NVME_QUIRK_IGNORE_DEV_SUBNQN list: the kernel's subsysnqn is the fallback. */
  ignoreDeviceSubnqn?: boolean;
  /** Fixed-width identify strings; trailing spaces are kept, exactly as a device reports them. */
  sn: string;
  mn: string;
  fr: string;
  cntlid: number;
  /** Real bitfields as unsigned values; nvme-cli 2.3 prints them as int32. */
  sanicap: number;
  oacs: number;
  oncs: number;
  fna: number;
  nn: number;
  /** Total NVM capacity in bytes; namespaces must fit. */
  tnvmcapBytes: number;
  /** False: id-ctrl reports tnvmcap/unvmcap as "0" (capacity unknown), like QEMU's controller. Default true. */
  reportCapacity?: boolean;
  /**
   * The whole NVM capacity as one file: what the media holds outside the
   * namespaces. A deleted namespace's bytes stay there (at its mediaOffset);
   * a created namespace starts with whatever the media held (no deallocation
   * on create: the pessimistic controller). Sanitize erases it all.
   */
  mediaPath?: string;
  /** Block device name prefix of namespaces (nsid appended): `<name>n`, or `nvme<S>n` on a subsystem. */
  nsNamePrefix?: string;
  namespaces: SimNamespaceState[];
  sanitize: SimSanitizeState;
  faults?: { [command: string]: SimFault };
  /** The SMART / Health log counters; absent: those of a new drive (NEW_SMART), until the first look. */
  smart?: SimSmartState;
  /**
   * Another controller of the same NVM subsystem, which holds the subsystem's
   * namespaces, media, capacity, identify strings and sanitize state; this
   * one keeps only its name, devPath, pciAddress, cntlid and faults, and its
   * own copies of the rest are ignored (subsystem.ts).
   */
  shares?: string;
}

export interface NvmeSimState {
  version: 1;
  controllers: SimControllerState[];
}

/** A lock older than this is assumed to belong to a killed process and is broken. */
const STALE_LOCK_MS = 5000;
const LOCK_RETRY_MS = 5;

export function lockPathFor(statePath: string): string {
  return `${statePath}.lock`;
}

/** Reads the state without locking and without schema validation (hot path). */
export function loadState(statePath: string): NvmeSimState {
  return JSON.parse(readFileSync(statePath, 'utf8')) as NvmeSimState;
}

/** Writes atomically (temp + rename) so a concurrent unlocked reader never sees a torn file. */
export function saveState(statePath: string, state: NvmeSimState): void {
  const tmp = `${statePath}.${process.pid}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(state, null, 2)}\n`);
  renameSync(tmp, statePath);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

async function acquireLock(lockPath: string): Promise<void> {
  for (;;) {
    try {
      const fd = openSync(lockPath, 'wx');
      writeFileSync(fd, String(process.pid));
      closeSync(fd);
      return;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    try {
      if (Date.now() - statSync(lockPath).mtimeMs > STALE_LOCK_MS) {
        unlinkSync(lockPath);
        continue;
      }
    } catch {
      // The holder released it between our open and stat: retry at once.
      continue;
    }
    await sleep(LOCK_RETRY_MS);
  }
}

function releaseLock(lockPath: string): void {
  try {
    unlinkSync(lockPath);
  } catch {
    // Already broken as stale by someone else; nothing to undo.
  }
}

/**
 * Runs `fn` with the state file locked. `fn` mutates the state in place and
 * returns whether it changed anything; the state is written back only then.
 */
export async function withStateLock<T>(
  statePath: string,
  fn: (state: NvmeSimState) => Promise<{ changed: boolean; result: T }> | { changed: boolean; result: T },
): Promise<T> {
  const lockPath = lockPathFor(statePath);
  await acquireLock(lockPath);
  try {
    const state = loadState(statePath);
    const { changed, result } = await fn(state);
    if (changed) saveState(statePath, state);
    return result;
  } finally {
    releaseLock(lockPath);
  }
}
