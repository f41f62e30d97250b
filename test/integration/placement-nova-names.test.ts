/**
 * The provider names, resource classes and traits Berth reports to Placement
 * agree with Nova's own PCI translator, checked by running Nova's code
 * (python3-nova: nova.pci.devspec and nova.compute.pci_placement_translator,
 * test/integration/python/nova_pci_placement.py) on the same device_spec
 * entries and devices Berth's agent discovers on a simulated host.
 *
 * The vectors are Nova's own (nova/tests/unit/compute/test_pci_placement_translator.py:
 * test_resource_class_normalization, test_trait_normalization), plus upper-case
 * hex in addresses and ids, a class os-resource-classes added later
 * (NET_PACKET_RATE_KILOPACKET_PER_SEC), and SR-IOV VFs, which Nova counts on
 * their PF's provider. Nova 26 (Zed) predates HW_PCI_LIVE_MIGRATABLE,
 * HW_PCI_ONE_TIME_USE and OWNER_NOVA, so the traits compared are those the
 * device_spec names (Berth adds its owner trait, Nova COMPUTE_MANAGED_PCI_DEVICE).
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { newUuid, parseHostName } from '../../src/identifiers.js';
import { createLogger } from '../../src/logging.js';
import { ExecRunner } from '../../src/plugins/exec-runner.js';
import { parseAgentConfig } from '../../src/server/agent/config.js';
import { PluginHost } from '../../src/server/agent/plugin-host.js';
import type { DeviceFacts } from '../../src/server/scheduler/domain/device-state.js';
import { newDevice } from '../../src/server/scheduler/domain/device-state.js';
import { desiredProviders } from '../../src/server/scheduler/placement/desired.js';
import { OWNER_TRAIT } from '../../src/server/scheduler/placement/names.js';
import { buildSimHost } from '../../src/sim/host.js';
import { tempDir } from '../helpers/agent.js';
import { available, novaTranslator, PYTHON } from '../helpers/prerequisites.js';

const NODE = parseHostName('host', 'compute-7.example.org');
const have = available(novaTranslator(), "Berth's Placement names against Nova's translator");

/** [resource_class tag, traits tag] per plain function, from Nova's unit-test vectors. */
const VECTORS: Array<[string | null, string | null]> = [
  [null, null],
  ['', ''],
  ['PGPU', 'a'],
  ['pgpu', 'a,b'],
  ['foobar', 'HW_GPU_API_VULKAN'],
  ['custom_foo', 'CUSTOM_FOO'],
  ['CUSTOM_foo', 'custom_bar'],
  ['custom_FOO', 'custom-bar'],
  ['CUSTOM_FOO', 'CUSTOM_a'],
  ['custom-foo', 'a@!#$b123X'],
  ['a###b', 'a!@b,a###b'],
  ['NET_PACKET_RATE_KILOPACKET_PER_SEC', 'HW_NIC_SRIOV'],
];

function runNova(input: unknown): Promise<{
  standard_traits: string[];
  providers: Record<string, { resource_class: string; traits: string[]; devices: string[] }>;
}> {
  return new Promise((resolve, reject) => {
    const child = execFile(
      PYTHON,
      [join(import.meta.dirname, 'python', 'nova_pci_placement.py')],
      { timeout: 60_000, maxBuffer: 8 * 1024 * 1024 },
      (err, stdout, stderr) =>
        err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(JSON.parse(stdout)),
    );
    child.stdin!.end(JSON.stringify(input));
  });
}

describe.skipIf(!have)("Berth's Placement names agree with Nova's PCI translator", () => {
  it('on the device_spec vectors of Nova’s own tests, upper-case hex, and SR-IOV VFs', async () => {
    const dir = await tempDir('berth-nova-names-');
    try {
      // One plain function per vector (its own address: the spec entry names it), ids with hex letters.
      const functions = VECTORS.map((_, i) => ({
        address: `0000:8${i.toString(16)}:00.0`,
        vendorId: '10de',
        productId: `2${i.toString(16)}b6`,
        classCode: '030200',
        driver: 'vfio-pci',
        numaNode: 0,
      }));
      const spec: Array<Record<string, unknown>> = VECTORS.map(([rc, traits], i) => ({
        address: functions[i]!.address,
        ...(rc === null ? {} : { resource_class: rc }),
        ...(traits === null ? {} : { traits }),
      }));
      // SR-IOV: the VFs of one PF, counted on the PF's provider.
      spec.push({ vendor_id: '15b3', product_id: '101e', traits: 'fast' });
      const sim = await buildSimHost(join(dir.path, 'host'), {
        host: NODE,
        pci: {
          functions,
          pfs: [
            {
              address: '0000:af:00.0',
              vendorId: '15b3',
              productId: '101d',
              driver: 'mlx5_core',
              numaNode: 0,
              totalVfs: 4,
              numVfs: 3,
              vf: { productId: '101e', driver: 'vfio-pci' },
            },
          ],
        },
        nvme: [],
        pciDeviceSpec: spec,
        nvmeDeviceSpec: [],
      });
      const config = parseAgentConfig(sim.agentConfig, {}, dir.path);
      const host = await PluginHost.load(config, {
        sysfsRoot: config.sysfsRoot,
        devRoot: config.devRoot,
        stateDir: config.stateDir,
        readOnly: true,
        hostname: NODE,
        runner: new ExecRunner(),
        logger: createLogger({ level: 'silent' }),
      });
      await host.initHost();
      const found = (await host.discover({ strict: true })).devices;
      expect(found).toHaveLength(VECTORS.length + 3);

      const nova = await runNova({
        nodename: NODE,
        device_spec: spec,
        devices: found.map((d) => ({
          address: d.address,
          vendor_id: d.vendorId,
          product_id: d.productId,
          dev_type: d.functionKind === 'VF' ? 'type-VF' : d.functionKind === 'PF' ? 'type-PF' : 'type-PCI',
          parent_addr: d.physfn,
        })),
      });
      const now = new Date().toISOString();
      const berth = desiredProviders(
        found.map((d) => newDevice(NODE, d as unknown as DeviceFacts, newUuid(), now)),
        new Map([[NODE, { name: NODE, connected: true }]]),
        { nodename: (h) => h, standardTraits: new Set(nova.standard_traits), ownsHost: () => true },
      );
      const berthView = Object.fromEntries(
        [...berth.values()].map((p) => [
          p.name,
          {
            resource_class: p.resourceClass,
            traits: p.traits.filter((t) => t !== OWNER_TRAIT),
            devices: p.devices.map((d) => d.address).sort(),
          },
        ]),
      );
      const novaView = Object.fromEntries(
        Object.entries(nova.providers).map(([name, p]) => [
          name,
          { ...p, traits: p.traits.filter((t) => t !== 'COMPUTE_MANAGED_PCI_DEVICE') },
        ]),
      );
      expect(berthView).toEqual(novaView);
      // What was compared, in Nova's words (so a vector that matched nothing cannot pass silently).
      expect(novaView[`${NODE}_0000:AF:00.0`]?.devices).toHaveLength(3);
      expect(novaView[`${NODE}_0000:8A:00.0`]).toEqual({
        resource_class: 'CUSTOM_A_B',
        traits: ['CUSTOM_A_B'],
        devices: ['0000:8a:00.0'],
      });
      expect(novaView[`${NODE}_0000:8B:00.0`]?.resource_class).toBe('NET_PACKET_RATE_KILOPACKET_PER_SEC');
      expect(novaView[`${NODE}_0000:80:00.0`]?.resource_class).toBe('CUSTOM_PCI_10DE_20B6');
    } finally {
      await dir.cleanup();
    }
  }, 90_000);
});
