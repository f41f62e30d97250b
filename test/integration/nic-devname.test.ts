/**
 * NIC `devname` (specs/device-role-tagging.txt: "the network device name, if
 * type==nic and the hypervisor supports explicit device names") through the
 * real scheduler on 127.0.0.1:0: registered with SetInstanceDevices, kept
 * across a restart, served in the metadata document exactly as the spec's LXC
 * example has it, and a bad name refused with INVALID_ARGUMENT naming the
 * field and the value, with nothing of the request stored.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Nic } from '../../src/gen/berth/scheduler/v1/instance.js';
import { validateMetadata } from '../../src/server/scheduler/guest/metadata.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import { expectCode } from '../helpers/errors.js';

const nic = (o: Partial<Nic> = {}): Nic => ({
  mac: '52:54:00:00:00:01',
  address: '',
  tag: 'nfvfunc1',
  vlan: undefined,
  model: 'virtio',
  devname: undefined,
  ...o,
});

describe('NIC devname in the device-role metadata', () => {
  let c: Cluster;

  beforeAll(async () => {
    c = await startCluster([]);
  }, 60_000);

  afterAll(async () => {
    await c?.stop();
  });

  const metadata = async (instanceUuid: string) =>
    JSON.parse((await c.client.instances.getDeviceMetadata({ instanceUuid })).json) as {
      devices: Record<string, unknown>[];
    };

  it('is stored, survives a restart and is served as the spec has it; a NIC without one has no key', async () => {
    await c.client.instances.setInstanceDevices({
      instanceUuid: 'vm-lxc',
      nics: [
        nic({ devname: 'eth0' }),
        nic({ mac: '52:54:00:00:00:02', tag: 'nfvfunc2', devname: 'eth1', address: '0000:00:03.0' }),
        nic({ mac: '52:54:00:00:00:03', tag: '' }),
      ],
      disks: [],
    });
    const expected = [
      { type: 'nic', bus: 'pci', mac: '52:54:00:00:00:01', devname: 'eth0', tags: ['nfvfunc1'] },
      {
        type: 'nic',
        bus: 'pci',
        address: '0000:00:03.0',
        mac: '52:54:00:00:00:02',
        devname: 'eth1',
        tags: ['nfvfunc2'],
      },
      { type: 'nic', bus: 'pci', mac: '52:54:00:00:00:03', tags: [] },
    ];
    const doc = await metadata('vm-lxc');
    expect(doc.devices).toEqual(expected);
    expect(validateMetadata(doc)).toEqual({ valid: true, errors: [] });
    await c.restartScheduler();
    expect((await metadata('vm-lxc')).devices).toEqual(expected);
  });

  it('refuses a bad or repeated devname with INVALID_ARGUMENT naming the field and the value; nothing is stored', async () => {
    await c.client.instances.setInstanceDevices({
      instanceUuid: 'vm-bad',
      nics: [nic({ devname: 'eth0' })],
      disks: [],
    });
    const before = await metadata('vm-bad');
    const bad = await expectCode(
      c.client.instances.setInstanceDevices({
        instanceUuid: 'vm-bad',
        nics: [
          nic({ devname: 'eth0' }),
          nic({ mac: '52:54:00:00:00:02', tag: 'b', devname: 'eth0' }),
          nic({ mac: '52:54:00:00:00:03', tag: 'c', devname: 'a-very-long-name0' }),
          nic({ mac: '52:54:00:00:00:04', tag: 'd', devname: 'eth%d' }),
          nic({ mac: '52:54:00:00:00:05', tag: 'e', devname: '' }),
        ],
        disks: [],
      }),
      'INVALID_ARGUMENT',
    );
    expect(bad.fieldViolations.map((v) => v.field)).toEqual([
      'nics[1].devname',
      'nics[2].devname',
      'nics[3].devname',
      'nics[4].devname',
    ]);
    expect(bad.fieldViolations[0]!.description).toContain('nics[0].devname');
    expect(bad.message).toContain('"a-very-long-name0" is 17 characters, more than the 15');
    expect(bad.message).toContain('"eth%d" contains "%"');
    expect(bad.message).toContain('"" is empty');
    expect(await metadata('vm-bad')).toEqual(before);
  });
});
