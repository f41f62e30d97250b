import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ConfigError } from '../../../errors.js';
import { parseAgentConfig } from '../config.js';
import { cdiSpec } from './cdi.js';
import { DraCheckpoint } from './dra-checkpoint.js';
import { draDeviceName } from './offer.js';

const API = { url: 'https://10.0.0.1:6443' };

describe('agent config: kubernetes.dra', () => {
  const parse = (dra: unknown, extra: Record<string, unknown> = { api_server: API }, scheduler = true) =>
    parseAgentConfig(
      {
        sysfs_root: '/',
        state_dir: '/var/lib/berth',
        ...(scheduler ? { scheduler: '127.0.0.1:1' } : {}),
        kubernetes: { dra, ...extra },
      },
      {},
      '/etc/berth',
    );

  it("is off unless enabled; the kubelet's paths by default; resource names are the device plugin's", () => {
    expect(parse({ enabled: false }).dra).toBeNull();
    expect(
      parse(
        { enabled: true, cdi_dir: 'cdi' },
        { api_server: API, device_plugin: { resource_names: { CUSTOM_NVME: 'example.com/nvme' } } },
      ).dra,
    ).toEqual({
      driverName: 'berth.dev',
      pool: 'vm',
      pluginsRegistryDir: '/var/lib/kubelet/plugins_registry',
      pluginDir: '/var/lib/kubelet/plugins/berth.dev',
      cdiDir: '/etc/berth/cdi',
      checkpointFile: '/var/lib/berth/kubelet-dra.json',
      resourceNames: { CUSTOM_NVME: 'example.com/nvme' },
      resourcePrefix: 'berth.dev/',
      schedulerTokenFile: null,
    });
    expect(parse({ enabled: true, driver_name: 'nvme.example.com' }).dra!.pluginDir).toBe(
      '/var/lib/kubelet/plugins/nvme.example.com',
    );
  });

  it.each([
    [{ enabled: 'yes' }, /kubernetes\.dra\.enabled.*"yes"/],
    [{ enabled: true, driver_name: 'Berth_Dev' }, /kubernetes\.dra\.driver_name.*"Berth_Dev"/],
    [{ enabled: true, cdi: '/x' }, /kubernetes\.dra.*unknown key/],
  ])('refuses %j, naming the key', (dra, message) => {
    expect(() => parse(dra)).toThrow(ConfigError);
    expect(() => parse(dra)).toThrow(message);
  });

  it("is one driver with the ResourceSlices: their pool and driver name are the plugin's", () => {
    const both = parse(
      { enabled: true, driver_name: 'nvme.example.com' },
      { api_server: API, resource_slices: { enabled: true, pool: 'rack-7' } },
    );
    expect(both.dra).toMatchObject({ driverName: 'nvme.example.com', pool: 'rack-7' });
    expect(both.resourceSlices).toMatchObject({ driver: 'nvme.example.com', pool: 'rack-7' });
    expect(() =>
      parse(
        { enabled: true },
        { api_server: API, resource_slices: { enabled: true, driver: 'other.example.com' } },
      ),
    ).toThrow(/kubernetes\.resource_slices\.driver: "other\.example\.com" is not the DRA plugin's driver/);
  });

  it('needs a scheduler and an API server', () => {
    expect(() => parse({ enabled: true }, { api_server: API }, false)).toThrow(
      /kubernetes\.dra\.enabled.*set scheduler/,
    );
    expect(() => parse({ enabled: true }, {})).toThrow(
      /kubernetes\.dra\.enabled.*set kubernetes\.api_server/,
    );
  });
});

describe('DRA: names and the CDI spec', () => {
  it('names a device by its PCI address as a DNS label', () => {
    expect(draDeviceName('0000:3B:00.1')).toBe('pci-0000-3b-00-1');
    expect(draDeviceName('0000:3b:00.1')).toMatch(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/);
  });

  it("puts the VFIO container node and KubeVirt's variable in the spec, each group's node once", () => {
    const spec = cdiSpec('berth.dev', '/dev', [
      { name: 'u-a', address: '0000:01:00.0', iommuGroup: 7, variable: 'PCI_RESOURCE_X', own: 'BERTH_A' },
      { name: 'u-b', address: '0000:01:00.1', iommuGroup: 7, variable: 'PCI_RESOURCE_X', own: 'BERTH_B' },
      { name: 'u-c', address: '0000:02:00.0', iommuGroup: 9, variable: 'PCI_RESOURCE_Y', own: 'BERTH_C' },
    ]);
    expect(spec).toEqual({
      cdiVersion: '0.5.0',
      kind: 'berth.dev/pci',
      containerEdits: {
        env: ['PCI_RESOURCE_X=0000:01:00.0,0000:01:00.1', 'PCI_RESOURCE_Y=0000:02:00.0'],
        deviceNodes: [{ path: '/dev/vfio/vfio', hostPath: '/dev/vfio/vfio', type: 'c', permissions: 'rw' }],
      },
      devices: [
        {
          name: 'u-a',
          containerEdits: {
            env: ['BERTH_A=0000:01:00.0'],
            deviceNodes: [{ path: '/dev/vfio/7', hostPath: '/dev/vfio/7', type: 'c', permissions: 'rw' }],
          },
        },
        { name: 'u-b', containerEdits: { env: ['BERTH_B=0000:01:00.1'] } },
        {
          name: 'u-c',
          containerEdits: {
            env: ['BERTH_C=0000:02:00.0'],
            deviceNodes: [{ path: '/dev/vfio/9', hostPath: '/dev/vfio/9', type: 'c', permissions: 'rw' }],
          },
        },
      ],
    });
  });
});

describe('DRA checkpoint', () => {
  let dir = '';
  afterEach(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });
  const entry = (uid: string) => ({
    namespace: 'default',
    name: `c-${uid}`,
    uid,
    nonce: 'n1',
    state: 'prepared' as const,
    devices: [
      {
        request: 'r',
        pool: 'h',
        device: 'pci-0000-01-00-0',
        address: '0000:01:00.0',
        arqUuid: 'a',
        cdiDeviceIds: ['berth.dev/pci=x'],
      },
    ],
  });

  it('survives a reload, is written whole (no temporary file left) and forgets what is removed', async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-dra-ck-'));
    const path = join(dir, 'sub', 'ck.json');
    const ck = await DraCheckpoint.load(path);
    expect(ck.entries()).toEqual([]);
    await ck.put(entry('u1'));
    await ck.put(entry('u2'));
    await ck.remove('u1');
    await ck.remove('never');
    const again = await DraCheckpoint.load(path);
    expect(again.entries()).toEqual([entry('u2')]);
    expect(again.get('u1')).toBeUndefined();
    expect(await readdir(join(dir, 'sub'))).toEqual(['ck.json']);
    expect(JSON.parse(await readFile(path, 'utf8')).version).toBe(1);
  });

  it('refuses a file it cannot read as a checkpoint, naming it: never guesses what was prepared', async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-dra-ck-'));
    const path = join(dir, 'ck.json');
    await writeFile(path, '{"version":1,"claims":{"u":{"uid":"u"}}}');
    await expect(DraCheckpoint.load(path)).rejects.toThrow(ConfigError);
    await expect(DraCheckpoint.load(path)).rejects.toThrow(/kubernetes\.dra\.checkpoint_file: .*ck\.json/);
    await writeFile(path, 'not json');
    await expect(DraCheckpoint.load(path)).rejects.toThrow(/is not a DRA checkpoint/);
  });
});
