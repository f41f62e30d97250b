import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { available, virtXmlValidate } from '../../../../test/helpers/prerequisites.js';
import { isBerthError } from '../../../errors.js';
import type { Arq } from '../domain/arq.js';
import { type DeviceRecord, newDevice } from '../domain/device-state.js';
import { hostName, pci, pciFacts, testUuid } from '../domain/fixtures.support.js';
import { guestAddressForSlot, parsePciAddress } from './guest-address.js';
import {
  aliasFor,
  buildHostdevs,
  type HostdevInput,
  hostdevFromBinding,
  renderHostdev,
  renderInstance,
  renderInstanceXml,
  USER_ALIAS,
  uniqueAliases,
} from './hostdev-xml.js';
import { validateDomains, wrapInDomain } from './virt-xml.js';

const ARQ = testUuid('2f59e9d8-5a17-4607-83c5-e2ff83cce2c7');

const input = (i: number, opts: Partial<HostdevInput> = {}): HostdevInput => ({
  arqUuid: `00000000-0000-4000-8000-${i.toString(16).padStart(12, '0')}`,
  deviceUuid: `dev-${i}`,
  source: parsePciAddress('source', `0000:${(0x3b + i).toString(16).padStart(2, '0')}:02.0`),
  guest: guestAddressForSlot(0x10 + i),
  managed: true,
  tag: '',
  ...opts,
});

describe('renderHostdev', () => {
  it("renders exactly libvirt's form", () => {
    const xml = renderHostdev({
      arqUuid: ARQ,
      deviceUuid: 'd',
      source: parsePciAddress('s', '0000:3b:02.0'),
      guest: guestAddressForSlot(0x10),
      managed: true,
      tag: 'gpu0',
    });
    expect(xml).toBe(
      [
        "<hostdev mode='subsystem' type='pci' managed='yes'>",
        "  <driver name='vfio'/>",
        '  <source>',
        "    <address domain='0x0000' bus='0x3b' slot='0x02' function='0x0'/>",
        '  </source>',
        "  <alias name='ua-gpu0'/>",
        "  <address type='pci' domain='0x0000' bus='0x00' slot='0x10' function='0x0'/>",
        '</hostdev>',
      ].join('\n'),
    );
  });

  it("says managed='no' for a device the host configured unmanaged", () => {
    expect(renderHostdev(input(0, { managed: false }))).toMatch(
      /^<hostdev mode='subsystem' type='pci' managed='no'>/,
    );
  });

  it('uses the ARQ uuid as the alias of an untagged device', () => {
    expect(renderHostdev(input(0, { arqUuid: ARQ }))).toContain(`<alias name='ua-${ARQ}'/>`);
  });

  it('refuses addresses that are not lower-case hex of the right width, naming the field', () => {
    expect(() =>
      renderHostdev(input(0, { source: { domain: '0000', bus: "3b'", slot: '02', function: '0' } })),
    ).toThrow(/source\.bus: "3b'"/);
    expect(() =>
      renderHostdev(input(0, { guest: { domain: '0000', bus: '00', slot: '20', function: '0' } })),
    ).toThrow(/guest\.slot/);
    expect(() =>
      renderHostdev(input(0, { guest: { domain: '0000', bus: '00', slot: '10', function: '8' } })),
    ).toThrow(/guest\.function/);
  });

  it('refuses an alias override outside the ua- form', () => {
    expect(() => renderHostdev(input(0, { alias: "ua-x'/><evil/>" }))).toThrow(/alias/);
  });
});

describe('aliases', () => {
  it('keep safe tags as they are and make every other tag safe and distinct', () => {
    expect(aliasFor({ tag: 'gpu_0-a', arqUuid: ARQ })).toBe('ua-gpu_0-a');
    const a = aliasFor({ tag: 'db.1', arqUuid: ARQ });
    const b = aliasFor({ tag: 'db:1', arqUuid: ARQ });
    expect(a).toMatch(/^ua-db_1-[0-9a-f]{8}$/);
    expect(b).toMatch(/^ua-db_1-[0-9a-f]{8}$/);
    expect(a).not.toBe(b);
    for (const tag of ["<x y='1'>&\"", 'ünïcödé 🚀', ' ', 'a b\tc\n']) {
      expect(aliasFor({ tag, arqUuid: ARQ })).toMatch(USER_ALIAS);
    }
  });

  it('are unique within the instance even when a PCI and an NVMe device share a tag; the first keeps ua-<tag>', () => {
    const aliases = uniqueAliases([
      { tag: 'fast', arqUuid: 'a' },
      { tag: 'fast', arqUuid: 'b' },
      { tag: '', arqUuid: 'fast' },
    ]);
    expect(aliases[0]).toBe('ua-fast');
    expect(new Set(aliases).size).toBe(3);
    for (const a of aliases) expect(a).toMatch(USER_ALIAS);
    // Stable when more devices are added after them.
    expect(
      uniqueAliases([
        { tag: 'fast', arqUuid: 'a' },
        { tag: 'fast', arqUuid: 'b' },
        { tag: 'z', arqUuid: 'c' },
      ]).slice(0, 2),
    ).toEqual(aliases.slice(0, 2));
  });
});

describe('buildHostdevs / renderInstance', () => {
  it('returns Hostdev-shaped data matching the XML', () => {
    const { xml, hostdevs } = renderInstance([input(0, { tag: 'gpu0' }), input(1, { managed: false })]);
    expect(hostdevs).toHaveLength(2);
    expect(hostdevs[0]).toMatchObject({ alias: 'ua-gpu0', tag: 'gpu0', managed: true, deviceUuid: 'dev-0' });
    expect(hostdevs[0]!.guest).toEqual({ domain: '0000', bus: '00', slot: '10', function: '0' });
    expect(hostdevs[1]!.source).toEqual({ domain: '0000', bus: '3c', slot: '02', function: '0' });
    expect(xml.split('<hostdev ')).toHaveLength(3);
    expect(renderInstanceXml([input(0, { tag: 'gpu0' }), input(1, { managed: false })])).toBe(xml);
  });

  it('re-rendering gives the same XML (addresses and aliases are stable)', () => {
    const inputs = [input(0, { tag: 'a' }), input(1, { tag: 'a?' }), input(2)];
    expect(renderInstanceXml(inputs)).toBe(renderInstanceXml(inputs.map((h) => ({ ...h }))));
  });

  it('refuses two devices on one guest slot and one host device twice, naming both', () => {
    expect(() => buildHostdevs([input(0), input(1, { guest: guestAddressForSlot(0x10) })])).toThrow(
      'hostdevs[1].guest: 0000:00:10.0 is on the same guest slot as hostdevs[0].guest',
    );
    expect(() => buildHostdevs([input(0), input(1, { source: input(0).source })])).toThrow(
      'hostdevs[1].source: host device 0000:3b:02.0 is already hostdevs[0].source',
    );
  });
});

describe('hostdevFromBinding', () => {
  const device = (managed: boolean): DeviceRecord =>
    newDevice(
      hostName('host-a'),
      pciFacts({ address: '0000:25:00.4', managed }),
      testUuid('dev-1'),
      '2026-01-01T00:00:00Z',
    );
  const arq = (over: Partial<Arq> = {}): Arq => ({
    uuid: ARQ,
    profileName: 'p',
    groupId: 0,
    group: {} as Arq['group'],
    state: 'bound',
    instanceUuid: 'i',
    host: hostName('host-a'),
    deviceUuid: testUuid('dev-1'),
    deviceAddress: pci('0000:25:00.4'),
    // The attach handle holds managed as it was at bind time; that is what counts.
    attachHandle: { domain: '0000', bus: '25', device: '00', function: '4', managed: true },
    tag: 'vf',
    error: '',
    createdAt: '',
    deviceType: 'PCI',
    ...over,
  });

  it('takes managed from the ARQ (its value at bind time) and the source address from the device record', () => {
    const bound = (managed: boolean) =>
      arq({ attachHandle: { domain: '0000', bus: '25', device: '00', function: '4', managed } });
    // The device's managed changed since the bind: the ARQ's value wins, so the XML and the ARQ agree.
    const h = hostdevFromBinding(bound(false), device(true), guestAddressForSlot(0x10));
    expect(h).toMatchObject({ managed: false, tag: 'vf', arqUuid: ARQ, deviceUuid: 'dev-1' });
    expect(h.source).toEqual({ domain: '0000', bus: '25', slot: '00', function: '4' });
    expect(renderHostdev(h)).toContain("managed='no'");
    expect(
      renderHostdev(hostdevFromBinding(bound(true), device(false), guestAddressForSlot(0x10))),
    ).toContain("managed='yes'");
  });

  it('refuses an ARQ not bound to the device', () => {
    try {
      hostdevFromBinding(arq({ deviceUuid: testUuid('other') }), device(true), guestAddressForSlot(0x10));
      expect.unreachable();
    } catch (e) {
      expect(isBerthError(e) && e.reason).toBe('ARQ_NOT_BOUND');
    }
    expect(() =>
      hostdevFromBinding(arq({ state: 'bind_started' }), device(true), guestAddressForSlot(0x10)),
    ).toThrow(/not bound/);
  });
});

const haveValidator = available(virtXmlValidate(), 'libvirt schema tests of hostdev XML');

describe.skipIf(!haveValidator)('libvirt schema (virt-xml-validate)', () => {
  const expectValid = (devicesXml: string[]) => {
    const results = validateDomains(devicesXml.map(wrapInDomain));
    results.forEach((r, i) => {
      expect(r.ok, `domain ${i} failed:\n${r.output}\n${devicesXml[i]}`).toBe(true);
    });
  };

  it('accepts managed yes/no, tagged/untagged, odd tag characters, one device and sixteen', () => {
    const odd = ["<x y='1'>&\"", 'ünïcödé 🚀', 'db.1', 'with space', '--', '_'];
    expectValid([
      renderInstanceXml([input(0, { tag: 'gpu0' })]),
      renderInstanceXml([input(0, { managed: false })]),
      renderInstanceXml([input(0, { managed: false, tag: 'vf' })]),
      renderInstanceXml(odd.map((tag, i) => input(i, { tag, managed: i % 2 === 0 }))),
      renderInstanceXml(
        Array.from({ length: 16 }, (_, i) =>
          input(i, { tag: i % 3 === 0 ? '' : `t${i % 5}`, managed: i % 2 === 0 }),
        ),
      ),
    ]);
  });

  it('the oracle can fail: a non-user alias and a broken element are rejected', () => {
    const bad = validateDomains([
      wrapInDomain(renderHostdev(input(0)).replace(/ua-[^']+/, 'ua gpu')),
      wrapInDomain(renderHostdev(input(0)).replace("managed='yes'", "managed='maybe'")),
    ]);
    expect(bad.map((r) => r.ok)).toEqual([false, false]);
  });

  it('property: any set of devices and tags renders XML libvirt accepts', () => {
    const device = fc.record({
      arqUuid: fc.uuid(),
      tag: fc.oneof(
        fc.constant(''),
        fc.string({ minLength: 1, maxLength: 60, unit: 'grapheme' }),
        fc.stringMatching(/^[a-z0-9_-]{1,10}$/),
      ),
      managed: fc.boolean(),
      bus: fc.integer({ min: 0, max: 255 }),
      slot: fc.integer({ min: 0, max: 31 }),
      fn: fc.integer({ min: 0, max: 7 }),
    });
    fc.assert(
      fc.property(
        fc.uniqueArray(device, {
          minLength: 1,
          maxLength: 16,
          selector: (d) => `${d.bus}:${d.slot}.${d.fn}`,
        }),
        (devs) => {
          const inputs = devs.map((d, i) => ({
            arqUuid: d.arqUuid,
            deviceUuid: `dev-${i}`,
            source: {
              domain: '0000',
              bus: d.bus.toString(16).padStart(2, '0'),
              slot: d.slot.toString(16).padStart(2, '0'),
              function: String(d.fn),
            },
            guest: guestAddressForSlot(0x10 + i),
            managed: d.managed,
            tag: d.tag,
          }));
          const { xml, hostdevs } = renderInstance(inputs);
          expect(new Set(hostdevs.map((h) => h.alias)).size).toBe(hostdevs.length);
          const [r] = validateDomains([wrapInDomain(xml)]);
          expect(r!.ok, `${r!.output}\n${xml}`).toBe(true);
        },
      ),
      { numRuns: 25 },
    );
  });
});
