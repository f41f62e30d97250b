/**
 * Guest integration end to end over gRPC, on two simulated hosts: the hostdev
 * XML (checked by libvirt's own virt-xml-validate), the device-role metadata
 * document (checked by its JSON Schema), and live migration — refused, short
 * of devices, prepared and committed, aborted, not ready on the destination,
 * raced, and surviving a scheduler restart.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BerthClientError } from '../../src/client/sdk.js';
import { ArqState } from '../../src/gen/berth/scheduler/v1/accelerator_request.js';
import { CleanupOutcome, DeviceState } from '../../src/gen/berth/scheduler/v1/device.js';
import { MigrationState } from '../../src/gen/berth/scheduler/v1/migration.js';
import { LiveMigratable } from '../../src/gen/berth/scheduler/v1/profile.js';
import { parseAgentConfig } from '../../src/server/agent/config.js';
import { rewriteSourceAddresses } from '../../src/server/scheduler/guest/hostdev-xml.js';
import { validateMetadata } from '../../src/server/scheduler/guest/metadata.js';
import { validateDomains, wrapInDomain } from '../../src/server/scheduler/guest/virt-xml.js';
import { demoHostDefinition, type SimHostDefinition } from '../../src/sim/host.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import { expectCode } from '../helpers/errors.js';
import { available, virtXmlValidate } from '../helpers/prerequisites.js';
import { eventually } from '../helpers/wait.js';

const run = promisify(execFile);
const BUF = join(process.cwd(), 'node_modules/.bin/buf');
const SRC = 'src-host';
const DST = 'dst-host';
const VF_CLASS = 'CUSTOM_PCI_8086_154C';
// 4 VFs + GPU + 4 NVMe controllers per host (the PF with VFs is excluded).
const DEVICES = 9;

/** The demo host. */
const host = (name: string, bus: number): SimHostDefinition => demoHostDefinition(name, bus);

/**
 * Its NVMe controllers go to a vendor driver whose cleaned devices may follow
 * their guest (the generic NVMe driver refuses live_migratable), so a
 * migration can move a device that is cleaned.
 */
const migratableNvme = (config: Record<string, unknown>): Record<string, unknown> => {
  const { nvme, ...rest } = config;
  return {
    ...rest,
    enabled_drivers: ['pci', join(process.cwd(), 'test/fixtures/drivers/migratable-nvme.ts')],
    'migratable-nvme': nvme,
  };
};

/** The guest `<address type='pci' .../>` lines of hostdev XML, in order. */
const guestLines = (xml: string) => xml.split('\n').filter((l) => l.includes("<address type='pci'"));
const sourceLines = (xml: string) =>
  xml.split('\n').filter((l) => l.includes('<address domain=') && !l.includes("type='pci'"));

const haveValidator = available(virtXmlValidate(), 'libvirt schema checks of rendered guest XML');

function expectValidXml(xml: string): void {
  if (!haveValidator) return;
  const [r] = validateDomains([wrapInDomain(xml)]);
  expect(r!.ok, `virt-xml-validate:\n${r!.output}\n${xml}`).toBe(true);
}

describe('guest XML, metadata and live migration over gRPC', () => {
  let c: Cluster;

  beforeAll(async () => {
    c = await startCluster([host(SRC, 0x3b), host(DST, 0x5b)], { agentConfig: migratableNvme });
    await c.waitForDevices(SRC, DEVICES);
    await c.waitForDevices(DST, DEVICES);
    const group = (vendorId: string, productId: string, liveMigratable: LiveMigratable) => ({
      resourceClass: '',
      vendorId,
      productId,
      requiredTraits: [],
      forbiddenTraits: [],
      liveMigratable,
      count: 1,
    });
    const profiles = {
      'vf-lm': group('8086', '154c', LiveMigratable.LIVE_MIGRATABLE_YES),
      'vf-fixed': group('8086', '154c', LiveMigratable.LIVE_MIGRATABLE_NO),
      'gpu-fixed': group('10de', '25b6', LiveMigratable.LIVE_MIGRATABLE_NO),
      'gpu-lm': group('10de', '25b6', LiveMigratable.LIVE_MIGRATABLE_YES),
      'nvme-lm': group('144d', 'a824', LiveMigratable.LIVE_MIGRATABLE_YES),
      // live_migratable unset: it may get a migratable VF, but the guest must not move.
      'vf-any': group('8086', '154c', LiveMigratable.LIVE_MIGRATABLE_UNSPECIFIED),
    };
    for (const [name, g] of Object.entries(profiles)) {
      await c.client.profiles.createProfile({
        profile: { name, uuid: '', description: '', groups: [g], createdAt: undefined },
      });
    }
  }, 60_000);
  afterAll(async () => {
    await c?.stop();
  });

  const device = async (h: string, address: string) =>
    (
      await c.client.devices.getDevice({
        device: { ref: { $case: 'hostAddress', value: { host: h, address } } },
      })
    ).device!;

  const available = async (h: string, resourceClass = VF_CLASS) =>
    (
      await c.client.devices.listDevices({
        filter: { host: h, type: 0, state: DeviceState.DEVICE_STATE_AVAILABLE, resourceClass },
        pageSize: 0,
        pageToken: '',
      })
    ).devices;

  /** Create one ARQ per profile (with its tag) and bind them all to `instance` on `h`. */
  async function bind(instance: string, h: string, wants: Array<[profile: string, tag: string]>) {
    const arqs = [];
    for (const [profile, tag] of wants) {
      const [arq] = (
        await c.client.arqs.createAcceleratorRequests({ profileName: profile, requestId: '', tags: [tag] })
      ).acceleratorRequests;
      arqs.push(arq!);
    }
    return (
      await c.client.arqs.bindAcceleratorRequests({
        bindings: arqs.map((a) => ({ arqUuid: a.uuid, instanceUuid: instance, host: h, tag: '' })),
      })
    ).acceleratorRequests;
  }

  const drop = (instance: string) =>
    c.client.arqs.deleteAcceleratorRequests({ uuids: [], instanceUuid: instance });

  /** A call through buf curl (reflection, protojson): what a JSON client sees. */
  async function bufCurl(method: string, body: unknown): Promise<unknown> {
    const { stdout } = await run(BUF, [
      'curl',
      '--protocol',
      'grpc',
      '--http2-prior-knowledge',
      '-d',
      JSON.stringify(body),
      `http://${c.scheduler.address}/${method}`,
    ]);
    return JSON.parse(stdout);
  }

  const plan = (instance: string, destinationHost = DST, requestId = '') =>
    c.client.migrations.planLiveMigration({ instanceUuid: instance, destinationHost, requestId });

  it('profiles: live_migratable yes binds only migratable devices, no only non-migratable ones', async () => {
    // The VFs are live-migratable, the GPU is not.
    for (const profile of ['vf-fixed', 'gpu-lm']) {
      const [arq] = (
        await c.client.arqs.createAcceleratorRequests({ profileName: profile, requestId: '', tags: [] })
      ).acceleratorRequests;
      const e = await expectCode(
        c.client.arqs.bindAcceleratorRequests({
          bindings: [{ arqUuid: arq!.uuid, instanceUuid: 'vm-filter', host: SRC, tag: '' }],
        }),
        'FAILED_PRECONDITION',
        'NO_ALLOCATABLE_DEVICE',
      );
      expect(e.message).toMatch(/live-migratable/);
    }
    const [vf] = await bind('vm-filter-ok', SRC, [['vf-lm', '']]);
    expect((await device(SRC, vf!.deviceAddress)).liveMigratable).toBe(true);
    await drop('vm-filter');
    await drop('vm-filter-ok');
  });

  it('renders valid hostdev XML (managed yes and no, tagged and untagged) and a schema-valid metadata document', async () => {
    const bound = await bind('vm-xml', SRC, [
      ['vf-lm', 'fast-nic'],
      ['vf-lm', ''],
      ['gpu-fixed', 'gpu0'],
    ]);
    expect(bound.map((a) => a.state)).toEqual([
      ArqState.ARQ_STATE_BOUND,
      ArqState.ARQ_STATE_BOUND,
      ArqState.ARQ_STATE_BOUND,
    ]);
    await c.client.instances.setInstanceDevices({
      instanceUuid: 'vm-xml',
      nics: [{ mac: '52:54:00:12:34:56', address: '0000:00:03.0', tag: 'net0', vlan: 100, model: 'virtio' }],
      disks: [
        { serial: 'disk-root', bus: 'virtio', address: '0000:00:04.0', path: '/dev/vda', tag: 'root' },
        { serial: 'disk-data', bus: 'scsi', address: '0:0:0:1', path: '', tag: '' },
      ],
    });
    const res = await c.client.instances.getInstanceXml({ instanceUuid: 'vm-xml' });
    expect(res.hostdevs.map((h) => [h.arqUuid, h.alias, h.managed, h.tag])).toEqual([
      [bound[0]!.uuid, 'ua-fast-nic', true, 'fast-nic'],
      [bound[1]!.uuid, `ua-${bound[1]!.uuid}`, true, ''],
      [bound[2]!.uuid, 'ua-gpu0', false, 'gpu0'],
    ]);
    expect(
      res.hostdevs.map((h) => `${h.guest!.domain}:${h.guest!.bus}:${h.guest!.slot}.${h.guest!.function}`),
    ).toEqual(['0000:00:10.0', '0000:00:11.0', '0000:00:12.0']);
    // managed comes from the device record at bind time: the GPU's spec says managed: false.
    // JSON clients (buf curl, gateways) see "managed": false too, never an absent key that
    // pci-managed-mode.txt reads as managed.
    const arqJson = await bufCurl('berth.scheduler.v1.AcceleratorRequestService/GetAcceleratorRequest', {
      uuid: bound[2]!.uuid,
    });
    expect(arqJson).toMatchObject({ acceleratorRequest: { attachHandleInfo: { managed: false } } });
    const xmlJson = (await bufCurl('berth.scheduler.v1.InstanceService/GetInstanceXml', {
      instanceUuid: 'vm-xml',
    })) as { hostdevs: { managed?: boolean }[] };
    expect(xmlJson.hostdevs.map((h) => h.managed)).toEqual([true, true, false]);
    expect(res.xml.match(/managed='yes'/g)).toHaveLength(2);
    expect(res.xml.match(/managed='no'/g)).toHaveLength(1);
    expect(res.xml).toContain(`<address domain='0x0000' bus='0x3c' slot='0x00' function='0x0'/>`);
    expectValidXml(res.xml);
    // Each element on its own is valid too (one managed='no', untagged, tagged).
    for (const h of res.xml.split(/\n(?=<hostdev )/)) expectValidXml(h);
    // Stable: the same addresses every time.
    expect(await c.client.instances.getInstanceXml({ instanceUuid: 'vm-xml' })).toEqual(res);

    const meta = JSON.parse((await c.client.instances.getDeviceMetadata({ instanceUuid: 'vm-xml' })).json);
    expect(validateMetadata(meta)).toEqual({ valid: true, errors: [] });
    expect(meta.devices).toEqual([
      {
        type: 'nic',
        bus: 'pci',
        address: '0000:00:03.0',
        mac: '52:54:00:12:34:56',
        vlan: 100,
        tags: ['net0'],
      },
      {
        type: 'disk',
        bus: 'pci',
        address: '0000:00:04.0',
        serial: 'disk-root',
        path: '/dev/vda',
        tags: ['root'],
      },
      { type: 'disk', bus: 'scsi', address: '0:0:0:1', serial: 'disk-data', tags: [] },
      {
        type: 'passthrough',
        bus: 'pci',
        address: '0000:00:10.0',
        vendor_id: '8086',
        product_id: '154c',
        device_type: 'PCI',
        tags: ['fast-nic'],
      },
      {
        type: 'passthrough',
        bus: 'pci',
        address: '0000:00:11.0',
        vendor_id: '8086',
        product_id: '154c',
        device_type: 'PCI',
        tags: [],
      },
      {
        type: 'passthrough',
        bus: 'pci',
        address: '0000:00:12.0',
        vendor_id: '10de',
        product_id: '25b6',
        device_type: 'PCI',
        tags: ['gpu0'],
      },
    ]);

    // The GPU's profile asked for a non-migratable device: the plan is refused, naming it (only it), and claims nothing.
    const free = (await available(DST)).length;
    const e = await expectCode(plan('vm-xml'), 'FAILED_PRECONDITION', 'PROFILE_NOT_LIVE_MIGRATABLE');
    expect(e.message).toContain(`${bound[2]!.deviceAddress} (profile gpu-fixed, live_migratable no)`);
    expect(e.message).not.toContain(bound[0]!.deviceAddress);
    expect((await available(DST)).length).toBe(free);
    await drop('vm-xml');
  });

  it('rejects bad instance devices with INVALID_ARGUMENT naming the fields; unknown instances are NOT_FOUND', async () => {
    await bind('vm-tags', SRC, [['vf-lm', 'nic']]);
    // An NVMe controller is a passthrough entry too: it cannot take the VF's tag.
    const [nvmeArq] = (
      await c.client.arqs.createAcceleratorRequests({ profileName: 'nvme-lm', requestId: '', tags: ['nic'] })
    ).acceleratorRequests;
    const shared = await expectCode(
      c.client.arqs.bindAcceleratorRequests({
        bindings: [{ arqUuid: nvmeArq!.uuid, instanceUuid: 'vm-tags', host: SRC, tag: '' }],
      }),
      'INVALID_ARGUMENT',
    );
    expect(shared.message).toMatch(/tag "nic" is already used by ARQ .* for a passthrough of this instance/);
    await c.client.arqs.deleteAcceleratorRequests({ uuids: [nvmeArq!.uuid], instanceUuid: '' });
    const nic = { mac: '52:54:00:00:00:01', address: '', tag: 'net', vlan: undefined, model: 'virtio' };
    const dup = await expectCode(
      c.client.instances.setInstanceDevices({
        instanceUuid: 'vm-tags',
        nics: [nic, { ...nic, mac: '52:54:00:00:00:02' }],
        disks: [],
      }),
      'INVALID_ARGUMENT',
    );
    expect(dup.fieldViolations.map((v) => v.field)).toEqual(['nics[1].tag']);
    expect(dup.fieldViolations[0]!.description).toContain('nics[0].tag');
    expect(dup.message).toContain('"net"');

    const many = await expectCode(
      c.client.instances.setInstanceDevices({
        instanceUuid: 'vm-tags',
        nics: [{ ...nic, mac: 'not-a-mac', vlan: 5000 }],
        disks: [{ serial: 's', bus: 'floppy', address: '', path: '', tag: 'bad/tag' }],
      }),
      'INVALID_ARGUMENT',
    );
    expect(many.fieldViolations.map((v) => v.field).sort()).toEqual([
      'disks[0].bus',
      'disks[0].tag',
      'nics[0].mac',
      'nics[0].vlan',
    ]);
    expect(many.message).toContain('not-a-mac');

    // A NIC on the slot Berth gave the VF would clash in the guest.
    await c.client.instances.getInstanceXml({ instanceUuid: 'vm-tags' });
    const slot = await expectCode(
      c.client.instances.setInstanceDevices({
        instanceUuid: 'vm-tags',
        nics: [{ ...nic, address: '0000:00:10.0' }],
        disks: [],
      }),
      'INVALID_ARGUMENT',
    );
    expect(slot.fieldViolations.map((v) => v.field)).toEqual(['nics[0].address']);
    expect(slot.message).toContain('ua-nic');

    const missing = await expectCode(
      c.client.instances.getInstanceXml({ instanceUuid: 'vm-nobody' }),
      'NOT_FOUND',
    );
    expect(missing.message).toContain('vm-nobody');
    await expectCode(c.client.instances.getDeviceMetadata({ instanceUuid: 'vm-nobody' }), 'NOT_FOUND');
    await expectCode(c.client.instances.getInstanceXml({ instanceUuid: 'bad id!' }), 'INVALID_ARGUMENT');
    await expectCode(plan('vm-nobody'), 'NOT_FOUND');
    const host404 = await expectCode(plan('vm-tags', 'no-such-host'), 'NOT_FOUND');
    expect(host404.message).toContain('no-such-host');
    await drop('vm-tags');
  });

  it('plans, prepares and commits: source devices released (NVMe cleaned), bindings moved, guest addresses unchanged', async () => {
    const bound = await bind('vm-mig', SRC, [
      ['vf-lm', 'nic'],
      ['nvme-lm', 'scratch'],
    ]);
    const [vfSrc, nvmeSrc] = bound.map((a) => a.deviceAddress) as [string, string];
    await c.client.instances.setInstanceDevices({
      instanceUuid: 'vm-mig',
      nics: [
        { mac: '52:54:00:00:10:01', address: '0000:00:03.0', tag: 'net0', vlan: undefined, model: 'virtio' },
      ],
      disks: [],
    });
    const source = await c.client.instances.getInstanceXml({ instanceUuid: 'vm-mig' });
    const sourceMeta = await c.client.instances.getDeviceMetadata({ instanceUuid: 'vm-mig' });

    const planned = (await plan('vm-mig', DST, 'plan-mig-1')).migration!;
    expect(planned.state).toBe(MigrationState.MIGRATION_STATE_PLANNED);
    expect([planned.instanceUuid, planned.sourceHost, planned.destinationHost]).toEqual(['vm-mig', SRC, DST]);
    const map = planned.pciDevMapSrcDst;
    expect(Object.keys(map).sort()).toEqual([vfSrc, nvmeSrc].sort());
    const [vfDst, nvmeDst] = [map[vfSrc]!, map[nvmeSrc]!];
    expect((await device(DST, vfDst)).productId).toBe('154c');
    expect((await device(DST, nvmeDst)).productId).toBe('a824');
    expect(planned.readiness.map((r) => [r.address, r.ready, r.reason]).sort()).toEqual(
      [
        [vfDst, true, ''],
        [nvmeDst, true, ''],
      ].sort(),
    );
    // Source addresses replaced, guest addresses and aliases untouched.
    expect(planned.destinationXml).toBe(rewriteSourceAddresses(source.xml, map));
    expect(guestLines(planned.destinationXml)).toEqual(guestLines(source.xml));
    expect(sourceLines(planned.destinationXml)).not.toEqual(sourceLines(source.xml));
    expectValidXml(planned.destinationXml);
    // The destination devices are claimed (reserved), the source ones still held.
    for (const a of [vfDst, nvmeDst]) {
      const d = await device(DST, a);
      expect([d.deviceState, d.reserved, d.arqUuid]).toEqual([DeviceState.DEVICE_STATE_ALLOCATED, 1, '']);
    }
    // A retry with the same request id is the same migration.
    expect((await plan('vm-mig', DST, 'plan-mig-1')).migration).toEqual(planned);
    // One planned migration per instance.
    await expectCode(plan('vm-mig', DST, 'plan-mig-2'), 'FAILED_PRECONDITION', 'MIGRATION_IN_PROGRESS');

    const committed = (await c.client.migrations.commitMigration({ migrationUuid: planned.uuid })).migration!;
    expect(committed.state).toBe(MigrationState.MIGRATION_STATE_COMMITTED);
    expect(committed.pciDevMapSrcDst).toEqual(map);
    expect((await c.client.migrations.commitMigration({ migrationUuid: planned.uuid })).migration).toEqual(
      committed,
    );
    await expectCode(
      c.client.migrations.abortMigration({ migrationUuid: planned.uuid }),
      'FAILED_PRECONDITION',
      'MIGRATION_NOT_PLANNED',
    );

    // Source: the VF is free at once, the NVMe controller is cleaned first.
    expect((await device(SRC, vfSrc)).deviceState).toBe(DeviceState.DEVICE_STATE_AVAILABLE);
    const nvmeAfter = await device(SRC, nvmeSrc);
    expect([DeviceState.DEVICE_STATE_PENDING_CLEANING, DeviceState.DEVICE_STATE_CLEANING]).toContain(
      nvmeAfter.deviceState,
    );
    const cleaned = await eventually(
      () => device(SRC, nvmeSrc),
      (d) => d.deviceState === DeviceState.DEVICE_STATE_AVAILABLE,
      20_000,
    );
    expect([cleaned.reserved, cleaned.lastCleanup?.action]).toEqual([0, nvmeAfter.cleanupAction]);

    // Destination: the instance's ARQs now hold the claimed devices.
    const arqs = (await c.client.arqs.listAcceleratorRequests({ instanceUuid: 'vm-mig' }))
      .acceleratorRequests;
    expect(arqs.map((a) => [a.uuid, a.host, a.deviceAddress, a.state])).toEqual([
      [bound[0]!.uuid, DST, vfDst, ArqState.ARQ_STATE_BOUND],
      [bound[1]!.uuid, DST, nvmeDst, ArqState.ARQ_STATE_BOUND],
    ]);
    for (const a of arqs) expect((await device(DST, a.deviceAddress)).arqUuid).toBe(a.uuid);
    const after = await c.client.instances.getInstanceXml({ instanceUuid: 'vm-mig' });
    expect(after.xml).toBe(planned.destinationXml);
    expect(after.hostdevs.map((h) => [h.alias, h.guest])).toEqual(
      source.hostdevs.map((h) => [h.alias, h.guest]),
    );
    expect(await c.client.instances.getDeviceMetadata({ instanceUuid: 'vm-mig' })).toEqual(sourceMeta);

    await drop('vm-mig');
    await eventually(
      () => device(DST, nvmeDst),
      (d) => d.deviceState === DeviceState.DEVICE_STATE_AVAILABLE,
      20_000,
    );
  });

  it('refuses to move a guest whose profile left live_migratable unset, even on a migratable device', async () => {
    const [arq] = await bind('vm-any', SRC, [['vf-any', '']]);
    expect((await device(SRC, arq!.deviceAddress)).liveMigratable).toBe(true);
    const free = (await available(DST)).length;
    const e = await expectCode(plan('vm-any'), 'FAILED_PRECONDITION', 'PROFILE_NOT_LIVE_MIGRATABLE');
    expect(e.message).toContain(`${arq!.deviceAddress} (profile vf-any, live_migratable unset)`);
    expect((await available(DST)).length).toBe(free);
    await drop('vm-any');
  });

  it('aborts: destination claims go back to available (the NVMe one through its cleanup), idempotently', async () => {
    const bound = await bind('vm-abort', SRC, [
      ['vf-lm', ''],
      ['nvme-lm', ''],
    ]);
    const m = (await plan('vm-abort')).migration!;
    const dests = Object.values(m.pciDevMapSrcDst);
    expect(dests).toHaveLength(2);
    const aborted = (await c.client.migrations.abortMigration({ migrationUuid: m.uuid })).migration!;
    expect(aborted.state).toBe(MigrationState.MIGRATION_STATE_ABORTED);
    expect((await c.client.migrations.abortMigration({ migrationUuid: m.uuid })).migration).toEqual(aborted);
    await expectCode(
      c.client.migrations.commitMigration({ migrationUuid: m.uuid }),
      'FAILED_PRECONDITION',
      'MIGRATION_NOT_PLANNED',
    );
    for (const a of dests) {
      const d = await eventually(
        () => device(DST, a),
        (x) => x.deviceState === DeviceState.DEVICE_STATE_AVAILABLE,
        20_000,
      );
      expect([d.reserved, d.instanceUuid]).toEqual([0, '']);
    }
    // The source bindings are untouched.
    for (const a of bound) expect((await device(SRC, a.deviceAddress)).arqUuid).toBe(a.uuid);
    await expectCode(
      c.client.migrations.commitMigration({ migrationUuid: '00000000-0000-4000-8000-000000000000' }),
      'NOT_FOUND',
    );
    await drop('vm-abort');
  });

  it('refuses a plan without enough matching devices on the destination', async () => {
    const free = await available(DST);
    await bind(
      'vm-filler',
      DST,
      free.map(() => ['vf-lm', ''] as [string, string]),
    );
    await bind('vm-short', SRC, [['vf-lm', '']]);
    const e = await expectCode(plan('vm-short'), 'FAILED_PRECONDITION', 'NO_ALLOCATABLE_DEVICE');
    expect(e.message).toContain(DST);
    expect(e.message).toContain('8086:154c');
    await drop('vm-short');
    await drop('vm-filler');
  });

  it('two plans racing for the one free destination device: exactly one wins, the loser claims nothing', async () => {
    const free = await available(DST);
    await bind(
      'vm-filler',
      DST,
      free.slice(1).map(() => ['vf-lm', ''] as [string, string]),
    );
    const last = (await available(DST)).map((d) => d.address);
    expect(last).toHaveLength(1);
    await bind('vm-race-a', SRC, [['vf-lm', '']]);
    await bind('vm-race-b', SRC, [['vf-lm', '']]);
    const results = await Promise.allSettled([plan('vm-race-a'), plan('vm-race-b')]);
    const won = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value.migration!] : []));
    const lost = results.flatMap((r) => (r.status === 'rejected' ? [r.reason as BerthClientError] : []));
    expect(won).toHaveLength(1);
    expect(lost.map((e) => [e.codeName, e.reason])).toEqual([
      ['FAILED_PRECONDITION', 'NO_ALLOCATABLE_DEVICE'],
    ]);
    expect(Object.values(won[0]!.pciDevMapSrcDst)).toEqual(last);
    await c.client.migrations.abortMigration({ migrationUuid: won[0]!.uuid });
    expect((await available(DST)).map((d) => d.address)).toEqual(last);
    await drop('vm-race-a');
    await drop('vm-race-b');
    await drop('vm-filler');
  });

  it('a planned migration survives a scheduler restart and can be committed after it', async () => {
    await bind('vm-restart', SRC, [['vf-lm', 'keep']]);
    const before = await c.client.instances.getInstanceXml({ instanceUuid: 'vm-restart' });
    const m = (await plan('vm-restart', DST, 'plan-restart')).migration!;
    await c.restartScheduler();
    await c.waitForDevices(SRC, DEVICES);
    await c.waitForDevices(DST, DEVICES);
    expect((await plan('vm-restart', DST, 'plan-restart')).migration).toEqual(m);
    const committed = (await c.client.migrations.commitMigration({ migrationUuid: m.uuid })).migration!;
    expect([committed.state, committed.destinationXml]).toEqual([
      MigrationState.MIGRATION_STATE_COMMITTED,
      m.destinationXml,
    ]);
    const after = await c.client.instances.getInstanceXml({ instanceUuid: 'vm-restart' });
    expect(guestLines(after.xml)).toEqual(guestLines(before.xml));
    expect(after.hostdevs[0]!.source).not.toEqual(before.hostdevs[0]!.source);
    await drop('vm-restart');
  });

  it('the destination agent records a claimed NVMe device before the plan is acknowledged; a refusal undoes the plan', async () => {
    const AVAILABLE = DeviceState.DEVICE_STATE_AVAILABLE;
    const dstAgent = c.host(DST).agent!;
    const held = (address: string) => dstAgent.cleanups.heldDevices().find((h) => h.address === address);
    const bound = await bind('vm-record', SRC, [['nvme-lm', '']]);
    const m = (await plan('vm-record', DST, 'plan-record')).migration!;
    const dst = Object.values(m.pciDevMapSrcDst)[0]!;
    expect(held(dst)).toMatchObject({ arqUuid: bound[0]!.uuid, instanceUuid: 'vm-record' });
    // An abort sends the claim through its cleanup, which clears the record.
    await c.client.migrations.abortMigration({ migrationUuid: m.uuid });
    await eventually(
      () => device(DST, dst),
      (d) => d.deviceState === AVAILABLE,
      20_000,
    );
    expect(held(dst)).toBeUndefined();

    // Every free NVMe controller on the destination still holds another tenant's data, by its agent's journal.
    const nvme = (await available(DST, '')).filter((d) => d.vendorId === '144d').map((d) => d.address);
    expect(nvme.length).toBeGreaterThan(0);
    for (const a of nvme) dstAgent.cleanups.recordBinding(a, 'arq-of-another-tenant', 'vm-of-another-tenant');
    const e = await expectCode(
      plan('vm-record', DST, 'plan-record-2'),
      'FAILED_PRECONDITION',
      'DEVICE_HOLDS_TENANT_DATA',
    );
    expect(e.message).toMatch(
      new RegExp(`migration \\S+ was refused and its claims released: the agent of host ${DST} refused`),
    );
    // The guest keeps its source device; nothing stays claimed, and every one of those
    // controllers is offered again only after a cleanup cleared its agent's record.
    expect((await device(SRC, bound[0]!.deviceAddress)).arqUuid).toBe(bound[0]!.uuid);
    await eventually(
      async () => dstAgent.cleanups.heldDevices(),
      (h) => h.length === 0,
      30_000,
    );
    for (const a of nvme) {
      const d = await eventually(
        () => device(DST, a),
        (x) => x.deviceState === AVAILABLE,
        20_000,
      );
      expect([d.reserved, d.lastCleanup?.outcome]).toEqual([0, CleanupOutcome.CLEANUP_OUTCOME_SUCCEEDED]);
    }
    await drop('vm-record');
  }, 90_000);

  it('managed changed while a device is bound: the ARQ and the XML keep the value it was bound with; the next bind gets the new one', async () => {
    // Nothing of the earlier tests still cleaning on the source: its agent restarts below.
    await eventually(
      () =>
        c.client.devices.listDevices({
          filter: { host: SRC, type: 0, state: 0, resourceClass: '' },
          pageSize: 0,
          pageToken: '',
        }),
      (r) =>
        r.devices.every(
          (d) =>
            d.deviceState !== DeviceState.DEVICE_STATE_PENDING_CLEANING &&
            d.deviceState !== DeviceState.DEVICE_STATE_CLEANING,
        ),
      30_000,
    );
    const restartSource = async (vfManaged: boolean) => {
      const h = c.host(SRC);
      await h.stop();
      const raw = {
        ...h.sim.agentConfig,
        scheduler: c.scheduler.address,
        register_interval: 0.5,
        discovery_interval: 3600,
        pci: {
          device_spec: [
            { vendor_id: '8086', product_id: '154c', live_migratable: true, managed: vfManaged },
            { vendor_id: '10de', product_id: '25b6', managed: false, one_time_use: true, assume_clean: true },
          ],
        },
      };
      await h.start({ config: parseAgentConfig(migratableNvme(raw), {}, c.root) });
    };
    const [arq] = await bind('vm-managed', SRC, [['vf-lm', '']]);
    expect(arq!.attachHandleInfo?.managed).toBe(true);
    await restartSource(false);
    await eventually(
      () => device(SRC, arq!.deviceAddress),
      (d) => d.managed === false,
      20_000,
    );
    // Bound with managed: the ARQ, the XML and the structured hostdev all still say so.
    const shown = (await c.client.arqs.getAcceleratorRequest({ uuid: arq!.uuid })).acceleratorRequest!;
    expect(shown.attachHandleInfo?.managed).toBe(true);
    const xml = await c.client.instances.getInstanceXml({ instanceUuid: 'vm-managed' });
    expect(xml.hostdevs.map((h) => h.managed)).toEqual([true]);
    expect(xml.xml).toContain("managed='yes'");
    // The next bind of that device gets the new setting, everywhere.
    await drop('vm-managed');
    const [again] = await bind('vm-managed-2', SRC, [['vf-lm', '']]);
    expect(again!.attachHandleInfo?.managed).toBe(false);
    const xml2 = await c.client.instances.getInstanceXml({ instanceUuid: 'vm-managed-2' });
    expect(xml2.hostdevs.map((h) => h.managed)).toEqual([false]);
    expect(xml2.xml).toContain("managed='no'");
    await drop('vm-managed-2');
    await restartSource(true);
    await eventually(
      () =>
        c.client.devices.listDevices({
          filter: { host: SRC, type: 0, state: 0, resourceClass: VF_CLASS },
          pageSize: 0,
          pageToken: '',
        }),
      (r) => r.devices.every((d) => d.managed),
      20_000,
    );
  }, 90_000);

  it('a destination device that is gone from the host: plan refused with the reason, claims released', async () => {
    const free = (await available(DST)).map((d) => d.address);
    expect(free.length).toBeGreaterThan(0);
    // Removed from sysfs before the agent hears of it (no uevent, no rediscovery): the scheduler
    // still offers them, PrepareMigration finds them gone.
    const sysfs = c.host(DST).sim.sysfs;
    const log = sysfs.ueventLog;
    sysfs.ueventLog = null;
    for (const a of free) await sysfs.removeFunction(a);
    sysfs.ueventLog = log;
    await bind('vm-gone', SRC, [['vf-lm', '']]);
    const e = await expectCode(
      plan('vm-gone', DST, 'plan-gone'),
      'FAILED_PRECONDITION',
      'MIGRATION_DEVICE_NOT_READY',
    );
    expect(e.message).toMatch(/no longer present/);
    expect((await available(DST)).map((d) => d.address)).toEqual(free);
    // The retry reports the same refusal instead of a half-done plan.
    await expectCode(plan('vm-gone', DST, 'plan-gone'), 'FAILED_PRECONDITION', 'MIGRATION_DEVICE_NOT_READY');

    // The destination agent down: UNAVAILABLE, and again nothing stays claimed.
    await c.host(DST).stop();
    await expectCode(plan('vm-gone', DST, 'plan-down'), 'UNAVAILABLE', 'AGENT_UNAVAILABLE');
    expect((await available(DST)).map((d) => d.address)).toEqual(free);
    await drop('vm-gone');
  });
});
