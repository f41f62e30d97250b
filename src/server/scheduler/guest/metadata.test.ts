import { readFileSync } from 'node:fs';
import { Ajv } from 'ajv';
import { describe, expect, it } from 'vitest';
import { violations } from '../../../../test/helpers/errors.js';
import { newDevice } from '../domain/device-state.js';
import { facts, hostName, pciFacts, testUuid } from '../domain/fixtures.support.js';
import { assignGuestAddress, guestAddressForSlot } from './guest-address.js';
import { buildHostdevs } from './hostdev-xml.js';
import {
  buildMetadata,
  type DiskInput,
  type NicInput,
  type PassthroughInput,
  passthroughFromHostdev,
  registeredAddresses,
  renderMetadataJson,
  validateInstanceDevices,
  validateMetadata,
} from './metadata.js';
import { METADATA_SCHEMA_URL, metadataSchema } from './metadata-schema.js';

const nic = (o: Partial<NicInput> = {}): NicInput => ({
  mac: '52:54:00:12:34:56',
  address: '0000:00:03.0',
  tag: 'nfvfunc1',
  model: 'virtio',
  ...o,
});
const disk = (o: Partial<DiskInput> = {}): DiskInput => ({
  serial: 'disk-vol-2352423',
  bus: 'scsi',
  address: '1:0:2:0',
  path: '',
  tag: 'oracledb',
  ...o,
});
const gpu = (o: Partial<PassthroughInput> = {}): PassthroughInput => ({
  guest: guestAddressForSlot(0x10),
  vendorId: '10de',
  productId: '25b6',
  deviceType: 'PCI',
  tag: 'gpu0',
  ...o,
});

describe('the schema file', () => {
  it('is JSON that compiles under strict draft-07 ajv', () => {
    const raw = JSON.parse(readFileSync(METADATA_SCHEMA_URL, 'utf8'));
    expect(raw.$schema).toBe('http://json-schema.org/draft-07/schema#');
    expect(() => new Ajv({ strict: true }).compile(raw)).not.toThrow();
    expect(metadataSchema).toEqual(raw);
  });

  it("accepts the spec's own libvirt and LXC examples", () => {
    const libvirt = {
      devices: [
        { type: 'nic', bus: 'pci', address: '0000:00:02.0', mac: '01:22:22:42:22:21', tags: ['nfvfunc1'] },
        { type: 'nic', bus: 'pci', address: '0000:00:03.0', mac: '01:22:22:42:22:21', tags: ['nfvfunc2'] },
        { type: 'disk', bus: 'scsi', address: '1:0:2:0', serial: 'disk-vol-2352423', tags: ['oracledb'] },
        {
          type: 'disk',
          bus: 'pci',
          address: '0000:00:07.0',
          serial: 'disk-vol-24235252',
          tags: ['squidcache'],
        },
      ],
    };
    const lxc = {
      devices: [
        { type: 'nic', bus: 'none', mac: '01:22:22:42:22:21', devname: 'eth0', tags: ['nfvfunc1'] },
        { type: 'disk', bus: 'none', serial: 'disk-vol-2352423', path: '/dev/sda', tags: ['oracledb'] },
        { type: 'disk', bus: 'ide', address: '0:1', serial: 'disk-vol-789321', tags: ['squidcache'] },
      ],
    };
    expect(validateMetadata(libvirt)).toEqual({ valid: true, errors: [] });
    expect(validateMetadata(lxc)).toEqual({ valid: true, errors: [] });
  });

  it.each([
    ['not an object', 42],
    ['devices not an array', { devices: {} }],
    ['a nic without mac', { devices: [{ type: 'nic', bus: 'pci' }] }],
    ['an unknown type', { devices: [{ type: 'gpu', bus: 'pci' }] }],
    ['a device without bus', { devices: [{ type: 'disk', serial: 's' }] }],
    ['an unknown bus', { devices: [{ type: 'disk', bus: 'floppy' }] }],
    ['a bus that only contains a known one', { devices: [{ type: 'disk', bus: 'xpcix' }] }],
    ['a malformed pci address', { devices: [{ type: 'nic', bus: 'pci', mac: 'm', address: '00:03.0' }] }],
    [
      'a pci address with junk around it',
      { devices: [{ type: 'nic', bus: 'pci', mac: 'm', address: 'x0000:00:03.0' }] },
    ],
    ['an ide address out of range', { devices: [{ type: 'disk', bus: 'ide', address: '2:0' }] }],
    [
      'a passthrough device without vendor_id',
      {
        devices: [
          {
            type: 'passthrough',
            bus: 'pci',
            address: '0000:00:10.0',
            product_id: '25b6',
            device_type: 'PCI',
          },
        ],
      },
    ],
    [
      'a passthrough device on the scsi bus',
      {
        devices: [
          {
            type: 'passthrough',
            bus: 'scsi',
            address: '0:0:0:0',
            vendor_id: '10de',
            product_id: '25b6',
            device_type: 'PCI',
          },
        ],
      },
    ],
    [
      'a passthrough tag with a slash',
      {
        devices: [
          {
            type: 'passthrough',
            bus: 'pci',
            address: '0000:00:10.0',
            vendor_id: '10de',
            product_id: '25b6',
            device_type: 'PCI',
            tags: ['a/b'],
          },
        ],
      },
    ],
  ])('rejects %s', (_name, doc) => {
    const r = validateMetadata(doc);
    expect(r.valid).toBe(false);
    expect(r.errors.length).toBeGreaterThan(0);
  });
});

describe('buildMetadata / renderMetadataJson', () => {
  it('builds a schema-valid document with NICs, disks and passthrough devices at their guest addresses', () => {
    const devices = {
      nics: [
        nic(),
        nic({
          mac: '52:54:00:AB:CD:EF',
          address: '0000:00:04.0',
          tag: 'nfvfunc2',
          vlan: 1000,
          devname: 'eth1',
        }),
      ],
      disks: [
        disk(),
        disk({ bus: 'virtio', address: '0000:00:07.0', serial: 'disk-vol-24235252', tag: 'squidcache' }),
        disk({ bus: 'ide', address: '0:1', serial: '', tag: '' }),
        disk({ bus: 'none', address: '', path: '/dev/sdb', tag: 'scratch' }),
      ],
    };
    const passthrough = [
      gpu(),
      gpu({
        guest: guestAddressForSlot(0x11),
        vendorId: '144d',
        productId: 'a808',
        deviceType: 'NVME',
        tag: 'nvme-data',
      }),
      gpu({ guest: guestAddressForSlot(0x12), tag: '' }),
    ];
    const doc = buildMetadata(devices, passthrough);
    expect(validateMetadata(doc)).toEqual({ valid: true, errors: [] });
    expect(doc.devices).toEqual([
      { type: 'nic', bus: 'pci', address: '0000:00:03.0', mac: '52:54:00:12:34:56', tags: ['nfvfunc1'] },
      {
        type: 'nic',
        bus: 'pci',
        address: '0000:00:04.0',
        mac: '52:54:00:ab:cd:ef',
        devname: 'eth1',
        vlan: 1000,
        tags: ['nfvfunc2'],
      },
      { type: 'disk', bus: 'scsi', address: '1:0:2:0', serial: 'disk-vol-2352423', tags: ['oracledb'] },
      {
        type: 'disk',
        bus: 'pci',
        address: '0000:00:07.0',
        serial: 'disk-vol-24235252',
        tags: ['squidcache'],
      },
      { type: 'disk', bus: 'ide', address: '0:1', tags: [] },
      { type: 'disk', bus: 'none', serial: 'disk-vol-2352423', path: '/dev/sdb', tags: ['scratch'] },
      {
        type: 'passthrough',
        bus: 'pci',
        address: '0000:00:10.0',
        vendor_id: '10de',
        product_id: '25b6',
        device_type: 'PCI',
        tags: ['gpu0'],
      },
      {
        type: 'passthrough',
        bus: 'pci',
        address: '0000:00:11.0',
        vendor_id: '144d',
        product_id: 'a808',
        device_type: 'NVME',
        tags: ['nvme-data'],
      },
      {
        type: 'passthrough',
        bus: 'pci',
        address: '0000:00:12.0',
        vendor_id: '10de',
        product_id: '25b6',
        device_type: 'PCI',
        tags: [],
      },
    ]);
    const json = renderMetadataJson(devices, passthrough);
    expect(JSON.parse(json)).toEqual(doc);
    expect(renderMetadataJson(devices, passthrough)).toBe(json);
  });

  it('works end to end: registered NICs/disks steer guest addresses, hostdevs feed the document', () => {
    const devices = validateInstanceDevices({
      nics: [nic({ address: '0000:00:10.0' })],
      disks: [disk({ bus: 'virtio', address: '0000:00:11.0' })],
    });
    const guest = assignGuestAddress(registeredAddresses(devices));
    const record = newDevice(
      hostName('h'),
      pciFacts({ address: '0000:3b:02.0' }),
      testUuid('dev-1'),
      '2026-01-01T00:00:00Z',
    );
    const [hd] = buildHostdevs([
      {
        arqUuid: 'a',
        deviceUuid: 'dev-1',
        source: guestAddressForSlot(2),
        guest,
        managed: true,
        tag: 'gpu0',
      },
    ]);
    const doc = buildMetadata(devices, [passthroughFromHostdev(hd!, record)]);
    expect(doc.devices[2]).toMatchObject({
      type: 'passthrough',
      address: '0000:00:12.0',
      vendor_id: '10de',
      tags: ['gpu0'],
    });
    expect(validateMetadata(doc).valid).toBe(true);
    const nvme = newDevice(hostName('h'), facts({ index: 1 }), testUuid('dev-2'), '2026-01-01T00:00:00Z');
    expect(passthroughFromHostdev(hd!, nvme)).toMatchObject({ deviceType: 'NVME', vendorId: '144d' });
  });

  it('refuses a NIC registered on a hostdev guest slot, naming both', () => {
    expect(
      violations(() => buildMetadata({ nics: [nic({ address: '0000:00:10.3' })], disks: [] }, [gpu()])),
    ).toEqual(['nics[0].address: address 0000:00:10.3 is on the guest slot of hostdevs[0] (0000:00:10.0)']);
  });

  it('refuses duplicate passthrough tags, PCI and NVMe alike (one passthrough scope)', () => {
    expect(
      violations(() =>
        buildMetadata({ nics: [], disks: [] }, [gpu(), gpu({ guest: guestAddressForSlot(0x11) })]),
      ),
    ).toEqual([
      'hostdevs[1].tag: tag "gpu0" is already used by hostdevs[0].tag for a passthrough of this instance',
    ]);
    expect(
      violations(() =>
        buildMetadata({ nics: [], disks: [] }, [
          gpu(),
          gpu({ guest: guestAddressForSlot(0x11), vendorId: '144d', productId: 'a808', deviceType: 'NVME' }),
        ]),
      ),
    ).toEqual([
      'hostdevs[1].tag: tag "gpu0" is already used by hostdevs[0].tag for a passthrough of this instance',
    ]);
    // A NIC may share a passthrough device's tag (different metadata types).
    expect(() => buildMetadata({ nics: [nic({ tag: 'gpu0' })], disks: [] }, [gpu()])).not.toThrow();
  });
});

describe('validateInstanceDevices', () => {
  it('names both places of a duplicate tag, per device type only', () => {
    expect(
      violations(() =>
        validateInstanceDevices({ nics: [nic({ tag: 'db' }), nic({ tag: 'db', address: '' })], disks: [] }),
      ),
    ).toEqual(['nics[1].tag: tag "db" is already used by nics[0].tag for a nic of this instance']);
    expect(
      violations(() =>
        validateInstanceDevices({
          nics: [],
          disks: [disk({ tag: 'x' }), disk({ tag: 'y' }), disk({ tag: 'x', address: '' })],
        }),
      ),
    ).toEqual(['disks[2].tag: tag "x" is already used by disks[0].tag for a disk of this instance']);
    // The same tag on a NIC and a disk is allowed (the spec's rule).
    expect(() =>
      validateInstanceDevices({ nics: [nic({ tag: 'db' })], disks: [disk({ tag: 'db' })] }),
    ).not.toThrow();
  });

  it("applies Nova's tag rules, naming the field and the value", () => {
    expect(
      violations(() =>
        validateInstanceDevices({
          nics: [nic({ tag: 'a,b' })],
          disks: [disk({ tag: 'x/y' }), disk({ tag: 't'.repeat(61), address: '' })],
        }),
      ),
    ).toEqual([
      'nics[0].tag: tag "a,b" must not contain "," or "/"',
      'disks[0].tag: tag "x/y" must not contain "," or "/"',
      `disks[1].tag: tag "${'t'.repeat(61)}" is 61 characters, more than 60`,
    ]);
    expect(() => validateInstanceDevices({ nics: [nic({ tag: 't'.repeat(60) })], disks: [] })).not.toThrow();
  });

  it('checks MAC syntax, VLAN range, bus and address syntax per bus', () => {
    expect(
      violations(() =>
        validateInstanceDevices({
          nics: [
            nic({ mac: '52:54:00:12:34', tag: 'a' }),
            nic({ mac: '52-54-00-12-34-56', address: '', tag: 'b' }),
            nic({ address: '00:04.0', tag: 'c' }),
            nic({ address: '', vlan: 0, tag: 'd' }),
            nic({ address: '', vlan: 4095, tag: 'e' }),
          ],
          disks: [
            disk({ bus: 'floppy', tag: 'a' }),
            disk({ bus: 'scsi', address: '0:0:0', tag: 'b' }),
            disk({ bus: 'ide', address: '2:0', tag: 'c' }),
            disk({ bus: 'virtio', address: '1:0:0:0', tag: 'd' }),
            disk({ bus: 'usb', address: '0000:00:05.0', tag: 'e' }),
            disk({ bus: 'none', address: '0:0', tag: 'f' }),
          ],
        }),
      ),
    ).toEqual([
      'nics[0].mac: "52:54:00:12:34" is not a MAC address like 52:54:00:12:34:56',
      'nics[1].mac: "52-54-00-12-34-56" is not a MAC address like 52:54:00:12:34:56',
      'nics[2].address: "00:04.0" is not a PCI address like 0000:00:03.0',
      'nics[3].vlan: 0 is not a VLAN id in 1..4094',
      'nics[4].vlan: 4095 is not a VLAN id in 1..4094',
      'disks[0].bus: "floppy" is not a disk bus (one of pci, virtio, scsi, ide, usb, none)',
      'disks[1].address: "0:0:0" is not an address for bus scsi (like 0:0:0:0)',
      'disks[2].address: "2:0" is not an address for bus ide (like 0:1)',
      'disks[3].address: "1:0:0:0" is not an address for bus virtio (like 0000:00:04.0)',
      'disks[4].address: "0000:00:05.0" is not an address for bus usb (like 1:2)',
      'disks[5].address: "0:0" given for bus none, which has no addresses',
    ]);
    expect(() =>
      validateInstanceDevices({
        nics: [nic({ vlan: 1 }), nic({ vlan: 4094, address: '', tag: '' })],
        disks: [],
      }),
    ).not.toThrow();
  });

  it('checks NIC devnames against the Linux interface-name rules, naming the field and the value', () => {
    const named = (devname: string, i: number) => nic({ devname, address: '', tag: `t${i}` });
    const bad = ['', 'x'.repeat(16), '.', '..', 'eth/0', 'eth:0', 'eth 0', 'eth%d', 'eth\t0', 'éth0'];
    expect(violations(() => validateInstanceDevices({ nics: bad.map(named), disks: [] }))).toEqual([
      'nics[0].devname: "" is empty: leave devname unset for a NIC without a name',
      `nics[1].devname: "${'x'.repeat(16)}" is 16 characters, more than the 15 of a Linux interface name`,
      'nics[2].devname: "." is not allowed as an interface name',
      'nics[3].devname: ".." is not allowed as an interface name',
      'nics[4].devname: "eth/0" contains "/": an interface name is printable ASCII without "/", ":", "%" or spaces',
      'nics[5].devname: "eth:0" contains ":": an interface name is printable ASCII without "/", ":", "%" or spaces',
      'nics[6].devname: "eth 0" contains a space: an interface name is printable ASCII without "/", ":", "%" or spaces',
      'nics[7].devname: "eth%d" contains "%": an interface name is printable ASCII without "/", ":", "%" or spaces',
      'nics[8].devname: "eth\t0" contains "\\t": an interface name is printable ASCII without "/", ":", "%" or spaces',
      'nics[9].devname: "éth0" contains "é": an interface name is printable ASCII without "/", ":", "%" or spaces',
    ]);
    const good = ['eth0', 'x'.repeat(15), 'eth0.100', 'br-lan', 'net_data', 'enp0s3', '...'];
    const ok = validateInstanceDevices({ nics: good.map(named), disks: [] });
    expect(ok.nics.map((n) => n.devname)).toEqual(good);
  });

  it('refuses one devname on two NICs of an instance, naming both; case matters, as in Linux', () => {
    expect(
      violations(() =>
        validateInstanceDevices({
          nics: [
            nic({ devname: 'eth0', tag: 'a' }),
            nic({ devname: 'ETH0', address: '', tag: 'b' }),
            nic({ devname: 'eth0', address: '', tag: 'c' }),
          ],
          disks: [],
        }),
      ),
    ).toEqual([
      'nics[2].devname: "eth0" is already the name of nics[0].devname: a guest\'s interface names are unique',
    ]);
  });

  it('refuses two NICs/disks at one PCI address, naming both, and normalises case', () => {
    expect(
      violations(() =>
        validateInstanceDevices({ nics: [nic()], disks: [disk({ bus: 'pci', address: '0000:00:03.0' })] }),
      ),
    ).toEqual(['disks[0].address: address 0000:00:03.0 is already used by nics[0].address']);
    const ok = validateInstanceDevices({
      nics: [nic({ mac: '52:54:00:AB:CD:EF' })],
      disks: [disk({ bus: 'VirtIO', address: '0000:00:03.1' })],
    });
    expect(ok.nics[0]!.mac).toBe('52:54:00:ab:cd:ef');
    expect(ok.disks[0]!.bus).toBe('virtio');
    expect(registeredAddresses(ok).map((t) => t.address)).toEqual(['0000:00:03.0', '0000:00:03.1']);
  });
});
