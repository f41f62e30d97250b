/**
 * Parsers for what nvme-cli prints, written against the real 2.3 behaviour
 * (notes/nvme-cli.md) and tolerant of 1.x and newer releases:
 *
 * - unsigned 32-bit fields (sanicap, oacs, nn, ...) come out as signed int32 in
 *   2.3, so `sanicap` with bit 31 set is negative: normalise with `>>> 0`;
 * - 128-bit capacities (tnvmcap, unvmcap) are locale-formatted *strings* in 2.3
 *   ("3,200,631,791,616"), plain numbers in 1.x and ≥ 2.4: keep the digits;
 * - sn/mn/fr are fixed-width with trailing spaces;
 * - the sanitize log is wrapped in a key named after the device argument;
 * - the exit code is only 0/1: the NVMe status is the `(0x....)` at the end of
 *   the `NVMe status:` line on stderr.
 */

/** What the driver needs from `nvme id-ctrl -o json`. */
export interface IdCtrl {
  vid: number;
  ssvid: number;
  sn: string;
  mn: string;
  fr: string;
  cntlid: number;
  oacs: number;
  oncs: number;
  fna: number;
  sanicap: number;
  nn: number;
  /** Total NVM capacity in bytes (0 when the controller does not report it). */
  tnvmcap: bigint;
}

export class NvmeOutputError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NvmeOutputError';
  }
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** An int32-or-uint32 JSON number as the unsigned 32-bit value it stands for. */
export function u32(value: unknown, field: string): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < -0x80000000 || value > 0xffffffff) {
    throw new NvmeOutputError(`id-ctrl field ${field}: ${JSON.stringify(value)} is not a 32-bit integer`);
  }
  return value >>> 0;
}

/**
 * A capacity: a JSON number (1.x, ≥ 2.4) or a string with the locale's
 * thousands separators (2.3). Digits only are kept; anything else that is not
 * a separator (a minus sign, a decimal point, letters) is rejected.
 */
export function capacity(value: unknown, field: string): bigint {
  if (typeof value === 'bigint') return value;
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return BigInt(value);
  if (typeof value === 'string') {
    const trimmed = value.trim();
    // Separators seen in the wild: , . ' space, narrow no-break space (fr_FR), apostrophe (de_CH).
    if (/^\d[\d,.'\s\u00a0\u202f]*$/.test(trimmed)) {
      const digits = trimmed.replace(/\D/g, '');
      if (digits.length > 0) return BigInt(digits);
    }
  }
  throw new NvmeOutputError(`id-ctrl field ${field}: ${JSON.stringify(value)} is not a capacity in bytes`);
}

/**
 * Numbers above 2^53 lose precision in JSON.parse, and 1.x prints tnvmcap as
 * a bare number; read it straight from the text so the bytes stay exact.
 */
function rawNumberField(text: string, field: string): bigint | undefined {
  const m = new RegExp(`"${field}"\\s*:\\s*(\\d+)\\s*[,}]`).exec(text);
  return m ? BigInt(m[1]!) : undefined;
}

function str(value: unknown, field: string): string {
  if (typeof value !== 'string') {
    throw new NvmeOutputError(`id-ctrl field ${field}: ${JSON.stringify(value)} is not a string`);
  }
  return value.trim();
}

/** Parses `nvme id-ctrl -o json` output (any nvme-cli version since 1.x). */
export function parseIdCtrl(text: string): IdCtrl {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw new NvmeOutputError(`id-ctrl output is not JSON: ${(e as Error).message}`);
  }
  if (!isRecord(json)) throw new NvmeOutputError('id-ctrl output is not a JSON object');
  const opt = (f: string) => (json[f] === undefined ? 0 : u32(json[f], f));
  return {
    vid: u32(json.vid, 'vid'),
    ssvid: opt('ssvid'),
    sn: str(json.sn, 'sn'),
    mn: str(json.mn, 'mn'),
    fr: str(json.fr, 'fr'),
    cntlid: opt('cntlid'),
    oacs: u32(json.oacs, 'oacs'),
    oncs: u32(json.oncs, 'oncs'),
    fna: opt('fna'),
    // Pre-1.3 controllers have no SANICAP and 1.x nvme-cli may omit it: no sanitize.
    sanicap: opt('sanicap'),
    nn: opt('nn'),
    tnvmcap:
      json.tnvmcap === undefined
        ? 0n
        : (rawNumberField(text, 'tnvmcap') ?? capacity(json.tnvmcap, 'tnvmcap')),
  };
}

/** Capability bits the policy and the zero path use. */
export function capabilitiesOf(id: IdCtrl): {
  ces: boolean;
  bes: boolean;
  wzs: boolean;
  nsManagement: boolean;
} {
  return {
    ces: (id.sanicap & 0x1) !== 0,
    bes: (id.sanicap & 0x2) !== 0,
    wzs: (id.oncs & 0x8) !== 0,
    nsManagement: (id.oacs & 0x8) !== 0,
  };
}

export const hex = (n: number): string => `0x${(n >>> 0).toString(16)}`;

/** SSTAT bits 2:0. */
export const SANITIZE_NEVER = 0;
export const SANITIZE_COMPLETED = 1;
export const SANITIZE_IN_PROGRESS = 2;
export const SANITIZE_FAILED = 3;
export const SANITIZE_COMPLETED_DEALLOC = 4;

export interface SanitizeLog {
  /** SSTAT bits 2:0. */
  status: number;
  /** The status text nvme-cli printed (2.3), or a generic one. */
  statusText: string;
  /** SPROG, numerator over 65536. */
  sprog: number;
  globalErased: boolean;
  /** SCDW10: CDW10 of the sanitize that set the log (2.3 prints it as `cdw10_info`); null when absent. */
  scdw10: number | null;
}

const STATUS_TEXT: Record<number, string> = {
  0: 'NVM Subsystem has never been sanitized.',
  1: 'Most Recent Sanitize Command Completed Successfully.',
  2: 'Sanitize in Progress.',
  3: 'Most Recent Sanitize Command Failed.',
  4: 'Most Recent Sanitize Command (No-Deallocate After Sanitize) Completed Successfully.',
};

/**
 * Parses `nvme sanitize-log -o json`. 2.3 wraps the log in a key named after
 * the device (`{"nvme0": {...}}`) and prints SSTAT as an object whose `status`
 * string starts with `(N)`; other versions print SSTAT as a number or leave the
 * log unwrapped. All are accepted; anything else is an error (fail closed).
 */
export function parseSanitizeLog(text: string): SanitizeLog {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw new NvmeOutputError(`sanitize-log output is not JSON: ${(e as Error).message}`);
  }
  if (!isRecord(json)) throw new NvmeOutputError('sanitize-log output is not a JSON object');
  let log: Record<string, unknown> = json;
  if (!('sprog' in json) && !('sstat' in json)) {
    const values = Object.values(json);
    if (values.length !== 1 || !isRecord(values[0])) {
      throw new NvmeOutputError(
        `sanitize-log output has ${values.length} top-level keys, expected one device: ${text.slice(0, 200)}`,
      );
    }
    log = values[0];
  }
  if (typeof log.sprog !== 'number') {
    throw new NvmeOutputError(`sanitize-log: sprog ${JSON.stringify(log.sprog)} is not a number`);
  }
  const sprog = (log.sprog >>> 0) & 0xffff;
  const rawCdw10 = log.cdw10_info ?? log.scdw10;
  const scdw10 = typeof rawCdw10 === 'number' && Number.isInteger(rawCdw10) ? rawCdw10 >>> 0 : null;
  const sstat = log.sstat;
  if (typeof sstat === 'number') {
    const status = sstat & 0x7;
    return {
      status,
      statusText: STATUS_TEXT[status] ?? `status ${status}`,
      sprog,
      globalErased: (sstat & 0x100) !== 0,
      scdw10,
    };
  }
  if (isRecord(sstat) && typeof sstat.status === 'string') {
    const m = /^\s*\((\d+)\)\s*(.*)$/.exec(sstat.status);
    if (!m)
      throw new NvmeOutputError(`sanitize-log: sstat.status ${JSON.stringify(sstat.status)} has no (N) code`);
    return {
      status: Number(m[1]),
      statusText: m[2]!.trim(),
      sprog,
      globalErased: sstat.global_erased === 1 || sstat.global_erased === true,
      scdw10,
    };
  }
  throw new NvmeOutputError(`sanitize-log: sstat ${JSON.stringify(sstat)} is neither a number nor an object`);
}

export interface NvmeStatus {
  /** The text before the hex code (libnvme's wording varies across versions: never match on it). */
  text: string;
  /** Raw status including DNR/More bits. */
  value: number;
  /** Status code (bits 7:0). */
  sc: number;
  /** Status code type (bits 10:8). */
  sct: number;
  dnr: boolean;
}

/**
 * The NVMe status from nvme-cli's stderr, or null when there is none (an
 * errno failure, an argument error). Only the trailing `(0x...)` is parsed;
 * the text is kept for messages.
 */
export function parseNvmeStatus(stderr: string): NvmeStatus | null {
  for (const line of stderr.split('\n').reverse()) {
    const m = /NVMe status:\s*(.*?)\s*\((0x[0-9a-fA-F]+)\)\s*$/.exec(line);
    if (m) {
      const value = Number.parseInt(m[2]!, 16);
      return { text: m[1]!, value, sc: value & 0xff, sct: (value >> 8) & 0x7, dnr: (value & 0x4000) !== 0 };
    }
  }
  return null;
}

/**
 * Why a tool exited non-zero, for messages: the NVMe status with its hex when
 * stderr carries one, else the last line of stderr that says something, else
 * the exit code or signal.
 */
export function toolFailure(r: { stderr: string; code: number | null; signal: string | null }): {
  status: NvmeStatus | null;
  detail: string;
} {
  const status = parseNvmeStatus(r.stderr);
  if (status) return { status, detail: `NVMe status ${status.text} (${hex(status.value)})` };
  const last = r.stderr
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean)
    .at(-1);
  return { status, detail: last || `exit ${r.code ?? r.signal}` };
}

/**
 * The controller does not implement the command at all (generic Invalid
 * Command Opcode, 0x01): QEMU answers namespace management this way although
 * OACS advertises it. A tenant got the same answer.
 */
export const isNotImplemented = (s: NvmeStatus): boolean => s.sct === 0 && s.sc === 0x01;

/** Generic status 0x1d: Sanitize In Progress. */
export const isSanitizeInProgress = (s: NvmeStatus): boolean => s.sct === 0 && s.sc === 0x1d;

/** `nvme list-ns -o json` (`{"nsid_list":[{"nsid":1},...]}`) → the nsids. */
export function parseNsidList(text: string): number[] {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw new NvmeOutputError(`list-ns output is not JSON: ${(e as Error).message}`);
  }
  const list = isRecord(json) ? json.nsid_list : undefined;
  if (!Array.isArray(list))
    throw new NvmeOutputError(`list-ns output has no nsid_list: ${text.slice(0, 200)}`);
  return list.map((e) => {
    const nsid = isRecord(e) ? e.nsid : undefined;
    if (typeof nsid !== 'number' || !Number.isInteger(nsid)) {
      throw new NvmeOutputError(`list-ns: ${JSON.stringify(e)} has no nsid`);
    }
    return nsid >>> 0;
  });
}

/** `create-ns: Success, created nsid:<n>` → n. */
export function parseCreatedNsid(stdout: string): number | null {
  const m = /created nsid:\s*(\d+)/.exec(stdout);
  return m ? Number(m[1]) : null;
}

/** `nvme version 2.3 (git 2.3)` → '2.3'. */
export function parseNvmeVersion(stdout: string): string | null {
  const m = /nvme version\s+(\d+(?:\.\d+)*\S*)/.exec(stdout);
  return m ? m[1]! : null;
}

/** TNVMCAP and UNVMCAP from `nvme id-ctrl -o json`, in bytes (0 when absent or unknown). */
export function parseIdCtrlCapacity(text: string): { tnvmcap: bigint; unvmcap: bigint } {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw new NvmeOutputError(`id-ctrl output is not JSON: ${(e as Error).message}`);
  }
  if (!isRecord(json)) throw new NvmeOutputError('id-ctrl output is not a JSON object');
  const read = (field: 'tnvmcap' | 'unvmcap') =>
    json[field] === undefined ? 0n : (rawNumberField(text, field) ?? capacity(json[field], field));
  return { tnvmcap: read('tnvmcap'), unvmcap: read('unvmcap') };
}

/** What a census needs from `nvme id-ns -o json`: the size and the block size in use. */
export interface IdNs {
  /** Namespace size in logical blocks. */
  nsze: number;
  /** Data size of the LBA format in use, in bytes. */
  blockSize: number;
}

/**
 * Parses `nvme id-ns -o json`. An nsid that is not allocated reads as a
 * zero-filled structure (nsze 0): the caller decides what that means.
 */
export function parseIdNs(text: string): IdNs {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw new NvmeOutputError(`id-ns output is not JSON: ${(e as Error).message}`);
  }
  if (!isRecord(json)) throw new NvmeOutputError('id-ns output is not a JSON object');
  const nsze =
    rawNumberField(text, 'nsze') ?? (typeof json.nsze === 'number' ? BigInt(json.nsze) : undefined);
  if (nsze === undefined || nsze < 0n || nsze > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw new NvmeOutputError(`id-ns field nsze: ${JSON.stringify(json.nsze)} is not a block count`);
  }
  const flbas = json.flbas;
  if (typeof flbas !== 'number' || !Number.isInteger(flbas) || flbas < 0) {
    throw new NvmeOutputError(`id-ns field flbas: ${JSON.stringify(flbas)} is not a format index`);
  }
  // FLBAS bits 3:0, and bits 6:5 as the high bits of the index (NVMe 2.0, more than 16 formats).
  const index = (flbas & 0xf) | (((flbas >> 5) & 0x3) << 4);
  const lbafs = Array.isArray(json.lbafs) ? json.lbafs : [];
  const format = lbafs[index];
  const ds = isRecord(format) ? format.ds : undefined;
  if (nsze === 0n && (typeof ds !== 'number' || ds === 0)) return { nsze: 0, blockSize: 0 };
  if (typeof ds !== 'number' || !Number.isInteger(ds) || ds < 9 || ds > 16) {
    throw new NvmeOutputError(
      `id-ns: LBA format ${index} (flbas ${flbas}) has data size ${JSON.stringify(ds)}, not 2^9..2^16 bytes`,
    );
  }
  return { nsze: Number(nsze), blockSize: 2 ** ds };
}

/**
 * What the SMART / Health log (log page 02h, `nvme smart-log <ctrl> -o json`)
 * says of the writes a controller served. The counters are 128-bit in the
 * NVMe specification: kept as bigint, never rounded.
 */
export interface SmartLog {
  /** Data Units Written: thousands of 512-byte units the host wrote, rounded up. */
  dataUnitsWritten: bigint;
  /** Host Write Commands: write commands the controller completed. */
  hostWriteCommands: bigint;
  /** Power Cycles. */
  powerCycles: bigint;
  /** Power On Hours. */
  powerOnHours: bigint;
}

/**
 * A 128-bit counter as nvme-cli prints it: 2.3's `uint128_t_to_string()`
 * gives a string with the locale's thousands separator ("12,345" under
 * en_US, "12345" under LC_ALL=C); 1.x printed a JSON number (a double,
 * exact only below 2^53, read from the text when larger).
 */
function counter128(json: Record<string, unknown>, text: string, field: string): bigint {
  const value = json[field];
  if (value === undefined) throw new NvmeOutputError(`smart-log: no ${field}`);
  if (typeof value === 'number') {
    const raw = rawNumberField(text, field);
    if (raw !== undefined) return raw;
    if (Number.isSafeInteger(value) && value >= 0) return BigInt(value);
  } else if (typeof value === 'string' && /^\d[\d,.'\s\u00a0\u202f]*$/.test(value.trim())) {
    const n = BigInt(value.replace(/\D/g, ''));
    if (n < 1n << 128n) return n;
  }
  throw new NvmeOutputError(`smart-log field ${field}: ${JSON.stringify(value)} is not a 128-bit counter`);
}

/**
 * Parses `nvme smart-log <dev> -o json`: 2.3 prints one unwrapped object
 * (`json_smart_log`) whose 128-bit counters are strings. Anything else is
 * an error (fail closed): a missing counter is never read as zero.
 */
export function parseSmartLog(text: string): SmartLog {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw new NvmeOutputError(`smart-log output is not JSON: ${(e as Error).message}`);
  }
  if (!isRecord(json)) throw new NvmeOutputError('smart-log output is not a JSON object');
  return {
    dataUnitsWritten: counter128(json, text, 'data_units_written'),
    hostWriteCommands: counter128(json, text, 'host_write_commands'),
    powerCycles: counter128(json, text, 'power_cycles'),
    powerOnHours: counter128(json, text, 'power_on_hours'),
  };
}
