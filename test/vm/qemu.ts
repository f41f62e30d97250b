/**
 * The QEMU machine: a q35 (PCI Express) machine with NVMe controllers on fixed
 * slots of its root complex (so the agent config can name them by PCI
 * address), namespaces backed by raw files on the host, the host's root shared
 * read-only over virtio-9p, two serial ports written to files (ttyS0 the
 * console, ttyS1 the results), and no network device at all. Optionally
 * `pcie-root-port`s with nothing behind them, drives with no device yet, and
 * a QMP monitor socket: the host plugs an NVMe controller into a port while
 * the guest runs (`device_add`), and pulls it (`device_del`). On q35 QEMU 7.2
 * signals both through ACPI, so the guest's kernel (acpiphp) adds or ejects
 * the function at once.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createConnection, type Socket } from 'node:net';
import type { VmHost } from './host-check.js';

export interface NamespaceSpec {
  nsid: number;
  /** Raw backing file on the host. */
  file: string;
  /** The host opens the file read-only: every write the guest issues fails in QEMU. */
  readOnly?: boolean;
  /** Allocated but attached to no controller (`detached=on`, a subsystem's namespaces only). */
  detached?: boolean;
}

export interface ControllerSpec {
  /** Short id, unique in the machine ([a-z0-9-]). */
  id: string;
  /** PCI slot on bus 0: the guest sees the controller at 0000:00:<slot>.0. */
  slot: number;
  serial: string;
  /** Put the controller in its own nvme-subsys: its namespaces become shared (multipath). */
  subsystem?: boolean;
  /**
   * Join the nvme-subsys of the controller with this id instead (a second
   * port of a dual-port drive): it reaches that subsystem's shared namespaces
   * and has none of its own.
   */
  joins?: string;
  namespaces: NamespaceSpec[];
}

export interface MachineSpec {
  host: VmHost;
  initrd: string;
  consoleLog: string;
  resultsLog: string;
  controllers: ControllerSpec[];
  memoryMb: number;
  cpus: number;
  /** A host directory the guest may write (virtio-9p tag `berthpersist`): what outlives a boot. */
  persistDir?: string;
  /** Empty `pcie-root-port`s (id, slot on bus 0): a device added to port N appears behind it, on bus N's secondary bus. */
  hotplugPorts?: { id: string; slot: number }[];
  /** Raw files opened as drives without a device (`-drive if=none,id=…`), for a `device_add` to take. */
  spareDrives?: { id: string; file: string }[];
  /** The QMP monitor's Unix socket (server, no wait). */
  qmpSocket?: string;
}

export function pciAddress(slot: number): string {
  return `0000:00:${slot.toString(16).padStart(2, '0')}.0`;
}

/** QEMU's option syntax uses ',' as a separator: refuse paths that would be cut at one. */
function optPath(p: string): string {
  if (p.includes(',')) throw new Error(`a path QEMU cannot take in an option: ${p}`);
  return p;
}

export function qemuArgs(m: MachineSpec): string[] {
  const args = [
    '-machine',
    'q35',
    '-accel',
    m.host.accel,
    '-m',
    String(m.memoryMb),
    '-smp',
    String(m.cpus),
    '-nodefaults',
    '-display',
    'none',
    '-no-reboot',
    '-kernel',
    m.host.kernel,
    '-initrd',
    m.initrd,
    '-append',
    // no_timer_check: under TCG on a loaded host the kernel's check of the IO-APIC timer can
    // miss its ticks and panic ("IO-APIC + timer doesn't work!"); the emulated timer is fine.
    'console=ttyS0 panic=-1 loglevel=4 no_timer_check',
    '-serial',
    `file:${optPath(m.consoleLog)}`,
    '-serial',
    `file:${optPath(m.resultsLog)}`,
    '-virtfs',
    'local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap',
  ];
  if (m.persistDir) {
    args.push(
      '-virtfs',
      `local,path=${optPath(m.persistDir)},mount_tag=berthpersist,security_model=none,multidevs=remap`,
    );
  }
  for (const p of m.hotplugPorts ?? []) {
    // chassis/slot: the port's hotplug slot numbers, unique in the machine.
    args.push(
      '-device',
      `pcie-root-port,id=${p.id},bus=pcie.0,addr=0x${p.slot.toString(16)},chassis=${p.slot},slot=${p.slot}`,
    );
  }
  for (const d of m.spareDrives ?? []) {
    args.push('-drive', `file=${optPath(d.file)},if=none,format=raw,id=${d.id}`);
  }
  if (m.qmpSocket) args.push('-qmp', `unix:${optPath(m.qmpSocket)},server=on,wait=off`);
  // Every controller first, then the namespaces: a shared namespace is attached to
  // each controller its subsystem has when it is created.
  for (const c of m.controllers) {
    let ctrl = `nvme,id=c-${c.id},serial=${c.serial},addr=0x${c.slot.toString(16)}`;
    if (c.subsystem) {
      args.push('-device', `nvme-subsys,id=s-${c.id},nqn=${c.id}`);
      ctrl += `,subsys=s-${c.id}`;
    } else if (c.joins) {
      ctrl += `,subsys=s-${c.joins}`;
    }
    args.push('-device', ctrl);
  }
  for (const c of m.controllers) {
    for (const ns of c.namespaces) {
      const drive = `d-${c.id}-${ns.nsid}`;
      args.push(
        '-drive',
        `file=${optPath(ns.file)},if=none,format=raw,id=${drive}${ns.readOnly ? ',readonly=on' : ''}`,
        '-device',
        `nvme-ns,drive=${drive},bus=c-${c.id},nsid=${ns.nsid}${ns.detached ? ',detached=on' : ''}`,
      );
    }
  }
  return args;
}

export interface QemuExit {
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
  /** The guest reported it was done but did not power off within the grace period: stopped by us. */
  stoppedAfterDone: boolean;
  /** QEMU's own messages (e.g. "aio failed" for writes to a read-only drive). */
  stderr: string;
  ms: number;
}

/** How long a guest that reported `done` gets to power off before it is stopped. */
const POWEROFF_GRACE_MS = 30_000;

/**
 * Runs QEMU until the guest powers off, killing it at `timeoutMs`. With
 * `resultsLog`, a guest that wrote its `done` record there but has not powered
 * off POWEROFF_GRACE_MS later is stopped too (its results are complete): a slow
 * power-off on a loaded machine must not hold the suite for the whole timeout.
 */
export function runQemu(
  qemu: string,
  args: string[],
  timeoutMs: number,
  resultsLog?: string,
): Promise<QemuExit> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn(qemu, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    let timedOut = false;
    let stoppedAfterDone = false;
    let doneAt: number | null = null;
    child.stderr.on('data', (c: Buffer) => {
      stderr += c.toString();
    });
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    const watch = resultsLog
      ? setInterval(() => {
          if (doneAt === null) {
            let text = '';
            try {
              text = readFileSync(resultsLog, 'utf8');
            } catch {
              return;
            }
            if (/"type":"done"/.test(text)) doneAt = Date.now();
          } else if (Date.now() - doneAt > POWEROFF_GRACE_MS) {
            stoppedAfterDone = true;
            child.kill('SIGKILL');
          }
        }, 1_000)
      : null;
    const stop = () => {
      clearTimeout(timer);
      if (watch) clearInterval(watch);
    };
    child.on('error', (err) => {
      stop();
      reject(err);
    });
    child.on('close', (code, signal) => {
      stop();
      resolve({ exitCode: code, signal, timedOut, stoppedAfterDone, stderr, ms: Date.now() - started });
    });
  });
}

/** A QMP connection: commands answered in order, events kept. */
export interface Qmp {
  command(execute: string, args?: Record<string, unknown>): Promise<unknown>;
  events: { event: string; data?: unknown; at: number }[];
  close(): void;
}

/**
 * Connects to QEMU's QMP socket (retrying while QEMU has not made it yet,
 * until `timeoutMs`) and leaves the capabilities negotiation done.
 */
export async function openQmp(path: string, timeoutMs = 30_000): Promise<Qmp> {
  const deadline = Date.now() + timeoutMs;
  let sock: Socket;
  for (;;) {
    try {
      sock = await new Promise<Socket>((resolve, reject) => {
        const c = createConnection(path);
        c.once('connect', () => resolve(c));
        c.once('error', reject);
      });
      break;
    } catch (err) {
      if (Date.now() > deadline) throw new Error(`cannot reach QMP at ${path}: ${(err as Error).message}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  const events: Qmp['events'] = [];
  const pending: { resolve(v: unknown): void; reject(e: Error): void }[] = [];
  let greeted: () => void = () => {};
  const greeting = new Promise<void>((r) => {
    greeted = r;
  });
  let buf = '';
  sock.setEncoding('utf8');
  sock.on('data', (chunk: string) => {
    buf += chunk;
    for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
      const line = buf.slice(0, i).trim();
      buf = buf.slice(i + 1);
      if (!line) continue;
      const m = JSON.parse(line) as {
        QMP?: unknown;
        event?: string;
        data?: unknown;
        return?: unknown;
        error?: { desc: string };
      };
      if (m.QMP) greeted();
      else if (m.event) events.push({ event: m.event, data: m.data, at: Date.now() });
      else if ('return' in m) pending.shift()?.resolve(m.return);
      else if (m.error) pending.shift()?.reject(new Error(`QMP: ${m.error.desc}`));
    }
  });
  sock.on('close', () => {
    for (const p of pending.splice(0)) p.reject(new Error('QMP connection closed'));
  });
  const command = (execute: string, args?: Record<string, unknown>) =>
    new Promise<unknown>((resolve, reject) => {
      pending.push({ resolve, reject });
      sock.write(`${JSON.stringify(args ? { execute, arguments: args } : { execute })}\n`);
    });
  await greeting;
  await command('qmp_capabilities');
  return { command, events, close: () => sock.destroy() };
}
