/**
 * The simulated udevadm against the real one: the real `udevadm monitor
 * --kernel` on this machine, while the test makes the kernel send a uevent
 * (`change` written to a PCI function's `uevent`), must print the same header
 * and the same line as the simulator prints for that event, timestamp aside —
 * and its timestamp must be the monotonic clock the simulator prints.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { readdirSync, realpathSync, writeFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { available, UDEVADM, udevadm, writableUevent } from '../../../test/helpers/prerequisites.js';
import { parseUeventLine } from '../../server/agent/uevent.js';
import { formatEvent, header, parseMonitorArgs } from './main.js';

const ready =
  available(udevadm(), 'the udevadm format oracle') &&
  available(writableUevent(), 'the udevadm format oracle');

const children: ChildProcess[] = [];
afterEach(() => {
  for (const c of children.splice(0)) c.kill('SIGKILL');
});

/** Runs the real monitor; resolves its output once `done` says it holds what is wanted. */
function monitor(args: string[]) {
  const child = spawn(UDEVADM, ['monitor', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let out = '';
  const waiters: { test: (s: string) => boolean; resolve: (s: string) => void }[] = [];
  child.stdout!.setEncoding('utf8');
  child.stdout!.on('data', (c: string) => {
    out += c;
    for (const w of [...waiters]) {
      if (w.test(out)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(out);
      }
    }
  });
  return {
    until: (test: (s: string) => boolean) =>
      new Promise<string>((resolve, reject) => {
        if (test(out)) return resolve(out);
        waiters.push({ test, resolve });
        child.once('exit', (code) => reject(new Error(`udevadm exited ${code} before printing: ${out}`)));
      }),
  };
}

describe.skipIf(!ready)('the simulated udevadm prints what the real one prints', () => {
  const fn = ready ? readdirSync('/sys/bus/pci/devices').sort()[0]! : '';
  const devpath = ready ? realpathSync(`/sys/bus/pci/devices/${fn}`).replace(/^\/sys/, '') : '';
  const stamp = (s: string) => s.replace(/^KERNEL\[\d+\.\d{6}\]/m, 'KERNEL[T]');

  it('the header, and an event line byte for byte but the time, which is the monotonic clock', async () => {
    const args = ['--kernel', '--subsystem-match=pci'];
    const m = monitor(args);
    const opts = parseMonitorArgs(args);
    if (typeof opts === 'string') throw new Error(opts);
    const head = await m.until((s) => s.endsWith('\n\n'));
    expect(head).toBe(header(opts));
    const before = Number(process.hrtime.bigint()) / 1e9;
    writeFileSync(`/sys/bus/pci/devices/${fn}/uevent`, 'change');
    const out = await m.until((s) => s.includes(` ${devpath} (pci)\n`));
    const after = Number(process.hrtime.bigint()) / 1e9;
    const line = out.split('\n').find((l) => l.includes(` ${devpath} (pci)`))!;
    const sim = formatEvent({ action: 'change', devpath, subsystem: 'pci' }, opts, 0n).slice(0, -1);
    expect(stamp(line)).toBe(stamp(sim));
    const e = parseUeventLine(line)!;
    expect(e).toMatchObject({ source: 'KERNEL', action: 'change', devpath, subsystem: 'pci' });
    expect(e.at).toBeGreaterThanOrEqual(Math.floor(before * 1e6) / 1e6);
    expect(e.at).toBeLessThanOrEqual(after);
  }, 30_000);

  it('with --property: the same line, then KEY=value lines from ACTION to SEQNUM and an empty line', async () => {
    const args = ['--kernel', '--property', '--subsystem-match=pci'];
    const m = monitor(args);
    await m.until((s) => s.endsWith('\n\n'));
    writeFileSync(`/sys/bus/pci/devices/${fn}/uevent`, 'change');
    const out = await m.until((s) => /\nSEQNUM=\d+\n\n/.test(s));
    const block = out.slice(out.indexOf('KERNEL['));
    const lines = block.split('\n');
    const opts = parseMonitorArgs(args);
    if (typeof opts === 'string') throw new Error(opts);
    const sim = formatEvent({ action: 'change', devpath, subsystem: 'pci', seqnum: 1 }, opts, 0n).split('\n');
    expect(stamp(lines[0]!)).toBe(stamp(sim[0]!));
    expect(lines.slice(1, 4)).toEqual(sim.slice(1, 4));
    expect(lines.find((l) => l.startsWith('SEQNUM='))).toMatch(/^SEQNUM=\d+$/);
    expect(parseUeventLine(lines[1]!)).toBeNull();
  }, 30_000);
});
