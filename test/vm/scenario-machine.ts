/**
 * The one guest every VM scenario shares: eight QEMU NVMe controllers, each
 * mapped to its driver and policy by PCI address in one agent config, booted
 * once, then once more with only the moved drive. The host fills every
 * backing file with a tenant's data before the first boot; the test reads
 * them after the guests power off.
 *
 *   slot 4  write-zeroes   plain controller, one 40 MiB namespace (two write-zeroes chunks)
 *   slot 5  subsystem      nvme-subsys, two namespaces (8 + 12 MiB): shared, multipath names
 *   slot 6  vendor-format  the nvme-vendor-example driver: format --ses=1
 *   slot 7  read-only      its backing file opened read-only: every write fails in the controller
 *   slot 8  sanitize       clear_action: sanitize, which QEMU cannot do: excluded, never touched
 *   slot 9  dual-port      QEMU's own nvme-subsys with two controllers (slots 9 and 10) sharing
 *                          an 8 MiB namespace, and a 4 MiB one left detached from both;
 *                          cleaned through the second controller
 *   slot 11 moved          bound to a tenant (RecordBinding), never cleaned; the guest powers off,
 *                          and a second boot of the same host (its journal kept on a writable
 *                          share) has the same drive (backing file, serial) at slot 12
 *   slot 16 hotplug        an empty pcie-root-port: after the cleanups the host plugs an NVMe
 *                          controller into it from QEMU's monitor, the agent's inventory gets it
 *                          through the kernel's uevents (0000:01:00.0), then the host pulls it
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { build } from 'esbuild';
import type { VmHost } from './host-check.js';
import { driveHotplug, type HotplugTimings } from './hotplug-driver.js';
import { buildInitramfs } from './initramfs.js';
import type { CleanupRecord, CommandRecord, GuestPlan, GuestRecord, RpcRecord } from './protocol.js';
import { type ControllerSpec, pciAddress, type QemuExit, qemuArgs, runQemu } from './qemu.js';
import { writeTenantFile } from './tenant-data.js';

const MiB = 1 << 20;
/** The guest's tmpfs work dir (test/vm/guest/init.sh): its only writable place. */
const GUEST_DIR = '/run/berth-vm';

export type Role =
  | 'write-zeroes'
  | 'subsystem'
  | 'vendor-format'
  | 'read-only'
  | 'sanitize'
  | 'dual-port'
  | 'moved';

interface Device {
  slot: number;
  serial: string;
  subsystem?: boolean;
  namespaces: { nsid: number; sizeBytes: number; readOnly?: boolean; detached?: boolean }[];
  /** Which driver section lists it, and its device_spec entry beyond the address. */
  driver: 'nvme' | 'nvme-vendor-example';
  spec?: Record<string, unknown>;
  /** CleanupDevice is called for it. */
  clean: boolean;
  /** A second controller of the same nvme-subsys at this slot (a dual-port drive); the cleanup goes through it. */
  peerSlot?: number;
}

export const DEVICES: Record<Role, Device> = {
  'write-zeroes': {
    slot: 4,
    serial: 'berth-wz',
    namespaces: [{ nsid: 1, sizeBytes: 40 * MiB }],
    driver: 'nvme',
    clean: true,
  },
  subsystem: {
    slot: 5,
    serial: 'berth-subsys',
    subsystem: true,
    namespaces: [
      { nsid: 1, sizeBytes: 8 * MiB },
      { nsid: 2, sizeBytes: 12 * MiB },
    ],
    driver: 'nvme',
    clean: true,
  },
  'vendor-format': {
    slot: 6,
    serial: 'berth-format',
    namespaces: [{ nsid: 1, sizeBytes: 8 * MiB }],
    driver: 'nvme-vendor-example',
    clean: true,
  },
  'read-only': {
    slot: 7,
    serial: 'berth-ro',
    namespaces: [{ nsid: 1, sizeBytes: 4 * MiB, readOnly: true }],
    driver: 'nvme',
    clean: true,
  },
  sanitize: {
    slot: 8,
    serial: 'berth-sanitize',
    namespaces: [{ nsid: 1, sizeBytes: 1 * MiB }],
    driver: 'nvme',
    spec: { clear_action: 'sanitize' },
    clean: false,
  },
  'dual-port': {
    slot: 9,
    peerSlot: 10,
    serial: 'berth-dual',
    subsystem: true,
    // nsid 2 as a tenant would leave one: allocated, attached to neither controller.
    namespaces: [
      { nsid: 1, sizeBytes: 8 * MiB },
      { nsid: 2, sizeBytes: 4 * MiB, detached: true },
    ],
    driver: 'nvme',
    clean: true,
  },
  moved: {
    slot: 11,
    serial: 'berth-moved',
    namespaces: [{ nsid: 1, sizeBytes: 4 * MiB }],
    driver: 'nvme',
    // Declared clean at first sight, so it can be bound; held, it stays held whatever this says.
    spec: { assume_clean: true },
    clean: false,
  },
};

/**
 * The hotplug scenario: the empty root port (slot 16), the function a
 * controller plugged into it becomes (the port's secondary bus is bus 1), the
 * drive it is given and its serial.
 */
export const HOT_PORT = { id: 'rp-hot', slot: 0x10 };
export const HOT_ADDRESS = '0000:01:00.0';
export const HOT_SERIAL = 'berth-hot';
const HOT_DRIVE = 'd-hot';
/** How long the guest follows the inventory, and the host waits, for the plug and the pull. */
const HOTPLUG_TIMEOUT_MS = 120_000;

/** The slot the moved drive comes back at, on the second boot. */
export const MOVED_SLOT = 12;
/** The second cleanup of the vendor-format drive (8 MiB: quick under TCG), after the guest wrote to it outside Berth (decision 64). */
export const REWRITE_JOB = 'vm-write-after-clean';

/** The binding the first boot records for the moved drive, and the one the second boot tries. */
export const MOVED_BINDING = { arqUuid: 'vm-arq-moved', instanceUuid: 'vm-tenant-moved' };
export const NEXT_BINDING = { arqUuid: 'vm-arq-next', instanceUuid: 'vm-tenant-next' };

export const ROLES = Object.keys(DEVICES) as Role[];
export const addressOf = (role: Role): string => pciAddress(DEVICES[role].slot);
/** The second controller's address, for a dual-port role. */
export const peerAddressOf = (role: Role): string | null =>
  DEVICES[role].peerSlot === undefined ? null : pciAddress(DEVICES[role].peerSlot!);
/** The address CleanupDevice is called with: through the second controller where there is one. */
export const cleanAddressOf = (role: Role): string => peerAddressOf(role) ?? addressOf(role);
/** Every controller address of the machine (a dual-port role has two). */
const allAddresses = (role: Role): string[] => [
  addressOf(role),
  ...(peerAddressOf(role) ? [peerAddressOf(role)!] : []),
];
/** The tenant whose data a namespace held before the boot. */
export const tenantOf = (role: Role, nsid: number): string => `${role}-ns${nsid}`;

/** The agent's configuration: every controller by address (`slots` overrides a role's), each in its driver's section. */
function agentConfig(
  tokensFile: string,
  roles: readonly Role[] = ROLES,
  slots: Partial<Record<Role, number>> = {},
  hotplug = false,
): string {
  const section = (driver: Device['driver']) => ({
    cleanup_timeout: 600,
    // QEMU's machine here has no IOMMU: the controllers are named by address and allowed explicitly.
    device_spec: [
      ...roles
        .filter((r) => DEVICES[r].driver === driver)
        .flatMap((r) =>
          (slots[r] === undefined ? allAddresses(r) : [pciAddress(slots[r])]).map((address) => ({
            address,
            allow_no_iommu: true,
            ...DEVICES[r].spec,
          })),
        ),
      // The controller the host plugs in later: managed like any.
      ...(hotplug && driver === 'nvme' ? [{ address: HOT_ADDRESS, allow_no_iommu: true }] : []),
    ],
  });
  return JSON.stringify(
    {
      host: 'berth-vm',
      listen: '127.0.0.1:0',
      state_dir: `${GUEST_DIR}/agent-state`,
      discovery_interval: 3600,
      auth: { static_tokens_file: tokensFile },
      enabled_drivers: ['nvme', 'nvme-vendor-example'],
      nvme: section('nvme'),
      'nvme-vendor-example': section('nvme-vendor-example'),
    },
    null,
    2,
  );
}

/** What one boot's guest sent back. */
export interface BootRecords {
  records: GuestRecord[];
  rpc(method: string, address?: string): RpcRecord;
  command(name: string): CommandRecord;
}

export interface ScenarioRun {
  /** The work dir: backing files, initramfs, console.log, results.jsonl, qemu.sh. */
  dir: string;
  records: GuestRecord[];
  qemu: QemuExit;
  /** The second boot of the same host: the moved drive at slot MOVED_SLOT, the first boot's journal. */
  after: BootRecords;
  /** The host's timings of the plug and the pull (first boot). */
  hotplug: HotplugTimings;
  /** Backing file of a namespace. */
  file(role: Role, nsid: number): string;
  command(name: string): CommandRecord;
  cleanup(role: Role): CleanupRecord;
  /** What to print when an assertion fails: guest errors and the console's end. */
  diagnostics(): string;
}

/** Bound on each step inside the guest; the guest as a whole gets twice that. */
const STEP_TIMEOUT_MS = 240_000;
/**
 * The first boot runs the dry run, five cleanups, a write after a clean
 * record with its second cleanup (decision 64) and the hotplug: on the shared
 * build machine at a load average of 15-20 the dry run alone took 118-185 s
 * and the cleanups 120 s, and 480 s no longer covered it.
 */
export const GUEST_TIMEOUT_MS = 3 * STEP_TIMEOUT_MS;

const shellQuote = (a: string) => `'${a.replaceAll("'", `'\\''`)}'`;

const backingFile = (dir: string, role: Role, nsid: number) => join(dir, `${role}-ns${nsid}.img`);

/**
 * Builds the guest, fills the backing files, boots, and collects what came
 * out; then boots the same host again with the moved drive at MOVED_SLOT and
 * the first boot's agent journal. With BERTH_VM_REUSE=<work dir of a kept
 * run> it boots nothing and reads that run again (to work on the assertions
 * without waiting for a guest).
 */
export async function bootScenarioMachine(host: VmHost, repo: string): Promise<ScenarioRun> {
  const reuse = process.env.BERTH_VM_REUSE;
  if (reuse) {
    const none: QemuExit = {
      exitCode: 0,
      signal: null,
      timedOut: false,
      stoppedAfterDone: false,
      stderr: '',
      ms: 0,
    };
    return collect(reuse, none, none);
  }
  const dir = mkdtempSync(join(tmpdir(), 'berth-vm-'));
  const file = (role: Role, nsid: number) => backingFile(dir, role, nsid);
  /** A role's controllers: the first (at `slot`), and the second port of a dual-port drive. */
  const controllersOf = (role: Role, slot = DEVICES[role].slot): ControllerSpec[] => [
    {
      id: role,
      slot,
      serial: DEVICES[role].serial,
      subsystem: DEVICES[role].subsystem ?? false,
      namespaces: DEVICES[role].namespaces.map((ns) => ({
        nsid: ns.nsid,
        file: file(role, ns.nsid),
        readOnly: ns.readOnly ?? false,
        detached: ns.detached ?? false,
      })),
    },
    // The second port: same serial (a dual-port drive's controllers report the subsystem's), same subsystem.
    ...(DEVICES[role].peerSlot === undefined
      ? []
      : [
          {
            id: `${role}-b`,
            slot: DEVICES[role].peerSlot!,
            serial: DEVICES[role].serial,
            joins: role,
            namespaces: [],
          },
        ]),
  ];
  for (const role of ROLES) {
    for (const ns of DEVICES[role].namespaces) {
      await writeTenantFile(file(role, ns.nsid), ns.sizeBytes, tenantOf(role, ns.nsid));
    }
  }

  // The guest's share is read-only: bin/berth must find its bundle up to date.
  execFileSync(join(repo, 'bin/berth'), ['--version'], { stdio: 'ignore' });
  const orchestrator = await build({
    entryPoints: [join(repo, 'test/vm/guest/orchestrator.ts')],
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    write: false,
    logLevel: 'error',
  });
  const token = randomBytes(24).toString('hex');
  const persist = join(dir, 'persist');
  mkdirSync(persist);
  const base = {
    repo,
    buf: host.buf,
    nvmeCli: host.nvmeCli,
    workDir: GUEST_DIR,
    resultsDevice: '/dev/ttyS1',
    agentConfig: `${GUEST_DIR}/agent.json`,
    token,
    stepTimeoutMs: STEP_TIMEOUT_MS,
  };
  const boot = (
    name: '' | '-2',
    plan: GuestPlan,
    config: string,
    controllers: ControllerSpec[],
    hotplug?: { file: string },
  ) =>
    bootGuest(host, repo, dir, {
      name,
      plan,
      config,
      controllers,
      persist,
      orchestrator: orchestrator.outputFiles[0]!.contents,
      ...(hotplug ? { hotplug } : {}),
    });
  const hotFile = join(dir, 'hot-ns1.img');
  await writeTenantFile(hotFile, 4 * MiB, 'hotplug-ns1');

  const first = await boot(
    '',
    {
      ...base,
      controllers: ROLES.flatMap(allAddresses),
      cleanups: ROLES.filter((r) => DEVICES[r].clean).map((r) => ({
        address: cleanAddressOf(r),
        jobId: `vm-${r}`,
      })),
      // nvme-cli's own answer to a write on the read-only namespace.
      probes: [
        {
          address: addressOf('read-only'),
          argv: [host.nvmeCli, 'write-zeroes', '{ns}', '-n', '1', '-s', '0', '-c', '0'],
        },
      ],
      // The namespaces' identifiers as nvme-cli reads them, for what the agent reports.
      idNs: (['write-zeroes', 'subsystem'] as const).flatMap((r) =>
        DEVICES[r].namespaces.map((ns) => ({ address: addressOf(r), nsid: ns.nsid })),
      ),
      bindings: [{ address: addressOf('moved'), ...MOVED_BINDING }],
      saveState: `${GUEST_DIR}/persist/agent-state`,
      hotplug: { address: HOT_ADDRESS, timeoutMs: HOTPLUG_TIMEOUT_MS },
      writeAfterClean: { address: cleanAddressOf('vendor-format'), jobId: REWRITE_JOB },
    },
    agentConfig(`${GUEST_DIR}/tokens.yaml`, ROLES, {}, true),
    ROLES.flatMap((r) => controllersOf(r)),
    { file: hotFile },
  );
  // The same host again: only the moved drive, at another slot; the journal of the first boot.
  const second = await boot(
    '-2',
    {
      ...base,
      controllers: [],
      cleanups: [],
      probes: [],
      dryRun: false,
      restoreState: `${GUEST_DIR}/persist/agent-state`,
      bindings: [{ address: pciAddress(MOVED_SLOT), ...NEXT_BINDING }],
      listDevices: true,
    },
    agentConfig(`${GUEST_DIR}/tokens.yaml`, ['moved'], { moved: MOVED_SLOT }),
    controllersOf('moved', MOVED_SLOT),
  );
  return collect(dir, first, second);
}

/** One boot: its initramfs (the orchestrator, its plan and agent config), QEMU, and what came out. */
async function bootGuest(
  host: VmHost,
  repo: string,
  dir: string,
  b: {
    name: '' | '-2';
    plan: GuestPlan;
    config: string;
    controllers: ControllerSpec[];
    persist: string;
    orchestrator: Uint8Array;
    /** An empty root port, a spare drive for the controller the host plugs there, and QMP to do it. */
    hotplug?: { file: string };
  },
): Promise<QemuExit> {
  const path = [
    dirname(host.node),
    '/usr/local/sbin',
    '/usr/local/bin',
    '/usr/sbin',
    '/usr/bin',
    '/sbin',
    '/bin',
  ];
  const initrd = join(dir, `initramfs${b.name}.cpio`);
  buildInitramfs(initrd, {
    busybox: host.busybox,
    init: join(repo, 'test/vm/guest/init.sh'),
    modules: host.modules,
    files: {
      'orchestrator.mjs': { data: b.orchestrator },
      'plan.json': { data: JSON.stringify(b.plan) },
      'agent.json': { data: b.config },
      'tokens.yaml': { data: `${b.plan.token}: admin\n`, mode: 0o600 },
      run: {
        data: `#!/bin/sh\nexec ${[
          '/usr/bin/env',
          '-i',
          `PATH=${path.join(':')}`,
          `HOME=${GUEST_DIR}`,
          `TMPDIR=${GUEST_DIR}/tmp`,
          'LC_ALL=C',
          host.node,
          `${GUEST_DIR}/orchestrator.mjs`,
          `${GUEST_DIR}/plan.json`,
        ]
          .map(shellQuote)
          .join(' ')}\n`,
        mode: 0o755,
      },
    },
  });

  const qmpSocket = join(dir, `qmp${b.name}.sock`);
  const args = qemuArgs({
    host,
    initrd,
    consoleLog: join(dir, `console${b.name}.log`),
    resultsLog: join(dir, `results${b.name}.jsonl`),
    controllers: b.controllers,
    memoryMb: 2048,
    cpus: 2,
    persistDir: b.persist,
    ...(b.hotplug
      ? { hotplugPorts: [HOT_PORT], spareDrives: [{ id: HOT_DRIVE, file: b.hotplug.file }], qmpSocket }
      : {}),
  });
  writeFileSync(
    join(dir, `qemu${b.name}.sh`),
    `#!/bin/sh\n${[host.qemu, ...args].map(shellQuote).join(' \\\n  ')}\n`,
    {
      mode: 0o755,
    },
  );
  const qemu = runQemu(host.qemu, args, GUEST_TIMEOUT_MS, join(dir, `results${b.name}.jsonl`));
  if (b.hotplug) {
    // Beside the guest: plug and pull once it follows its agent's inventory.
    await driveHotplug({
      qmpSocket,
      resultsLog: join(dir, `results${b.name}.jsonl`),
      out: join(dir, `hotplug${b.name}.json`),
      port: HOT_PORT.id,
      drive: HOT_DRIVE,
      serial: HOT_SERIAL,
      timeoutMs: GUEST_TIMEOUT_MS,
    });
  }
  return qemu;
}

const read = (p: string) => {
  try {
    return readFileSync(p, 'utf8');
  } catch {
    return '';
  }
};

/** The records of one boot, with what to print when an assertion about them fails. */
function bootRecords(dir: string, name: '' | '-2', qemu: QemuExit) {
  const records: GuestRecord[] = [];
  const unparsed: string[] = [];
  for (const line of read(join(dir, `results${name}.jsonl`)).split(/\r?\n/)) {
    if (line.trim() === '') continue;
    try {
      records.push(JSON.parse(line) as GuestRecord);
    } catch {
      unparsed.push(line);
    }
  }
  const diagnostics = () => {
    const errors = records.filter((r) => r.type === 'error').map((r) => r.message);
    const agentLog = records.find((r) => r.type === 'agent-log')?.lines.slice(-30) ?? [];
    return [
      `boot${name || ' 1'} of work dir: ${dir} (BERTH_VM_KEEP=1 keeps it; qemu${name}.sh reruns the guest, BERTH_VM_REUSE=<dir> re-reads it)`,
      `qemu: exit ${qemu.exitCode ?? qemu.signal}${qemu.timedOut ? ` (killed after ${GUEST_TIMEOUT_MS} ms)` : ''}${qemu.stoppedAfterDone ? ' (stopped: done but no power-off)' : ''} in ${qemu.ms} ms`,
      ...(qemu.stderr ? [`qemu stderr: ${qemu.stderr.trim().split('\n').slice(-10).join(' | ')}`] : []),
      ...errors.map((e) => `guest error: ${e}`),
      ...unparsed.slice(0, 5).map((l) => `unparsed result line: ${l.slice(0, 300)}`),
      ...(agentLog.length > 0 ? ['agent log (last lines):', ...agentLog] : []),
      'console (last lines):',
      ...read(join(dir, `console${name}.log`))
        .split(/\r?\n/)
        .slice(-40),
    ].join('\n');
  };
  if (!records.some((r) => r.type === 'done')) {
    throw new Error(`the guest did not finish\n${diagnostics()}`);
  }
  const boot: BootRecords & { diagnostics(): string } = {
    records,
    diagnostics,
    command(cmd) {
      const r = records.find((x): x is CommandRecord => x.type === 'command' && x.name === cmd);
      if (!r) throw new Error(`the guest reported no command '${cmd}'\n${diagnostics()}`);
      return r;
    },
    rpc(method, address) {
      const r = records.find(
        (x): x is RpcRecord =>
          x.type === 'rpc' &&
          x.method === method &&
          (address === undefined || (x.request as { address?: string }).address === address),
      );
      if (!r)
        throw new Error(
          `the guest reported no ${method}${address ? ` of ${address}` : ''}\n${diagnostics()}`,
        );
      return r;
    },
  };
  return boot;
}

/** Reads what the guests left in their work dir. */
function collect(dir: string, qemu: QemuExit, qemu2: QemuExit): ScenarioRun {
  const first = bootRecords(dir, '', qemu);
  const second = bootRecords(dir, '-2', qemu2);
  const diagnostics = () => `${first.diagnostics()}\n\n${second.diagnostics()}`;
  const timings = read(join(dir, 'hotplug.json'));
  const hotplug: HotplugTimings = timings
    ? (JSON.parse(timings) as HotplugTimings)
    : { addedMs: null, identifiedMs: null, removedMs: null, error: 'the host wrote no hotplug timings' };
  return {
    dir,
    records: first.records,
    qemu,
    after: second,
    hotplug,
    file: (role, nsid) => backingFile(dir, role, nsid),
    command: first.command,
    cleanup(role) {
      const address = cleanAddressOf(role);
      const r = first.records.find((x): x is CleanupRecord => x.type === 'cleanup' && x.address === address);
      if (!r) throw new Error(`the guest reported no cleanup of ${address} (${role})\n${diagnostics()}`);
      return r;
    },
    diagnostics,
  };
}

/** Removes the work dir unless BERTH_VM_KEEP is set. */
export function disposeScenarioRun(run: ScenarioRun | undefined): void {
  if (!run || process.env.BERTH_VM_REUSE) return;
  if (process.env.BERTH_VM_KEEP) {
    console.log(`VM work dir kept: ${run.dir}`);
    return;
  }
  rmSync(run.dir, { recursive: true, force: true });
}
