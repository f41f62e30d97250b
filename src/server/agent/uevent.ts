/**
 * The kernel's uevents as `udevadm monitor --kernel` prints them, one line
 * per event (systemd's udevadm-monitor.c: `"%-6s[%lu.%06lu] %-8s %s (%s)\n"`,
 * source, CLOCK_MONOTONIC seconds of receipt, action, devpath, subsystem):
 *
 *     monitor will print the received events for:
 *     KERNEL - the kernel uevent
 *
 *     KERNEL[6269.712153] change   /devices/pci0000:00/0000:00:00.0 (pci)
 *     KERNEL[6269.712193] add      /devices/pci0000:00/0000:00:1c.0/0000:01:00.0/nvme/nvme0 (nvme)
 *
 * The header ends with an empty line, printed once the netlink socket is
 * bound: from then on no event is lost. With `--property` each event line is
 * followed by KEY=value lines and an empty line; those are not events.
 * Pure functions here; the process that prints them is run by hotplug.ts.
 */
import { isPciAddress } from '../../identifiers.js';

export interface Uevent {
  /** KERNEL (the kernel's netlink group) or UDEV (after udevd's rules). */
  source: 'KERNEL' | 'UDEV';
  /** Seconds (CLOCK_MONOTONIC) when udevadm received it. */
  at: number;
  /** add, remove, change, move, online, offline, bind, unbind. */
  action: string;
  /** The device's path under /sys, starting with /devices/. */
  devpath: string;
  /** pci, nvme, block, …; `n/a` when the device has none. */
  subsystem: string;
}

const EVENT_LINE = /^(KERNEL|UDEV) *\[(\d+)\.(\d{1,9})\] (\S+) +(\/\S.*?) \(([^()\s]*)\)$/;
const ACTIONS = new Set(['add', 'remove', 'change', 'move', 'online', 'offline', 'bind', 'unbind']);

/**
 * One line of `udevadm monitor` output: an event, or null for anything else
 * (the header, the empty line ending it, a property line, garbage). An action
 * udevadm does not print, or a devpath outside /devices, is not an event.
 */
export function parseUeventLine(line: string): Uevent | null {
  const m = EVENT_LINE.exec(line.endsWith('\r') ? line.slice(0, -1) : line);
  if (!m) return null;
  const [, source, sec, frac, action, devpath, subsystem] = m;
  if (!ACTIONS.has(action!) || !devpath!.startsWith('/devices/') || devpath!.includes('/../')) return null;
  return {
    source: source as Uevent['source'],
    at: Number(sec) + Number(`0.${frac}`),
    action: action!,
    devpath: devpath!,
    subsystem: subsystem!,
  };
}

/** What an event is about, as far as PCI functions go. */
export type UeventTarget =
  /** The deepest PCI function in the devpath: the function itself, or a child of it (nvme0, nvme0n1, a netdev). */
  | { kind: 'function'; address: string }
  /** A multipath namespace head of an NVM subsystem (no PCI function in its path): every controller of it. */
  | { kind: 'nvme-subsystem'; name: string };

const NVME_SUBSYS_RE = /^nvme-subsys\d+$/;

/**
 * The PCI function an event concerns, or null when none does (a loop device,
 * a virtual network interface, a CPU). Behind bridges the devpath names every
 * bridge on the way (`/devices/pci0000:00/0000:00:1c.0/0000:01:00.0`): the
 * last PCI address in it is the device's own, or its parent function's for a
 * child device (an NVMe controller, a namespace, a netdev).
 */
export function ueventTarget(e: Pick<Uevent, 'devpath'>): UeventTarget | null {
  const parts = e.devpath.split('/');
  for (let i = parts.length - 1; i >= 0; i--) {
    if (isPciAddress(parts[i])) return { kind: 'function', address: parts[i]! };
  }
  const s = parts.indexOf('nvme-subsystem');
  if (s >= 0 && NVME_SUBSYS_RE.test(parts[s + 1] ?? ''))
    return { kind: 'nvme-subsystem', name: parts[s + 1]! };
  return null;
}

/**
 * Splits a stream of output into lines: `push` a chunk, get the complete
 * lines; the tail waits for its newline. A line longer than `maxLine` (no
 * uevent line is) is dropped rather than kept growing.
 */
export class LineSplitter {
  private tail = '';
  private dropping = false;

  constructor(private readonly maxLine = 8192) {}

  push(chunk: string): string[] {
    const text = this.tail + chunk;
    const lines = text.split('\n');
    this.tail = lines.pop()!;
    if (this.dropping && lines.length > 0) {
      // The first complete "line" is the end of the one being dropped.
      lines.shift();
      this.dropping = false;
    }
    if (this.tail.length > this.maxLine) {
      this.tail = '';
      this.dropping = true;
    }
    return lines.filter((l) => l.length <= this.maxLine);
  }
}
