import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../errors.js';
import { normalizeResourceClass, normalizeTrait } from './placement-names.js';

const W = 'pci.device_spec[0].traits[0]';

describe('normalizeResourceClass', () => {
  it.each([
    ['foo', 'CUSTOM_FOO'],
    ['foo-bar', 'CUSTOM_FOO_BAR'],
    ['foo--bar..baz', 'CUSTOM_FOO_BAR_BAZ'], // runs of non-alphanumerics become one _
    ['foo__bar', 'CUSTOM_FOO_BAR'],
    ['gpu a100', 'CUSTOM_GPU_A100'],
    ['CUSTOM_GPU_A100', 'CUSTOM_GPU_A100'],
    ['custom_gpu', 'CUSTOM_GPU'],
    ['pci_device', 'PCI_DEVICE'], // a standard class (Nova upper-cases first)
    ['VGPU', 'VGPU'],
    ['NET_PACKET_RATE_KILOPACKET_PER_SEC', 'NET_PACKET_RATE_KILOPACKET_PER_SEC'], // os-resource-classes 1.1
    ['net_packet_rate_egr_kilopacket_per_sec', 'NET_PACKET_RATE_EGR_KILOPACKET_PER_SEC'],
    ['  fpga  ', 'FPGA'],
    ['é', 'CUSTOM__'],
  ])('%j -> %j', (value, expected) => {
    expect(normalizeResourceClass(value, 'x')).toBe(expected);
  });

  it.each([[''], ['  '], ['CUSTOM_'], ['CUSTOM_A-B'], ['x'.repeat(300)], [5 as unknown as string]])(
    'refuses %j, naming where',
    (value) => {
      expect(() => normalizeResourceClass(value, 'pci.device_spec[4].resource_class')).toThrow(ConfigError);
      expect(() => normalizeResourceClass(value, 'pci.device_spec[4].resource_class')).toThrow(
        'pci.device_spec[4].resource_class',
      );
    },
  );
});

describe('normalizeTrait', () => {
  it.each([
    ['foo', 'CUSTOM_FOO'],
    ['foo-bar', 'CUSTOM_FOO_BAR'],
    ['CUSTOM_FAST', 'CUSTOM_FAST'],
    ['custom_fast', 'CUSTOM_FAST'],
    ['HW_NVME_CES', 'HW_NVME_CES'],
    ['OWNER_BERTH', 'OWNER_BERTH'],
    ['COMPUTE_NET_VIF_MODEL_VIRTIO', 'COMPUTE_NET_VIF_MODEL_VIRTIO'],
    ['STORAGE_DISK_SSD', 'STORAGE_DISK_SSD'],
    ['hw_nvme_ces', 'CUSTOM_HW_NVME_CES'], // not exactly a standard name: custom, as in Nova
    ['HW_NO_SUCH_TRAIT', 'CUSTOM_HW_NO_SUCH_TRAIT'], // upper case, but not in os-traits: custom, as in Nova
    ['COMPUTE_MANAGED_PCI_DEVICE', 'COMPUTE_MANAGED_PCI_DEVICE'], // os-traits
    ['HW_ONE_TIME_USE', 'HW_ONE_TIME_USE'], // Berth's own
    [' x ', 'CUSTOM_X'],
    ['x'.repeat(248), `CUSTOM_${'X'.repeat(248)}`],
  ])('%j -> %j', (value, expected) => {
    expect(normalizeTrait(value, W)).toBe(expected);
  });

  it.each([[''], [' '], ['CUSTOM_'], ['CUSTOM_A.B'], ['x'.repeat(249)], [null as unknown as string]])(
    'refuses %j, naming where and the value',
    (value) => {
      expect(() => normalizeTrait(value, W)).toThrow(ConfigError);
      expect(() => normalizeTrait(value, W)).toThrow(W);
    },
  );
});
