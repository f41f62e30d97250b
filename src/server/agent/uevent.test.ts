import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { formatEvent, header, parseMonitorArgs } from '../../sim/udevadm/main.js';
import { LineSplitter, parseUeventLine, ueventTarget } from './uevent.js';

describe('parseUeventLine', () => {
  it('reads the lines systemd 252 udevadm monitor --kernel prints (captured on Debian 12)', () => {
    expect(parseUeventLine('KERNEL[6269.712153] change   /devices/pci0000:00/0000:00:00.0 (pci)')).toEqual({
      source: 'KERNEL',
      at: 6269.712153,
      action: 'change',
      devpath: '/devices/pci0000:00/0000:00:00.0',
      subsystem: 'pci',
    });
    expect(
      parseUeventLine('KERNEL[12.000001] add      /devices/pci0000:00/0000:00:1c.0/0000:01:00.0 (pci)'),
    ).toMatchObject({
      action: 'add',
      devpath: '/devices/pci0000:00/0000:00:1c.0/0000:01:00.0',
      at: 12.000001,
    });
    // An action as long as the padding, and udevd's events (`UDEV  [`) too.
    expect(parseUeventLine('KERNEL[5.5] offline  /devices/system/cpu/cpu1 (cpu)')?.action).toBe('offline');
    expect(parseUeventLine('UDEV  [7.250000] unbind   /devices/pci0000:00/0000:00:04.0 (pci)')).toMatchObject(
      {
        source: 'UDEV',
        action: 'unbind',
      },
    );
    expect(
      parseUeventLine('KERNEL[1.000000] remove   /devices/virtual/block/loop0 (block)\r')?.subsystem,
    ).toBe('block');
  });

  it('is null for everything else udevadm prints, and for garbage', () => {
    for (const line of [
      'monitor will print the received events for:',
      'KERNEL - the kernel uevent',
      'UDEV - the event which udev sends out after rule processing',
      '',
      'ACTION=add',
      'DEVPATH=/devices/pci0000:00/0000:00:04.0',
      'SEQNUM=904',
      'KERNEL[6269.712153] explode  /devices/pci0000:00/0000:00:00.0 (pci)',
      'KERNEL[6269.712153] add      /sys/devices/pci0000:00/0000:00:00.0 (pci)',
      'KERNEL[6269.712153] add      /devices/../../etc (pci)',
      'KERNEL[x] add      /devices/pci0000:00/0000:00:00.0 (pci)',
      'KERNEL[1.0] add /devices/pci0000:00/0000:00:00.0',
      'kernel[1.0] add      /devices/pci0000:00/0000:00:00.0 (pci)',
    ]) {
      expect(parseUeventLine(line), line).toBeNull();
    }
  });
});

describe('ueventTarget', () => {
  it('names the deepest PCI function of the devpath: the function itself or its child’s parent', () => {
    const at = (devpath: string) => ueventTarget({ devpath });
    expect(at('/devices/pci0000:00/0000:00:04.0')).toEqual({ kind: 'function', address: '0000:00:04.0' });
    expect(at('/devices/pci0000:00/0000:00:1c.0/0000:01:00.0')).toEqual({
      kind: 'function',
      address: '0000:01:00.0',
    });
    expect(at('/devices/pci0000:00/0000:00:1c.0/0000:01:00.0/nvme/nvme3/nvme3n1')).toEqual({
      kind: 'function',
      address: '0000:01:00.0',
    });
    expect(at('/devices/pci0000:00/0000:00:03.0/virtio0/net/eth0')).toEqual({
      kind: 'function',
      address: '0000:00:03.0',
    });
    expect(at('/devices/virtual/nvme-subsystem/nvme-subsys2/nvme2n1')).toEqual({
      kind: 'nvme-subsystem',
      name: 'nvme-subsys2',
    });
    expect(at('/devices/virtual/block/loop0')).toBeNull();
    expect(at('/devices/system/cpu/cpu1')).toBeNull();
    // A VMD domain (five hex digits) is no address Berth takes.
    expect(at('/devices/pci10000:00/10000:00:02.0')).toBeNull();
  });
});

describe('LineSplitter', () => {
  it('gives complete lines only, across chunks, and drops an endless line', () => {
    const s = new LineSplitter(16);
    expect(s.push('KERNEL[1')).toEqual([]);
    expect(s.push('.0] a\nnext')).toEqual(['KERNEL[1.0] a']);
    expect(s.push('\n')).toEqual(['next']);
    expect(s.push('x'.repeat(40))).toEqual([]);
    expect(s.push('y'.repeat(10))).toEqual([]);
    expect(s.push('z\nok\n')).toEqual(['ok']);
  });
});

describe('the simulated udevadm prints what the parser reads', () => {
  const options = parseMonitorArgs(['--kernel', '--subsystem-match=pci', '-s', 'nvme']);
  if (typeof options === 'string') throw new Error(options);

  it('has udevadm’s header and its answers to bad arguments', () => {
    expect(header(options)).toBe(
      'monitor will print the received events for:\nKERNEL - the kernel uevent\n\n',
    );
    expect(parseMonitorArgs(['--bogus'])).toBe("monitor: unrecognized option '--bogus'");
    expect(parseMonitorArgs(['-s'])).toBe("monitor: option '-s' requires an argument");
  });

  it('round-trips every event, and filters by subsystem', () => {
    const segment = fc.stringMatching(/^[a-z0-9:._-]{1,12}$/);
    fc.assert(
      fc.property(
        fc.constantFrom('add', 'remove', 'change', 'move', 'online', 'offline', 'bind', 'unbind'),
        fc.array(segment, { minLength: 1, maxLength: 6 }),
        fc.constantFrom('pci', 'nvme', 'block', 'net'),
        fc.bigInt({ min: 0n, max: 10n ** 15n }),
        (action, parts, subsystem, ns) => {
          fc.pre(!parts.includes('..') && !parts.includes('.'));
          const devpath = `/devices/${parts.join('/')}`;
          const line = formatEvent({ action, devpath, subsystem }, options, ns);
          if (subsystem === 'block' || subsystem === 'net') {
            expect(line).toBe('');
            return;
          }
          const e = parseUeventLine(line.slice(0, -1));
          expect(e).toMatchObject({ source: 'KERNEL', action, devpath, subsystem });
          expect(e!.at).toBeCloseTo(Number(ns / 1000n) / 1e6, 6);
        },
      ),
    );
  });
});
