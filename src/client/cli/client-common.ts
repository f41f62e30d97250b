/**
 * What every client command of the berth CLI shares: the connection flags
 * (--endpoint, --token, -o), the one-line error report with the exit code
 * main.ts defines, device references, and the JSON/YAML views of the API's
 * messages.
 *
 * JSON and YAML output use the proto's field names in snake_case (as in the
 * .proto files and `berth agent discover -o json`), every field present even
 * when it is empty, enums as short lower-case names (`available`, `nvme`,
 * `bound`) and timestamps as ISO 8601 strings — stable for scripts and jq.
 */

import { readFile } from 'node:fs/promises';
import type { Command } from 'commander';
import { parse as parseYaml } from 'yaml';
import { BerthError, isBerthError, notFoundReason, type RecordKind } from '../../errors.js';
import { type CleanupEvent, cleanupPhaseToJSON } from '../../gen/berth/agent/v1/agent.js';
import {
  type CensusNamespace,
  type CleanupProof,
  namespaceManagementToJSON,
  readBackToJSON,
} from '../../gen/berth/agent/v1/cleanup_proof.js';
import { type MediaIdentity, mediaIdentityKindToJSON } from '../../gen/berth/agent/v1/device.js';
import {
  type AcceleratorRequest,
  arqStateToJSON,
  attachHandleTypeToJSON,
} from '../../gen/berth/scheduler/v1/accelerator_request.js';
import {
  type CleanupRecord,
  cleanupOutcomeToJSON,
  type Device,
  deviceStateToJSON,
  deviceStatusToJSON,
  deviceTypeToJSON,
  healthToJSON,
} from '../../gen/berth/scheduler/v1/device.js';
import type { DeviceFilter, DeviceRef } from '../../gen/berth/scheduler/v1/device_service.js';
import type { Host } from '../../gen/berth/scheduler/v1/host.js';
import type { Hostdev, PciAddress } from '../../gen/berth/scheduler/v1/instance.js';
import { type Migration, migrationStateToJSON } from '../../gen/berth/scheduler/v1/migration.js';
import { liveMigratableToJSON, type Profile } from '../../gen/berth/scheduler/v1/profile.js';
import { isUuid } from '../../identifiers.js';
import { type ClientTls, http1Answer, speaksTls, tlsProblem } from '../../transport/channel.js';
import {
  type ClientFlagValues,
  loadClientTls,
  type ResolvedClient,
  resolveClient,
} from '../client-config.js';
import { BerthClientError, identifyServer, SchedulerClient } from '../sdk.js';
import { UsageError } from '../usage-error.js';
import { type OutputFormat, parseFormat } from './output.js';

/** Exit codes, as main.ts defines them (kept here so commands need not import main.ts, which runs the CLI). */
export const EXIT_CODE = { ok: 0, failed: 1, usage: 2, unavailable: 3 } as const;

export { UsageError };

/**
 * A command that ran but did not get what it should (a failed cleanup, a demo
 * step): exit 1 with the message already worded for the operator.
 */
export class CommandFailed extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'CommandFailed';
  }
}

/** A command stopped by a signal before it finished: one line, exit 130 (SIGINT) or 143 (SIGTERM). */
export class CommandInterrupted extends Error {
  constructor(
    message: string,
    readonly exitCode: number,
  ) {
    super(message);
    this.name = 'CommandInterrupted';
  }
}

export const OUTPUT_HELP =
  'output format: table, wide (more columns), json or yaml (JSON/YAML: snake_case proto field names, every field present, enums as lower-case names such as "available")';

export interface ClientFlags extends ClientFlagValues {
  output: string;
}

/** Adds the connection flags (--endpoint, --token, TLS) and -o to a client command. */
export function clientOptions(cmd: Command, withOutput = true): Command {
  connectionOptions(cmd);
  if (withOutput) cmd.option('-o, --output <format>', OUTPUT_HELP, 'table');
  return cmd;
}

/** --endpoint, --token and the TLS flags, as every command that calls the scheduler takes them. */
export function connectionOptions(cmd: Command): Command {
  return cmd
    .option(
      '--endpoint <addr>',
      'scheduler host:port, https://host:port (TLS), or ip:port,ip:port for replicas (default: $BERTH_ENDPOINT, the client config, 127.0.0.1:7070)',
    )
    .option('--token <token>', 'bearer token (default: $BERTH_TOKEN, the client config)')
    .option(
      '--tls-ca <file>',
      'TLS: CA verifying the scheduler (default: $BERTH_TLS_CA, tls.ca in the client config)',
    )
    .option(
      '--tls-cert <file>',
      'TLS: client certificate, for mutual TLS (default: $BERTH_TLS_CERT, tls.cert in the client config)',
    )
    .option(
      '--tls-key <file>',
      'TLS: key of --tls-cert (default: $BERTH_TLS_KEY, tls.key in the client config)',
    )
    .option(
      '--tls-server-name <name>',
      "TLS: the name the scheduler's certificate carries, when it is not the endpoint's host (default: $BERTH_TLS_SERVER_NAME)",
    );
}

/** The flags of connectionOptions, as resolveClient takes them. */
export const connectionFlags = (o: ClientFlagValues): ClientFlagValues => ({
  endpoint: o.endpoint,
  token: o.token,
  tlsCa: o.tlsCa,
  tlsCert: o.tlsCert,
  tlsKey: o.tlsKey,
  tlsServerName: o.tlsServerName,
});

/** A one-line message ends without a stop when something follows it (no `….;`). */
const openEnded = (message: string) => message.replace(/[\s.;:,]+$/, '');

/** grpc-js's connection messages, on one line and without their empty notes. */
export function oneLine(message: string): string {
  return message
    .replace(/\s*Resolution note:\s*$/, '')
    .replace(/\s*\n\s*/g, ' ')
    .trim();
}

/**
 * The error line: `berth: <CODE>: <message> [<REASON>]` (the reason when it
 * says more than the code), field violations appended when the message lacks
 * them, then a hint on what to do when there is one.
 */
export function errorLine(err: BerthClientError, hint?: string): string {
  const extra = err.fieldViolations
    .map((v) => `${v.field}: ${v.description}`)
    .filter((v) => !err.message.includes(v));
  const message = oneLine(err.message);
  const reason = err.reason && err.reason !== err.codeName ? ` [${err.reason}]` : '';
  const tail = `${reason}${extra.length ? ` (${extra.join('; ')})` : ''}${hint ? `; ${hint}` : ''}`;
  return `berth: ${err.codeName}: ${tail ? openEnded(message) : message}${tail}`;
}

/** Where the endpoint came from, for messages. */
function endpointWhere(client: ResolvedClient): string {
  return client.endpointSource === 'flag'
    ? '--endpoint'
    : client.endpointSource === 'env'
      ? '$BERTH_ENDPOINT'
      : client.endpointSource === 'file'
        ? `the endpoint in ${client.configPath}`
        : 'the default endpoint (no --endpoint, $BERTH_ENDPOINT or client configuration)';
}

/**
 * Why a connection failed, in one line, when it is something the caller can
 * fix: a host name that does not resolve, or TLS on one side only (a
 * plaintext client and a TLS server, or the reverse), a server certificate
 * from a CA the client does not trust, one for another name, a client
 * certificate the server requires. Undefined when there is nothing to add.
 */
export async function explainConnection(
  err: { codeName: string; message: string },
  client: Pick<ResolvedClient, 'endpoint' | 'endpointSource' | 'configPath' | 'tls'>,
  tls?: ClientTls,
): Promise<string | undefined> {
  if (err.codeName !== 'UNAVAILABLE') return undefined;
  const where = endpointWhere(client as ResolvedClient);
  const ep = client.endpoint;
  const cfg = client.configPath;
  const resolution = /Name resolution failed for target (?:dns:)?(\S+)/.exec(err.message);
  if (resolution) {
    const target = resolution[1]!.replace(/:\d+$/, '').replace(/^\/+/, '');
    return `no such host ${JSON.stringify(target)} (${where}): check the name, or give the scheduler's address`;
  }
  let m = err.message;
  if (client.tls && tls && /Failed to connect|Connection dropped|ECONNRESET|EPIPE/.test(m)) {
    // grpc-js says no more; a handshake of our own with the same files says what the server refused.
    m = (await tlsProblem(client.endpoint, tls)) ?? m;
  }
  if (client.tls) {
    const why = client.tls.from.join(', ');
    if (/wrong version number|packet length too long|unknown protocol|http_request/i.test(m)) {
      return `${ep} does not speak TLS, and this client does (${why}): use http://${ep.split(',')[0]} or drop the TLS settings, or enable TLS on the server`;
    }
    if (/certificate required|alert number 116/i.test(m)) {
      return `${ep} requires a client certificate (mutual TLS): give --tls-cert and --tls-key ($BERTH_TLS_CERT and $BERTH_TLS_KEY, or tls.cert and tls.key in ${cfg})`;
    }
    if (/unable to verify|self[- ]signed|unable to get local issuer|certificate signature failure/i.test(m)) {
      return `${ep}'s certificate is not signed by a CA this client trusts (${
        client.tls.ca ? `CA ${client.tls.ca}` : "the system's roots"
      }): give the CA that signed it with --tls-ca ($BERTH_TLS_CA, or tls.ca in ${cfg})`;
    }
    const altname = /Host: (\S+?)\.? is not in the cert's altnames: ([^\n]*?)(?:\. Resolution note|$)/i.exec(
      m,
    );
    if (altname || /does not match certificate's altnames/i.test(m)) {
      const names = altname ? ` (it is for ${altname[2]!.trim()}, not ${altname[1]})` : '';
      return `${ep}'s certificate is not for the name dialled${names}: give a name it carries with --tls-server-name ($BERTH_TLS_SERVER_NAME, or tls.server_name in ${cfg})`;
    }
    if (/bad certificate|unknown ca|certificate unknown|alert|certificate refused/i.test(m)) {
      const cert = client.tls.cert ? ` ${client.tls.cert}` : '';
      return `${ep} refused this client's certificate${cert} (${oneLine(m).replace(/^No connection established\. Last error: /, '')}): is it signed by the CA the server trusts?`;
    }
    if (/certificate has expired|not yet valid/i.test(m)) {
      return `${ep}: ${oneLine(m).replace(/^No connection established\. Last error: (Error: )?/, '')}`;
    }
    return undefined;
  }
  if (/Protocol error/.test(m)) {
    // An HTTP/1.1 server: Berth's Cyborg API, a Placement, anything but the scheduler's gRPC port.
    const http = await http1Answer(ep);
    if (http) {
      const what = /OpenStack Cyborg API/.test(http.body)
        ? "Berth's Cyborg API (for Nova)"
        : /placement/i.test(http.body)
          ? 'an OpenStack Placement'
          : `an HTTP/1.1 server (it answered ${http.status})`;
      return `${ep} (${where}) is ${what}, not the scheduler's gRPC endpoint: give the scheduler's --listen address (berth scheduler serve prints it as "endpoint")`;
    }
  }
  if (!/ECONNREFUSED|EHOSTUNREACH|ENETUNREACH|ETIMEDOUT/.test(m) && (await speaksTls(ep)) === true) {
    return `${ep} speaks TLS, and this client connected in plaintext: give the CA with --tls-ca ($BERTH_TLS_CA, or tls.ca in ${cfg}), or https://${ep.split(',')[0]} for a certificate from a public CA`;
  }
  return undefined;
}

/**
 * What to do about an error whose cause is on the caller's side: an endpoint
 * that is an agent (or not Berth), a token that the environment overrides.
 */
export async function hintFor(
  err: BerthClientError,
  client: ResolvedClient,
  tls?: ClientTls,
): Promise<string | undefined> {
  const where = endpointWhere(client);
  if (err.reason === 'CLEANUP_IN_PROGRESS') {
    const device = err.metadata.device_uuid;
    return `follow it with: berth device watch-cleanup ${device ?? 'DEVICE'}`;
  }
  if (err.codeName === 'UNIMPLEMENTED') {
    const kind = await identifyServer(client.endpoint, tls ? { tls } : {}).catch(() => 'unknown' as const);
    if (kind === 'agent') {
      return `${client.endpoint} (${where}) is a Berth agent, not a scheduler: give the scheduler's endpoint`;
    }
    return `${client.endpoint} (${where}) does not serve the Berth scheduler API: is it a Berth scheduler?`;
  }
  if (err.codeName === 'UNAUTHENTICATED' && client.tokenSource === 'env') {
    return `the token comes from $BERTH_TOKEN, which overrides the one in ${client.configPath}: unset BERTH_TOKEN to use that one`;
  }
  if (err.codeName === 'UNAUTHENTICATED' && client.tokenSource === 'default') {
    return `no token: give --token, set $BERTH_TOKEN, or run berth up (it writes one into ${client.configPath})`;
  }
  if (err.codeName === 'UNAVAILABLE') {
    return `nothing answers at ${client.endpoint} (${where}): is berth up (or the scheduler) running${
      client.endpointSource === 'flag' ? ', and is that its address' : ''
    }?`;
  }
  return undefined;
}

/** Reports an error on stderr as one line and returns the exit code for it. */
export function reportError(err: unknown, hint?: string): number {
  if (err instanceof BerthClientError) {
    console.error(errorLine(err, hint));
    return err.codeName === 'UNAVAILABLE' || err.codeName === 'DEADLINE_EXCEEDED'
      ? EXIT_CODE.unavailable
      : EXIT_CODE.failed;
  }
  if (isBerthError(err)) {
    const reason = err.reason ? ` [${err.reason}]` : '';
    const tail = `${reason}${hint ? `; ${hint}` : ''}`;
    console.error(`berth: ${err.code}: ${tail ? openEnded(err.message) : err.message}${tail}`);
    return err.code === 'UNAVAILABLE' ? EXIT_CODE.unavailable : EXIT_CODE.failed;
  }
  if (err instanceof UsageError) {
    console.error(`berth: usage: ${err.message}`);
    return EXIT_CODE.usage;
  }
  if (err instanceof CommandInterrupted) {
    console.error(`berth: ${err.message}`);
    return err.exitCode;
  }
  const msg = (err as Error)?.message ?? String(err);
  console.error(`berth: ${msg.split('\n')[0]}`);
  return EXIT_CODE.failed;
}

/**
 * Reports an error of a client command: a connection failure the caller can
 * fix in one line of its own, else the error line with the command's hint or
 * the general one. Returns the exit code.
 */
export async function reportClientError(
  err: unknown,
  resolved: ResolvedClient | undefined,
  tls?: ClientTls,
): Promise<number> {
  if (err instanceof BerthClientError && resolved) {
    const explained = await explainConnection(err, resolved, tls);
    if (explained) {
      console.error(`berth: ${err.codeName}: ${explained}`);
      return EXIT_CODE.unavailable;
    }
  }
  const own = (err as { hint?: string } | undefined)?.hint;
  const hint =
    own ?? (err instanceof BerthClientError && resolved ? await hintFor(err, resolved, tls) : undefined);
  return reportError(err, hint);
}

/** The scheduler client a command's flags, environment and client configuration describe. */
export async function connect(
  flags: ClientFlagValues,
  extra: { retries?: number; timeoutMs?: number } = {},
): Promise<{ client: SchedulerClient; resolved: ResolvedClient; tls: ClientTls | undefined }> {
  const resolved = await resolveClient(connectionFlags(flags));
  const tls = await loadClientTls(resolved.tls);
  const client = new SchedulerClient({
    endpoint: resolved.endpoint,
    token: resolved.token,
    ...(tls ? { tls } : {}),
    retries: extra.retries ?? 2,
    ...(extra.timeoutMs ? { timeoutMs: extra.timeoutMs } : {}),
  });
  return { client, resolved, tls };
}

/**
 * Wraps a command action: connects to the scheduler, runs `fn`, closes the
 * channels, and turns any error into the one-line report and exit code (main.ts
 * prints domain errors, not the SDK's, so client commands report their own).
 */
export function withClient<A extends unknown[]>(
  fn: (client: SchedulerClient, format: OutputFormat, ...args: A) => Promise<void>,
): (...args: A) => Promise<void> {
  return async (...args: A) => {
    // commander passes (...positionals, options, command)
    const options = args[args.length - 2] as ClientFlags;
    let client: SchedulerClient | undefined;
    let resolved: ResolvedClient | undefined;
    let tls: ClientTls | undefined;
    try {
      const format = parseFormatOrUsage(options.output ?? 'table');
      ({ client, resolved, tls } = await connect(options));
      await fn(client, format, ...args);
    } catch (err) {
      process.exitCode = await reportClientError(err, resolved, tls);
    } finally {
      client?.close();
    }
  };
}

function parseFormatOrUsage(v: string): OutputFormat {
  try {
    return parseFormat(v);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

/** A full uuid in either case (the server takes either; the rule is src/identifiers.ts's). */
const isFullUuid = (s: string): boolean => isUuid(s.toLowerCase());
/** What may abbreviate a uuid: at least 4 of its leading characters. */
const UUID_PREFIX = /^[0-9a-fA-F][0-9a-fA-F-]{3,35}$/;

/**
 * A PCI address as the tables show it (`0000:3d:00.0`), from the full form in
 * any case or lspci's short one without the domain (`3d:00.0`); anything else
 * is passed on for the server to refuse with the field named.
 */
export function normalizePciAddress(address: string): string {
  const m = /^(?:([0-9a-f]{1,4}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])$/i.exec(address.trim());
  if (!m) return address;
  const [, domain = '0', bus, slot, fn] = m;
  return `${domain.padStart(4, '0')}:${bus!.padStart(2, '0')}:${slot!.padStart(2, '0')}.${fn}`.toLowerCase();
}

/**
 * A device named by its uuid or as `host/address`, the address in full
 * (`sim-host-1/0000:3d:00.0`) or as lspci prints it (`sim-host-1/3d:00.0`).
 * A uuid prefix needs the device list: see resolveDeviceRef.
 */
export function parseDeviceRef(name: string): DeviceRef {
  if (isFullUuid(name)) return { ref: { $case: 'uuid', value: name.toLowerCase() } };
  const slash = name.lastIndexOf('/');
  if (slash > 0 && slash < name.length - 1) {
    return {
      ref: {
        $case: 'hostAddress',
        value: { host: name.slice(0, slash), address: normalizePciAddress(name.slice(slash + 1)) },
      },
    };
  }
  throw new UsageError(
    `device ${JSON.stringify(name)}: give a uuid (or its first characters, as the tables show it) or host/address (e.g. sim-host-1/0000:3d:00.0 or sim-host-1/3d:00.0)`,
  );
}

/**
 * The one id among `ids` that starts with `prefix`: NOT_FOUND when none
 * does, a usage error listing them when several do.
 */
export function matchPrefix(what: RecordKind, prefix: string, ids: readonly string[]): string {
  const p = prefix.toLowerCase();
  const hits = [...new Set(ids.filter((id) => id.startsWith(p)))];
  if (hits.length === 1) return hits[0]!;
  if (hits.length === 0) {
    throw new BerthError('NOT_FOUND', `no ${what} uuid starts with ${JSON.stringify(prefix)}`, {
      reason: notFoundReason(what),
    });
  }
  throw new UsageError(
    `${JSON.stringify(prefix)} is the start of ${hits.length} ${what} uuids (${hits.slice(0, 5).join(', ')}${hits.length > 5 ? ', …' : ''}): give more characters`,
  );
}

/** Every page of ListDevices. */
export async function listAllDevices(
  client: SchedulerClient,
  filter: DeviceFilter | undefined,
): Promise<Device[]> {
  const out: Device[] = [];
  let pageToken = '';
  do {
    const res = await client.devices.listDevices({ filter, pageSize: 0, pageToken });
    out.push(...res.devices);
    pageToken = res.nextPageToken;
  } while (pageToken);
  return out;
}

/** Every page of ListHosts. */
export async function listAllHosts(client: SchedulerClient): Promise<Host[]> {
  const out: Host[] = [];
  let pageToken = '';
  do {
    const res = await client.hosts.listHosts({ pageSize: 0, pageToken });
    out.push(...res.hosts);
    pageToken = res.nextPageToken;
  } while (pageToken);
  return out;
}

/** parseDeviceRef, plus a unique prefix of a device uuid (looked up in the device list). */
export async function resolveDeviceRef(client: SchedulerClient, name: string): Promise<DeviceRef> {
  if (!isFullUuid(name) && !name.includes('/') && UUID_PREFIX.test(name)) {
    const all = await listAllDevices(client, undefined);
    const uuid = matchPrefix(
      'device',
      name,
      all.map((d) => d.uuid),
    );
    return { ref: { $case: 'uuid', value: uuid } };
  }
  return parseDeviceRef(name);
}

/** ARQ uuids, each in full or as a unique prefix (looked up in the ARQ list once, when needed). */
export async function resolveArqUuids(client: SchedulerClient, names: readonly string[]): Promise<string[]> {
  let all: string[] | undefined;
  const out: string[] = [];
  for (const n of names) {
    if (isFullUuid(n) || !UUID_PREFIX.test(n)) {
      // A full uuid as the server stores it; anything else for the server to refuse, as given.
      out.push(isFullUuid(n) ? n.toLowerCase() : n);
      continue;
    }
    all ??= (await client.arqs.listAcceleratorRequests({ instanceUuid: '' })).acceleratorRequests.map(
      (a) => a.uuid,
    );
    out.push(matchPrefix('accelerator request', n, all));
  }
  return out;
}

/** `DEVICE_STATE_PENDING_CLEANING` → `pending_cleaning`. */
export function shortEnum(full: string, prefix: string): string {
  if (full === `${prefix}UNSPECIFIED`) return '';
  return (full.startsWith(prefix) ? full.slice(prefix.length) : full).toLowerCase();
}

/**
 * `pending_cleaning` (or `PENDING_CLEANING`, `pending-cleaning`, or the proto
 * name `DEVICE_STATE_PENDING_CLEANING` as buf curl prints it) → the enum
 * value, or a usage error listing the names.
 */
export function parseEnum<E extends number>(
  flag: string,
  value: string,
  prefix: string,
  toJSON: (v: E) => string,
  values: readonly E[],
): E {
  let want = value.trim().toLowerCase().replace(/-/g, '_');
  if (want.startsWith(prefix.toLowerCase())) want = want.slice(prefix.length);
  for (const v of values) {
    if (shortEnum(toJSON(v), prefix) === want && want !== '') return v;
  }
  const names = values.map((v) => shortEnum(toJSON(v), prefix)).filter((n) => n !== '');
  throw new UsageError(`${flag}: expected one of ${names.join(', ')}, got ${JSON.stringify(value)}`);
}

const iso = (d: Date | undefined) => (d ? d.toISOString() : null);

export const deviceName = (d: { host: string; address: string }) => `${d.host}/${d.address}`;

export function cleanupRecordView(r: CleanupRecord | undefined) {
  if (!r) return null;
  return {
    job_id: r.jobId,
    action: r.action,
    outcome: shortEnum(cleanupOutcomeToJSON(r.outcome), 'CLEANUP_OUTCOME_'),
    message: r.message,
    started_at: iso(r.startedAt),
    finished_at: iso(r.finishedAt),
    proof: cleanupProofView(r.proof),
  };
}

/**
 * How a cleanup was proven: method, full or sample read-back, bytes written /
 * read / covered, findings, and (NVMe) the agent's census of the media it covered.
 */
export function cleanupProofView(p: CleanupProof | undefined) {
  if (!p) return null;
  const ns = (n: CensusNamespace) => ({
    nsid: n.nsid,
    size_bytes: n.sizeBytes,
    block_size: n.blockSize,
    attached: n.attached,
    name: n.name,
    ...(n.coveredBy ? { covered_by: n.coveredBy } : {}),
  });
  const c = p.census;
  return {
    method: p.method,
    read_back: shortEnum(readBackToJSON(p.readBack), 'READ_BACK_'),
    bytes_written: p.bytesWritten,
    bytes_read: p.bytesRead,
    bytes_total: p.bytesTotal,
    findings: p.findings,
    census: c
      ? {
          controller: c.controller,
          total_capacity_bytes: c.totalCapacityBytes ?? null,
          unallocated_capacity_bytes: c.unallocatedCapacityBytes ?? null,
          namespace_management: shortEnum(
            namespaceManagementToJSON(c.namespaceManagement),
            'NAMESPACE_MANAGEMENT_',
          ),
          unallocated: c.unallocated,
          namespaces: c.namespaces.map(ns),
          namespaces_before: c.namespacesBefore.map(ns),
        }
      : null,
  };
}

export function deviceView(d: Device) {
  return {
    uuid: d.uuid,
    host: d.host,
    address: d.address,
    vendor_id: d.vendorId,
    product_id: d.productId,
    class_code: d.classCode,
    kernel_driver: d.kernelDriver,
    driver: d.driver,
    type: shortEnum(deviceTypeToJSON(d.type), 'DEVICE_TYPE_'),
    physfn: d.physfn,
    iommu_group: d.iommuGroup ?? null,
    numa_node: d.numaNode,
    resource_class: d.resourceClass,
    traits: d.traits,
    managed: d.managed,
    live_migratable: d.liveMigratable,
    one_time_use: d.oneTimeUse,
    burned: d.burned,
    cleanup_action: d.cleanupAction,
    supports_cleaning: d.supportsCleaning,
    device_state: shortEnum(deviceStateToJSON(d.deviceState), 'DEVICE_STATE_'),
    status: shortEnum(deviceStatusToJSON(d.status), 'DEVICE_STATUS_'),
    health: shortEnum(healthToJSON(d.health), 'HEALTH_'),
    health_reason: d.healthReason,
    reserved: d.reserved,
    total: d.total,
    resource_provider: d.resourceProvider,
    generation: d.generation,
    allocatable: d.allocatable,
    unallocatable_reason: d.unallocatableReason,
    arq_uuid: d.arqUuid,
    instance_uuid: d.instanceUuid,
    error_reason: d.errorReason,
    last_cleanup: cleanupRecordView(d.lastCleanup),
    attributes: d.attributes,
    // The media the device gives access to (docs/media-identity.md).
    media: d.media ? mediaView(d.media) : null,
    updated_at: iso(d.updatedAt),
    // Only on a scheduler that reports to Placement.
    ...(d.placementProviderName
      ? {
          placement_provider: d.placementProviderName,
          placement_provider_uuid: d.placementProviderUuid,
          placement_synced_at: iso(d.placementSyncedAt) || 'never',
          placement_note: d.placementNote,
        }
      : {}),
  };
}
export type DeviceView = ReturnType<typeof deviceView>;

/** A media identity as the CLI shows it: the key, what it is read from, and the identifiers it has. */
function mediaView(m: MediaIdentity) {
  return {
    key: m.key,
    kind: shortEnum(mediaIdentityKindToJSON(m.kind), 'MEDIA_IDENTITY_KIND_'),
    ...(m.subsystemNqn ? { subsystem_nqn: m.subsystemNqn } : {}),
    ...(m.serial ? { serial: m.serial } : {}),
    ...(m.model ? { model: m.model } : {}),
    ...(m.deviceSerialNumber ? { device_serial_number: m.deviceSerialNumber } : {}),
    ...(m.namespaces.length > 0
      ? {
          namespaces: m.namespaces.map((n) => ({
            nsid: n.nsid,
            ...(n.nguid ? { nguid: n.nguid } : {}),
            ...(n.eui64 ? { eui64: n.eui64 } : {}),
            ...(n.uuid ? { uuid: n.uuid } : {}),
          })),
        }
      : {}),
  };
}

export function hostView(h: Host) {
  return {
    name: h.name,
    endpoint: h.endpoint,
    boot_id: h.bootId,
    agent_version: h.agentVersion,
    features: h.features,
    drivers: h.drivers,
    connected: h.connected,
    registered_at: iso(h.registeredAt),
    last_seen: iso(h.lastSeen),
    device_count: h.deviceCount,
    followed_by: h.followedBy,
  };
}
export type HostView = ReturnType<typeof hostView>;

export function profileView(p: Profile) {
  return {
    name: p.name,
    uuid: p.uuid,
    description: p.description,
    groups: p.groups.map((g) => ({
      resource_class: g.resourceClass,
      vendor_id: g.vendorId,
      product_id: g.productId,
      required_traits: g.requiredTraits,
      forbidden_traits: g.forbiddenTraits,
      live_migratable: shortEnum(liveMigratableToJSON(g.liveMigratable), 'LIVE_MIGRATABLE_') || 'unset',
      count: g.count,
    })),
    created_at: iso(p.createdAt),
  };
}
export type ProfileView = ReturnType<typeof profileView>;

export function arqView(a: AcceleratorRequest) {
  return {
    uuid: a.uuid,
    profile_name: a.profileName,
    group_id: a.groupId,
    state: shortEnum(arqStateToJSON(a.state), 'ARQ_STATE_'),
    instance_uuid: a.instanceUuid,
    host: a.host,
    device_uuid: a.deviceUuid,
    device_address: a.deviceAddress,
    attach_handle_type: shortEnum(attachHandleTypeToJSON(a.attachHandleType), 'ATTACH_HANDLE_TYPE_'),
    attach_handle_info: a.attachHandleInfo
      ? {
          domain: a.attachHandleInfo.domain,
          bus: a.attachHandleInfo.bus,
          device: a.attachHandleInfo.device,
          function: a.attachHandleInfo.function,
          managed: a.attachHandleInfo.managed,
        }
      : null,
    tag: a.tag,
    error: a.error,
    created_at: iso(a.createdAt),
    resource_class: a.resourceClass,
  };
}
export type ArqView = ReturnType<typeof arqView>;

const pciView = (p: PciAddress | undefined) =>
  p ? { domain: p.domain, bus: p.bus, slot: p.slot, function: p.function } : null;
export function hostdevView(h: Hostdev) {
  return {
    arq_uuid: h.arqUuid,
    device_uuid: h.deviceUuid,
    source: pciView(h.source),
    guest: pciView(h.guest),
    managed: h.managed,
    alias: h.alias,
    tag: h.tag,
  };
}

export function migrationView(m: Migration) {
  return {
    uuid: m.uuid,
    instance_uuid: m.instanceUuid,
    source_host: m.sourceHost,
    destination_host: m.destinationHost,
    state: shortEnum(migrationStateToJSON(m.state), 'MIGRATION_STATE_'),
    pci_dev_map_src_dst: m.pciDevMapSrcDst,
    destination_xml: m.destinationXml,
    readiness: m.readiness.map((r) => ({ address: r.address, ready: r.ready, reason: r.reason })),
    created_at: iso(m.createdAt),
  };
}

export function cleanupEventView(e: CleanupEvent, deviceUuid = '') {
  return {
    device_uuid: deviceUuid,
    job_id: e.jobId,
    address: e.address,
    action: e.action,
    phase: shortEnum(cleanupPhaseToJSON(e.phase), 'CLEANUP_PHASE_'),
    step: e.step,
    percent: e.percent,
    bytes_done: e.bytesDone,
    bytes_total: e.bytesTotal,
    message: e.message,
    time: iso(e.time),
    sequence: e.sequence,
  };
}

/** Reads a YAML or JSON file (JSON is valid YAML); a missing or malformed file is a usage error. */
export async function readDocument(path: string): Promise<unknown> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new UsageError(`--file ${path}: ${(err as Error).message}`);
  }
  try {
    return parseYaml(text) as unknown;
  } catch (err) {
    throw new UsageError(`--file ${path}: not YAML or JSON: ${(err as Error).message.split('\n')[0]}`);
  }
}

/** Collects a repeatable option into an array. */
export const collect = (value: string, previous: string[] = []) => [...previous, value];

/** `12s ago`, `5m ago`, `3h ago`, `2d ago` (or `never`). */
export function ago(when: Date | string | null | undefined, now = Date.now()): string {
  if (!when) return 'never';
  const s = Math.max(0, Math.round((now - new Date(when).getTime()) / 1000));
  if (s < 120) return `${s}s ago`;
  if (s < 7200) return `${Math.round(s / 60)}m ago`;
  if (s < 172_800) return `${Math.round(s / 3600)}h ago`;
  return `${Math.round(s / 86_400)}d ago`;
}

/** Bytes as the progress line and table show them (binary units). */
export function formatBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(1)} ${units[i]}`;
}
