import { describe, expect, it } from 'vitest';
import { makeFunction, makeLookup } from './fixtures.support.js';
import { matchDevice } from './match.js';
import { parseDeviceSpecs } from './parse.js';

const parse = (raw: unknown) => parseDeviceSpecs(raw, { section: 'pci', cleanupKeys: false });

// A host: an SR-IOV PF with two VFs enabled, a second PF with none, a plain GPU,
// and a VF-less NIC function in another domain.
const PF = makeFunction('0000:3b:00.0', {
  sriovTotalVfs: 8,
  sriovNumVfs: 2,
  virtfns: ['0000:3b:02.0', '0000:3b:02.1'],
  netdevs: ['enp59s0f0'],
});
const VF0 = makeFunction('0000:3b:02.0', { productId: '154c', physfn: PF.address, netdevs: ['enp59s0f0v0'] });
const VF1 = makeFunction('0000:3b:02.1', { productId: '154c', physfn: PF.address });
const PF_IDLE = makeFunction('0000:3b:00.1', { sriovTotalVfs: 8, netdevs: ['enp59s0f1'] });
const GPU = makeFunction('0000:5e:00.0', { vendorId: '10de', productId: '25b6', classCode: '030200' });
const NIC = makeFunction('0001:0a:00.3', { vendorId: '15b3', productId: '1017', netdevs: ['eth9'] });
// A VF whose physfn is the plain NIC (not a PF per sriov_totalvfs): must not inherit its address.
const ODD_VF = makeFunction('0001:0b:00.0', { vendorId: '15b3', productId: '1018', physfn: NIC.address });
const ALL = [PF, VF0, VF1, PF_IDLE, GPU, NIC, ODD_VF];
const lookup = makeLookup(ALL);

/** The addresses of the functions the spec list matches. */
function matched(raw: unknown): string[] {
  const entries = parse(raw);
  return ALL.filter((fn) => matchDevice(entries, fn, lookup) !== null).map((fn) => fn.address);
}

describe('matchDevice', () => {
  it.each<[string, unknown, string[]]>([
    ['no entries', [], []],
    ['empty entry matches everything', [{}], ALL.map((fn) => fn.address)],
    ['vendor any, product given', [{ product_id: '154c' }], [VF0.address, VF1.address]],
    ['vendor given, product any', [{ vendor_id: '10de' }], [GPU.address]],
    ['vendor "*" product "*"', [{ vendor_id: '*', product_id: '*', address: '5e:00.0' }], [GPU.address]],
    ['vendor and product', [{ vendor_id: '8086', product_id: '1572' }], [PF.address, PF_IDLE.address]],
    ['upper-case ids normalise', [{ vendor_id: '10DE', product_id: '0x25B6' }], [GPU.address]],
    // globs
    ['full exact glob', [{ address: '0000:5e:00.0' }], [GPU.address]],
    ['single field is the slot', [{ address: '02' }], [VF0.address, VF1.address]],
    ['single field is not the bus', [{ address: '0a' }], []],
    ['bus:slot', [{ address: '5e:00' }], [GPU.address]],
    ['bus:slot.function', [{ address: '3b:00.1' }], [PF_IDLE.address]],
    ['wildcard domain', [{ address: '*:0a:00.3' }], [NIC.address]],
    ['empty domain and function', [{ address: ':0a:00.' }], [NIC.address]],
    ['wildcard function', [{ address: '0000:3b:02.*' }], [VF0.address, VF1.address]],
    ['domain only', [{ address: '0001::.' }], [NIC.address, ODD_VF.address]],
    ['function only', [{ address: '.3' }], [NIC.address]],
    // regexes
    [
      'regex prefix-anchored',
      [{ address: { bus: '3' } }],
      [PF.address, VF0.address, VF1.address, PF_IDLE.address],
    ],
    ['regex not found mid-field', [{ address: { bus: 'b' } }], []],
    ['regex several fields', [{ address: { domain: '0001', function: '[0-2]' } }], [ODD_VF.address]],
    ['regex with $', [{ address: { slot: '0$' } }], []],
    // PF address covers its VFs
    [
      'exact PF address matches the PF and its VFs',
      [{ address: '0000:3b:00.0' }],
      [PF.address, VF0.address, VF1.address],
    ],
    [
      'PF address + VF product id matches only the VFs',
      [{ address: '0000:3b:00.0', product_id: '154c' }],
      [VF0.address, VF1.address],
    ],
    [
      'all-hex regex naming the PF matches its VFs',
      [{ address: { domain: '0000', bus: '3b', slot: '00', function: '0' } }],
      [PF.address, VF0.address, VF1.address],
    ],
    ['wildcard glob covering the PF does not pull in VFs', [{ address: '3b:00.0' }], [PF.address]],
    [
      'exact non-PF address does not match functions naming it as physfn',
      [{ address: '0001:0a:00.3' }],
      [NIC.address],
    ],
    ['exact VF address matches that VF only', [{ address: '0000:3b:02.1' }], [VF1.address]],
    // devname
    [
      'devname of a PF matches the PF and its VFs',
      [{ devname: 'enp59s0f0' }],
      [PF.address, VF0.address, VF1.address],
    ],
    ['devname of a VF matches the VF', [{ devname: 'enp59s0f0v0' }], [VF0.address]],
    ['devname of a plain function', [{ devname: 'eth9' }], [NIC.address]],
    ['devname of a PF without VFs', [{ devname: 'enp59s0f1' }], [PF_IDLE.address]],
    ['unresolvable devname matches nothing', [{ devname: 'eth404' }], []],
    ['devname still checks ids', [{ devname: 'enp59s0f0', product_id: '154c' }], [VF0.address, VF1.address]],
  ])('%s', (_name, raw, expected) => {
    expect(matched(raw)).toEqual(expected);
  });

  it('returns the first matching entry', () => {
    const entries = parse([
      { vendor_id: '10de', managed: false },
      { address: '0000:5e:00.0', live_migratable: true },
      {},
    ]);
    expect(matchDevice(entries, GPU, lookup)).toBe(entries[0]);
    expect(matchDevice(entries, NIC, lookup)).toBe(entries[2]);
    expect(matchDevice(entries.slice(1), GPU, lookup)).toBe(entries[1]);
    expect(matchDevice(entries.slice(0, 2), NIC, lookup)).toBeNull();
  });

  it('finds a PF that appears after parsing (the lookup is asked at match time)', () => {
    const entries = parse([{ address: '0000:3b:00.0' }]);
    const withoutPf = makeLookup([VF0]);
    expect(matchDevice(entries, VF0, withoutPf)).toBeNull();
    expect(matchDevice(entries, VF0, lookup)).toBe(entries[0]);
  });

  it('does not treat a netdev resolving to garbage as an address', () => {
    const entries = parse([{ devname: 'weird' }]);
    const bad = { get: lookup.get, netdevAddress: () => '../../etc' };
    expect(matchDevice(entries, PF, bad)).toBeNull();
    const upper = { get: lookup.get, netdevAddress: () => '0000:5E:00.0' };
    expect(matchDevice(entries, GPU, upper)).toBe(entries[0]);
  });
});
