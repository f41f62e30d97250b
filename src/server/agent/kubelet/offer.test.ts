import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../../errors.js';
import type { DiscoveredDevice, MediaRecord } from '../../../plugins/types.js';
import { parseAgentConfig } from '../config.js';
import { kubevirtVariable, notOffered, preferred, resourceNameOf } from './offer.js';

const record = (over: Partial<MediaRecord> = {}): MediaRecord => ({
  key: 'nvme:k',
  condition: 'clean',
  burned: false,
  since: 1,
  lastAddress: '0000:01:00.0',
  arqUuid: '',
  instanceUuid: '',
  reason: '',
  ...over,
});

const device = (
  address: string,
  numaNode: number,
  iommuGroup: number | null,
  over: Partial<DiscoveredDevice> = {},
) =>
  ({
    address,
    numaNode,
    iommuGroup,
    resourceClass: 'CUSTOM_NVME',
    health: 'healthy',
    healthReason: '',
    supportsCleaning: true,
    media: { key: `nvme:${address}` },
    mediaRecord: record(),
    ...over,
  }) as DiscoveredDevice;

describe('device plugin: what is offered', () => {
  it('offers only a clean, allocatable device, and says why not otherwise', () => {
    expect(notOffered(device('0000:01:00.0', 0, 1), false)).toBeNull();
    expect(
      notOffered(
        device('0000:01:00.0', 0, 1, { mediaRecord: record({ condition: 'declared_clean' }) }),
        false,
      ),
    ).toBeNull();
    expect(notOffered(device('0000:01:00.0', 0, 1), true)).toBe('it is being cleaned');
    expect(
      notOffered(device('0000:01:00.0', 0, 1, { mediaRecord: record({ condition: 'dirty' }) }), false),
    ).toMatch(/dirty/);
    expect(
      notOffered(
        device('0000:01:00.0', 0, 1, {
          mediaRecord: record({ condition: 'held', instanceUuid: 'vm-9', arqUuid: 'a' }),
        }),
        false,
      ),
    ).toContain('vm-9');
    expect(
      notOffered(device('0000:01:00.0', 0, 1, { mediaRecord: record({ burned: true }) }), false),
    ).toMatch(/burned/);
    expect(
      notOffered(device('0000:01:00.0', 0, 1, { health: 'unhealthy', healthReason: 'link down' }), false),
    ).toContain('link down');
    expect(notOffered(device('0000:01:00.0', 0, 1, { supportsCleaning: false }), false)).toMatch(
      /does not clean/,
    );
    expect(notOffered(device('0000:01:00.0', 0, 1, { mediaRecord: undefined }), false)).toMatch(
      /no identity/,
    );
    expect(notOffered(undefined, false)).toMatch(/not on this host/);
  });

  it('prefers the IOMMU group and NUMA node of the devices it must include', () => {
    const list = [
      device('0000:01:00.0', 0, 10),
      device('0000:02:00.0', 1, 20),
      device('0000:03:00.0', 1, 21),
      device('0000:04:00.0', 0, 11),
      device('0000:05:00.0', 1, 20),
    ];
    expect(preferred(list, ['0000:02:00.0'], 2)).toEqual(['0000:02:00.0', '0000:05:00.0']);
    expect(preferred(list, ['0000:02:00.0'], 3)).toEqual(['0000:02:00.0', '0000:05:00.0', '0000:03:00.0']);
    // Nothing to include: the NUMA node with the most candidates.
    expect(preferred(list, [], 2)).toEqual(['0000:02:00.0', '0000:05:00.0']);
  });

  it("names resources and KubeVirt's variable as KubeVirt reads it", () => {
    const config = parseAgentConfig(
      {
        sysfs_root: '/',
        scheduler: '127.0.0.1:1',
        kubernetes: {
          device_plugin: { enabled: true, resource_names: { CUSTOM_GPU: 'example.com/gpu.a100' } },
        },
      },
      {},
      '/tmp',
    ).devicePlugin!;
    expect(config.kubeletSocketDir).toBe('/var/lib/kubelet/device-plugins');
    expect(config.podResourcesSocket).toBe('/var/lib/kubelet/pod-resources/kubelet.sock');
    expect(resourceNameOf('CUSTOM_NVME_144D_A824', config)).toBe('berth.dev/custom-nvme-144d-a824');
    expect(resourceNameOf('CUSTOM_GPU', config)).toBe('example.com/gpu.a100');
    expect(kubevirtVariable('example.com/gpu.a100')).toBe('PCI_RESOURCE_EXAMPLE_COM_GPU_A100');
  });
});

describe('agent config: kubernetes.device_plugin', () => {
  const parse = (dp: unknown, scheduler: string | null = '127.0.0.1:1') =>
    parseAgentConfig(
      { sysfs_root: '/', ...(scheduler ? { scheduler } : {}), kubernetes: { device_plugin: dp } },
      {},
      '/tmp',
    );

  it('is off unless enabled', () => {
    expect(parse({ enabled: false }).devicePlugin).toBeNull();
    expect(parseAgentConfig({ sysfs_root: '/' }, {}, '/tmp').devicePlugin).toBeNull();
  });

  it.each([
    [{ enabled: 'yes' }, /kubernetes\.device_plugin\.enabled.*"yes"/],
    [
      { enabled: true, resource_names: { X: 'no-slash' } },
      /kubernetes\.device_plugin\.resource_names\.X.*"no-slash"/,
    ],
    [{ enabled: true, resource_names: { X: 'kubernetes.io/gpu' } }, /resource_names\.X.*reserved/],
    [{ enabled: true, resource_prefix: 'berth.dev' }, /resource_prefix.*ending in "\/"/],
    [{ enabled: true, poll_interval: 0 }, /poll_interval/],
    [{ enabled: true, socket_dir: '/x' }, /kubernetes\.device_plugin.*unknown key/],
    [{ enabled: true, cdi: 'yes' }, /kubernetes\.device_plugin\.cdi\b.*"yes"/],
    [{ enabled: true, cdi: true, cdi_dir: 7 }, /kubernetes\.device_plugin\.cdi_dir/],
    [{ enabled: true, cdi: true, cdi_dir: '' }, /kubernetes\.device_plugin\.cdi_dir/],
  ])('refuses %j, naming the key', (dp, message) => {
    expect(() => parse(dp)).toThrow(ConfigError);
    expect(() => parse(dp)).toThrow(message);
  });

  it('gives CDI device names only when cdi is true: in /var/run/cdi by default, vendor the DRA driver name', () => {
    expect(parse({ enabled: true }).devicePlugin!.cdi).toBeNull();
    expect(parse({ enabled: true, cdi: false, cdi_dir: 'cdi' }).devicePlugin!.cdi).toBeNull();
    expect(parse({ enabled: true, cdi: true }).devicePlugin!.cdi).toEqual({
      dir: '/var/run/cdi',
      vendor: 'berth.dev',
    });
    const named = parseAgentConfig(
      {
        sysfs_root: '/',
        scheduler: '127.0.0.1:1',
        kubernetes: {
          device_plugin: { enabled: true, cdi: true, cdi_dir: 'cdi' },
          dra: { driver_name: 'nvme.example.com' },
        },
      },
      {},
      '/tmp',
    );
    expect(named.devicePlugin!.cdi).toEqual({ dir: '/tmp/cdi', vendor: 'nvme.example.com' });
  });

  it('needs a scheduler to hold devices through', () => {
    expect(() => parse({ enabled: true }, null)).toThrow(/kubernetes\.device_plugin\.enabled.*set scheduler/);
  });
});
