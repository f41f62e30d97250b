/**
 * `berth device list|show|clean|watch-cleanup|release|enable|disable|watch`: the operator's
 * view of the inventory and the admin actions on one device. A device is named
 * by its uuid or as `host/address` (e.g. `sim-host-1/0000:3d:00.0`).
 */
import type { Command } from 'commander';
import { BerthError } from '../../errors.js';
import {
  type Device,
  DeviceState,
  DeviceStatus,
  DeviceType,
  deviceStateToJSON,
  deviceTypeToJSON,
} from '../../gen/berth/scheduler/v1/device.js';
import type { DeviceFilter, DeviceRef } from '../../gen/berth/scheduler/v1/device_service.js';
import { BerthClientError, type SchedulerClient } from '../sdk.js';
import { UsageError } from '../usage-error.js';
import { defaultProgressStyle, followCleanup } from './cleanup-progress.js';
import { CommandFailed, CommandInterrupted, oneLine } from './command-errors.js';
import { clientOptions, withClient } from './connection.js';
import { parseEnum } from './format.js';
import { interruptible, SIGNAL_EXIT } from './interrupt.js';
import {
  type OutputFormat,
  printList,
  render,
  renderRecord,
  renderTable,
  toYaml,
  uniquePrefixes,
} from './output.js';
import { listAllDevices, listAllHosts, resolveDeviceRef } from './references.js';
import { type DeviceView, deviceName, deviceView } from './views.js';

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
      { header: 'uuid', get: (d) => short.get(d.uuid), only: 'table', fixed: true },
      { header: 'uuid', get: (d) => d.uuid, only: 'wide' },
      { header: 'host', get: (d) => d.host, shrink: true },
      { header: 'address', get: (d) => d.address, fixed: true },
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
  const placement =
    'placement_provider' in d
      ? {
          placement_provider: `${d.placement_provider} (its provider in OpenStack Placement, as Nova names it; uuid ${d.placement_provider_uuid})`,
        }
      : {};
  return renderRecord({
    ...d,
    // Two names of one device: Berth's own, and (when reporting) Placement's.
    resource_provider: d.resource_provider ? `${d.resource_provider} (Berth's own name for it)` : '',
    ...placement,
    traits: d.traits.join(', '),
    attributes: Object.entries(d.attributes)
      .map(([k, v]) => `${k}=${v}`)
      .join(', '),
    media: d.media ? mediaLine(d.media) : '-',
    last_cleanup: d.last_cleanup ? cleanupLine(d.last_cleanup) : '-',
  });
}

/** The last cleanup in one wrappable line: outcome, action, job, when, message, how it was proven. */
function cleanupLine(c: NonNullable<DeviceView['last_cleanup']>): string {
  const when = c.finished_at ? `${c.started_at} → ${c.finished_at}` : `started ${c.started_at}, running`;
  const p = c.proof;
  const proof = p
    ? `; proof: ${p.method}, read-back ${p.read_back.toLowerCase()}, ${p.bytes_written} bytes written, ${p.bytes_read} read of ${p.bytes_total}${
        p.findings.length > 0 ? `, findings: ${p.findings.join('; ')}` : ''
      }`
    : '';
  return `${c.outcome.toLowerCase()}, ${c.action} (job ${c.job_id}), ${when}${c.message ? `: ${c.message}` : ''}${proof}`;
}

/** A media identity in one wrappable line: `key=…, kind=…, serial=…, namespace 1 nguid=…`. */
function mediaLine(m: NonNullable<DeviceView['media']>): string {
  const { namespaces, ...fields } = m;
  return [
    ...Object.entries(fields).map(([k, v]) => `${k}=${v}`),
    ...(namespaces ?? []).map(({ nsid, ...ids }) =>
      [`namespace ${nsid}`, ...Object.entries(ids).map(([k, v]) => `${k}=${v}`)].join(' '),
    ),
  ].join(', ');
}

/** NOT_FOUND naming the known hosts when `host` is not one (a list filtered by a typo is not empty by chance). */
async function requireHost(client: SchedulerClient, host: string): Promise<void> {
  try {
    await client.hosts.getHost({ name: host });
  } catch (err) {
    if (!(err instanceof BerthClientError) || err.codeName !== 'NOT_FOUND') throw err;
    const known = (await listAllHosts(client)).map((h) => h.name).sort();
    throw new BerthError(
      'NOT_FOUND',
      `no such host ${JSON.stringify(host)} (known hosts: ${known.length ? known.join(', ') : 'none'})`,
      { reason: 'HOST_NOT_FOUND' },
    );
  }
}

/** A command stopped by a signal: exit 130 (SIGINT) or 143 (SIGTERM) with what it left running. */
function interrupted(signal: 'SIGINT' | 'SIGTERM' | undefined, what: string): Error {
  return new CommandInterrupted(`interrupted: ${what}`, SIGNAL_EXIT[signal ?? 'SIGINT']);
}

/**
 * WatchCleanup of a device that has no cleanup job answers NOT_FOUND about a
 * job "of device …" the caller never named: say that the device was never
 * cleaned, and how to clean it.
 */
async function neverCleaned(
  client: SchedulerClient,
  err: unknown,
  ref: DeviceRef,
  name: string,
  job: string | undefined,
): Promise<unknown> {
  if (!(err instanceof BerthClientError) || err.codeName !== 'NOT_FOUND' || job) return err;
  const d = await client.devices.getDevice({ device: ref }).then(
    (r) => r.device,
    () => undefined,
  );
  if (!d || d.lastCleanup) return err;
  const state = deviceView(d).device_state;
  const next = !d.supportsCleaning
    ? ', and its driver does not clean it'
    : state === 'error'
      ? `; clean it with: berth device clean ${name} --wait`
      : '; a cleanup starts when the ARQ holding it is deleted';
  return new BerthError(
    'NOT_FOUND',
    `${deviceName(d)} has never been cleaned: there is no cleanup to follow (it is ${state})${next}`,
    { reason: 'NO_CLEANUP' },
  );
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
      if (rows.length === 0 && o.host) await requireHost(client, o.host);
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
      await interruptible(async (interruption) => {
        const { signal } = interruption;
        const out = await followCleanup(
          client,
          { ref: { $case: 'uuid', value: d.uuid } },
          res.jobId,
          defaultProgressStyle(format === 'json'),
          { signal },
        );
        if (out.interrupted) throw interrupted(interruption.received, `${deviceName(d)}: ${out.reason}`);
        if (!out.succeeded) throw new CommandFailed(`${deviceName(d)}: ${out.reason}`);
        if (format !== 'json') console.log(`${deviceName(d)} is clean and available again`);
      });
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
      const ref = await resolveDeviceRef(client, name);
      await interruptible(async (interruption) => {
        const { signal } = interruption;
        const out = await followCleanup(client, ref, o.job ?? '', defaultProgressStyle(format === 'json'), {
          signal,
        }).catch(async (err: unknown) => {
          throw await neverCleaned(client, err, ref, name, o.job);
        });
        if (out.interrupted) throw interrupted(interruption.received, `${name}: ${out.reason}`);
        if (!out.succeeded) throw new CommandFailed(`${name}: ${out.reason}`);
      });
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
      if (o.host) await requireHost(client, o.host);
      // Ctrl-C ends a watch: that is how it stops, so the exit code is 0.
      const stop = new AbortController();
      const onSignal = () => stop.abort();
      process.once('SIGINT', onSignal);
      process.once('SIGTERM', onSignal);
      const where = client.endpoint;
      const watch = client.watchDevicesResuming(
        { filter: filterFrom(o), fromRevision: Number(o.fromRevision) || 0 },
        {
          signal: stop.signal,
          onRelist: (err) => console.error(`berth: ${err.message} (re-listing the current state now)`),
          onRetry: ({ error, delayMs, resumeAfter, attempt }) => {
            // Say it at the first attempt and then every tenth: a long outage is not a flood of lines.
            if (attempt !== 1 && attempt % 10 !== 0) return;
            const resume = resumeAfter > 0 ? `resuming after revision ${resumeAfter}` : 'from the start';
            console.error(
              `berth: lost the watch on ${where} (${error.codeName}: ${oneLine(error.message)}); reconnecting in ${(delayMs / 1000).toFixed(1)} s (attempt ${attempt}), ${resume}`,
            );
          },
          onResumed: ({ resumeAfter, attempts, downMs }) =>
            console.error(
              `berth: watching ${where} again after ${(downMs / 1000).toFixed(1)} s (${attempts} attempt${attempts === 1 ? '' : 's'}), ${resumeAfter > 0 ? `resumed after revision ${resumeAfter}` : 'from the start'}`,
            ),
        },
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
          console.log(format === 'json' ? JSON.stringify(event) : `---\n${toYaml(event)}`);
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
