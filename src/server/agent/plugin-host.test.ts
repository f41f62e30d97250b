import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { makeFunction } from '../../plugins/device-spec/fixtures.support.js';
import { parseDeviceSpecs } from '../../plugins/device-spec/index.js';
import { deviceFromFunction } from '../../plugins/pci/pci-driver.js';
import type { DiscoveredDevice } from '../../plugins/types.js';
import { parseAgentConfig } from './config.js';
import { markSharedIommuGroups, PluginHost } from './plugin-host.js';

const [entry] = parseDeviceSpecs([{ vendor_id: '10de' }], { section: 'pci', cleanupKeys: false });

/** Devices for `addresses`, all in IOMMU group 7 with `members`. */
function inGroup(addresses: string[], members: string[]): DiscoveredDevice[] {
  const host = { groups: new Map([[7, members]]) } as Parameters<typeof deviceFromFunction>[2];
  return addresses.map((a) =>
    deviceFromFunction(makeFunction(a, { iommuGroup: 7, kernelDriver: 'vfio-pci' }), entry!, host, {
      driver: 'pci',
      type: 'PCI',
      resourceClass: 'CUSTOM_X',
      traits: [],
    }),
  );
}

describe('markSharedIommuGroups', () => {
  it('marks a device whose group holds a function Berth does not manage, with a copy', () => {
    const devices = inGroup(['0000:65:00.0'], ['0000:65:00.0', '0000:65:00.1']);
    const returned = devices[0]!;
    markSharedIommuGroups(devices);
    expect(devices[0]!.unallocatableReason).toBe(
      'IOMMU group 7 also holds 0000:65:00.1, which Berth does not manage',
    );
    // The driver's own record is left as it was: it may return it again next pass.
    expect(returned.unallocatableReason).toBe('');
  });

  it('leaves a group whose functions Berth all manages allocatable, and keeps a reason already given', () => {
    const both = inGroup(['0000:65:00.0', '0000:65:00.1'], ['0000:65:00.0', '0000:65:00.1']);
    markSharedIommuGroups(both);
    expect(both.map((d) => d.unallocatableReason)).toEqual(['', '']);
    const [given] = inGroup(['0000:65:00.0'], ['0000:65:00.0', '0000:65:00.1']);
    given!.unallocatableReason = 'firmware too old';
    const list = [given!];
    markSharedIommuGroups(list);
    expect(list[0]).toBe(given);
    expect(list[0]!.unallocatableReason).toBe('firmware too old');
  });
});

describe('PluginHost: the cleanup capability and the census', () => {
  it('asks a driver for its cleanup capability, and takes a census by the device, not by its driver', async () => {
    const root = await mkdtemp(join(tmpdir(), 'berth-plugin-host-'));
    try {
      await mkdir(join(root, 'sys/bus/pci/devices'), { recursive: true });
      const config = parseAgentConfig(
        {
          host: 'h',
          sysfs_root: join(root, 'sys'),
          state_dir: join(root, 'state'),
          enabled_drivers: ['pci', 'nvme'],
          auth: { mode: 'none' },
        },
        {},
        root,
      );
      const host = await PluginHost.loadFor(config, { logger: pino({ level: 'silent' }) });
      const [pci, nvme] = [host.driver('pci')!, host.driver('nvme')!];
      expect(host.cleaner(pci)).toBeNull();
      expect(pci.supportsCleaning).toBe(false);
      expect(typeof host.cleaner(nvme)).toBe('function');
      expect(nvme.supportsCleaning).toBe(true);
      // An NVMe controller (class 0108xx) offered by the PCI driver still gets the agent's census:
      // the driver that claims a device cannot take it out of the coverage check.
      const [asPci] = inGroup(['0000:3d:00.0'], []);
      expect(host.hasCensus({ ...asPci!, classCode: '010802' })).toBe(true);
      expect(host.hasCensus(asPci!)).toBe(false);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
});
