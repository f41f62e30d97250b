/**
 * The agent's configuration file (YAML; JSON is valid YAML), validated by the
 * zod schema below (emitted as schema/agent-config.schema.json). Every mistake
 * is a ConfigError naming the key and the value; unknown top-level keys are
 * refused unless they are the section of an enabled driver; every duration has
 * a range (DURATION_RANGES); no string may hold a NUL.
 *
 * Security keys (docs/security.md); relative paths resolve from the file's directory:
 * - `auth`: who may call this agent. `mode: token` (default when the section is
 *   present) with any of `static_tokens_file` (lines `token: role`),
 *   `jwt_secret_file` (HS256), `jwt_public_key_file` (PEM), `jwks_file`,
 *   `jwt_issuer`, `jwt_audience`, `cert_roles` (client-cert CN → role, `*` any);
 *   or `mode: none` to switch authentication off explicitly.
 * - `tls`: `cert`, `key` (this agent's identity, served and presented to the
 *   scheduler), `ca` (verifies the scheduler; with it, callers must present a
 *   client certificate from that CA: mutual TLS).
 * - `scheduler_token_file`: the bearer token (role `agent`) sent with Register.
 */
import { readFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { dirname, resolve } from 'node:path';
import { z } from 'zod';
import {
  hostPort,
  keyPathOf,
  mapping,
  parseConfig,
  refuseUnsafeStrings,
  seconds,
  section,
  text,
} from '../../config-schema.js';
import { ConfigError } from '../../errors.js';
import { type HostName, isHostName } from '../../identifiers.js';
import { show } from '../../plugins/device-spec/messages.js';
import { parseStrictYaml } from '../../strict-yaml.js';
import { type AuthFileOptions, type AuthOptions, loadAuthOptions } from '../grpc/auth/configuration.js';
import type { TlsFiles } from '../grpc/tls.js';
import { type ApiServerConfig, apiServerConfig } from './kubelet/api-server.js';
import {
  type DevicePluginConfig,
  DRA_DEFAULTS,
  type DraConfig,
  devicePluginConfig,
  draConfig,
  kubernetesSectionSchema,
} from './kubelet/config.js';
import { type ResourceSlicesConfig, resourceSlicesConfig } from './kubelet/slices-config.js';

export interface AgentConfig {
  host: HostName;
  listen: string;
  /** Endpoint the scheduler dials back; defaults to the bound listen address. */
  advertise: string | null;
  /** The first scheduler address; null runs the agent on its own (no registration). */
  scheduler: string | null;
  /**
   * Every scheduler address, in order (schedulers sharing one database): the
   * agent registers with the first that answers and moves on when it stops
   * answering. Empty when `scheduler` is null.
   */
  schedulers: string[];
  sysfsRoot: string;
  devRoot: string;
  /** Root of procfs, where discovery reads the host's mounts and routes (plugins/host-use.ts). */
  procRoot: string;
  stateDir: string;
  /** Seconds between rediscoveries while no kernel event source is followed (polling). */
  discoveryInterval: number;
  /** How hotplug reaches the agent (the `hotplug` section; decision 56). */
  hotplug: HotplugConfig;
  /** Seconds between re-registrations with the scheduler (heartbeat). */
  registerInterval: number;
  /** host:port serving Prometheus /metrics; null = not served. */
  metricsListen: string | null;
  enabledDrivers: string[];
  /** Each driver's section by driver key (the enabled_drivers entry's key). */
  driverSections: Record<string, Record<string, unknown>>;
  /** Directory the config file lives in; relative driver module paths resolve from here. */
  baseDir: string;
  /** The `auth` section; null when absent (then the agent refuses to serve unless told otherwise). */
  auth: AuthFileOptions | null;
  /** The `tls` section; null serves plaintext. */
  tls: TlsFiles | null;
  /** File holding the token sent to the scheduler with Register. */
  schedulerTokenFile: string | null;
  /** The kubelet's device plugin API (the `kubernetes.device_plugin` section); null when not enabled. */
  devicePlugin: DevicePluginConfig | null;
  /** The Kubernetes API server (the `kubernetes.api_server` section); null when not configured. */
  kubernetesApiServer: ApiServerConfig | null;
  /** The kubelet's DRA plugin API (the `kubernetes.dra` section); null when not enabled. */
  dra: DraConfig | null;
  /** This host's ResourceSlices on that API server (`kubernetes.resource_slices`); null when not enabled. */
  resourceSlices: ResourceSlicesConfig | null;
}

export interface HotplugConfig {
  /** `udevadm`: follow the kernel's uevents (`udevadm monitor --kernel`); `none`: poll at discovery_interval. */
  source: 'udevadm' | 'none';
  /** The udevadm program: a path, or a name looked up in PATH. */
  udevadm: string;
  /** Seconds between full rescans while events are followed: the safety net. */
  rescanInterval: number;
  /** Milliseconds of quiet after the last event before its functions are re-read (a burst is one pass). */
  settleMs: number;
}

/** Defaults of the `hotplug` section (docs/operator-guide.md). */
export const HOTPLUG_DEFAULTS = { udevadm: 'udevadm', rescanInterval: 300, settle: 0.05 } as const;

export interface ConfigOverrides {
  host?: string;
  listen?: string;
  advertise?: string;
  scheduler?: string;
  sysfsRoot?: string;
  devRoot?: string;
  procRoot?: string;
  stateDir?: string;
  nvmeCli?: string;
  discoveryInterval?: number;
  /** `--insecure-no-auth`: the explicit way to serve without authentication. */
  insecureNoAuth?: boolean;
  /** `--cert-roles FILE` (read): client-certificate common name → role, in place of `auth.cert_roles`. */
  certRoles?: Record<string, string>;
}

/** The key under which a driver's section is found: the name, or a module's file stem. */
export function driverKey(entry: string): string {
  const base = entry.split('/').pop() ?? entry;
  return base.replace(/\.(m?[jt]s|cjs)$/, '');
}

/** Ranges of the durations (seconds), documented in docs/operator-guide.md. */
export const DURATION_RANGES = {
  discovery_interval: [0.1, 86_400],
  register_interval: [0.1, 3_600],
  'hotplug.rescan_interval': [1, 86_400],
  'hotplug.settle': [0, 5],
} as const;

const file = (description: string) => text().nullish().describe(description);

/** The `auth` section (docs/security.md). */
export const authSectionSchema = section({
  mode: z
    .enum(['token', 'none'], { error: (iss) => `expected "token" or "none", got ${show(iss.input)}` })
    .nullish()
    .describe('token (default) or none (authentication off, explicitly)'),
  static_tokens_file: file('static bearer tokens, lines `token: role`'),
  jwt_secret_file: file('HS256 secret for JWT bearer tokens'),
  jwt_public_key_file: file('PEM public key for JWT bearer tokens'),
  jwks_file: file('JWKS (JSON) for JWT bearer tokens'),
  jwt_issuer: text().nullish().describe('required JWT issuer'),
  jwt_audience: text().nullish().describe('required JWT audience'),
  scheduler_public_key_file: file(
    "the scheduler's public key (PEM): its per-host credentials, JWTs for this host only (invariant 10)",
  ),
  cert_roles: z
    .record(z.string(), z.string({ error: (iss) => `expected a role name, got ${show(iss.input)}` }), {
      error: (iss) => `expected a mapping, got ${show(iss.input)}`,
    })
    .nullish()
    .describe('client-certificate common name (or *) → role'),
})
  .superRefine((a, ctx) => {
    const given = [
      a.static_tokens_file,
      a.jwt_secret_file,
      a.jwt_public_key_file,
      a.jwks_file,
      a.cert_roles,
      a.scheduler_public_key_file,
    ];
    if ((a.mode ?? 'token') === 'token' && given.every((g) => g == null)) {
      ctx.addIssue({
        code: 'custom',
        message:
          'give static_tokens_file, a jwt_* key, scheduler_public_key_file or cert_roles (or mode: none to switch authentication off)',
      });
    }
  })
  .describe('who may call this agent (docs/security.md)');

/** The `hotplug` section: where the kernel's events come from (decision 56). */
export const hotplugSectionSchema = section({
  source: z
    .enum(['udevadm', 'none'], { error: (iss) => `expected "udevadm" or "none", got ${show(iss.input)}` })
    .nullish()
    .describe(
      'udevadm: follow the kernel uevents (`udevadm monitor --kernel`); none: poll at discovery_interval (default: udevadm when sysfs_root is /sys, none on a simulated tree)',
    ),
  udevadm: text().nullish().describe('the udevadm program, a path or a name in PATH (default udevadm)'),
  rescan_interval: seconds(...DURATION_RANGES['hotplug.rescan_interval'])
    .nullish()
    .describe('seconds between full rescans while events are followed: the safety net (default 300)'),
  settle: seconds(...DURATION_RANGES['hotplug.settle'])
    .nullish()
    .describe(
      'seconds of quiet after the last event before its functions are re-read, so a burst is one pass (default 0.05)',
    ),
}).describe('how hotplug reaches the agent: kernel uevents, else polling');

/** The `tls` section. */
export const tlsSectionSchema = section({
  cert: file("this agent's certificate (PEM), served and presented to the scheduler"),
  key: file('the private key of cert'),
  ca: file('CA verifying the scheduler; callers then need a client certificate from it'),
})
  .superRefine((t, ctx) => {
    if (t.cert == null || t.key == null) {
      ctx.addIssue({ code: 'custom', message: 'cert and key are required (ca for mutual TLS)' });
    }
  })
  .describe('TLS (mutual TLS with ca)');

function expectedDrivers(v: unknown): string {
  return `expected a non-empty list of driver names or module paths, got ${show(v)}`;
}

/** A list, or one comma-separated string; non-empty names, none listed twice (by section key). */
const enabledDriversSchema = z
  .union([z.string(), z.array(z.unknown())], { error: (iss) => expectedDrivers(iss.input) })
  .transform((v, ctx) => {
    const list = typeof v === 'string' ? v.split(',').map((d) => d.trim()) : v;
    if (list.length === 0 || list.some((d) => typeof d !== 'string' || d.trim() === '')) {
      ctx.addIssue({ code: 'custom', message: expectedDrivers(v) });
      return z.NEVER;
    }
    const entries = (list as string[]).map((d) => d.trim());
    const keys = entries.map(driverKey);
    const dup = keys.find((k, i) => keys.indexOf(k) !== i);
    if (dup) {
      ctx.addIssue({ code: 'custom', message: `driver ${JSON.stringify(dup)} is listed twice` });
      return z.NEVER;
    }
    return entries;
  });

/** The configured host name (checked by the schema), else the machine's, which must be one Berth accepts too. */
function configHost(configured: string | null | undefined): HostName {
  const name = configured ?? hostname();
  if (!isHostName(name)) {
    throw new ConfigError(
      `host: this machine's host name ${show(name)} is not one Berth accepts ([A-Za-z0-9._-], at most 254 characters, starting and ending with a letter or digit): set host`,
    );
  }
  return name;
}

/** Every key of the agent configuration but the drivers' sections. */
export const agentConfigSchema = z.object({
  host: text()
    .superRefine((value, ctx) => {
      if (!isHostName(value))
        ctx.addIssue({
          code: 'custom',
          message: `expected a host name ([A-Za-z0-9._-], at most 254 characters, starting and ending with a letter or digit), got ${show(value)}`,
        });
    })
    .nullish()
    .describe("this host's name (default: the machine's host name)"),
  listen: hostPort().nullish().describe('host:port the agent serves on (default 127.0.0.1:7071)'),
  advertise: hostPort()
    .nullish()
    .describe('host:port the scheduler dials back (default: the bound listen address)'),
  scheduler: z
    .union([hostPort(), z.array(hostPort()).min(1).max(8)])
    .nullish()
    .describe(
      "the scheduler's host:port, or a list of them (schedulers sharing one database: the agent registers with the first that answers); absent: the agent runs on its own",
    ),
  sysfs_root: text().nullish().describe('root of sysfs (default /sys); it must hold bus/pci/devices'),
  dev_root: text().nullish().describe('root of device nodes (default /dev)'),
  proc_root: text()
    .nullish()
    .describe(
      "root of procfs (default /proc): the host's mounts and routes, so discovery never offers a function the host uses",
    ),
  state_dir: text().nullish().describe('where the cleanup journal lives (default /var/lib/berth)'),
  discovery_interval: seconds(...DURATION_RANGES.discovery_interval)
    .nullish()
    .describe(
      'seconds between full rediscoveries while no kernel event source is followed (hotplug.source none, or failed) (default 10)',
    ),
  register_interval: seconds(...DURATION_RANGES.register_interval)
    .nullish()
    .describe('seconds between re-registrations with the scheduler (default 15)'),
  metrics_listen: hostPort().nullish().describe('host:port serving Prometheus /metrics'),
  enabled_drivers: z
    .unknown()
    .pipe(
      z
        .union([z.string(), z.array(z.unknown())], { error: (iss) => expectedDrivers(iss.input) })
        .pipe(enabledDriversSchema),
    )
    .nullish()
    .describe('built-in driver names (pci, nvme, nvme-vendor-example), module paths or package names'),
  hotplug: hotplugSectionSchema.nullish(),
  auth: authSectionSchema.nullish(),
  tls: tlsSectionSchema.nullish(),
  scheduler_token_file: text().nullish().describe('file holding the token (role agent) sent with Register'),
  kubernetes: kubernetesSectionSchema.nullish(),
});

/** Every top-level key the agent configuration knows (besides enabled drivers' sections). */
export const TOP_LEVEL_KEYS: ReadonlySet<string> = new Set(Object.keys(agentConfigSchema.shape));

/** The document with the command line's overrides in place (they are checked like the file's values). */
function withOverrides(raw: Record<string, unknown>, o: ConfigOverrides): Record<string, unknown> {
  const doc: Record<string, unknown> = { ...raw };
  const set = (key: string, v: unknown) => {
    if (v !== undefined) doc[key] = v;
  };
  set('host', o.host);
  set('listen', o.listen);
  set('advertise', o.advertise);
  set('scheduler', o.scheduler);
  set('sysfs_root', o.sysfsRoot);
  set('dev_root', o.devRoot);
  set('proc_root', o.procRoot);
  set('state_dir', o.stateDir);
  set('discovery_interval', o.discoveryInterval);
  if (o.certRoles) {
    const auth = doc.auth && typeof doc.auth === 'object' ? (doc.auth as Record<string, unknown>) : {};
    doc.auth = { ...auth, cert_roles: o.certRoles };
  }
  if (o.insecureNoAuth) doc.auth = { mode: 'none' };
  return doc;
}

/** The drivers' sections, from the document's own keys, into an object without a prototype. */
function driverSections(
  raw: Record<string, unknown>,
  keys: readonly string[],
  nvmeCli: string | undefined,
): Record<string, Record<string, unknown>> {
  const sections = Object.create(null) as Record<string, Record<string, unknown>>;
  for (const [key, value] of Object.entries(raw)) {
    if (TOP_LEVEL_KEYS.has(key)) continue;
    if (!keys.includes(key)) {
      throw new ConfigError(
        `${keyPathOf([key])}: unknown key (known: ${[...TOP_LEVEL_KEYS].join(', ')}, and the section of an enabled driver: ${keys.join(', ')})`,
      );
    }
    if (value === null || value === undefined) continue;
    sections[key] = { ...parseConfig(mapping(), value, [key]) };
  }
  for (const k of keys) {
    sections[k] ??= {};
    if (nvmeCli && k.startsWith('nvme')) sections[k] = { ...sections[k], nvme_cli: nvmeCli };
  }
  return sections;
}

const resolved = (baseDir: string, p: string | null | undefined) =>
  p == null ? undefined : resolve(baseDir, p);

function toAuth(a: z.output<typeof authSectionSchema>, baseDir: string): AuthFileOptions {
  if (a.mode === 'none') return { mode: 'none' };
  const out: AuthFileOptions = { mode: 'token' };
  const files = {
    staticTokensFile: resolved(baseDir, a.static_tokens_file),
    jwtSecretFile: resolved(baseDir, a.jwt_secret_file),
    jwtPublicKeyFile: resolved(baseDir, a.jwt_public_key_file),
    jwksFile: resolved(baseDir, a.jwks_file),
    jwtIssuer: a.jwt_issuer ?? undefined,
    jwtAudience: a.jwt_audience ?? undefined,
    schedulerPublicKeyFile: resolved(baseDir, a.scheduler_public_key_file),
  };
  for (const [k, v] of Object.entries(files)) if (v) (out as unknown as Record<string, string>)[k] = v;
  if (a.cert_roles)
    out.certRoles = Object.assign(Object.create(null), a.cert_roles) as Record<string, string>;
  return out;
}

/** Validates a parsed config document and applies command-line overrides. */
export function parseAgentConfig(
  doc: unknown,
  overrides: ConfigOverrides = {},
  baseDir = process.cwd(),
): AgentConfig {
  if (doc === null || doc === undefined) doc = {};
  if (typeof doc !== 'object' || Array.isArray(doc)) {
    throw new ConfigError(`the configuration must be a mapping of keys to values, got ${show(doc)}`);
  }
  refuseUnsafeStrings(doc);
  const raw = withOverrides(doc as Record<string, unknown>, overrides);
  const c = parseConfig(agentConfigSchema, raw);
  const enabled = c.enabled_drivers ?? ['pci'];
  const sections = driverSections(raw, enabled.map(driverKey), overrides.nvmeCli);
  const sysfsRoot = resolve(baseDir, c.sysfs_root ?? '/sys');
  if (c.kubernetes?.device_plugin?.enabled && !c.scheduler) {
    throw new ConfigError(
      'kubernetes.device_plugin.enabled: the device plugin holds and releases devices through the scheduler: set scheduler',
    );
  }
  if (c.kubernetes?.dra?.enabled && !c.scheduler) {
    throw new ConfigError(
      'kubernetes.dra.enabled: the DRA plugin holds and releases devices through the scheduler: set scheduler',
    );
  }
  if (c.kubernetes?.dra?.enabled && !c.kubernetes.api_server) {
    throw new ConfigError(
      "kubernetes.dra.enabled: the DRA plugin reads each claim's allocation from the API server: set kubernetes.api_server",
    );
  }
  const stateDir = resolve(baseDir, c.state_dir ?? '/var/lib/berth');
  const host = configHost(c.host);
  const { dra, resourceSlices } = kubernetesDra(c.kubernetes, host, baseDir, stateDir);
  return {
    host,
    listen: c.listen ?? '127.0.0.1:7071',
    advertise: c.advertise ?? null,
    scheduler: schedulerList(c.scheduler)[0] ?? null,
    schedulers: schedulerList(c.scheduler),
    sysfsRoot,
    devRoot: resolve(baseDir, c.dev_root ?? '/dev'),
    procRoot: resolve(baseDir, c.proc_root ?? '/proc'),
    stateDir,
    discoveryInterval: c.discovery_interval ?? 10,
    hotplug: {
      // The kernel's events describe the real /sys: an agent on a simulated tree polls unless told otherwise.
      source: c.hotplug?.source ?? (sysfsRoot === '/sys' ? 'udevadm' : 'none'),
      udevadm: c.hotplug?.udevadm ?? HOTPLUG_DEFAULTS.udevadm,
      rescanInterval: c.hotplug?.rescan_interval ?? HOTPLUG_DEFAULTS.rescanInterval,
      settleMs: (c.hotplug?.settle ?? HOTPLUG_DEFAULTS.settle) * 1000,
    },
    registerInterval: c.register_interval ?? 15,
    metricsListen: c.metrics_listen ?? null,
    enabledDrivers: enabled,
    driverSections: sections,
    baseDir,
    auth: c.auth ? toAuth(c.auth, baseDir) : null,
    tls: c.tls
      ? {
          cert: resolve(baseDir, c.tls.cert!),
          key: resolve(baseDir, c.tls.key!),
          ...(c.tls.ca ? { ca: resolve(baseDir, c.tls.ca) } : {}),
        }
      : null,
    schedulerTokenFile: resolved(baseDir, c.scheduler_token_file) ?? null,
    devicePlugin: devicePluginConfig(c.kubernetes, baseDir),
    kubernetesApiServer: apiServerConfig(c.kubernetes?.api_server, baseDir),
    dra,
    resourceSlices,
  };
}

/**
 * The DRA plugin and the ResourceSlices it allocates from are one driver: the
 * slices publish under the DRA plugin's driver name and pool, and a claim's
 * results are Berth's when they name both. One name each, so an operator
 * cannot make the plugin look for devices in a pool the slices do not publish.
 */
function kubernetesDra(
  k: z.infer<typeof agentConfigSchema>['kubernetes'],
  host: HostName,
  baseDir: string,
  stateDir: string,
): { dra: DraConfig | null; resourceSlices: ResourceSlicesConfig | null } {
  const slicesSection = k?.resource_slices;
  const draDriver = k?.dra?.enabled ? (k.dra.driver_name ?? DRA_DEFAULTS.driverName) : null;
  if (draDriver && slicesSection?.enabled && slicesSection.driver && slicesSection.driver !== draDriver) {
    throw new ConfigError(
      `kubernetes.resource_slices.driver: ${JSON.stringify(slicesSection.driver)} is not the DRA plugin's driver ` +
        `(kubernetes.dra.driver_name ${JSON.stringify(draDriver)}): the slices are that driver's; give one name`,
    );
  }
  const slices = resourceSlicesConfig(
    draDriver && slicesSection
      ? { ...slicesSection, driver: slicesSection.driver ?? draDriver }
      : slicesSection,
    host,
    !!k?.api_server,
  );
  const dra = draConfig(k, baseDir, stateDir, slices?.pool ?? host);
  return { dra, resourceSlices: slices };
}

/**
 * What `agent serve` authenticates its callers with, read from the `auth`
 * section — or the refusal when there is none (only `auth: {mode: none}` /
 * `--insecure-no-auth` switch authentication off). The dry run asks the
 * same, so it fails on every configuration `serve` would refuse.
 */
export async function agentAuthOptions(config: AgentConfig): Promise<AuthOptions> {
  if (config.auth) return loadAuthOptions(config.auth, config.host);
  throw new ConfigError(
    'auth: no authentication configured: give auth.static_tokens_file, a jwt_* key or cert_roles (--cert-roles), ' +
      'or switch it off explicitly with auth: {mode: none} / --insecure-no-auth',
  );
}

/** Reads and validates a config file. */
export async function loadAgentConfig(path: string, overrides: ConfigOverrides = {}): Promise<AgentConfig> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new ConfigError(`cannot read the configuration file ${path}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  let doc: unknown;
  try {
    doc = parseStrictYaml(text);
  } catch (err) {
    throw new ConfigError(`${path} is not valid YAML/JSON: ${(err as Error).message}`, { cause: err });
  }
  try {
    return parseAgentConfig(doc, overrides, dirname(resolve(path)));
  } catch (err) {
    if (err instanceof ConfigError) throw new ConfigError(`${path}: ${err.message}`, { cause: err });
    throw err;
  }
}

/** `scheduler:` as a list of distinct addresses (a string is a list of one). */
function schedulerList(value: string | string[] | null | undefined): string[] {
  if (value === null || value === undefined) return [];
  return [...new Set(Array.isArray(value) ? value : [value])];
}
