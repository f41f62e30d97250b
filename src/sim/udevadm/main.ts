/**
 * udevadm-sim: a stand-in for systemd 252's `udevadm monitor` (Debian 12's
 * /bin/udevadm) over a simulated host. The sysfs builder appends the kernel's
 * events of every change to a log (one JSON line each, src/sim/sysfs/builder.ts);
 * this program prints those appended after it started, as the real one prints
 * what the kernel sends on its netlink socket after it bound it:
 *
 *     monitor will print the received events for:
 *     KERNEL - the kernel uevent
 *
 *     KERNEL[6269.712153] add      /devices/pci0000:00/0000:3b:00.0 (pci)
 *
 * the time being CLOCK_MONOTONIC seconds at receipt, the action padded to 8,
 * `--subsystem-match` filters, `--property` adds KEY=value lines and an empty
 * line. The log is named by BERTH_UDEVADM_SIM_LOG. Command-line mistakes are
 * answered as udevadm answers them (exit 1). It exits when its stdin, a pipe,
 * closes (the agent that ran it is gone), or on SIGTERM.
 */
import { closeSync, fstatSync, openSync, readSync, realpathSync, watch } from 'node:fs';
import { fileURLToPath } from 'node:url';

interface Options {
  kernel: boolean;
  udev: boolean;
  property: boolean;
  subsystems: string[];
}

/** Parses `monitor`'s options; a string is the error udevadm would print. */
export function parseMonitorArgs(argv: readonly string[]): Options | string {
  const o: Options = { kernel: false, udev: false, property: false, subsystems: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '-k' || a === '--kernel') o.kernel = true;
    else if (a === '-u' || a === '--udev') o.udev = true;
    else if (a === '-p' || a === '--property' || a === '-e' || a === '--environment') o.property = true;
    else if (a.startsWith('--subsystem-match=')) o.subsystems.push(a.slice('--subsystem-match='.length));
    else if (a === '-s' || a === '--subsystem-match') {
      const v = argv[++i];
      if (v === undefined) return `monitor: option '${a}' requires an argument`;
      o.subsystems.push(v);
    } else if (a.startsWith('-s') && a.length > 2) o.subsystems.push(a.slice(2));
    else if (a.startsWith('--tag-match=') || a === '-t') {
      if (a === '-t') i++;
      // Tags are udevd's: kernel events carry none.
    } else if (a.startsWith('--')) return `monitor: unrecognized option '${a}'`;
    else if (a.startsWith('-')) return `monitor: invalid option -- '${a.slice(1, 2)}'`;
    else return `monitor: unexpected argument '${a}'`;
  }
  // Neither asked for: both, as udevadm does.
  if (!o.kernel && !o.udev) {
    o.kernel = true;
    o.udev = true;
  }
  return o;
}

export function header(o: Options): string {
  return [
    'monitor will print the received events for:',
    ...(o.udev ? ['UDEV - the event which udev sends out after rule processing'] : []),
    ...(o.kernel ? ['KERNEL - the kernel uevent'] : []),
    '',
    '',
  ].join('\n');
}

interface LoggedEvent {
  action: string;
  devpath: string;
  subsystem: string;
  seqnum?: number;
  env?: Record<string, string>;
}

/** One logged event as `udevadm monitor` prints it (`%-6s[%lu.%06lu] %-8s %s (%s)`), or '' when filtered out. */
export function formatEvent(e: LoggedEvent, o: Options, monotonicNs: bigint): string {
  if (!o.kernel) return '';
  // `subsystem[/devtype]`: the devtype part matches nothing the simulator logs, so only the subsystem counts.
  if (o.subsystems.length > 0 && !o.subsystems.some((s) => s.split('/')[0] === e.subsystem)) return '';
  const sec = monotonicNs / 1_000_000_000n;
  const usec = (monotonicNs % 1_000_000_000n) / 1000n;
  let out = `KERNEL[${sec}.${usec.toString().padStart(6, '0')}] ${e.action.padEnd(8)} ${e.devpath} (${e.subsystem})\n`;
  if (o.property) {
    const props: [string, string][] = [
      ['ACTION', e.action],
      ['DEVPATH', e.devpath],
      ['SUBSYSTEM', e.subsystem],
      ...Object.entries(e.env ?? {}),
      ['SEQNUM', String(e.seqnum ?? 0)],
    ];
    out += `${props.map(([k, v]) => `${k}=${v}`).join('\n')}\n\n`;
  }
  return out;
}

/** Follows the log from its current end, calling `line` with every complete line appended. */
function follow(file: string, line: (text: string) => void): void {
  const fd = openSync(file, 'a+');
  let offset = fstatSync(fd).size;
  let tail = '';
  const buf = Buffer.alloc(64 * 1024);
  const drain = () => {
    for (;;) {
      const n = readSync(fd, buf, 0, buf.length, offset);
      if (n <= 0) break;
      offset += n;
      const lines = (tail + buf.toString('utf8', 0, n)).split('\n');
      tail = lines.pop()!;
      for (const l of lines) if (l.trim() !== '') line(l);
    }
  };
  // inotify: nothing runs between changes.
  watch(file, { persistent: true }, () => drain());
  drain();
  process.on('exit', () => closeSync(fd));
}

export function main(argv: readonly string[]): void {
  const [verb, ...rest] = argv;
  if (verb === '--version' || verb === '-V') {
    process.stdout.write('252\n');
    return;
  }
  if (verb !== 'monitor') {
    process.stderr.write(
      verb === undefined ? 'udevadm: missing or unknown command\n' : `Unknown command verb ${verb}.\n`,
    );
    process.exitCode = 1;
    return;
  }
  const o = parseMonitorArgs(rest);
  if (typeof o === 'string') {
    process.stderr.write(`${o}\n`);
    process.exitCode = 1;
    return;
  }
  const log = process.env.BERTH_UDEVADM_SIM_LOG;
  if (!log) {
    process.stderr.write('udevadm-sim: BERTH_UDEVADM_SIM_LOG names no event log\n');
    process.exitCode = 1;
    return;
  }
  process.stdout.on('error', () => process.exit(0));
  // The netlink socket is bound before the header: so is the log's end read here.
  follow(log, (text) => {
    let e: LoggedEvent;
    try {
      e = JSON.parse(text) as LoggedEvent;
    } catch {
      return;
    }
    const out = formatEvent(e, o, process.hrtime.bigint());
    if (out) process.stdout.write(out);
  });
  process.stdout.write(header(o));
  // A pipe (or socket) on stdin is the parent's: when it closes the parent is gone, and so is this.
  const stdin = fstatSync(0);
  if (stdin.isFIFO() || stdin.isSocket()) {
    process.stdin.on('end', () => process.exit(0));
    process.stdin.on('error', () => process.exit(0));
    process.stdin.resume();
  }
  process.on('SIGTERM', () => process.exit(0));
}

function isMain(): boolean {
  try {
    return realpathSync(process.argv[1] ?? '') === realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
}

if (isMain()) main(process.argv.slice(2));
