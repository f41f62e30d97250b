/**
 * Nova's one-time-use devices, scrubbed by Berth and returned (mode
 * clean-one-time-use), on a real Placement. Nova's side is played by hand, as
 * Nova does it: its compute node and device providers (OWNER_NOVA,
 * COMPUTE_MANAGED_PCI_DEVICE, HW_PCI_ONE_TIME_USE), an instance's allocation,
 * `reserved = total` once the device is assigned, then the allocation deleted
 * with the instance. Whether Berth scrubbed is judged from the simulated
 * controller's media (the namespace's backing file), not from Berth's report.
 *
 * Placement here knows HW_PCI_ONE_TIME_USE as a standard trait, as one built
 * with a newer os-traits does (test/helpers/placement.ts).
 */
import { randomUUID } from 'node:crypto';
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SchedulerClient } from '../../src/client/sdk.js';
import { DeviceState } from '../../src/gen/berth/scheduler/v1/device.js';
import type { PlacementOptions } from '../../src/server/scheduler/placement/config.js';
import type { SimHostDefinition } from '../../src/sim/host.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import { getDevice, settledDevice, uuidRef } from '../helpers/invariants.js';
import { type Gate, nvmeGateSync } from '../helpers/nvme-gate.js';
import {
  type PlacementServer,
  providerView,
  startPlacementServer,
  testPlacementOptions,
} from '../helpers/placement.js';
import { available, placementApi } from '../helpers/prerequisites.js';
import { eventually } from '../helpers/wait.js';

const HOST = 'nova-compute-1';
const RC = 'CUSTOM_PCI_144D_A824';
const MIB = 1024 * 1024;
const DEV = { nvme0: '0000:3d:00.0', nvme1: '0000:3e:00.0', nvme2: '0000:3f:00.0' } as const;
const SECRET = Buffer.from('TENANT-OF-NOVA-'.repeat(300).slice(0, 4096));
const have = available(placementApi(), "Berth cleaning Nova's one-time-use devices");

function hostDefinition(): SimHostDefinition {
  const ctrl = (name: keyof typeof DEV, i: number) => ({
    address: DEV[name],
    vendorId: '144d',
    productId: 'a824',
    classCode: '010802',
    numaNode: 0,
    controller: name,
    model: `OTU ${name}`,
    serial: `OTU${i}`,
    caps: { ces: true },
    namespaces: [{ nsid: 1, sizeBytes: MIB }],
    sanitizeMs: 200,
  });
  return {
    host: HOST,
    pci: {},
    nvme: [ctrl('nvme0', 0), ctrl('nvme1', 1), ctrl('nvme2', 2)],
    pciDeviceSpec: [],
    nvmeDeviceSpec: [{ vendor_id: '144d', one_time_use: true }],
  };
}

describe.skipIf(!have)("Nova's one-time-use devices: Berth scrubs them and returns them", () => {
  let placement: PlacementServer;
  let c: Cluster;
  let client: SchedulerClient;
  let gate: Gate;
  let root: string;
  const providers = new Map<string, string>();

  beforeAll(async () => {
    placement = await startPlacementServer({
      standardTraits: ['HW_PCI_ONE_TIME_USE', 'HW_PCI_LIVE_MIGRATABLE'],
    });
    // nova-compute's side: its compute node provider, and a provider per one-time-use device.
    root = randomUUID();
    await placement.ok('POST', '/resource_providers', { name: HOST, uuid: root });
    await placement.ok('PUT', `/resource_classes/${RC}`);
    for (const address of Object.values(DEV)) {
      const uuid = randomUUID();
      const name = `${HOST}_${address.toUpperCase()}`;
      await placement.ok('POST', '/resource_providers', { name, uuid, parent_provider_uuid: root });
      await placement.ok('PUT', `/resource_providers/${uuid}/traits`, {
        resource_provider_generation: 0,
        traits: ['COMPUTE_MANAGED_PCI_DEVICE', 'HW_PCI_ONE_TIME_USE', 'OWNER_NOVA'],
      });
      await placement.ok('PUT', `/resource_providers/${uuid}/inventories`, {
        resource_provider_generation: 1,
        inventories: { [RC]: { total: 1, max_unit: 1 } },
      });
      providers.set(address, uuid);
    }
    const options: PlacementOptions = testPlacementOptions(placement.url, {
      mode: 'clean-one-time-use',
      createRoots: false,
    });
    c = await startCluster([hostDefinition()], {
      scheduler: { placement: options },
      agentConfig: (raw) => {
        const nvme = raw.nvme as Record<string, unknown>;
        gate ??= nvmeGateSync(`${String(raw.state_dir)}/../gate`, String(nvme.nvme_cli), 'sanitize');
        return { ...raw, nvme: { ...nvme, nvme_cli: gate.nvmeCli } };
      },
    });
    client = c.client;
    await c.waitForDevices(HOST, 3);
  }, 120_000);

  afterAll(async () => {
    gate?.open();
    await c?.stop();
    await placement?.stop();
  });

  const media = (ctrl: keyof typeof DEV) => join(c.host(HOST).sim.devRoot, `${ctrl}n1`);

  async function plant(ctrl: keyof typeof DEV): Promise<void> {
    const fh = await open(media(ctrl), 'r+');
    try {
      await fh.write(SECRET, 0, SECRET.length, 8192);
    } finally {
      await fh.close();
    }
  }

  async function holdsSecret(ctrl: keyof typeof DEV): Promise<boolean> {
    const fh = await open(media(ctrl), 'r');
    try {
      const buf = Buffer.alloc(SECRET.length);
      await fh.read(buf, 0, buf.length, 8192);
      return buf.equals(SECRET);
    } finally {
      await fh.close();
    }
  }

  const inventory = async (address: string) => {
    const v = await providerView(placement, `${HOST}_${address.toUpperCase()}`);
    return { generation: v!.generation, ...v!.inventories[RC]! };
  };

  /** Nova: the scheduler's allocation for an instance, then the compute node reserves the one-time-use device. */
  async function novaBoots(address: string): Promise<string> {
    const instance = randomUUID();
    await placement.ok('PUT', `/allocations/${instance}`, {
      allocations: { [providers.get(address)!]: { resources: { [RC]: 1 } } },
      project_id: randomUUID(),
      user_id: randomUUID(),
      consumer_generation: null,
      consumer_type: 'INSTANCE',
    });
    const inv = await inventory(address);
    await placement.ok('PUT', `/resource_providers/${providers.get(address)}/inventories`, {
      resource_provider_generation: inv.generation,
      inventories: { [RC]: { total: 1, max_unit: 1, reserved: 1 } },
    });
    return instance;
  }

  /** Nova deletes the instance: its allocation goes, `reserved` stays (Nova never un-reserves). */
  const novaDeletes = (instance: string) => placement.ok('DELETE', `/allocations/${instance}`);

  /** One whole pass of Berth over Placement, now: what it did. */
  const pass = async () => (await client.placement.syncPlacement({ dryRun: false })).changes;

  it('never scrubs or un-reserves a device while its instance holds an allocation; scrubs it, with proof, once it goes', async () => {
    const address = DEV.nvme0;
    const instance = await novaBoots(address);
    await plant('nvme0');
    // A full pass with the instance there: nothing for this provider, and the tenant's data untouched.
    for (const dryRun of [true, false]) {
      const changes = (await client.placement.syncPlacement({ dryRun })).changes;
      expect(changes.filter((x) => x.deviceAddresses.includes(address))).toEqual([]);
    }
    expect(await holdsSecret('nvme0')).toBe(true);
    expect((await getDevice(client, HOST, address)).lastCleanup).toBeUndefined();
    expect(await inventory(address)).toMatchObject({ reserved: 1 });
    const shown = await getDevice(client, HOST, address);
    expect(shown.placementProviderUuid).toBe(providers.get(address));
    // Nova's (random) provider uuid → Berth's device, through the port.
    expect(await c.scheduler.placement!.devicesOfProvider(providers.get(address)!)).toEqual([
      { deviceUuid: shown.uuid, host: HOST, address },
    ]);
    expect(shown.placementNote).toMatch(new RegExp(`in use in Nova \\(allocations of ${instance}\\)`));

    await novaDeletes(instance);
    const returned = await eventually(
      () => inventory(address),
      (inv) => inv.reserved === 0,
      60_000,
    );
    expect(returned.total).toBe(1);
    // Returned only once the media is clean, by a cleanup Berth proved.
    expect(await holdsSecret('nvme0')).toBe(false);
    const d = await getDevice(client, HOST, address);
    expect(d.deviceState).toBe(DeviceState.DEVICE_STATE_AVAILABLE);
    expect(d.lastCleanup?.proof?.method).toBeTruthy();
    expect(d.burned).toBe(false);
  }, 120_000);

  it('leaves a provider whose scrub failed reserved (the reason in device show), and returns it after a proven cleanup', async () => {
    const address = DEV.nvme1;
    await c.host(HOST).sim.setFault('nvme1', 'sanitize', { mode: 'sanitize-fails' });
    const instance = await novaBoots(address);
    await plant('nvme1');
    await novaDeletes(instance);
    const failed = await eventually(
      () => getDevice(client, HOST, address),
      (d) => d.deviceState === DeviceState.DEVICE_STATE_ERROR,
      60_000,
    );
    expect(failed.errorReason).toMatch(/failed/);
    // A whole pass after the failure: still reserved, and why is shown.
    await pass();
    expect(await inventory(address)).toMatchObject({ reserved: 1 });
    expect(await holdsSecret('nvme1')).toBe(true);
    const shown = await getDevice(client, HOST, address);
    expect(shown.placementNote).toMatch(/scrub failed: .*the provider stays reserved/);
    const status = (await client.placement.getPlacementStatus({})).status!;
    expect(
      status.problems.some(
        (p) => p.provider === `${HOST}_${address.toUpperCase()}` && /scrub failed/.test(p.note),
      ),
    ).toBe(true);

    // The operator fixes it and cleans: proven, so Berth returns the device.
    await c.host(HOST).sim.setFault('nvme1', 'sanitize', null);
    await client.devices.cleanDevice({ device: uuidRef(failed.uuid), requestId: '' });
    const clean = await settledDevice(client, HOST, address);
    expect(clean.deviceState).toBe(DeviceState.DEVICE_STATE_AVAILABLE);
    await eventually(
      () => inventory(address),
      (inv) => inv.reserved === 0,
      60_000,
    );
    expect(await holdsSecret('nvme1')).toBe(false);
  }, 120_000);

  it('scrubs again when the provider changed while it was being scrubbed, and un-reserves with the generation it read', async () => {
    const address = DEV.nvme2;
    const before = gate.calls();
    gate.close();
    const instance = await novaBoots(address);
    await plant('nvme2');
    await novaDeletes(instance);
    await gate.reached();
    // While Berth scrubs, someone writes the provider (a trait): its generation moves.
    const v = (await providerView(placement, `${HOST}_${address.toUpperCase()}`))!;
    await placement.ok('PUT', '/traits/CUSTOM_TOUCHED');
    await placement.ok('PUT', `/resource_providers/${v.uuid}/traits`, {
      resource_provider_generation: v.generation,
      traits: [...v.traits, 'CUSTOM_TOUCHED'],
    });
    gate.open();
    await eventually(
      () => inventory(address),
      (inv) => inv.reserved === 0,
      60_000,
    );
    // Two scrubs: the one running when the provider changed, and one after it.
    expect(gate.calls() - before).toBeGreaterThanOrEqual(2);
    expect(await holdsSecret('nvme2')).toBe(false);
  }, 120_000);
});
