/**
 * Building and validating simulator state files (harness side: tests, the demo,
 * the simulated-host builder). The nvme-sim process itself reads the file
 * without zod to keep its startup short; everything written through
 * {@link createNvmeSimState} has been validated here.
 */
import { mkdirSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { z } from 'zod';
import { isUuid } from '../../identifiers.js';
import { createBackingFile } from './media.js';
import { mediaMtimes, SSTAT_GLOBAL_ERASED } from './sanitize-engine.js';
import {
  NEW_SMART,
  type NvmeSimState,
  type SimControllerState,
  type SimSmartState,
  saveState,
  withStateLock,
} from './state.js';
import { holderOf } from './subsystem.js';

const u32 = z.number().int().min(0).max(0xffffffff);

export const simFaultSchema = z.discriminatedUnion('mode', [
  z.object({ mode: z.literal('error'), status: z.number().int().min(0).max(0xffff) }),
  z.object({ mode: z.literal('hang') }),
  z.object({ mode: z.literal('sanitize-fails') }),
  z.object({ mode: z.literal('noop') }),
  z.object({
    mode: z.literal('skip-range'),
    offset: z.number().int().nonnegative(),
    length: z.number().int().positive(),
  }),
]);

export const simNamespaceSchema = z.object({
  nsid: z.number().int().min(1).max(0xfffffffe),
  devPath: z.string().min(1),
  sizeBytes: z.number().int().nonnegative(),
  lbaSize: z.union([z.literal(512), z.literal(4096)]),
  attached: z.boolean(),
  attachedTo: z.array(z.number().int().min(0).max(0xffff)).optional(),
  mediaOffset: z.number().int().nonnegative().optional(),
  nguid: z
    .string()
    .regex(/^(?:[0-9a-f]{32})?$/)
    .optional(),
  eui64: z
    .string()
    .regex(/^(?:[0-9a-f]{16})?$/)
    .optional(),
  uuid: z
    .string()
    .refine((v) => v === '' || isUuid(v), 'a lower-case UUID or empty')
    .optional(),
});

/** A 128-bit counter as decimal digits. */
const decimal = z.string().regex(/^\d{1,39}$/);

export const simControllerSchema = z.object({
  name: z.string().regex(/^nvme\d+$/),
  devPath: z.string().min(1),
  pciAddress: z.string(),
  vid: z.number().int().min(0).max(0xffff),
  ssvid: z.number().int().min(0).max(0xffff),
  subnqn: z.string().max(223).optional(),
  ignoreDeviceSubnqn: z.boolean().optional(),
  sn: z.string().max(20),
  mn: z.string().max(40),
  fr: z.string().max(8),
  cntlid: z.number().int().min(0).max(0xffff),
  sanicap: u32,
  oacs: z.number().int().min(0).max(0xffff),
  oncs: z.number().int().min(0).max(0xffff),
  fna: z.number().int().min(0).max(0xff),
  nn: u32,
  tnvmcapBytes: z.number().int().nonnegative(),
  reportCapacity: z.boolean().optional(),
  mediaPath: z.string().min(1).optional(),
  nsNamePrefix: z
    .string()
    .regex(/^nvme\d+n$/)
    .optional(),
  namespaces: z.array(simNamespaceSchema),
  sanitize: z.object({
    sstat: z.number().int().min(0).max(0xffff),
    sprog: z.number().int().min(0).max(0xffff),
    startedAt: z.number().optional(),
    durationMs: z.number().nonnegative(),
    action: z.number().int().optional(),
    cdw10: u32.optional(),
    ovrpat: u32.optional(),
    failing: z.boolean().optional(),
    failureCleared: z.boolean().optional(),
    erasedMtimes: z.record(z.string(), z.number()).optional(),
  }),
  faults: z.record(z.string(), simFaultSchema).optional(),
  smart: z
    .object({
      dataUnitsRead: decimal,
      dataUnitsWritten: decimal,
      hostReadCommands: decimal,
      hostWriteCommands: decimal,
      powerCycles: decimal,
      powerOnHours: decimal,
      unsafeShutdowns: decimal,
      seen: z.record(z.string(), z.number()).optional(),
    })
    .optional(),
  shares: z
    .string()
    .regex(/^nvme\d+$/)
    .optional(),
});

export const nvmeSimStateSchema = z
  .object({
    version: z.literal(1),
    controllers: z.array(simControllerSchema),
  })
  .superRefine((state, ctx) => {
    for (const [i, c] of state.controllers.entries()) {
      if (c.shares === undefined) continue;
      const holder = state.controllers.find((h) => h.name === c.shares);
      if (!holder || holder.shares !== undefined) {
        ctx.addIssue({
          code: 'custom',
          path: ['controllers', i, 'shares'],
          message: `${c.name} shares with ${c.shares}, which is not a controller holding a subsystem`,
        });
      }
      const members = state.controllers.filter((m) => m.name === c.shares || m.shares === c.shares);
      if (members.filter((m) => m.cntlid === c.cntlid).length > 1) {
        ctx.addIssue({
          code: 'custom',
          path: ['controllers', i, 'cntlid'],
          message: `cntlid ${c.cntlid} is taken by another controller of ${c.shares}'s subsystem`,
        });
      }
    }
  });

/** A namespace to create; `devPath` defaults to `<dir of controller devPath>/<name>n<nsid>`. */
export interface SimNamespaceSpec {
  nsid: number;
  sizeBytes: number;
  lbaSize?: 512 | 4096;
  /** Default true: attached (on a subsystem with several controllers, to all of them). */
  attached?: boolean;
  /** On a subsystem with several controllers: the cntlids it is attached to (overrides `attached`). */
  attachedTo?: number[];
  devPath?: string;
  /** Identifiers other than the derived defaults (hex, '' = none). */
  nguid?: string;
  eui64?: string;
  uuid?: string;
}

/** A controller to create: everything but name and devPath has a realistic default. */
export type SimControllerSpec = Partial<Omit<SimControllerState, 'namespaces' | 'sanitize'>> & {
  name: string;
  devPath: string;
  namespaces?: SimNamespaceSpec[];
  sanitize?: Partial<SimControllerState['sanitize']>;
};

export interface NvmeSimSpec {
  controllers: SimControllerSpec[];
}

/**
 * Expands a spec into a full controller state. Identify strings are
 * space-padded to their fixed widths (20/40/8) as a real controller reports them.
 */
export function controllerFromSpec(spec: SimControllerSpec, index: number): SimControllerState {
  const dir = dirname(spec.devPath);
  const prefix = spec.nsNamePrefix ?? `${spec.name}n`;
  let mediaOffset = 0;
  const namespaces = (spec.namespaces ?? []).map((n) => {
    const ns = {
      nsid: n.nsid,
      devPath: n.devPath ?? `${dir}/${prefix}${n.nsid}`,
      sizeBytes: n.sizeBytes,
      lbaSize: n.lbaSize ?? 512,
      attached: n.attached ?? true,
      mediaOffset,
      ...(n.nguid === undefined ? {} : { nguid: n.nguid }),
      ...(n.eui64 === undefined ? {} : { eui64: n.eui64 }),
      ...(n.uuid === undefined ? {} : { uuid: n.uuid }),
    };
    mediaOffset += n.sizeBytes;
    return ns;
  });
  const used = namespaces.reduce((s, n) => s + n.sizeBytes, 0);
  const { namespaces: _n, sanitize: _s, ...rest } = spec;
  return {
    mediaPath: `${dir}/${spec.name}.media`,
    pciAddress: `0000:${(index + 1).toString(16).padStart(2, '0')}:00.0`,
    vid: 0x144d,
    ssvid: 0x144d,
    cntlid: 1,
    sanicap: 0x3,
    oacs: 0x1e,
    oncs: 0x5f,
    fna: 0x4,
    nn: 32,
    // The namespaces fill the drive (the common case); a controller without any gets 1 GiB.
    tnvmcapBytes: used > 0 ? used : 1 << 30,
    ...rest,
    sn: (spec.sn ?? `S${index.toString().padStart(3, '0')}SIMNVME`).padEnd(20),
    mn: (spec.mn ?? 'Berth Simulated NVMe').padEnd(40),
    fr: (spec.fr ?? '1.0').padEnd(8),
    namespaces,
    sanitize: { sstat: 0, sprog: 0xffff, durationMs: 2000, ...spec.sanitize },
  };
}

/**
 * Writes a new state file at `path` and creates each namespace's backing file
 * (sparse, `sizeBytes` long). Returns the validated state.
 */
export async function createNvmeSimState(path: string, spec: NvmeSimSpec): Promise<NvmeSimState> {
  const controllers = spec.controllers.map(controllerFromSpec);
  for (const c of controllers) {
    if (c.shares === undefined) continue;
    // A controller that shares a subsystem keeps only its own fields; the holder has the media.
    if ((spec.controllers.find((x) => x.name === c.name)?.namespaces ?? []).length > 0) {
      throw new Error(`${c.name} shares ${c.shares}'s subsystem: its namespaces are ${c.shares}'s`);
    }
    delete c.mediaPath;
  }
  for (const holder of controllers.filter((c) => controllers.some((x) => x.shares === c.name))) {
    const all = controllers.filter((x) => x === holder || x.shares === holder.name).map((x) => x.cntlid);
    const specs = spec.controllers.find((x) => x.name === holder.name)?.namespaces ?? [];
    for (const ns of holder.namespaces) {
      const given = specs.find((n) => n.nsid === ns.nsid);
      ns.attachedTo = [...(given?.attachedTo ?? (ns.attached ? all : []))].sort((a, b) => a - b);
      ns.attached = ns.attachedTo.length > 0;
    }
  }
  const state = nvmeSimStateSchema.parse({ version: 1, controllers }) as NvmeSimState;
  mkdirSync(dirname(path), { recursive: true });
  for (const c of state.controllers) {
    mkdirSync(dirname(c.devPath), { recursive: true });
    // Sparse: costs nothing until a test plants bytes in the unallocated capacity.
    if (c.mediaPath) createBackingFile(c.mediaPath, c.tnvmcapBytes);
    for (const ns of c.namespaces) {
      mkdirSync(dirname(ns.devPath), { recursive: true });
      createBackingFile(ns.devPath, ns.sizeBytes);
    }
    // Its SMART counters count every write from now on (commands/smart.ts).
    if (c.shares === undefined) c.smart = { ...NEW_SMART, ...c.smart, seen: mediaMtimes(c) };
    // A controller created "globally erased" has had nothing written yet: any write from now on clears it.
    if (c.sanitize.sstat & SSTAT_GLOBAL_ERASED && c.sanitize.erasedMtimes === undefined) {
      c.sanitize.erasedMtimes = mediaMtimes(c);
    }
  }
  saveState(path, state);
  return state;
}

/** Reads and validates a state file (e.g. to assert what the simulator did). */
export async function readNvmeSimState(path: string): Promise<NvmeSimState> {
  return nvmeSimStateSchema.parse(JSON.parse(await readFile(path, 'utf8'))) as NvmeSimState;
}

/**
 * Sets SMART counters of a controller's subsystem, as a drive whose firmware
 * reset them, or another drive with the same identity, would show them; the
 * counters not given stay.
 */
export async function setSmartCounters(
  statePath: string,
  ctrlName: string,
  counters: Partial<Omit<SimSmartState, 'seen'>>,
): Promise<void> {
  await withStateLock(statePath, (state) => {
    const own = state.controllers.find((c) => c.name === ctrlName);
    if (!own) throw new Error(`no simulated controller ${ctrlName} in ${statePath}`);
    const holder = holderOf(state, own);
    holder.smart = { ...NEW_SMART, ...holder.smart, ...counters };
    return { changed: true, result: undefined };
  });
}
