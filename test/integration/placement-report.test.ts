/**
 * Berth reporting to a real OpenStack Placement (Debian's placement-api 8.0.0,
 * SQLite, noauth2), through a TCP proxy that can cut the link. A scheduler and
 * the agent of one simulated host (the demo host: 4 SR-IOV VFs of one PF, a
 * one-time-use GPU, four NVMe controllers) plus one plain function that can be
 * unplugged. Every assertion reads Placement itself.
 *
 * - providers named and classed as Nova's translator names them, under a root
 *   Berth creates (no Nova here); unknown standard traits made CUSTOM_;
 * - inventory, traits and `reserved` through every state change of a device's
 *   life, with a poller that reads Placement and then Berth all along: never
 *   reserved = 0 in Placement while Berth holds the device back;
 * - a concurrent writer bumping a provider's generation (409, re-read, retry);
 * - a Placement outage: Berth keeps working, the lag shows, and the catch-up
 *   writes the holds first, in order;
 * - a device removed while Placement holds an allocation against it;
 * - GET /allocation_candidates lists exactly what Berth would hand out.
 */
import { randomUUID } from 'node:crypto';
import { type Logger, pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SchedulerClient } from '../../src/client/sdk.js';
import { type Device, DeviceState, DeviceStatus } from '../../src/gen/berth/scheduler/v1/device.js';
import type { PlacementStatus } from '../../src/gen/berth/scheduler/v1/placement.js';
import type { PlacementOptions } from '../../src/server/scheduler/placement/config.js';
import { demoHostDefinition, type SimHostDefinition } from '../../src/sim/host.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import {
  createAndBind,
  createClassProfile,
  createNvmeProfile,
  getDevice,
  listChecked,
  settledDevice,
  uuidRef,
} from '../helpers/invariants.js';
import { type Gate, nvmeGateSync } from '../helpers/nvme-gate.js';
import {
  type PlacementServer,
  providerView,
  startPlacementServer,
  testPlacementOptions,
} from '../helpers/placement.js';
import { available, placementApi } from '../helpers/prerequisites.js';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js';
import { eventually } from '../helpers/wait.js';

const HOST = 'sim-host-1';
const PF = '0000:3b:00.0';
const GPU = '0000:3c:00.0';
const NVME = { nvme0: '0000:3d:00.0', nvme1: '0000:3e:00.0', nvme2: '0000:3f:00.0', nvme3: '0000:40:00.0' };
const PLUG = '0000:50:00.0';
const PLUG_RC = 'CUSTOM_PCI_1AF4_1041';
const VF_RC = 'CUSTOM_PCI_8086_154C';
const rp = (address: string) => `${HOST}_${address.toUpperCase()}`;
const have = available(placementApi(), 'Berth reporting to Placement');

function hostDefinition(): SimHostDefinition {
  const def = demoHostDefinition(HOST);
  def.pci.functions = [
    ...(def.pci.functions ?? []),
    {
      address: PLUG,
      vendorId: '1af4',
      productId: '1041',
      classCode: '020000',
      driver: 'vfio-pci',
      numaNode: 0,
    },
  ];
  def.pciDeviceSpec = [...def.pciDeviceSpec, { vendor_id: '1af4', product_id: '1041' }];
  def.nvme = def.nvme.map((n) => ({ ...n, sanitizeMs: 200 }));
  return def;
}

describe.skipIf(!have)('Berth reports its devices to Placement', () => {
  let placement: PlacementServer;
  let proxy: TcpProxy;
  let c: Cluster;
  let client: SchedulerClient;
  let gate: Gate;
  const logs: string[] = [];
  let bindToReserveMs = 0;

  beforeAll(async () => {
    placement = await startPlacementServer();
    proxy = await startTcpProxy(`127.0.0.1:${placement.port}`);
    const options: PlacementOptions = testPlacementOptions(`http://${proxy.address}`);
    const logger: Logger = pino({ level: 'info' }, { write: (l: string) => void logs.push(l) });
    c = await startCluster([hostDefinition()], {
      scheduler: { placement: options, logger, metricsListen: '127.0.0.1:0' },
      agentConfig: (raw) => {
        const nvme = raw.nvme as Record<string, unknown>;
        gate ??= nvmeGateSync(`${String(raw.state_dir)}/../gate`, String(nvme.nvme_cli), 'sanitize');
        return { ...raw, nvme: { ...nvme, nvme_cli: gate.nvmeCli } };
      },
    });
    client = c.client;
    await c.waitForDevices(HOST, 10);
    await inStep();
  }, 120_000);

  afterAll(async () => {
    gate?.open();
    await c?.stop();
    await proxy?.close();
    await placement?.stop();
  });

  const status = async (): Promise<PlacementStatus> =>
    (await client.placement.getPlacementStatus({})).status!;

  /** Placement shows every change Berth has committed (pending none, applied up to Berth's revision). */
  async function inStep(): Promise<void> {
    const revision = await c.scheduler.useCases.currentRevision();
    await eventually(
      status,
      (s) => s.reachable && s.pendingProviders === 0 && s.appliedRevision >= revision,
      30_000,
    );
  }

  const reserved = async (address: string, rc?: string) => {
    const v = await providerView(placement, rp(address));
    if (!v) return null;
    const inv = rc ? v.inventories[rc] : Object.values(v.inventories)[0];
    return inv?.reserved ?? null;
  };

  const untilReserved = (address: string, n: number, rc?: string) =>
    eventually(
      () => reserved(address, rc),
      (r) => r === n,
      30_000,
    );

  it('names and classes each provider as Nova does, under a root provider for the host', async () => {
    const root = await providerView(placement, HOST);
    expect(root?.parent).toBeNull();
    expect(root?.traits).toEqual(['CUSTOM_OWNER_BERTH']);
    // The four VFs count on their PF's provider, as Nova's translator counts them.
    const vfs = await providerView(placement, rp(PF));
    expect(vfs).toMatchObject({ parent: root!.uuid });
    expect(vfs!.inventories[VF_RC]).toMatchObject({ total: 4, reserved: 0, max_unit: 4 });
    // Debian's os-traits predate HW_PCI_LIVE_MIGRATABLE and HW_PCI_ONE_TIME_USE: made CUSTOM_, as Nova's normalisation does.
    expect(vfs!.traits).toEqual(['CUSTOM_HW_PCI_LIVE_MIGRATABLE', 'CUSTOM_OWNER_BERTH']);
    const gpu = await providerView(placement, rp(GPU));
    expect(gpu!.inventories.CUSTOM_PCI_10DE_25B6).toMatchObject({ total: 1, reserved: 0 });
    expect(gpu!.traits).toEqual(['CUSTOM_HW_PCI_ONE_TIME_USE', 'CUSTOM_OWNER_BERTH']);
    // NVMe devices get Nova's class (CUSTOM_PCI_…), not Berth's own CUSTOM_NVME_….
    const nvme0 = await providerView(placement, rp(NVME.nvme0));
    expect(Object.keys(nvme0!.inventories)).toEqual(['CUSTOM_PCI_144D_A824']);
    expect(nvme0!.traits).toContain('CUSTOM_HW_NVME_CES');
    // The uuid is what `device show` says, and what Berth derives from the name.
    const shown = await getDevice(client, HOST, NVME.nvme0);
    expect(shown.placementProviderUuid).toBe(nvme0!.uuid);
    expect(shown.placementProviderName).toBe(rp(NVME.nvme0));
    expect(shown.placementSyncedAt).toBeInstanceOf(Date);
    const vf = (await listChecked(client, HOST)).find((d) => d.physfn === PF)!;
    expect((await getDevice(client, HOST, vf.address)).placementProviderUuid).toBe(vfs!.uuid);
    // The port's lookups, provider uuid → devices (what a Cyborg ARQ's device_rp_uuid names).
    const port = c.scheduler.placement!;
    expect(await port.devicesOfProvider(nvme0!.uuid)).toEqual([
      { deviceUuid: shown.uuid, host: HOST, address: NVME.nvme0 },
    ]);
    expect((await port.devicesOfProvider(vfs!.uuid)).map((d) => d.address)).toHaveLength(4);
    // Near its host: from the store alone.
    expect((await port.devicesOfProvider(vfs!.uuid, HOST)).map((d) => d.address)).toHaveLength(4);
    expect(await port.devicesOfProvider(root!.uuid)).toEqual([]);
  }, 60_000);

  it('follows a cleaned device through its life: reserved once bound, through release and scrub, 0 only after the proof', async () => {
    const addr = NVME.nvme0;
    const profile = await createNvmeProfile(client, 'nvme0');
    gate.close();
    const arq = await createAndBind(client, profile, 'vm-life', HOST);
    // How long Placement lags behind the bind's answer (read as fast as Placement answers).
    const boundAt = performance.now();
    let reads = 0;
    while ((await reserved(addr)) !== 1) {
      if (++reads > 2_000) throw new Error('Placement never showed the bind');
    }
    bindToReserveMs = Math.round(performance.now() - boundAt);
    expect((await getDevice(client, HOST, addr)).deviceState).toBe(DeviceState.DEVICE_STATE_ALLOCATED);

    // A poller reads Placement, then Berth, from the moment the bind shows
    // there until the proof is accepted (the tenant's whole stay, its release, the scrub):
    // whenever Placement says reserved 0, Berth (read after it) must say available.
    let polling = true;
    const violations: string[] = [];
    let samples = 0;
    const poller = (async () => {
      while (polling) {
        const r = await reserved(addr);
        const d = await getDevice(client, HOST, addr);
        samples++;
        if (r === 0 && d.deviceState !== DeviceState.DEVICE_STATE_AVAILABLE) {
          violations.push(`Placement reserved 0 while Berth says ${DeviceState[d.deviceState]}`);
        }
      }
    })();

    await client.arqs.deleteAcceleratorRequests({ uuids: [arq.uuid], instanceUuid: '' });
    await gate.reached();
    // The cleanup is held inside the sanitize: Berth cleaning, Placement reserved.
    const cleaning = await eventually(
      () => getDevice(client, HOST, addr),
      (d) => d.deviceState === DeviceState.DEVICE_STATE_CLEANING,
      30_000,
    );
    expect(cleaning.reserved).toBe(1);
    await inStep();
    expect(await reserved(addr)).toBe(1);

    gate.open();
    await untilReserved(addr, 0);
    // Un-reserved only after the proof was accepted.
    const d = await getDevice(client, HOST, addr);
    expect(d.deviceState).toBe(DeviceState.DEVICE_STATE_AVAILABLE);
    expect(d.lastCleanup?.proof?.method).toBeTruthy();
    polling = false;
    await poller;
    expect(samples).toBeGreaterThan(3);
    expect(violations).toEqual([]);
    console.log(
      `placement: bind answered → reserved=1 read back from Placement: ${bindToReserveMs} ms; ${samples} samples, no violation`,
    );

    // The operator's switch.
    await client.devices.setDeviceStatus({
      device: uuidRef(d.uuid),
      status: DeviceStatus.DEVICE_STATUS_MAINTAINING,
    });
    await untilReserved(addr, 1);
    await client.devices.setDeviceStatus({
      device: uuidRef(d.uuid),
      status: DeviceStatus.DEVICE_STATUS_ENABLED,
    });
    await untilReserved(addr, 0);
  }, 120_000);

  it('keeps a device whose cleanup failed reserved, until a cleanup proves erasure', async () => {
    const addr = NVME.nvme1;
    const profile = await createNvmeProfile(client, 'nvme1');
    await c.host(HOST).sim.setFault('nvme1', 'sanitize', { mode: 'sanitize-fails' });
    const arq = await createAndBind(client, profile, 'vm-fail', HOST);
    await client.arqs.deleteAcceleratorRequests({ uuids: [arq.uuid], instanceUuid: '' });
    const failed = await settledDevice(client, HOST, addr);
    expect(failed.deviceState).toBe(DeviceState.DEVICE_STATE_ERROR);
    await inStep();
    expect(await reserved(addr)).toBe(1);

    await c.host(HOST).sim.setFault('nvme1', 'sanitize', null);
    await client.devices.cleanDevice({ device: uuidRef(failed.uuid), requestId: '' });
    const clean = await eventually(
      () => getDevice(client, HOST, addr),
      (d) => d.deviceState === DeviceState.DEVICE_STATE_AVAILABLE,
      30_000,
    );
    expect(clean.lastCleanup?.proof?.method).toBeTruthy();
    await untilReserved(addr, 0);
  }, 90_000);

  it('keeps a used one-time-use device reserved until the operator releases it', async () => {
    const profile = await createClassProfile(client, 'gpu', 'CUSTOM_PCI_10DE_25B6');
    const arq = await createAndBind(client, profile, 'vm-gpu', HOST);
    await untilReserved(GPU, 1);
    await client.arqs.deleteAcceleratorRequests({ uuids: [arq.uuid], instanceUuid: '' });
    const burned = await eventually(
      () => getDevice(client, HOST, GPU),
      (d) => d.deviceState === DeviceState.DEVICE_STATE_AVAILABLE && d.burned,
      30_000,
    );
    await inStep();
    expect(await reserved(GPU)).toBe(1);
    await client.devices.releaseDevice({ device: uuidRef(burned.uuid), generation: undefined });
    await untilReserved(GPU, 0);
  }, 60_000);

  it('reserves every device of a host whose agent Berth cannot reach, and returns them when it is back', async () => {
    await c.host(HOST).stop();
    await eventually(
      () => client.hosts.getHost({ name: HOST }),
      (r) => r.host?.connected === false,
      30_000,
    );
    await untilReserved(NVME.nvme2, 1);
    await untilReserved(PF, 4);
    await c.host(HOST).start();
    await c.waitForDevices(HOST, 10);
    await untilReserved(NVME.nvme2, 0);
    await untilReserved(PF, 0);
  }, 90_000);

  it('re-reads a provider another writer changed (409 on the generation) and writes again', async () => {
    const addr = NVME.nvme2;
    const before = (await status()).generationConflicts;
    const v = (await providerView(placement, rp(addr)))!;
    // Another writer comes first: Berth's cached generation is now stale.
    await placement.ok('PUT', '/traits/CUSTOM_OTHER_WRITER');
    await placement.ok('PUT', `/resource_providers/${v.uuid}/traits`, {
      resource_provider_generation: v.generation,
      traits: [...v.traits, 'CUSTOM_OTHER_WRITER'],
    });
    const d = await getDevice(client, HOST, addr);
    await client.devices.setDeviceStatus({
      device: uuidRef(d.uuid),
      status: DeviceStatus.DEVICE_STATUS_MAINTAINING,
    });
    await untilReserved(addr, 1);
    expect((await status()).generationConflicts).toBeGreaterThan(before);
    // Berth owns its providers' traits: the other writer's goes (traits belong in the device_spec).
    expect((await providerView(placement, rp(addr)))!.traits).not.toContain('CUSTOM_OTHER_WRITER');
    await client.devices.setDeviceStatus({
      device: uuidRef(d.uuid),
      status: DeviceStatus.DEVICE_STATUS_ENABLED,
    });
    await untilReserved(addr, 0);
  }, 60_000);

  it('keeps working while Placement is down, shows the lag, and catches up holds first', async () => {
    const released = NVME.nvme3;
    const releasedDevice = await getDevice(client, HOST, released);
    await client.devices.setDeviceStatus({
      device: uuidRef(releasedDevice.uuid),
      status: DeviceStatus.DEVICE_STATUS_MAINTAINING,
    });
    await untilReserved(released, 1);
    const heldRp = (await providerView(placement, rp(PF)))!;
    const releasedRp = (await providerView(placement, rp(released)))!;

    proxy.cut();
    // Berth goes on: a release (which Placement must not see before the hold) and a bind.
    await client.devices.setDeviceStatus({
      device: uuidRef(releasedDevice.uuid),
      status: DeviceStatus.DEVICE_STATUS_ENABLED,
    });
    const vfProfile = await createClassProfile(client, 'one-vf', VF_RC);
    await createAndBind(client, vfProfile, 'vm-outage', HOST);
    const down = await eventually(
      status,
      (s) => !s.reachable && s.pendingProviders >= 2 && s.lagSeconds > 0,
      30_000,
    );
    expect(down.lastError).toMatch(/does not answer/);
    expect(down.unreachableSince).toBeInstanceOf(Date);
    expect(logs.join('')).toMatch(/Placement does not answer: Berth keeps working/);
    const metrics = await (await fetch(`http://${c.scheduler.metricsAddress}/metrics`)).text();
    expect(metrics).toMatch(/^berth_placement_reachable\{[^}]*\} 0$/m);
    expect(Number(/^berth_placement_lag_seconds\{[^}]*\} ([\d.e+-]+)$/m.exec(metrics)?.[1])).toBeGreaterThan(
      0,
    );
    expect(
      Number(/^berth_placement_pending_providers\{[^}]*\} (\d+)$/m.exec(metrics)?.[1]),
    ).toBeGreaterThanOrEqual(2);

    const mark = placement.log().length;
    proxy.restore();
    await inStep();
    expect(await reserved(PF)).toBe(1);
    expect(await reserved(released)).toBe(0);
    expect(logs.join('')).toMatch(/Placement answers again after \d+ s: catching up/);
    // The catch-up wrote the hold (the VF bound during the outage) before the release.
    const after = placement.log().slice(mark);
    const holdAt = after.indexOf(`PUT /resource_providers/${heldRp.uuid}/inventories`);
    const releaseAt = after.indexOf(`PUT /resource_providers/${releasedRp.uuid}/inventories`);
    expect(holdAt).toBeGreaterThanOrEqual(0);
    expect(releaseAt).toBeGreaterThan(holdAt);
  }, 90_000);

  it('keeps the provider of a device that went away while Placement holds an allocation against it, and says so', async () => {
    const v = (await providerView(placement, rp(PLUG)))!;
    const consumer = randomUUID();
    // A consumer of Placement (Nova's scheduler, say) allocates the device.
    await placement.ok('PUT', `/allocations/${consumer}`, {
      allocations: { [v.uuid]: { resources: { [PLUG_RC]: 1 } } },
      project_id: randomUUID(),
      user_id: randomUUID(),
      consumer_generation: null,
      consumer_type: 'INSTANCE',
    });
    await c.host(HOST).sim.sysfs.removeFunction(PLUG);
    await c.host(HOST).agent!.rediscover();
    const held = await eventually(status, (s) => s.held.some((h) => h.provider === rp(PLUG)), 30_000);
    expect(held.held.find((h) => h.provider === rp(PLUG))?.consumers).toEqual([consumer]);
    expect(await reserved(PLUG)).toBe(1);
    const shown = await getDevice(client, HOST, PLUG);
    expect(shown.placementNote).toMatch(
      new RegExp(`provider kept: Placement holds allocations of ${consumer}`),
    );
    expect(logs.join('')).toMatch(/went away, but Placement holds allocations/);
    const metrics = await (await fetch(`http://${c.scheduler.metricsAddress}/metrics`)).text();
    expect(metrics).toMatch(
      new RegExp(`^berth_placement_held_providers\\{[^}]*provider="${rp(PLUG)}"[^}]*\\} 1$`, 'm'),
    );

    // The allocation goes: so does the provider.
    await placement.ok('DELETE', `/allocations/${consumer}`);
    await eventually(
      () => providerView(placement, rp(PLUG)),
      (p) => p === null,
      30_000,
    );
    expect((await status()).held).toEqual([]);
    // The device comes back: its provider too, with the same (derived) uuid.
    await c.host(HOST).sim.sysfs.addFunction({
      address: PLUG,
      vendorId: '1af4',
      productId: '1041',
      classCode: '020000',
      driver: 'vfio-pci',
      numaNode: 0,
    });
    await c.host(HOST).agent!.rediscover();
    const back = await eventually(
      () => providerView(placement, rp(PLUG)),
      (p) => p !== null && p.inventories[PLUG_RC]?.reserved === 0,
      30_000,
    );
    expect(back!.uuid).toBe(v.uuid);
  }, 90_000);

  it('GET /allocation_candidates lists exactly the devices Berth would hand out', async () => {
    // A mix: one more VF bound (two of four), nvme2 in maintenance, the GPU burned.
    const vfProfile = await createClassProfile(client, 'another-vf', VF_RC);
    await createAndBind(client, vfProfile, 'vm-candidates', HOST);
    const nvme2 = await getDevice(client, HOST, NVME.nvme2);
    await client.devices.setDeviceStatus({
      device: uuidRef(nvme2.uuid),
      status: DeviceStatus.DEVICE_STATUS_MAINTAINING,
    });
    const gpuProfile = await createClassProfile(client, 'gpu-again', 'CUSTOM_PCI_10DE_25B6');
    await createAndBind(client, gpuProfile, 'vm-candidates-gpu', HOST);
    await inStep();

    const devices: Device[] = await listChecked(client, HOST);
    const providerOf = (d: Device) => rp(d.physfn || d.address);
    const placementClass = (d: Device) =>
      d.resourceClass.startsWith('CUSTOM_NVME_')
        ? d.resourceClass.replace('CUSTOM_NVME_', 'CUSTOM_PCI_')
        : d.resourceClass;
    const classes = [...new Set(devices.map(placementClass))].sort();
    const uuids = new Map<string, string>();
    for (const d of devices)
      uuids.set((await getDevice(client, HOST, d.address)).placementProviderUuid, providerOf(d));
    for (const rc of classes) {
      for (const n of [1, 2, 3]) {
        const berth = new Map<string, number>();
        for (const d of devices.filter((x) => placementClass(x) === rc && x.allocatable)) {
          berth.set(providerOf(d), (berth.get(providerOf(d)) ?? 0) + 1);
        }
        const expected = [...berth]
          .filter(([, free]) => free >= n)
          .map(([name]) => name)
          .sort();
        const res = await placement.ok<{
          allocation_requests: Array<{ allocations: Record<string, { resources: Record<string, number> }> }>;
        }>('GET', `/allocation_candidates?resources=${rc}:${n}`);
        const listed = res.allocation_requests
          .flatMap((r) => Object.entries(r.allocations))
          .filter(([, a]) => a.resources[rc] === n)
          .map(([u]) => uuids.get(u) ?? `unknown provider ${u}`)
          .sort();
        expect(listed, `${rc}:${n}`).toEqual(expected);
      }
    }
    // The mix is what it says: two VFs left, nvme2 and the GPU out.
    expect(devices.filter((d) => d.physfn === PF && d.allocatable)).toHaveLength(2);
  }, 90_000);

  it('a restarted scheduler finds its providers again: the same uuids, nothing created twice', async () => {
    const before = await placement.ok<{ resource_providers: Array<{ uuid: string; name: string }> }>(
      'GET',
      '/resource_providers',
    );
    await c.restartScheduler();
    client = c.client;
    await c.waitForDevices(HOST, 10);
    await inStep();
    const after = await placement.ok<{ resource_providers: Array<{ uuid: string; name: string }> }>(
      'GET',
      '/resource_providers',
    );
    const byName = (l: typeof before) =>
      Object.fromEntries(l.resource_providers.map((p) => [p.name, p.uuid]));
    expect(byName(after)).toEqual(byName(before));
    expect((await status()).problems).toEqual([]);
  }, 90_000);
});
