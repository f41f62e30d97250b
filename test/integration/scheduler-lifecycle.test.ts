/**
 * The device lifecycle end to end over gRPC: real scheduler, real agents on
 * simulated hosts (sysfs tree + nvme-cli simulator), on loopback.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CleanupEvent, CleanupPhase } from '../../src/gen/berth/agent/v1/agent.js';
import { ArqState } from '../../src/gen/berth/scheduler/v1/accelerator_request.js';
import { DeviceState, DeviceStatus, DeviceType } from '../../src/gen/berth/scheduler/v1/device.js';
import { LiveMigratable } from '../../src/gen/berth/scheduler/v1/profile.js';
import { demoHostDefinition } from '../../src/sim/host.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import { expectCode } from '../helpers/errors.js';
import { eventually } from '../helpers/wait.js';

const HOST = 'sim-host-1';
// 4 VFs + GPU + 4 NVMe controllers (the PF with VFs is excluded).
const DEVICES = 9;

const noFilter = { host: '', type: 0, state: 0, resourceClass: '' };

describe('scheduler lifecycle over gRPC', () => {
  let c: Cluster;

  beforeAll(async () => {
    c = await startCluster([demoHostDefinition(HOST)]);
    await c.waitForDevices(HOST, DEVICES);
  }, 60_000);
  afterAll(async () => {
    await c?.stop();
  });

  const device = async (address: string) =>
    (
      await c.client.devices.getDevice({
        device: { ref: { $case: 'hostAddress', value: { host: HOST, address } } },
      })
    ).device!;

  it('lists the host and its devices with the fields DESIGN.md names', async () => {
    const hosts = await c.client.hosts.listHosts({});
    expect(hosts.hosts.map((h) => h.name)).toEqual([HOST]);
    expect(hosts.hosts[0]!.features).toContain('cleanup.v1');
    const nvme = await c.client.devices.listDevices({
      filter: { ...noFilter, type: DeviceType.DEVICE_TYPE_NVME },
      pageSize: 0,
      pageToken: '',
    });
    expect(nvme.devices).toHaveLength(4);
    const actions = Object.fromEntries(
      nvme.devices.map((d) => [d.attributes.nvme_controller, d.cleanupAction]),
    );
    expect(actions).toEqual({
      nvme0: 'sanitize-crypto',
      nvme1: 'sanitize-block',
      nvme2: 'write-zeroes',
      nvme3: 'shred',
    });
    const d = nvme.devices[0]!;
    expect(d.resourceProvider).toBe(`${HOST}_${d.address}`);
    expect(d.deviceState).toBe(DeviceState.DEVICE_STATE_AVAILABLE);
    expect(d.reserved).toBe(0);
    expect(d.total).toBe(1);
    expect(d.allocatable).toBe(true);
    expect(d.traits).toContain('OWNER_BERTH');
  });

  it('binds a VF, renders nothing to clean, and returns it to available on delete', async () => {
    await c.client.profiles.createProfile({
      profile: {
        name: 'vf-lm',
        uuid: '',
        description: 'one live-migratable VF',
        groups: [
          {
            resourceClass: 'CUSTOM_PCI_8086_154C',
            vendorId: '',
            productId: '',
            requiredTraits: ['HW_PCI_LIVE_MIGRATABLE'],
            forbiddenTraits: [],
            liveMigratable: LiveMigratable.LIVE_MIGRATABLE_YES,
            count: 1,
          },
        ],
        createdAt: undefined,
      },
    });
    const created = await c.client.arqs.createAcceleratorRequests({
      profileName: 'vf-lm',
      requestId: 'r-vf-1',
      tags: ['nic0'],
    });
    expect(created.acceleratorRequests).toHaveLength(1);
    const arq = created.acceleratorRequests[0]!;
    const bound = await c.client.arqs.bindAcceleratorRequests({
      bindings: [{ arqUuid: arq.uuid, instanceUuid: 'vm-1', host: HOST, tag: '' }],
    });
    const b = bound.acceleratorRequests[0]!;
    expect(b.state).toBe(ArqState.ARQ_STATE_BOUND);
    expect(b.attachHandleInfo?.managed).toBe(true);
    const dev = await device(b.deviceAddress);
    expect(dev.deviceState).toBe(DeviceState.DEVICE_STATE_ALLOCATED);
    expect(dev.reserved).toBe(1);
    expect(dev.arqUuid).toBe(arq.uuid);
    // A retry of the same binding returns the same device.
    const again = await c.client.arqs.bindAcceleratorRequests({
      bindings: [{ arqUuid: arq.uuid, instanceUuid: 'vm-1', host: HOST, tag: '' }],
    });
    expect(again.acceleratorRequests[0]!.deviceUuid).toBe(b.deviceUuid);

    await c.client.arqs.deleteAcceleratorRequests({ uuids: [], instanceUuid: 'vm-1' });
    const after = await device(b.deviceAddress);
    expect(after.deviceState).toBe(DeviceState.DEVICE_STATE_AVAILABLE);
    expect(after.reserved).toBe(0);
    // Deleting again is a no-op.
    await c.client.arqs.deleteAcceleratorRequests({ uuids: [], instanceUuid: 'vm-1' });
  });

  it('cleans an NVMe device after delete (sanitize), streaming progress, then makes it available', async () => {
    await c.client.profiles.createProfile({
      profile: {
        name: 'nvme-crypto',
        uuid: '',
        description: '',
        groups: [
          {
            resourceClass: '',
            vendorId: '144d',
            productId: 'a824',
            requiredTraits: ['HW_NVME_CES'],
            forbiddenTraits: [],
            liveMigratable: LiveMigratable.LIVE_MIGRATABLE_UNSPECIFIED,
            count: 1,
          },
        ],
        createdAt: undefined,
      },
    });
    const [arq] = (
      await c.client.arqs.createAcceleratorRequests({ profileName: 'nvme-crypto', requestId: '', tags: [] })
    ).acceleratorRequests;
    const [b] = (
      await c.client.arqs.bindAcceleratorRequests({
        bindings: [{ arqUuid: arq!.uuid, instanceUuid: 'vm-2', host: HOST, tag: '' }],
      })
    ).acceleratorRequests;
    const dev = await device(b!.deviceAddress);
    expect(dev.cleanupAction).toBe('sanitize-crypto');

    await c.client.arqs.deleteAcceleratorRequests({ uuids: [arq!.uuid], instanceUuid: '' });
    const pending = await device(b!.deviceAddress);
    expect([DeviceState.DEVICE_STATE_PENDING_CLEANING, DeviceState.DEVICE_STATE_CLEANING]).toContain(
      pending.deviceState,
    );
    expect(pending.reserved).toBe(1);

    const events: CleanupEvent[] = [];
    for await (const m of c.client.watchCleanup({
      device: { ref: { $case: 'uuid', value: dev.uuid } },
      jobId: '',
      fromSequence: 0,
    })) {
      events.push(m.event!);
    }
    const phases = events.map((e) => e.phase);
    expect(phases.at(-1)).toBe(CleanupPhase.CLEANUP_PHASE_SUCCEEDED);
    expect(phases).toContain(CleanupPhase.CLEANUP_PHASE_SANITIZING);
    const seqs = events.map((e) => e.sequence);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    const done = await eventually(
      () => device(b!.deviceAddress),
      (d) => d.deviceState === DeviceState.DEVICE_STATE_AVAILABLE,
    );
    expect(done.reserved).toBe(0);
    expect(done.lastCleanup?.action).toBe('sanitize-crypto');
  });

  it('refuses CleanDevice with the reasons DESIGN.md names', async () => {
    const nvme = (
      await c.client.devices.listDevices({
        filter: { ...noFilter, type: DeviceType.DEVICE_TYPE_NVME },
        pageSize: 0,
        pageToken: '',
      })
    ).devices;
    const ref = (uuid: string) => ({
      device: { ref: { $case: 'uuid' as const, value: uuid } },
      requestId: '',
    });
    await expectCode(
      c.client.devices.cleanDevice(ref(nvme[0]!.uuid)),
      'FAILED_PRECONDITION',
      'DEVICE_ALREADY_CLEAN',
    );
    await expectCode(c.client.devices.cleanDevice(ref('00000000-0000-4000-8000-000000000000')), 'NOT_FOUND');
    const vf = (
      await c.client.devices.listDevices({
        filter: { ...noFilter, resourceClass: 'CUSTOM_PCI_8086_154C' },
        pageSize: 0,
        pageToken: '',
      })
    ).devices[0]!;
    const e = await expectCode(c.client.devices.cleanDevice(ref(vf.uuid)), 'FAILED_PRECONDITION');
    expect(['CLEANING_NOT_SUPPORTED', 'DEVICE_ALREADY_CLEAN']).toContain(e.reason);
    await expectCode(c.client.devices.cleanDevice({ device: undefined, requestId: '' }), 'INVALID_ARGUMENT');
    const bad = await expectCode(
      c.client.devices.cleanDevice({
        device: { ref: { $case: 'uuid', value: 'not-a-uuid' } },
        requestId: '',
      }),
      'INVALID_ARGUMENT',
    );
    expect(bad.fieldViolations[0]?.field).toBe('device.uuid');
    expect(bad.message).toContain('not-a-uuid');
  });

  it('switches a device to maintaining and back; a stale generation is ABORTED', async () => {
    const d = await device(
      (await c.client.devices.listDevices({ filter: noFilter, pageSize: 1, pageToken: '' })).devices[0]!
        .address,
    );
    const ref = { ref: { $case: 'uuid' as const, value: d.uuid } };
    const m = await c.client.devices.setDeviceStatus({
      device: ref,
      status: DeviceStatus.DEVICE_STATUS_MAINTAINING,
      generation: d.generation,
    });
    expect(m.device!.allocatable).toBe(false);
    expect(m.device!.reserved).toBe(1);
    await expectCode(
      c.client.devices.setDeviceStatus({
        device: ref,
        status: DeviceStatus.DEVICE_STATUS_ENABLED,
        generation: d.generation,
      }),
      'ABORTED',
    );
    const e = await c.client.devices.setDeviceStatus({
      device: ref,
      status: DeviceStatus.DEVICE_STATUS_ENABLED,
      generation: undefined,
    });
    expect(e.device!.reserved).toBe(0);
  });
});
