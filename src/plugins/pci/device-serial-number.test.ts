/**
 * The Device Serial Number reader, on configuration spaces the simulator
 * writes and on ones it would not (loops, pointers into the standard space,
 * truncated files), with the real lspci as the oracle where it is installed:
 * whatever serial lspci prints for a function, the reader returns, and where
 * lspci prints none (or walks into garbage) the reader returns none.
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { available, lspci as lspciTool } from '../../../test/helpers/prerequisites.js';
import { buildConfigSpace } from '../../sim/sysfs/config-space.js';
import { buildSysfs } from '../../sim/sysfs/index.js';
import { findDeviceSerialNumber, readDeviceSerialNumber } from './device-serial-number.js';

const haveLspci = available(lspciTool(), 'the lspci oracle for Device Serial Numbers');

const FIELDS = {
  vendorId: '10de',
  productId: '25b6',
  classCode: '030200',
  revision: 'a1',
  subsystemVendorId: '10de',
  subsystemProductId: '1234',
  enabled: true,
};

const reader = (b: Buffer) => (offset: number, length: number) =>
  offset + length <= b.length ? b.subarray(offset, offset + length) : null;

/** A config space with a PCIe capability and these extended capability headers (offset → [id, next]). */
function withChain(chain: [number, number, number][], dsn?: [number, number]): Buffer {
  const b = buildConfigSpace({ ...FIELDS, deviceSerialNumber: '0000000000000001' });
  b.fill(0, 0x100);
  for (const [at, id, next] of chain) b.writeUInt32LE(((next << 20) | (1 << 16) | id) >>> 0, at);
  if (dsn) {
    const at = chain.find(([, id]) => id === 3)![0];
    b.writeUInt32LE(dsn[0], at + 4);
    b.writeUInt32LE(dsn[1], at + 8);
  }
  return b;
}

describe('findDeviceSerialNumber', () => {
  it('reads the serial the simulator writes, upper dword first as lspci prints it', () => {
    const b = buildConfigSpace({ ...FIELDS, deviceSerialNumber: '00-1b-21-ff-fe-12-34-56' });
    expect(b.length).toBe(4096);
    expect(findDeviceSerialNumber(reader(b))).toBe('00-1b-21-ff-fe-12-34-56');
  });

  it('none in a conventional 256-byte config space, or a non-root reader’s 64 bytes', () => {
    expect(findDeviceSerialNumber(reader(buildConfigSpace(FIELDS)))).toBeNull();
    const full = buildConfigSpace({ ...FIELDS, deviceSerialNumber: '0123456789abcdef' });
    expect(findDeviceSerialNumber(reader(full.subarray(0, 64)))).toBeNull();
  });

  it('walks past other capabilities to the DSN', () => {
    const b = withChain(
      [
        [0x100, 0x0001, 0x150],
        [0x150, 0x000b, 0x2a0],
        [0x2a0, 0x0003, 0],
      ],
      [0x89abcdef, 0x01234567],
    );
    expect(findDeviceSerialNumber(reader(b))).toBe('01-23-45-67-89-ab-cd-ef');
  });

  it('garbage ends the walk with no serial: loops, pointers into the standard space, misaligned or past the end', () => {
    const cases: [string, [number, number, number][]][] = [
      ['a self loop', [[0x100, 0x0001, 0x100]]],
      [
        'a longer loop',
        [
          [0x100, 0x0001, 0x140],
          [0x140, 0x000b, 0x100],
        ],
      ],
      ['a pointer into the standard space', [[0x100, 0x0001, 0x040]]],
      ['a pointer past the end', [[0x100, 0x0001, 0xffe]]],
    ];
    for (const [what, chain] of cases) {
      expect(findDeviceSerialNumber(reader(withChain(chain))), what).toBeNull();
    }
    // A header whose reserved low bits are set still points at an aligned header, as lspci reads it.
    const misaligned = withChain([[0x100, 0x0001, 0x143]]);
    misaligned.writeUInt32LE((1 << 16) | 0x0003, 0x140);
    misaligned.writeUInt32LE(0x00000002, 0x144);
    expect(findDeviceSerialNumber(reader(misaligned))).toBe('00-00-00-00-00-00-00-02');
  });

  it('all ones (a function gone mid-read) and an all-zero serial are no serial', () => {
    const gone = Buffer.alloc(4096, 0xff);
    expect(findDeviceSerialNumber(reader(gone))).toBeNull();
    const zero = withChain([[0x100, 0x0003, 0]], [0, 0]);
    expect(findDeviceSerialNumber(reader(zero))).toBeNull();
    const ones = withChain([[0x100, 0x0003, 0]], [0xffffffff, 0xffffffff]);
    expect(findDeviceSerialNumber(reader(ones))).toBeNull();
  });

  it('a DSN header in the last dword, its body cut off: no serial', () => {
    const b = withChain([
      [0x100, 0x0001, 0xffc],
      [0xffc, 0x0003, 0],
    ]);
    expect(findDeviceSerialNumber(reader(b))).toBeNull();
  });
});

function lspciDsn(root: string, address: string): string | null {
  const out = execFileSync(
    'lspci',
    ['-A', 'linux-sysfs', '-O', `sysfs.path=${root}/bus/pci`, '-D', '-vv', '-s', address],
    { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] },
  );
  return /Device Serial Number ([0-9a-f]{2}(?:-[0-9a-f]{2}){7})/.exec(out)?.[1] ?? null;
}

describe.skipIf(!haveLspci)('readDeviceSerialNumber agrees with lspci -vv on simulated trees', () => {
  let root: string;
  beforeAll(async () => {
    root = await mkdtemp(path.join(os.tmpdir(), 'berth-dsn-'));
    await buildSysfs(root, {
      functions: [
        {
          address: '0000:65:00.0',
          ...FIELDS,
          driver: 'vfio-pci',
          deviceSerialNumber: 'a0-b1-c2-d3-e4-f5-06-17',
        },
        { address: '0000:65:00.1', vendorId: '10de', productId: '228b', classCode: '040300' },
        { address: '0000:66:00.0', ...FIELDS, deviceSerialNumber: '0123456789abcdef' },
      ],
      pfs: [
        {
          address: '0000:3b:00.0',
          vendorId: '8086',
          productId: '1572',
          driver: 'i40e',
          deviceSerialNumber: '00-1b-21-ff-ff-aa-bb-cc',
          totalVfs: 4,
          numVfs: 2,
          vf: { productId: '154c', driver: 'vfio-pci' },
        },
      ],
    });
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('the same serial, or none, for every function', () => {
    const expected: Record<string, string | null> = {
      '0000:65:00.0': 'a0-b1-c2-d3-e4-f5-06-17',
      '0000:65:00.1': null,
      '0000:66:00.0': '01-23-45-67-89-ab-cd-ef',
      '0000:3b:00.0': '00-1b-21-ff-ff-aa-bb-cc',
      '0000:3b:02.0': null,
    };
    for (const [address, dsn] of Object.entries(expected)) {
      expect(lspciDsn(root, address), `lspci on ${address}`).toBe(dsn);
      expect(readDeviceSerialNumber(root, address), address).toBe(dsn);
    }
  });

  it('configuration spaces the simulator would not write: the reader never finds a serial lspci does not print', async () => {
    const file = path.join(root, 'bus', 'pci', 'devices', '0000:66:00.0', 'config');
    const cases: Buffer[] = [
      withChain([[0x100, 0x0001, 0x100]]),
      withChain(
        [
          [0x100, 0x0001, 0x200],
          [0x200, 0x0003, 0x100],
        ],
        [0x55667788, 0x11223344],
      ),
      withChain([[0x100, 0x000b, 0x040]]),
      withChain([[0x100, 0x0003, 0]], [0x0d0c0b0a, 0x04030201]).subarray(0, 0x104),
    ];
    for (const [i, b] of cases.entries()) {
      await writeFile(file, b);
      expect(readDeviceSerialNumber(root, '0000:66:00.0'), `case ${i}`).toBe(lspciDsn(root, '0000:66:00.0'));
    }
  });

  it('an address that is not one is refused before any path is built; a missing function has none', () => {
    expect(() => readDeviceSerialNumber(root, '../../etc')).toThrow(/not a PCI address/);
    expect(readDeviceSerialNumber(root, '0000:99:00.0')).toBeNull();
  });
});
