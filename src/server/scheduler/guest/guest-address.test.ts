import { describe, expect, it } from 'vitest';
import { isBerthError } from '../../../errors.js';
import {
  assignGuestAddress,
  formatPciAddress,
  guestAddressForSlot,
  parsePciAddress,
  planGuestAddresses,
  type TakenAddress,
} from './guest-address.js';

const slotOf = (a: { slot: string }) => Number.parseInt(a.slot, 16);

describe('assignGuestAddress', () => {
  it('starts at slot 0x10 on domain 0000 bus 00, function 0', () => {
    expect(assignGuestAddress([])).toEqual({ domain: '0000', bus: '00', slot: '10', function: '0' });
  });

  it('skips slots taken by NICs, disks and other hostdevs, and ignores other buses', () => {
    const taken: TakenAddress[] = [
      { owner: 'nics[0].address', address: '0000:00:10.0' },
      { owner: 'disks[0].address', address: '0000:00:11.3' },
      { owner: 'hostdev a', address: '0000:00:13.0' },
      { owner: 'nics[1].address', address: '0000:01:12.0' },
      { owner: 'nics[2].address', address: '0001:00:12.0' },
    ];
    expect(formatPciAddress(assignGuestAddress(taken))).toBe('0000:00:12.0');
  });

  it('is deterministic: the same inputs give the same slot', () => {
    const taken = [{ owner: 'x', address: '0000:00:10.0' }];
    expect(assignGuestAddress(taken)).toEqual(assignGuestAddress([...taken]));
  });

  it('fails with RESOURCE_EXHAUSTED once slots 0x10-0x1f are all taken', () => {
    const taken = Array.from({ length: 16 }, (_, i) => ({
      owner: `hostdev ${i}`,
      address: formatPciAddress(guestAddressForSlot(0x10 + i)),
    }));
    try {
      assignGuestAddress(taken);
      expect.unreachable();
    } catch (e) {
      expect(isBerthError(e) && e.code).toBe('RESOURCE_EXHAUSTED');
      expect((e as Error).message).toContain('full');
    }
    // One free slot left: the last one is used, never one above 0x1f.
    expect(assignGuestAddress(taken.slice(1)).slot).toBe('10');
    expect(assignGuestAddress(taken.slice(0, 15)).slot).toBe('1f');
  });

  it('rejects a malformed taken address naming its owner', () => {
    expect(() => assignGuestAddress([{ owner: 'nics[0].address', address: '00:03.0' }])).toThrow(
      /nics\[0\]\.address: "00:03.0"/,
    );
  });
});

describe('planGuestAddresses', () => {
  const nics = [{ owner: 'nics[0].address', address: '0000:00:11.0' }];

  it('keeps stored addresses and gives new devices the lowest free slots in order', () => {
    const plan = planGuestAddresses(
      [
        { id: 'a', guest: '0000:00:12.0' },
        { id: 'b', guest: null },
        { id: 'c', guest: null },
      ],
      nics,
    );
    expect(formatPciAddress(plan.get('a')!)).toBe('0000:00:12.0');
    expect(formatPciAddress(plan.get('b')!)).toBe('0000:00:10.0');
    expect(formatPciAddress(plan.get('c')!)).toBe('0000:00:13.0');
  });

  it('is stable: re-planning with the stored result changes nothing, and a new device does not move others', () => {
    const first = planGuestAddresses(
      [
        { id: 'a', guest: null },
        { id: 'b', guest: null },
      ],
      nics,
    );
    const stored = [...first].map(([id, a]) => ({ id, guest: formatPciAddress(a) }));
    const again = planGuestAddresses(stored, nics);
    expect(again).toEqual(first);
    const withNew = planGuestAddresses([...stored, { id: 'c', guest: null }], nics);
    expect(withNew.get('a')).toEqual(first.get('a'));
    expect(withNew.get('b')).toEqual(first.get('b'));
    const all = [...withNew.values()].map(slotOf);
    expect(new Set(all).size).toBe(3);
    expect(all).not.toContain(0x11);
  });

  it('never puts two devices on one slot (16 devices fill 0x10-0x1f exactly, the 17th fails)', () => {
    const ids = Array.from({ length: 16 }, (_, i) => ({ id: `d${i}`, guest: null }));
    const plan = planGuestAddresses(ids, []);
    expect([...plan.values()].map(slotOf).sort((x, y) => x - y)).toEqual(
      Array.from({ length: 16 }, (_, i) => 0x10 + i),
    );
    expect(() => planGuestAddresses([...ids, { id: 'd16', guest: null }], [])).toThrow(/full/);
  });

  it('refuses stored state where a hostdev shares a slot with a NIC, naming both', () => {
    try {
      planGuestAddresses([{ id: 'a', guest: '0000:00:11.0' }], nics);
      expect.unreachable();
    } catch (e) {
      expect(isBerthError(e) && e.code).toBe('FAILED_PRECONDITION');
      expect((e as Error).message).toBe(
        'hostdev a at 0000:00:11.0 is on the same guest slot as nics[0].address',
      );
    }
  });

  it('parsePciAddress names the field and the value', () => {
    expect(() => parsePciAddress('guest', '0000:00:1G.0')).toThrow(
      'guest: "0000:00:1G.0" is not a PCI address',
    );
  });
});
