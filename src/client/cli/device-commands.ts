/**
 * `berth device list|show|clean|watch-cleanup|release|enable|disable|watch`: the operator's
 * view of the inventory and the admin actions on one device. A device is named
 * by its uuid or as `host/address` (e.g. `sim-host-1/0000:3d:00.0`).
 */
import type { Command } from 'commander';
import { stringify as toYaml } from 'yaml';
import {
  type Device,
  DeviceState,
  DeviceStatus,
  DeviceType,
  deviceStateToJSON,
  deviceTypeToJSON,
} from '../../gen/berth/scheduler/v1/device.js';
import type { DeviceFilter } from '../../gen/berth/scheduler/v1/device_service.js';
import { defaultProgressStyle, followCleanup } from './cleanup-progress.js';
import {
  CommandFailed,
  clientOptions,
  type DeviceView,
  deviceName,
  deviceView,
  listAllDevices,
  parseEnum,
  resolveDeviceRef,
  UsageError,
  withClient,
} from './client-common.js';
import { type OutputFormat, printList, render, renderRecord, renderTable, uniquePrefixes } from './output.js';

interface FilterFlags {
  host?: string;
  type?: string;
  state?: string;
  resourceClass?: string;
}

function filterFrom(o: FilterFlags): DeviceFilter {
  return {
    host: o.host ?? '',
    type: o.type
      ? parseEnum('--type', o.type, 'DEVICE_TYPE_', deviceTypeToJSON, [
          DeviceType.DEVICE_TYPE_PCI,
          DeviceType.DEVICE_TYPE_NVME,
        ])
      : DeviceType.DEVICE_TYPE_UNSPECIFIED,
    state: o.state
      ? parseEnum('--state', o.state, 'DEVICE_STATE_', deviceStateToJSON, [
          DeviceState.DEVICE_STATE_AVAILABLE,
          DeviceState.DEVICE_STATE_ALLOCATED,
          DeviceState.DEVICE_STATE_PENDING_CLEANING,
          DeviceState.DEVICE_STATE_CLEANING,
          DeviceState.DEVICE_STATE_ERROR,
        ])
      : DeviceState.DEVICE_STATE_UNSPECIFIED,
    resourceClass: o.resourceClass ?? '',
  };
}

function filterOptions(cmd: Command): Command {
  return cmd
    .option('--host <host>', 'only devices of this host')
    .option('--type <type>', 'only this device type: pci or nvme')
    .option('--state <state>', 'only this state: available, allocated, pending_cleaning, cleaning, error')
    .option('--resource-class <rc>', 'only this resource class, e.g. CUSTOM_PCI_8086_154C');
}

/**
 * The device list: what an operator scans for fits 120 columns — a uuid
 * prefix that is unique in the list (the commands accept it back), the
 * state with what else keeps the device out of the pool (`available,burned`,
 * `available,maintaining`, `error,unhealthy`, as kubectl shows
 * `Ready,SchedulingDisabled`), the locked-in cleanup action and the instance
 * holding it. `-o wide` adds the full uuid, resource class, vendor:product,
 * NUMA node, IOMMU group and flags.
 */
export function deviceTable(rows: readonly DeviceView[], wide = false): string {
  const short = uniquePrefixes(rows.map((d) => d.uuid));
  return renderTable(
    rows,
    [
      { header: 'uuid', get: (d) => short.get(d.uuid), only: 'table' },
      { header: 'uuid', get: (d) => d.uuid, only: 'wide' },
      { header: 'host', get: (d) => d.host, shrink: true },
      { header: 'address', get: (d) => d.address },
      { header: 'type', get: (d) => d.type },
      { header: 'state', get: (d) => deviceState(d) },
      { header: 'cleanup', get: (d) => d.cleanup_action || '-' },
      { header: 'instance', get: (d) => d.instance_uuid || '-', shrink: true },
      { header: 'resource class', get: (d) => d.resource_class, only: 'wide' },
      { header: 'vendor:product', get: (d) => `${d.vendor_id}:${d.product_id}`, only: 'wide' },
      { header: 'numa', get: (d) => (d.numa_node < 0 ? '-' : d.numa_node), only: 'wide' },
      { header: 'iommu', get: (d) => d.iommu_group ?? '-', only: 'wide' },
      { header: 'flags', get: (d) => deviceFlags(d) || '-', only: 'wide' },
    ],
    { wide },
  );
}

/** The device state, then whatever else keeps it out of the pool. */
export function deviceState(d: DeviceView): string {
  const s = [d.device_state];
  if (d.burned) s.push('burned');
  if (d.status !== 'enabled') s.push(d.status);
  if (d.health === 'unhealthy') s.push('unhealthy');
  return s.join(',');
}

/** The properties an operator scans for, in one cell. */
function deviceFlags(d: DeviceView): string {
  const f: string[] = [];
  if (d.live_migratable) f.push('migratable');
  if (d.one_time_use) f.push('one-time-use');
  if (!d.managed) f.push('unmanaged');
  return f.join(',');
}

/** The `show` view: every field, nested ones as compact JSON. */
export function deviceRecord(d: DeviceView): string {
  return renderRecord({
    ...d,
    traits: d.traits.join(', '),
    attributes: Object.entries(d.attributes)
      .map(([k, v]) => `${k}=${v}`)
      .join(', '),
  });
}

function printDevice(format: OutputFormat, d: Device): void {
  const v = deviceView(d);
  console.log(render(format, v, () => deviceRecord(v)));
}

export function registerDeviceCommands(program: Command): void {
  const device = program
    .command('device')
    .description(
      'devices: list, inspect, clean, release, enable/disable, watch (a device is a uuid or host/address)',
    );

  filterOptions(clientOptions(device.command('list').description('list devices (filters combine)'))).action(
    withClient(async (client, format, o: FilterFlags) => {
      const rows = (await listAllDevices(client, filterFrom(o))).map(deviceView);
      printList(format, rows, 'devices', (wide) => deviceTable(rows, wide));
    }),
  );

  clientOptions(
    device.command('show').description('show one device, every field').argument('<device>'),
  ).action(
    withClient(async (client, format, name: string) => {
      const res = await client.devices.getDevice({ device: await resolveDeviceRef(client, name) });
      printDevice(format, res.device!);
    }),
  );

  clientOptions(
    device
      .command('clean')
      .description(
        'clean a device in error with its locked-in cleanup action (admin); --wait follows the progress and exits 1 unless it succeeds',
      )
      .argument('<device>')
      .option(
        '--wait',
        'follow the cleanup to its end: a progress bar on a terminal, progress lines otherwise',
      )
      .option('--request-id <id>', 'idempotency key: a retry with the same id returns the same job'),
  ).action(
    withClient(async (client, format, name: string, o: { wait?: boolean; requestId?: string }) => {
      const ref = await resolveDeviceRef(client, name);
      const res = await client.devices.cleanDevice({ device: ref, requestId: o.requestId ?? '' });
      const d = res.device!;
      if (!o.wait) {
        const v = { job_id: res.jobId, device: deviceView(d) };
        console.log(
          render(format, v, () =>
            renderRecord({
              job_id: res.jobId,
              device: deviceName(d),
              uuid: d.uuid,
              cleanup_action: d.cleanupAction,
              device_state: v.device.device_state,
            }),
          ),
        );
        return;
      }
      if (format !== 'json') {
        console.log(`cleaning ${deviceName(d)} (${d.cleanupAction}), job ${res.jobId}`);
      }
      const onSigint = () => {
        console.error('berth: interrupted: stopped following; the cleanup continues on the host');
        process.exit(1);
      };
      process.once('SIGINT', onSigint);
      try {
        const out = await followCleanup(
          client,
          { ref: { $case: 'uuid', value: d.uuid } },
          res.jobId,
          defaultProgressStyle(format === 'json'),
        );
        if (!out.succeeded) throw new CommandFailed(`${deviceName(d)}: ${out.reason}`);
        if (format !== 'json') console.log(`${deviceName(d)} is clean and available again`);
      } finally {
        process.removeListener('SIGINT', onSigint);
      }
    }),
  );

  clientOptions(
    device
      .command('watch-cleanup')
      .description(
        "follow a device's current (or last) cleanup, e.g. the one an ARQ delete started; exits 1 unless it succeeds",
      )
      .argument('<device>')
      .option('--job <id>', 'a specific cleanup job'),
  ).action(
    withClient(async (client, format, name: string, o: { job?: string }) => {
      const out = await followCleanup(
        client,
        await resolveDeviceRef(client, name),
        o.job ?? '',
        defaultProgressStyle(format === 'json'),
      );
      if (!out.succeeded) throw new CommandFailed(`${name}: ${out.reason}`);
    }),
  );

  clientOptions(
    device
      .command('release')
      .description('release a burned one-time-use device back into the pool (admin)')
      .argument('<device>'),
  ).action(
    withClient(async (client, format, name: string) => {
      const res = await client.devices.releaseDevice({ device: await resolveDeviceRef(client, name) });
      printDevice(format, res.device!);
    }),
  );

  for (const [verb, status, what] of [
    ['enable', DeviceStatus.DEVICE_STATUS_ENABLED, 'let the scheduler allocate the device again (admin)'],
    [
      'disable',
      DeviceStatus.DEVICE_STATUS_MAINTAINING,
      'take the device out of scheduling: maintaining (admin)',
    ],
  ] as const) {
    clientOptions(
      device
        .command(verb)
        .description(what)
        .argument('<device>')
        .option('--generation <n>', 'refuse (ABORTED) unless the device is still at this generation'),
    ).action(
      withClient(async (client, format, name: string, o: { generation?: string }) => {
        let generation: number | undefined;
        if (o.generation !== undefined) {
          generation = Number(o.generation);
          if (!Number.isSafeInteger(generation) || generation < 0) {
            throw new UsageError(`--generation: ${JSON.stringify(o.generation)} is not a generation number`);
          }
        }
        const res = await client.devices.setDeviceStatus({
          device: await resolveDeviceRef(client, name),
          status,
          generation,
        });
        printDevice(format, res.device!);
      }),
    );
  }

  filterOptions(
    clientOptions(
      device
        .command('watch')
        .description(
          'stream device changes as lines (JSON lines with -o json, YAML documents with -o yaml): the current state first, then every change; Ctrl-C stops',
        )
        .option('--from-revision <n>', 'resume after this revision (skips the initial state)', '0')
        .option('--max-events <n>', 'stop after this many change events (after the initial state)'),
    ),
  ).action(
    withClient(async (client, format, o: FilterFlags & { fromRevision: string; maxEvents?: string }) => {
      const max = o.maxEvents === undefined ? Number.POSITIVE_INFINITY : Number(o.maxEvents);
      let changes = 0;
      process.once('SIGINT', () => process.exit(0));
      const watch = client.watchDevicesRelisting(
        { filter: filterFrom(o), fromRevision: Number(o.fromRevision) || 0 },
        (err) => console.error(`berth: ${err.message} (re-listing the current state now)`),
      );
      for await (const m of watch) {
        const v = m.device ? deviceView(m.device) : null;
        if (format === 'json' || format === 'yaml') {
          const event = {
            revision: m.revision,
            initial: m.initial,
            synced: m.synced,
            removed: m.removed,
            device: v,
          };
          // JSON lines (one event per line, for jq); YAML as a stream of documents.
          console.log(format === 'json' ? JSON.stringify(event) : `---\n${toYaml(event).trimEnd()}`);
        } else if (m.synced) {
          console.log(`rev=${m.revision} synced (initial state complete; changes follow)`);
        } else if (v) {
          const kind = m.removed ? 'removed' : m.initial ? 'initial' : 'changed';
          console.log(
            `rev=${m.revision} ${kind} ${v.host}/${v.address} uuid=${v.uuid} state=${v.device_state} status=${v.status} health=${v.health}${v.burned ? ' burned' : ''}${v.instance_uuid ? ` instance=${v.instance_uuid}` : ''}`,
          );
        }
        if (!m.initial && !m.synced && ++changes >= max) break;
      }
    }),
  );
}
