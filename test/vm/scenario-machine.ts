/**
 * The one guest every VM scenario shares: five QEMU NVMe controllers, each
 * mapped to its driver and policy by PCI address in one agent config, booted
 * once. The host fills every backing file with a tenant's data before the
 * boot; the test reads them after the guest powers off.
 *
 *   slot 4  write-zeroes   plain controller, one 40 MiB namespace (two write-zeroes chunks)
 *   slot 5  subsystem      nvme-subsys, two namespaces (8 + 12 MiB): shared, multipath names
 *   slot 6  vendor-format  the nvme-vendor-example driver: format --ses=1
 *   slot 7  read-only      its backing file opened read-only: every write fails in the controller
 *   slot 8  sanitize       clear_action: sanitize, which QEMU cannot do: excluded, never touched
 *   slot 9  dual-port      QEMU's own nvme-subsys with two controllers (slots 9 and 10) sharing
 *                          an 8 MiB namespace, and a 4 MiB one left detached from both;
 *                          cleaned through the second controller
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { build } from 'esbuild';
import type { VmHost } from './host-check.js';
import { buildInitramfs } from './initramfs.js';
import type { CleanupRecord, CommandRecord, GuestPlan, GuestRecord } from './protocol.js';
import { type ControllerSpec, pciAddress, type QemuExit, qemuArgs, runQemu } from './qemu.js';
import { writeTenantFile } from './tenant-data.js';

const MiB = 1 << 20;
/** The guest's tmpfs work dir (test/vm/guest/init.sh): its only writable place. */
const GUEST_DIR = '/run/berth-vm';

export type Role = 'write-zeroes' | 'subsystem' | 'vendor-format' | 'read-only' | 'sanitize' | 'dual-port';

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
};

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

/** The agent's configuration: every controller by address, each in its driver's section. */
function agentConfig(tokensFile: string): string {
  const section = (driver: Device['driver']) => ({
    cleanup_timeout: 600,
    device_spec: ROLES.filter((r) => DEVICES[r].driver === driver).flatMap((r) =>
      allAddresses(r).map((address) => ({ address, ...DEVICES[r].spec })),
    ),
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

export interface ScenarioRun {
  /** The work dir: backing files, initramfs, console.log, results.jsonl, qemu.sh. */
  dir: string;
  records: GuestRecord[];
  qemu: QemuExit;
  /** Backing file of a namespace. */
  file(role: Role, nsid: number): string;
  command(name: string): CommandRecord;
  cleanup(role: Role): CleanupRecord;
  /** What to print when an assertion fails: guest errors and the console's end. */
  diagnostics(): string;
}

/** Bound on each step inside the guest; the guest as a whole gets twice that. */
const STEP_TIMEOUT_MS = 240_000;
export const GUEST_TIMEOUT_MS = 2 * STEP_TIMEOUT_MS;

const shellQuote = (a: string) => `'${a.replaceAll("'", `'\\''`)}'`;

const backingFile = (dir: string, role: Role, nsid: number) => join(dir, `${role}-ns${nsid}.img`);

/**
 * Builds the guest, fills the backing files, boots, and collects what came
 * out. With BERTH_VM_REUSE=<work dir of a kept run> it boots nothing and reads
 * that run again (to work on the assertions without waiting for a guest).
 */
export async function bootScenarioMachine(host: VmHost, repo: string): Promise<ScenarioRun> {
  const reuse = process.env.BERTH_VM_REUSE;
  if (reuse) {
    return collect(reuse, {
      exitCode: 0,
      signal: null,
      timedOut: false,
      stoppedAfterDone: false,
      stderr: '',
      ms: 0,
    });
  }
  const dir = mkdtempSync(join(tmpdir(), 'berth-vm-'));
  const file = (role: Role, nsid: number) => backingFile(dir, role, nsid);
  const controllers: ControllerSpec[] = ROLES.flatMap((role) => [
    {
      id: role,
      slot: DEVICES[role].slot,
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
  ]);
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
  const plan: GuestPlan = {
    repo,
    buf: host.buf,
    nvmeCli: host.nvmeCli,
    workDir: GUEST_DIR,
    resultsDevice: '/dev/ttyS1',
    agentConfig: `${GUEST_DIR}/agent.json`,
    token,
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
    stepTimeoutMs: STEP_TIMEOUT_MS,
  };
  const path = [
    dirname(host.node),
    '/usr/local/sbin',
    '/usr/local/bin',
    '/usr/sbin',
    '/usr/bin',
    '/sbin',
    '/bin',
  ];
  const initrd = join(dir, 'initramfs.cpio');
  buildInitramfs(initrd, {
    busybox: host.busybox,
    init: join(repo, 'test/vm/guest/init.sh'),
    modules: host.modules,
    files: {
      'orchestrator.mjs': { data: orchestrator.outputFiles[0]!.contents },
      'plan.json': { data: JSON.stringify(plan) },
      'agent.json': { data: agentConfig(`${GUEST_DIR}/tokens.yaml`) },
      'tokens.yaml': { data: `${token}: admin\n`, mode: 0o600 },
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

  const args = qemuArgs({
    host,
    initrd,
    consoleLog: join(dir, CONSOLE_LOG),
    resultsLog: join(dir, RESULTS_LOG),
    controllers,
    memoryMb: 2048,
    cpus: 2,
  });
  writeFileSync(
    join(dir, 'qemu.sh'),
    `#!/bin/sh\n${[host.qemu, ...args].map(shellQuote).join(' \\\n  ')}\n`,
    {
      mode: 0o755,
    },
  );
  return collect(dir, await runQemu(host.qemu, args, GUEST_TIMEOUT_MS, join(dir, RESULTS_LOG)));
}

const CONSOLE_LOG = 'console.log';
const RESULTS_LOG = 'results.jsonl';

/** Reads what a guest left in its work dir. */
function collect(dir: string, qemu: QemuExit): ScenarioRun {
  const read = (p: string) => {
    try {
      return readFileSync(p, 'utf8');
    } catch {
      return '';
    }
  };
  const records: GuestRecord[] = [];
  const unparsed: string[] = [];
  for (const line of read(join(dir, RESULTS_LOG)).split(/\r?\n/)) {
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
      `work dir: ${dir} (BERTH_VM_KEEP=1 keeps it; qemu.sh reruns the guest, BERTH_VM_REUSE=<dir> re-reads it)`,
      `qemu: exit ${qemu.exitCode ?? qemu.signal}${qemu.timedOut ? ` (killed after ${GUEST_TIMEOUT_MS} ms)` : ''}${qemu.stoppedAfterDone ? ' (stopped: done but no power-off)' : ''} in ${qemu.ms} ms`,
      ...(qemu.stderr ? [`qemu stderr: ${qemu.stderr.trim().split('\n').slice(-10).join(' | ')}`] : []),
      ...errors.map((e) => `guest error: ${e}`),
      ...unparsed.slice(0, 5).map((l) => `unparsed result line: ${l.slice(0, 300)}`),
      ...(agentLog.length > 0 ? ['agent log (last lines):', ...agentLog] : []),
      'console (last lines):',
      ...read(join(dir, CONSOLE_LOG)).split(/\r?\n/).slice(-40),
    ].join('\n');
  };
  const run: ScenarioRun = {
    dir,
    records,
    qemu,
    file: (role, nsid) => backingFile(dir, role, nsid),
    command(name) {
      const r = records.find((x): x is CommandRecord => x.type === 'command' && x.name === name);
      if (!r) throw new Error(`the guest reported no command '${name}'\n${diagnostics()}`);
      return r;
    },
    cleanup(role) {
      const address = cleanAddressOf(role);
      const r = records.find((x): x is CleanupRecord => x.type === 'cleanup' && x.address === address);
      if (!r) throw new Error(`the guest reported no cleanup of ${address} (${role})\n${diagnostics()}`);
      return r;
    },
    diagnostics,
  };
  if (!records.some((r) => r.type === 'done')) {
    throw new Error(`the guest did not finish\n${diagnostics()}`);
  }
  return run;
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
