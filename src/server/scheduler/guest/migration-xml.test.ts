import { describe, expect, it } from 'vitest';
import { violations } from '../../../../test/helpers/errors.js';
import { available, virtXmlValidate } from '../../../../test/helpers/prerequisites.js';
import { guestAddressForSlot, parsePciAddress } from './guest-address.js';
import { renderInstanceXml, rewriteSourceAddresses } from './hostdev-xml.js';
import { validateDomains, wrapInDomain } from './virt-xml.js';

const xml = renderInstanceXml([
  {
    arqUuid: 'a',
    deviceUuid: 'd0',
    source: parsePciAddress('s', '0000:3b:02.0'),
    guest: guestAddressForSlot(0x10),
    managed: false,
    tag: 'vf0',
  },
  {
    arqUuid: 'b',
    deviceUuid: 'd1',
    source: parsePciAddress('s', '0000:3b:02.1'),
    guest: guestAddressForSlot(0x11),
    managed: false,
    tag: 'vf1',
  },
]);

describe('rewriteSourceAddresses', () => {
  const map = { '0000:3b:02.0': '0000:5e:00.4', '0000:3b:02.1': '0000:3b:02.0' };

  it('replaces each source address, including a swap onto another source address', () => {
    const out = rewriteSourceAddresses(xml, map);
    expect(out).toContain("<address domain='0x0000' bus='0x5e' slot='0x00' function='0x4'/>");
    // The second device moved onto the first's old address; replacement is simultaneous, not chained.
    expect(out.match(/<address domain='0x0000' bus='0x3b' slot='0x02' function='0x0'\/>/g)).toHaveLength(1);
    expect(out).not.toContain("function='0x1'/>\n  </source>");
    expect(out.indexOf("bus='0x5e'")).toBeLessThan(out.indexOf("alias name='ua-vf1'"));
  });

  it('leaves guest addresses, aliases and everything else untouched', () => {
    const out = rewriteSourceAddresses(xml, map);
    const strip = (s: string) => s.replace(/<source>[\s\S]*?<\/source>/g, '<source/>');
    expect(strip(out)).toBe(strip(xml));
    expect(out).toContain("<address type='pci' domain='0x0000' bus='0x00' slot='0x10' function='0x0'/>");
    expect(out).toContain("<address type='pci' domain='0x0000' bus='0x00' slot='0x11' function='0x0'/>");
  });

  it.skipIf(!available(virtXmlValidate(), 'libvirt schema check of migration XML'))(
    'keeps the XML valid for libvirt',
    () => {
      const [r] = validateDomains([wrapInDomain(rewriteSourceAddresses(xml, map))]);
      expect(r!.ok, r!.output).toBe(true);
    },
  );

  it('works on a full domain dump: libvirt attribute spellings, other hostdevs and comments', () => {
    const dump = `<domain type="kvm">
  <!-- <hostdev mode='subsystem' type='pci'><source><address domain='0x0000' bus='0x99' slot='0x00' function='0x0'/></source></hostdev> -->
  <devices>
    <interface type='network'><address type='pci' domain='0x0000' bus='0x00' slot='0x03' function='0x0'/></interface>
    <hostdev mode="subsystem" type="usb" managed="yes"><source><vendor id="0x1234"/><address bus="1" device="2"/></source></hostdev>
    <hostdev mode="subsystem" type="pci" managed="yes">
      <driver name="vfio"/>
      <source>
        <address domain="0" bus="59" slot="2" function="0"/>
      </source>
      <address type="pci" domain="0x0000" bus="0x00" slot="0x10" function="0x0"/>
    </hostdev>
  </devices>
</domain>`;
    const out = rewriteSourceAddresses(dump, { '0000:3b:02.0': '0000:af:00.1' });
    expect(out).toContain("<address domain='0x0000' bus='0xaf' slot='0x00' function='0x1'/>");
    expect(out).toContain("bus='0x99'"); // the comment is not a device
    expect(out).toContain('<address bus="1" device="2"/>'); // USB hostdev untouched
    expect(out).toContain('<address type="pci" domain="0x0000" bus="0x00" slot="0x10" function="0x0"/>');
    expect(out.length - dump.length).toBe(
      "<address domain='0x0000' bus='0xaf' slot='0x00' function='0x1'/>".length -
        '<address domain="0" bus="59" slot="2" function="0"/>'.length,
    );
  });

  it('a mapped source address missing from the XML is an error naming the map entry', () => {
    expect(violations(() => rewriteSourceAddresses(xml, { ...map, '0000:81:00.0': '0000:82:00.0' }))).toEqual(
      [
        'pci_dev_map_src_dst["0000:81:00.0"]: source 0000:81:00.0 is not the source address of any PCI hostdev in the XML',
      ],
    );
  });

  it('a hostdev with no mapping is an error naming its address', () => {
    expect(violations(() => rewriteSourceAddresses(xml, { '0000:3b:02.0': '0000:5e:00.4' }))).toEqual([
      'pci_dev_map_src_dst: hostdev source 0000:3b:02.1 in the XML has no destination in the map',
    ]);
  });

  it('rejects malformed addresses and two sources sent to one destination', () => {
    expect(
      violations(() => rewriteSourceAddresses(xml, { '3b:02.0': '0000:5e:00.4', '0000:3b:02.1': 'x' })),
    ).toEqual([
      'pci_dev_map_src_dst["3b:02.0"]: key "3b:02.0" is not a PCI address like 0000:3b:02.0',
      'pci_dev_map_src_dst["0000:3b:02.1"]: value "x" is not a PCI address like 0000:3b:02.0',
    ]);
    expect(
      violations(() =>
        rewriteSourceAddresses(xml, { '0000:3b:02.0': '0000:5e:00.4', '0000:3b:02.1': '0000:5e:00.4' }),
      ),
    ).toEqual([
      'pci_dev_map_src_dst["0000:3b:02.1"]: destination 0000:5e:00.4 is also the destination of 0000:3b:02.0',
    ]);
  });

  it('an empty map on XML without PCI hostdevs is a no-op', () => {
    expect(rewriteSourceAddresses('<devices/>', {})).toBe('<devices/>');
  });
});
