/**
 * The narrated demo: the whole device lifecycle against a running scheduler,
 * step by step, each step saying what it does and what came back, and checking
 * that it came back right. It uses only the public API (the SDK), plus one
 * back door a real operator does not have: a fault injected into a simulated
 * host's nvme-cli, to show a cleanup that fails and the operator's re-clean.
 *
 * Every name it creates carries a run id, so it can run again against the
 * same `berth up`. What it changes it writes down first (a DemoLedger, kept
 * in the state directory by `berth demo`) and undoes at the end whatever
 * happened — also when interrupted (Ctrl-C, SIGTERM): the injected fault is
 * cleared, its ARQs and profiles deleted, the GPU it burned released, the
 * drive its fault put in error cleaned again. A demo killed before it could
 * undo leaves the ledger behind, and the next demo undoes it first.
 */
import { randomBytes } from 'node:crypto';
import { ArqState } from '../../gen/berth/scheduler/v1/accelerator_request.js';
import { type Device, DeviceState, DeviceType } from '../../gen/berth/scheduler/v1/device.js';
import type { DeviceRef } from '../../gen/berth/scheduler/v1/device_service.js';
import { MigrationState } from '../../gen/berth/scheduler/v1/migration.js';
import { LiveMigratable, type RequestGroup } from '../../gen/berth/scheduler/v1/profile.js';
import { BerthClientError, type SchedulerClient } from '../sdk.js';
import { defaultProgressStyle, followCleanup, type ProgressStyle } from './cleanup-progress.js';
import { type DemoLedger, emptyLedger, type FaultInjector, undoDemo } from './demo-ledger.js';
import { deviceState } from './device-commands.js';
import { listAllDevices, listAllHosts } from './references.js';
import { deviceName, deviceView } from './views.js';

export interface DemoOptions {
  client: SchedulerClient;
  /** Aborted on Ctrl-C/SIGTERM: the demo stops at the next await and undoes what it did. */
  signal?: AbortSignal;
  /** Keeps the ledger where a later demo finds it (called before every change). */
  saveLedger?: (ledger: DemoLedger) => Promise<void>;
  /** How to reach the simulated hosts' nvme-cli state; undefined: the failed-cleanup step cannot run. */
  injectFault?: FaultInjector;
  /** Why there is no injector (shown when the step is skipped). */
  noFaultReason?: string;
  write?: (line: string) => void;
  progress?: ProgressStyle;
}

/** A step did not do what it should: the demo stops and says which and why. */
export class DemoFailure extends Error {}

/** The demo was interrupted (Ctrl-C, SIGTERM). */
export class DemoInterrupted extends Error {}

const noFilter = { host: '', type: DeviceType.DEVICE_TYPE_UNSPECIFIED, state: 0, resourceClass: '' };
const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const t = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
    function done() {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    }
  });

function check(cond: unknown, what: string): asserts cond {
  if (!cond) throw new DemoFailure(what);
}

const group = (g: Partial<RequestGroup>): RequestGroup => ({
  resourceClass: '',
  vendorId: '',
  productId: '',
  requiredTraits: [],
  forbiddenTraits: [],
  liveMigratable: LiveMigratable.LIVE_MIGRATABLE_UNSPECIFIED,
  count: 1,
  ...g,
});

const state = (d: Device) => deviceView(d).device_state;

/** Runs the demo; resolves true when every step did what it should. */
export async function runDemo(o: DemoOptions): Promise<boolean> {
  const { client } = o;
  const say = o.write ?? ((line: string) => process.stdout.write(`${line}\n`));
  const progress = o.progress ?? defaultProgressStyle(false);
  const run = randomBytes(3).toString('hex');
  const name = (s: string) => `demo-${run}-${s}`;
  const ledger = emptyLedger(run);
  const note = async (change: (l: DemoLedger) => void) => {
    change(ledger);
    await o.saveLedger?.(ledger);
  };
  let stepNo = 0;
  const startedAt = Date.now();
  const interruptedCheck = () => {
    if (o.signal?.aborted) throw new DemoInterrupted('interrupted');
  };

  const step = (title: string) => {
    interruptedCheck();
    stepNo++;
    say('');
    say(`== ${stepNo}. ${title}`);
  };
  const byUuid = (uuid: string): DeviceRef => ({ ref: { $case: 'uuid', value: uuid } });
  const getDevice = async (uuid: string) =>
    (await client.devices.getDevice({ device: byUuid(uuid) })).device!;
  const waitForState = async (uuid: string, want: DeviceState, ms = 20_000) => {
    const until = Date.now() + ms;
    for (;;) {
      const d = await getDevice(uuid);
      if (d.deviceState === want) return d;
      if (Date.now() > until) return d;
      await sleep(100, o.signal);
      interruptedCheck();
    }
  };
  const createProfile = async (profileName: string, description: string, g: RequestGroup) => {
    await note((l) => l.profiles.push(profileName));
    await client.profiles.createProfile({
      profile: { name: profileName, uuid: '', description, groups: [g], createdAt: undefined },
    });
  };
  const bind = async (profile: string, instance: string, host: string, tag: string) => {
    interruptedCheck();
    if (!ledger.instances.includes(instance)) await note((l) => l.instances.push(instance));
    const created = await client.arqs.createAcceleratorRequests({
      profileName: profile,
      requestId: `${instance}-${tag}`,
      tags: [tag],
    });
    await note((l) => l.arqs.push(...created.acceleratorRequests.map((a) => a.uuid)));
    const bound = await client.arqs.bindAcceleratorRequests({
      bindings: created.acceleratorRequests.map((a) => ({
        arqUuid: a.uuid,
        instanceUuid: instance,
        host,
        tag: '',
      })),
    });
    for (const a of bound.acceleratorRequests) {
      check(a.state === ArqState.ARQ_STATE_BOUND, `ARQ ${a.uuid} should be bound: ${a.error}`);
      const h = a.attachHandleInfo;
      say(
        `   ARQ ${a.uuid.slice(0, 8)} (tag ${a.tag}) is bound to ${host}/${a.deviceAddress}; attach handle ${h?.domain}:${h?.bus}:${h?.device}.${h?.function}, managed=${h?.managed}.`,
      );
    }
    return bound.acceleratorRequests;
  };
  const followAndReport = async (d: Device, jobId = '') => {
    say(`   Following the cleanup of ${deviceName(d)} (${d.cleanupAction}):`);
    const out = await followCleanup(client, byUuid(d.uuid), jobId, progress, {
      write: (line) => say(`     ${line}`),
      waiting: (line) => say(`     (${line})`),
      ...(o.signal ? { signal: o.signal } : {}),
    });
    interruptedCheck();
    return out;
  };

  try {
    // 1. Discovery
    step('Discovery: the hosts and their devices');
    // A host registers before the scheduler has followed its inventory stream:
    // give a freshly started `berth up` a moment until two hosts report devices.
    const ready = async () => (await listAllHosts(client)).filter((h) => h.connected && h.deviceCount > 0);
    let hosts = await ready();
    let told = '';
    const startedWaiting = Date.now();
    for (const until = Date.now() + 30_000; hosts.length < 2 && Date.now() < until; ) {
      await sleep(200, o.signal);
      interruptedCheck();
      hosts = await ready();
      const all = await listAllHosts(client);
      const why =
        `Waiting for a second host with devices (a migration needs a destination): ` +
        (all.length === 0
          ? 'no host has registered yet.'
          : all
              .map(
                (h) => `${h.name} ${h.connected ? `connected, ${h.deviceCount} devices` : 'not connected'}`,
              )
              .join('; ') + '.');
      if (hosts.length < 2 && why !== told && Date.now() - startedWaiting >= 1_500) {
        say(`   ${why}`);
        told = why;
      }
    }
    for (const h of hosts) {
      say(
        `   Host ${h.name}: agent ${h.agentVersion} at ${h.endpoint}, drivers ${h.drivers.join(', ')}, ${h.deviceCount} devices.`,
      );
    }
    check(
      hosts.length >= 2,
      `two connected hosts are needed (a migration needs a destination); found ${hosts.length}`,
    );
    const src = hosts[0]!.name;
    const dst = hosts[1]!.name;
    const devices = await devicesReady(client, src, say, o.signal);
    interruptedCheck();
    for (const host of [src, dst]) {
      const mine = devices.filter((d) => d.host === host);
      const kinds = new Map<string, number>();
      for (const d of mine) {
        const v = deviceView(d);
        const key = `${v.type} ${v.vendor_id}:${v.product_id}, cleanup ${v.cleanup_action || 'none'}${v.live_migratable ? ', live-migratable' : ''}${v.one_time_use ? ', one-time-use' : ''}`;
        kinds.set(key, (kinds.get(key) ?? 0) + 1);
      }
      say(`   ${host} has ${mine.length} devices:`);
      for (const [k, n] of kinds) say(`     ${n} x ${k}`);
    }
    const srcDevs = devices.filter((d) => d.host === src && d.allocatable);
    const missing = NEEDS.filter((n) => !srcDevs.some(n.test));
    check(missing.length === 0, notReady(src, devices, missing));
    const vf = srcDevs.find((d) => d.liveMigratable)!;
    const gpu = srcDevs.find((d) => d.oneTimeUse)!;
    const nvme = srcDevs.find((d) => d.traits.includes('HW_NVME_CES'))!;
    say(`   The demo uses ${src} as the source host and ${dst} as the migration destination.`);

    // 2. Profiles
    step('Profiles: what a guest asks for');
    const pVf = name('vf');
    const pNvme = name('nvme');
    const pGpu = name('gpu');
    await createProfile(
      pVf,
      'one live-migratable VF',
      group({
        vendorId: vf.vendorId,
        productId: vf.productId,
        liveMigratable: LiveMigratable.LIVE_MIGRATABLE_YES,
      }),
    );
    await createProfile(
      pNvme,
      'one NVMe drive with crypto erase',
      group({ vendorId: nvme.vendorId, productId: nvme.productId, requiredTraits: ['HW_NVME_CES'] }),
    );
    await createProfile(
      pGpu,
      'one GPU, one-time-use',
      group({ vendorId: gpu.vendorId, productId: gpu.productId, requiredTraits: ['HW_ONE_TIME_USE'] }),
    );
    say(`   Created ${pVf} (a live-migratable VF ${vf.vendorId}:${vf.productId}).`);
    say(`   Created ${pNvme} (an NVMe drive with the HW_NVME_CES trait).`);
    say(`   Created ${pGpu} (a one-time-use GPU ${gpu.vendorId}:${gpu.productId}).`);

    // 3. ARQs
    const vm1 = name('vm1');
    step(`Accelerator requests: a VF and an NVMe drive for instance ${vm1} on ${src}`);
    const vm1Vf = await bind(pVf, vm1, src, 'nic-fast');
    const vm1Nvme = await bind(pNvme, vm1, src, 'scratch');
    const nvmeUuid = vm1Nvme[0]!.deviceUuid;
    const nvmeDev = await getDevice(nvmeUuid);
    check(
      state(nvmeDev) === 'allocated' && nvmeDev.reserved === 1,
      `${deviceName(nvmeDev)} should be allocated and reserved`,
    );
    say(`   ${deviceName(nvmeDev)} is now allocated (reserved 1 of 1); nobody else can get it.`);

    // 4. XML
    step('The guest XML: one <hostdev> per device');
    const xml = await client.instances.getInstanceXml({ instanceUuid: vm1 });
    check(xml.hostdevs.length === 2, `expected 2 hostdevs, got ${xml.hostdevs.length}`);
    for (const line of xml.xml.trimEnd().split('\n')) say(`   ${line}`);
    for (const h of xml.hostdevs) {
      say(
        `   ${h.alias}: host ${h.source?.bus}:${h.source?.slot}.${h.source?.function} appears in the guest at ${h.guest?.domain}:${h.guest?.bus}:${h.guest?.slot}.${h.guest?.function}.`,
      );
    }

    // 5. Metadata
    step('Device-role metadata, after registering a NIC and a disk');
    await client.instances.setInstanceDevices({
      instanceUuid: vm1,
      nics: [
        {
          mac: '52:54:00:12:34:56',
          address: '0000:00:03.0',
          tag: 'uplink',
          vlan: undefined,
          model: 'virtio',
        },
      ],
      disks: [{ serial: 'DEMO-ROOT-1', bus: 'pci', address: '0000:00:04.0', path: '', tag: 'root' }],
    });
    say('   Registered NIC 52:54:00:12:34:56 (tag uplink) and disk DEMO-ROOT-1 (tag root).');
    const meta = JSON.parse((await client.instances.getDeviceMetadata({ instanceUuid: vm1 })).json) as {
      devices: { type: string; bus: string; address: string; tags?: string[] }[];
    };
    for (const d of meta.devices)
      say(`   ${d.type} on ${d.bus} ${d.address}, tags ${(d.tags ?? []).join(',')}`);
    check(
      meta.devices.length === 4,
      `the metadata should list 4 devices (NIC, disk, VF, NVMe), got ${meta.devices.length}`,
    );

    // 6. Delete → cleanup
    step(`Deleting ${vm1}: the VF is free at once, the NVMe drive is scrubbed first`);
    await client.arqs.deleteAcceleratorRequests({ uuids: [], instanceUuid: vm1 });
    const vfAfter = await getDevice(vm1Vf[0]!.deviceUuid);
    say(`   ${deviceName(vfAfter)} (no cleanup needed) is ${state(vfAfter)}.`);
    check(state(vfAfter) === 'available', `the VF should be available, it is ${state(vfAfter)}`);
    const pending = await getDevice(nvmeUuid);
    say(`   ${deviceName(pending)} is ${state(pending)}, still reserved (${pending.reserved}).`);
    const clean1 = await followAndReport(pending);
    check(clean1.succeeded, clean1.reason);
    const clean1Dev = await waitForState(nvmeUuid, DeviceState.DEVICE_STATE_AVAILABLE);
    check(
      state(clean1Dev) === 'available',
      `after the cleanup the drive should be available, it is ${state(clean1Dev)}`,
    );
    say(
      `   The cleanup succeeded; ${deviceName(clean1Dev)} is available again (reserved ${clean1Dev.reserved}).`,
    );

    // 7. Live migration
    const vm2 = name('vm2');
    step(`Live migration: ${vm2} with a VF, from ${src} to ${dst}`);
    const vm2Arqs = await bind(pVf, vm2, src, 'nic0');
    const srcVf = vm2Arqs[0]!;
    const plan = (
      await client.migrations.planLiveMigration({ instanceUuid: vm2, destinationHost: dst, requestId: '' })
    ).migration!;
    for (const [s, d] of Object.entries(plan.pciDevMapSrcDst)) say(`   Planned: ${src}/${s} -> ${dst}/${d}.`);
    for (const r of plan.readiness)
      say(`   Destination ${r.address}: ${r.ready ? 'ready' : `not ready (${r.reason})`}.`);
    check(plan.state === MigrationState.MIGRATION_STATE_PLANNED, 'the migration should be planned');
    check(Object.keys(plan.pciDevMapSrcDst).length === 1, 'the plan should map one device');
    say('   The destination XML, with the source address rewritten:');
    for (const line of plan.destinationXml.trimEnd().split('\n')) say(`   ${line}`);
    const committed = (await client.migrations.commitMigration({ migrationUuid: plan.uuid })).migration!;
    check(committed.state === MigrationState.MIGRATION_STATE_COMMITTED, 'the migration should be committed');
    const moved = (await client.arqs.listAcceleratorRequests({ instanceUuid: vm2 })).acceleratorRequests;
    check(moved.length === 1 && moved[0]!.host === dst, `${vm2}'s ARQ should now be on ${dst}`);
    const oldVf = await waitForState(srcVf.deviceUuid, DeviceState.DEVICE_STATE_AVAILABLE);
    check(state(oldVf) === 'available', `the source VF should be released, it is ${state(oldVf)}`);
    say(
      `   Committed. ${vm2} now holds ${dst}/${moved[0]!.deviceAddress}; ${deviceName(oldVf)} is ${state(oldVf)} again.`,
    );
    await client.arqs.deleteAcceleratorRequests({ uuids: [], instanceUuid: vm2 });

    // 8. One-time use
    const vm3 = name('vm3');
    step(`One-time use: ${vm3} gets the GPU, and after it the GPU stays burned`);
    const gpuArq = (await bind(pGpu, vm3, src, 'gpu0'))[0]!;
    await note((l) => l.burned.push(gpuArq.deviceUuid));
    check(
      gpuArq.attachHandleInfo?.managed === false,
      'the GPU is pre-bound by the operator: managed should be false',
    );
    await client.arqs.deleteAcceleratorRequests({ uuids: [], instanceUuid: vm3 });
    const burned = await getDevice(gpuArq.deviceUuid);
    say(
      `   ${vm3} deleted. ${deviceName(burned)}: burned=${burned.burned}, allocatable=${burned.allocatable}, reserved=${burned.reserved}.`,
    );
    check(
      burned.burned && !burned.allocatable && burned.reserved === 1,
      'the GPU should be burned and reserved',
    );
    const again = await client.arqs.createAcceleratorRequests({
      profileName: pGpu,
      requestId: `${vm3}-again`,
      tags: [],
    });
    const retry = await client.arqs
      .bindAcceleratorRequests({
        bindings: again.acceleratorRequests.map((a) => ({
          arqUuid: a.uuid,
          instanceUuid: vm3,
          host: src,
          tag: '',
        })),
      })
      .then(
        (r) => r.acceleratorRequests.find((a) => a.deviceUuid === gpuArq.deviceUuid),
        (e: unknown) => (e instanceof BerthClientError ? undefined : Promise.reject(e)),
      );
    await client.arqs.deleteAcceleratorRequests({
      uuids: again.acceleratorRequests.map((a) => a.uuid),
      instanceUuid: '',
    });
    check(!retry, 'a burned GPU must not be bound again');
    say('   Asking for the GPU again does not get it: it stays out of the pool.');
    const released = (await client.devices.releaseDevice({ device: byUuid(gpuArq.deviceUuid) })).device!;
    await note((l) => l.burned.splice(l.burned.indexOf(gpuArq.deviceUuid), 1));
    check(!released.burned && released.allocatable, 'after the release the GPU should be allocatable');
    say(`   The operator released it: burned=${released.burned}, allocatable=${released.allocatable}.`);

    // 9. Failed cleanup and the operator's re-clean
    const vm4 = name('vm4');
    step('A cleanup that fails, and the operator cleaning again');
    if (!o.injectFault) {
      throw new DemoFailure(
        `cannot inject a fault into the simulated host: ${o.noFaultReason ?? 'no simulated host'}`,
      );
    }
    const nvme4 = (await bind(pNvme, vm4, src, 'scratch'))[0]!;
    const dev4 = await getDevice(nvme4.deviceUuid);
    const controller = dev4.attributes.nvme_controller;
    check(controller, `${deviceName(dev4)} has no nvme_controller attribute`);
    await note((l) => {
      l.faults.push({ host: src, controller, command: 'sanitize' });
      l.dirtied.push(dev4.uuid);
    });
    await o.injectFault(src, controller, 'sanitize', { mode: 'sanitize-fails' });
    say(`   Injected a fault: ${controller}'s next sanitize will fail.`);
    await client.arqs.deleteAcceleratorRequests({ uuids: [], instanceUuid: vm4 });
    const failed = await followAndReport(dev4);
    check(!failed.succeeded, 'the cleanup should have failed');
    const inError = await waitForState(dev4.uuid, DeviceState.DEVICE_STATE_ERROR);
    check(state(inError) === 'error', `the drive should be in error, it is ${state(inError)}`);
    check(inError.reserved === 1 && !inError.allocatable, 'a drive in error must stay reserved');
    say(`   As it should: ${failed.reason.replace(/\.+$/, '')}.`);
    say(
      `   ${deviceName(inError)} is in error (${inError.errorReason || 'no reason'}), still reserved: no tenant gets a dirty drive.`,
    );
    await o.injectFault(src, controller, 'sanitize', null);
    await note((l) => {
      l.faults = [];
    });
    say(`   The operator fixes the drive (the fault is cleared) and cleans it again.`);
    const job = await client.devices.cleanDevice({ device: byUuid(dev4.uuid), requestId: `${vm4}-reclean` });
    const reclean = await followAndReport(dev4, job.jobId);
    check(reclean.succeeded, reclean.reason);
    const fixed = await waitForState(dev4.uuid, DeviceState.DEVICE_STATE_AVAILABLE);
    check(
      state(fixed) === 'available',
      `after the re-clean the drive should be available, it is ${state(fixed)}`,
    );
    say(`   ${deviceName(fixed)} is clean and available again.`);
    await note((l) => {
      l.dirtied = [];
    });

    say('');
    say(`All ${stepNo} steps did what they should, in ${((Date.now() - startedAt) / 1000).toFixed(1)} s.`);
    return true;
  } catch (err) {
    say('');
    if (err instanceof DemoInterrupted || o.signal?.aborted) say(`INTERRUPTED at step ${stepNo}.`);
    else if (err instanceof DemoFailure) say(`FAILED at step ${stepNo}: ${err.message}`);
    else if (err instanceof BerthClientError)
      say(`FAILED at step ${stepNo}: ${err.codeName}: ${err.message}${err.reason ? ` [${err.reason}]` : ''}`);
    else say(`FAILED at step ${stepNo}: ${(err as Error).message ?? String(err)}`);
    return false;
  } finally {
    // Leave the system as the demo found it.
    await undoDemo(client, o.injectFault, ledger, say, { wait: !o.signal?.aborted });
    await o.saveLedger?.(ledger);
  }
}

/** The devices the demo needs on its source host, each with what tells it. */
const NEEDS: readonly { what: string; test: (d: Device) => boolean }[] = [
  { what: 'a live-migratable VF', test: (d) => d.liveMigratable },
  { what: 'a one-time-use device', test: (d) => d.oneTimeUse },
  { what: 'a crypto-erase NVMe drive', test: (d) => d.traits.includes('HW_NVME_CES') },
];

/** What an operator runs to make a device allocatable again, when there is such a command. */
function fixFor(d: Device): string {
  const v = deviceView(d);
  const n = deviceName(d);
  if (v.device_state === 'error') return `berth device clean ${n} --wait`;
  if (v.burned && v.device_state === 'available') return `berth device release ${n}`;
  if (v.device_state === 'allocated' && v.instance_uuid)
    return `berth arq delete --instance ${v.instance_uuid}`;
  if (v.status === 'maintaining') return `berth device enable ${n}`;
  return '';
}

/** Why the source host cannot run the demo: each missing kind, the devices of that kind and how to free them. */
function notReady(
  host: string,
  devices: readonly Device[],
  missing: readonly (typeof NEEDS)[number][],
): string {
  const parts = missing.map((n) => {
    const of = devices.filter((d) => d.host === host && n.test(d));
    if (of.length === 0) return `${n.what}: ${host} has none (the demo host has them)`;
    const why = of.map((d) => {
      const fix = fixFor(d);
      return `${deviceName(d)} is ${deviceState(deviceView(d))}${d.errorReason ? ` (${d.errorReason})` : ''}${
        fix ? ` — ${fix}` : ''
      }`;
    });
    return `${n.what}: ${why.join('; ')}`;
  });
  return `${host} has no allocatable ${parts.join('. No allocatable ')}`;
}

/**
 * The device list once the source host's devices the demo needs are not in
 * the middle of a cleanup (one a previous run started): waits up to a minute
 * for those, saying so once.
 */
async function devicesReady(
  client: SchedulerClient,
  src: string,
  say: (line: string) => void,
  signal: AbortSignal | undefined,
): Promise<Device[]> {
  let told = false;
  for (const until = Date.now() + 60_000; ; ) {
    const devices = await listAllDevices(client, noFilter);
    const busy = devices.filter(
      (d) =>
        d.host === src &&
        NEEDS.some((n) => n.test(d)) &&
        (d.deviceState === DeviceState.DEVICE_STATE_PENDING_CLEANING ||
          d.deviceState === DeviceState.DEVICE_STATE_CLEANING),
    );
    const missing = NEEDS.filter((n) => !devices.some((d) => d.host === src && d.allocatable && n.test(d)));
    if (missing.length === 0 || busy.length === 0 || Date.now() > until || signal?.aborted) return devices;
    if (!told) {
      say(
        `   Waiting for ${busy.map((d) => `${deviceName(d)} (${state(d)})`).join(', ')} to finish cleaning.`,
      );
      told = true;
    }
    await sleep(250, signal);
  }
}
