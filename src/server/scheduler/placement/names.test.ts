import { describe, expect, it } from 'vitest';
import { newUuid } from '../../../identifiers.js';
import { bind, newDevice, setStatus, usedOutsideBerth, vanished } from '../domain/device-state.js';
import { facts, hostName, pciFacts } from '../domain/fixtures.support.js';
import { desiredProviders, type HostView } from './desired.js';
import {
  addressFromProviderName,
  placementResourceClass,
  placementTraits,
  providerNameFor,
  providerUuid,
  uuidV5,
} from './names.js';

const NOW = '2026-01-01T00:00:00.000Z';
const hosts = (connected = true) => new Map<string, HostView>([['h1', { name: hostName('h1'), connected }]]);
const opts = {
  nodename: (h: string) => h,
  standardTraits: new Set(['HW_PCI_ONE_TIME_USE']),
  ownsHost: () => true,
};

describe('Placement names', () => {
  it('derives provider uuids as RFC 9562 UUID v5 (the Python uuid5 vector) and stably per name', () => {
    expect(uuidV5('6ba7b810-9dad-11d1-80b4-00c04fd430c8', 'python.org')).toBe(
      '886313e1-3b8a-5372-9b90-0c9aee199e5d',
    );
    expect(providerUuid('h1_0000:3D:00.0')).toBe(providerUuid('h1_0000:3D:00.0'));
    expect(providerUuid('h1_0000:3D:00.0')).not.toBe(providerUuid('h2_0000:3D:00.0'));
  });

  it('names providers <node>_<ADDRESS> and reads the address back only from names of that node', () => {
    expect(providerNameFor('node-a', '0000:af:00.1')).toBe('node-a_0000:AF:00.1');
    expect(addressFromProviderName('node-a', 'node-a_0000:AF:00.1')).toBe('0000:af:00.1');
    expect(addressFromProviderName('node-a', 'node-b_0000:AF:00.1')).toBeNull();
    expect(addressFromProviderName('node-a', 'node-a_0000:AF:00.1_x')).toBeNull();
    expect(addressFromProviderName('node', 'node-a_0000:AF:00.1')).toBeNull();
  });

  it("gives NVMe devices Nova's CUSTOM_PCI_ class unless the device_spec named one", () => {
    expect(placementResourceClass(facts())).toBe('CUSTOM_PCI_144D_A808');
    expect(placementResourceClass(facts({ resourceClass: 'CUSTOM_FAST_DISK' }))).toBe('CUSTOM_FAST_DISK');
    expect(placementResourceClass(pciFacts())).toBe('CUSTOM_PCI_10DE_25B6');
  });

  it("maps Berth's own traits to Placement's, keeping only what Placement knows as standard", () => {
    const t = placementTraits(
      {
        traits: ['OWNER_BERTH', 'HW_ONE_TIME_USE', 'HW_NVME_CES', 'CUSTOM_X'],
        oneTimeUse: true,
        liveMigratable: true,
      },
      new Set(['HW_PCI_ONE_TIME_USE']),
    );
    expect(t).toEqual([
      'CUSTOM_HW_NVME_CES',
      'CUSTOM_HW_PCI_LIVE_MIGRATABLE',
      'CUSTOM_OWNER_BERTH',
      'CUSTOM_X',
      'HW_PCI_ONE_TIME_USE',
    ]);
  });
});

describe('desired providers', () => {
  it('reserves exactly the devices Berth would not hand out, and every device of a host it cannot reach', () => {
    const free = newDevice(hostName('h1'), facts({ index: 0 }), newUuid(), NOW);
    const bound = bind(newDevice(hostName('h1'), facts({ index: 1 }), newUuid(), NOW), {
      arqUuid: 'a',
      instanceUuid: 'i',
    });
    const off = setStatus(newDevice(hostName('h1'), facts({ index: 2 }), newUuid(), NOW), 'maintaining');
    const p = desiredProviders([free, bound, off], hosts(), opts);
    expect([...p.values()].map((x) => [x.name, x.total, x.reserved])).toEqual([
      ['h1_0000:10:00.0', 1, 0],
      ['h1_0000:11:00.0', 1, 1],
      ['h1_0000:12:00.0', 1, 1],
    ]);
    const down = desiredProviders([free], hosts(false), opts);
    expect(down.get('h1_0000:10:00.0')?.reserved).toBe(1);
    expect(down.get('h1_0000:10:00.0')?.devices[0]?.heldBecause).toMatch(/not connected/);
  });

  it('holds a device used outside Berth until it is cleaned', () => {
    const d = usedOutsideBerth(newDevice(hostName('h1'), facts(), newUuid(), NOW), 'job', 'Nova used it');
    expect(d.deviceState).toBe('pending_cleaning');
    expect(desiredProviders([d], hosts(), opts).get('h1_0000:10:00.0')?.reserved).toBe(1);
    const gpu = usedOutsideBerth(
      newDevice(hostName('h1'), pciFacts(), newUuid(), NOW),
      'job',
      'Nova used it',
    );
    expect(gpu.deviceState).toBe('error');
    expect(gpu.errorReason).toMatch(/Nova used it, and driver pci cannot clean it/);
  });

  it('counts VFs on their PF, drops vanished devices and Neutron ports, and refuses mixed VFs', () => {
    const vf = (i: number, over = {}) =>
      newDevice(
        hostName('h1'),
        pciFacts({ address: `0000:3b:02.${i}`, functionKind: 'VF', physfn: '0000:3b:00.0', ...over }),
        newUuid(),
        NOW,
      );
    const gone = vanished(newDevice(hostName('h1'), facts({ index: 5 }), newUuid(), NOW), 'unplugged');
    const port = newDevice(
      hostName('h1'),
      pciFacts({ index: 6, attributes: { physical_network: 'physnet1' } }),
      newUuid(),
      NOW,
    );
    const p = desiredProviders([vf(0), vf(1), vf(2), gone, port], hosts(), opts);
    expect([...p.keys()]).toEqual(['h1_0000:3B:00.0']);
    expect(p.get('h1_0000:3B:00.0')).toMatchObject({ total: 3, reserved: 0, problem: '' });
    const mixed = desiredProviders([vf(0), vf(1, { resourceClass: 'CUSTOM_OTHER' })], hosts(), opts);
    expect(mixed.get('h1_0000:3B:00.0')).toMatchObject({ total: 2, reserved: 2 });
    expect(mixed.get('h1_0000:3B:00.0')?.problem).toMatch(/different resource classes/);
  });

  it('only holds a device whose resource class or trait Placement would refuse, naming it (never sent in a URL)', () => {
    const badClass = newDevice(
      hostName('h1'),
      facts({ index: 0, resourceClass: 'CUSTOM_A/../B' }),
      newUuid(),
      NOW,
    );
    const badTrait = newDevice(hostName('h1'), facts({ index: 1, traits: ['CUSTOM_X/Y'] }), newUuid(), NOW);
    const p = desiredProviders([badClass, badTrait], hosts(), opts);
    expect(p.get('h1_0000:10:00.0')).toMatchObject({ total: 1, reserved: 1 });
    expect(p.get('h1_0000:10:00.0')?.problem).toMatch(
      /resource class "CUSTOM_A\/\.\.\/B", not a valid Placement name/,
    );
    expect(p.get('h1_0000:11:00.0')).toMatchObject({ total: 1, reserved: 1 });
    expect(p.get('h1_0000:11:00.0')?.problem).toMatch(/trait "CUSTOM_X\/Y", not a valid Placement name/);
  });
});
