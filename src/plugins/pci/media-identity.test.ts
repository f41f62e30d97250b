/**
 * A PCI function's media identity at discovery: its card's Device Serial
 * Number (each function of a multi-function card, and each VF, its own key),
 * else its slot; and the agent giving the slot's identity to the devices of a
 * driver that reports none or a malformed one.
 */
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { tempDir } from '../../../test/helpers/agent.js';
import { parseAgentConfig } from '../../server/agent/config.js';
import { PluginHost } from '../../server/agent/plugin-host.js';
import { buildSysfs, type SimHostSpec } from '../../sim/sysfs/index.js';
import { type HostContext, instantiateDriver } from '../driver.js';
import { ExecRunner } from '../exec-runner.js';
import type { DiscoveredDevice } from '../types.js';
import { pciDriver } from './pci-driver.js';

const dirs: { cleanup: () => Promise<void> }[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await d.cleanup();
});

const SPEC: SimHostSpec = {
  functions: [
    // A GPU and its audio function: one card, one serial.
    {
      address: '0000:65:00.0',
      vendorId: '10de',
      productId: '25b6',
      classCode: '030200',
      driver: 'vfio-pci',
      deviceSerialNumber: 'a0-b1-c2-d3-e4-f5-06-17',
      subsystemVendorId: '10de',
      subsystemProductId: '1612',
    },
    {
      address: '0000:65:00.1',
      vendorId: '10de',
      productId: '228b',
      classCode: '040300',
      driver: 'vfio-pci',
      deviceSerialNumber: 'a0-b1-c2-d3-e4-f5-06-17',
    },
    // A consumer card: no serial.
    {
      address: '0000:66:00.0',
      vendorId: '10de',
      productId: '2204',
      classCode: '030000',
      driver: 'vfio-pci',
      subsystemVendorId: '1458',
      subsystemProductId: '403b',
    },
  ],
  pfs: [
    {
      address: '0000:3b:00.0',
      vendorId: '8086',
      productId: '1572',
      driver: 'i40e',
      deviceSerialNumber: '00-1b-21-ff-ff-aa-bb-cc',
      totalVfs: 4,
      numVfs: 2,
      vf: { productId: '154c', driver: 'vfio-pci' },
    },
    {
      address: '0000:5e:00.0',
      vendorId: '8086',
      productId: '1572',
      driver: 'i40e',
      totalVfs: 4,
      numVfs: 1,
      vf: { productId: '154c', driver: 'vfio-pci' },
    },
  ],
};

async function tree(): Promise<string> {
  const dir = await tempDir('berth-pci-media-');
  dirs.push(dir);
  await buildSysfs(join(dir.path, 'sys'), SPEC);
  return dir.path;
}

const ctxOf = (root: string): HostContext => ({
  sysfsRoot: join(root, 'sys'),
  devRoot: join(root, 'dev'),
  stateDir: join(root, 'state'),
  hostname: 'gpu-host',
  runner: new ExecRunner(),
  logger: pino({ level: 'silent' }),
});

const byAddress = (devices: DiscoveredDevice[]) => new Map(devices.map((d) => [d.address, d.media]));

describe('PCI media identity', () => {
  it('the card’s serial and the function where there is one, VFs by their PF’s serial and index, else the slot', async () => {
    const root = await tree();
    const driver = instantiateDriver(pciDriver, {
      device_spec: [{ vendor_id: '10de' }, { vendor_id: '8086', product_id: '154c' }],
    });
    const media = byAddress((await driver.discover(ctxOf(root))).devices);
    expect(media.get('0000:65:00.0')).toEqual({
      key: 'pci-dsn:10de:a0-b1-c2-d3-e4-f5-06-17:00.0',
      kind: 'PCI_DSN',
      subsystemNqn: '',
      serial: '',
      model: '',
      namespaces: [],
      deviceSerialNumber: 'a0-b1-c2-d3-e4-f5-06-17',
    });
    expect(media.get('0000:65:00.1')?.key).toBe('pci-dsn:10de:a0-b1-c2-d3-e4-f5-06-17:00.1');
    expect(media.get('0000:66:00.0')).toMatchObject({
      key: 'pci-slot:gpu-host:0000:66:00.0:10de:2204:1458:403b',
      kind: 'PCI_SLOT',
      deviceSerialNumber: '',
    });
    expect(media.get('0000:3b:02.0')?.key).toBe('pci-dsn:8086:00-1b-21-ff-ff-aa-bb-cc:00.0:vf0');
    expect(media.get('0000:3b:02.1')?.key).toBe('pci-dsn:8086:00-1b-21-ff-ff-aa-bb-cc:00.0:vf1');
    // A VF of a PF without a serial follows its slot.
    const vf = [...media.keys()].find((a) => a.startsWith('0000:5e:'))!;
    expect(media.get(vf)?.key).toBe(`pci-slot:gpu-host:${vf}:8086:154c:8086:1572`);
    // Every device its own key: no two are one unit of tenancy.
    const keys = [...media.values()].map((m) => m!.key);
    expect(new Set(keys).size).toBe(keys.length);
  });

  it('the agent gives the slot’s identity to a driver’s device without one, or with a malformed one', async () => {
    const root = await tree();
    const config = parseAgentConfig(
      {
        host: 'gpu-host',
        sysfs_root: join(root, 'sys'),
        state_dir: join(root, 'state'),
        auth: { mode: 'none' },
        enabled_drivers: [join(process.cwd(), 'test/fixtures/drivers/no-media.ts')],
        'no-media': { device_spec: [{ vendor_id: '10de' }] },
      },
      {},
      process.cwd(),
    );
    const lines: string[] = [];
    const logger = pino({ level: 'warn' }, { write: (l: string) => void lines.push(l) });
    const host = await PluginHost.load(config, { ...ctxOf(root), logger });
    const media = byAddress((await host.discover({ strict: true })).devices);
    expect(media.get('0000:65:00.0')?.key).toBe('pci-slot:gpu-host:0000:65:00.0:10de:25b6:10de:1612');
    expect(media.get('0000:66:00.0')?.key).toBe('pci-slot:gpu-host:0000:66:00.0:10de:2204:1458:403b');
    expect(lines.map((l) => (JSON.parse(l) as { msg: string }).msg).join('\n')).toMatch(
      /no-media reported an unusable media identity \(media key "" is not 1-512/,
    );
  });
});
