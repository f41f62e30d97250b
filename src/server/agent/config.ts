/**
 * The agent's configuration file (YAML; JSON is valid YAML). Every mistake is a
 * ConfigError naming the key and the value; unknown top-level keys are refused
 * unless they are the section of an enabled driver.
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
import { ConfigError } from '../../errors.js';
import { parseStrictYaml } from '../../strict-yaml.js';
import type { AuthFileOptions } from '../grpc/auth.js';
import type { TlsFiles } from '../grpc/tls.js';

export interface AgentConfig {
  host: string;
  listen: string;
  /** Endpoint the scheduler dials back; defaults to the bound listen address. */
  advertise: string | null;
  /** Scheduler address; null runs the agent on its own (no registration). */
  scheduler: string | null;
  sysfsRoot: string;
  devRoot: string;
  stateDir: string;
  /** Seconds between rediscoveries. */
  discoveryInterval: number;
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
}

/** Every top-level key the agent configuration knows (besides enabled drivers' sections). */
export const TOP_LEVEL_KEYS: ReadonlySet<string> = new Set([
  'host',
  'listen',
  'advertise',
  'scheduler',
  'sysfs_root',
  'dev_root',
  'state_dir',
  'discovery_interval',
  'register_interval',
  'metrics_listen',
  'enabled_drivers',
  'auth',
  'tls',
  'scheduler_token_file',
]);

export interface ConfigOverrides {
  host?: string;
  listen?: string;
  advertise?: string;
  scheduler?: string;
  sysfsRoot?: string;
  devRoot?: string;
  stateDir?: string;
  nvmeCli?: string;
  discoveryInterval?: number;
  /** `--insecure-no-auth`: the explicit way to serve without authentication. */
  insecureNoAuth?: boolean;
}

/** The key under which a driver's section is found: the name, or a module's file stem. */
export function driverKey(entry: string): string {
  const base = entry.split('/').pop() ?? entry;
  return base.replace(/\.(m?[jt]s|cjs)$/, '');
}

function str(raw: Record<string, unknown>, key: string, fallback: string): string {
  const v = raw[key];
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'string' || v.trim() === '') {
    throw new ConfigError(`${key}: expected a non-empty string, got ${JSON.stringify(v)}`);
  }
  return v.trim();
}

function positiveNumber(raw: Record<string, unknown>, key: string, fallback: number): number {
  const v = raw[key];
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) {
    throw new ConfigError(`${key}: expected a positive number of seconds, got ${JSON.stringify(v)}`);
  }
  return v;
}

function checkAddress(key: string, value: string): string {
  if (!/^[^\s:/]+:\d{1,5}$/.test(value) && !/^\[[0-9a-fA-F:]+\]:\d{1,5}$/.test(value)) {
    throw new ConfigError(`${key}: expected host:port, got ${JSON.stringify(value)}`);
  }
  const port = Number(value.slice(value.lastIndexOf(':') + 1));
  if (port > 65535) throw new ConfigError(`${key}: port ${port} is out of range in ${JSON.stringify(value)}`);
  return value;
}

function section(raw: Record<string, unknown>, key: string): Record<string, unknown> | null {
  const v = raw[key];
  if (v === undefined || v === null) return null;
  if (typeof v !== 'object' || Array.isArray(v)) {
    throw new ConfigError(`${key}: expected a mapping, got ${JSON.stringify(v)}`);
  }
  return v as Record<string, unknown>;
}

function onlyKeys(name: string, sec: Record<string, unknown>, known: string[]): void {
  for (const k of Object.keys(sec)) {
    if (!known.includes(k)) throw new ConfigError(`${name}.${k}: unknown key (known: ${known.join(', ')})`);
  }
}

const AUTH_KEYS = [
  'mode',
  'static_tokens_file',
  'jwt_secret_file',
  'jwt_public_key_file',
  'jwks_file',
  'jwt_issuer',
  'jwt_audience',
  'cert_roles',
];

function parseAuth(raw: Record<string, unknown>, baseDir: string): AuthFileOptions | null {
  const sec = section(raw, 'auth');
  if (!sec) return null;
  onlyKeys('auth', sec, AUTH_KEYS);
  const mode = sec.mode ?? 'token';
  if (mode !== 'token' && mode !== 'none') {
    throw new ConfigError(`auth.mode: expected "token" or "none", got ${JSON.stringify(mode)}`);
  }
  if (mode === 'none') return { mode: 'none' };
  const out: AuthFileOptions = { mode: 'token' };
  // Checked under their full key path so errors name `auth.<key>`.
  const text = (k: string) => (sec[k] == null ? undefined : str({ [`auth.${k}`]: sec[k] }, `auth.${k}`, ''));
  const file = (k: string) => {
    const v = text(k);
    return v === undefined ? undefined : resolve(baseDir, v);
  };
  const staticTokensFile = file('static_tokens_file');
  const jwtSecretFile = file('jwt_secret_file');
  const jwtPublicKeyFile = file('jwt_public_key_file');
  const jwksFile = file('jwks_file');
  const jwtIssuer = text('jwt_issuer');
  const jwtAudience = text('jwt_audience');
  if (staticTokensFile) out.staticTokensFile = staticTokensFile;
  if (jwtSecretFile) out.jwtSecretFile = jwtSecretFile;
  if (jwtPublicKeyFile) out.jwtPublicKeyFile = jwtPublicKeyFile;
  if (jwksFile) out.jwksFile = jwksFile;
  if (jwtIssuer) out.jwtIssuer = jwtIssuer;
  if (jwtAudience) out.jwtAudience = jwtAudience;
  const cr = section({ 'auth.cert_roles': sec.cert_roles }, 'auth.cert_roles');
  if (cr) {
    const certRoles: Record<string, string> = {};
    for (const [cn, role] of Object.entries(cr)) {
      if (typeof role !== 'string') {
        throw new ConfigError(`auth.cert_roles.${cn}: expected a role name, got ${JSON.stringify(role)}`);
      }
      certRoles[cn] = role;
    }
    out.certRoles = certRoles;
  }
  if (!staticTokensFile && !jwtSecretFile && !jwtPublicKeyFile && !jwksFile && !cr) {
    throw new ConfigError(
      'auth: give static_tokens_file, a jwt_* key or cert_roles (or mode: none to switch authentication off)',
    );
  }
  return out;
}

function parseTls(raw: Record<string, unknown>, baseDir: string): TlsFiles | null {
  const sec = section(raw, 'tls');
  if (!sec) return null;
  onlyKeys('tls', sec, ['cert', 'key', 'ca']);
  const out: TlsFiles = {};
  for (const k of ['cert', 'key', 'ca'] as const) {
    if (sec[k] != null) out[k] = resolve(baseDir, str({ [`tls.${k}`]: sec[k] }, `tls.${k}`, ''));
  }
  if (!out.cert || !out.key) throw new ConfigError('tls: cert and key are required (ca for mutual TLS)');
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
    throw new ConfigError(
      `the configuration must be a mapping of keys to values, got ${JSON.stringify(doc)}`,
    );
  }
  const raw = doc as Record<string, unknown>;

  let enabled: string[] = ['pci'];
  if (raw.enabled_drivers !== undefined && raw.enabled_drivers !== null) {
    const v = raw.enabled_drivers;
    const list = typeof v === 'string' ? v.split(',').map((s) => s.trim()) : v;
    if (
      !Array.isArray(list) ||
      list.length === 0 ||
      list.some((d) => typeof d !== 'string' || d.trim() === '')
    ) {
      throw new ConfigError(
        `enabled_drivers: expected a non-empty list of driver names or module paths, got ${JSON.stringify(v)}`,
      );
    }
    enabled = (list as string[]).map((d) => d.trim());
  }
  const keys = enabled.map(driverKey);
  const dup = keys.find((k, i) => keys.indexOf(k) !== i);
  if (dup) throw new ConfigError(`enabled_drivers: driver ${JSON.stringify(dup)} is listed twice`);

  const driverSections: Record<string, Record<string, unknown>> = {};
  for (const [key, value] of Object.entries(raw)) {
    if (TOP_LEVEL_KEYS.has(key)) continue;
    if (!keys.includes(key)) {
      throw new ConfigError(
        `${key}: unknown key (known: ${[...TOP_LEVEL_KEYS].join(', ')}, and the section of an enabled driver: ${keys.join(', ')})`,
      );
    }
    if (value === null || value === undefined) continue;
    if (typeof value !== 'object' || Array.isArray(value)) {
      throw new ConfigError(`${key}: a driver section must be a mapping, got ${JSON.stringify(value)}`);
    }
    driverSections[key] = { ...(value as Record<string, unknown>) };
  }
  for (const k of keys) driverSections[k] ??= {};
  if (overrides.nvmeCli) {
    for (const k of keys)
      if (k.startsWith('nvme')) driverSections[k] = { ...driverSections[k], nvme_cli: overrides.nvmeCli };
  }

  const scheduler = overrides.scheduler ?? (raw.scheduler == null ? null : str(raw, 'scheduler', ''));
  const advertise = overrides.advertise ?? (raw.advertise == null ? null : str(raw, 'advertise', ''));
  return {
    host: overrides.host ?? str(raw, 'host', hostname()),
    listen: checkAddress('listen', overrides.listen ?? str(raw, 'listen', '127.0.0.1:7071')),
    advertise: advertise === null ? null : checkAddress('advertise', advertise),
    scheduler: scheduler === null ? null : checkAddress('scheduler', scheduler),
    sysfsRoot: resolve(baseDir, overrides.sysfsRoot ?? str(raw, 'sysfs_root', '/sys')),
    devRoot: resolve(baseDir, overrides.devRoot ?? str(raw, 'dev_root', '/dev')),
    stateDir: resolve(baseDir, overrides.stateDir ?? str(raw, 'state_dir', '/var/lib/berth')),
    discoveryInterval: overrides.discoveryInterval ?? positiveNumber(raw, 'discovery_interval', 10),
    registerInterval: positiveNumber(raw, 'register_interval', 15),
    metricsListen:
      raw.metrics_listen == null ? null : checkAddress('metrics_listen', str(raw, 'metrics_listen', '')),
    enabledDrivers: enabled,
    driverSections,
    baseDir,
    auth: overrides.insecureNoAuth ? { mode: 'none' } : parseAuth(raw, baseDir),
    tls: parseTls(raw, baseDir),
    schedulerTokenFile:
      raw.scheduler_token_file == null ? null : resolve(baseDir, str(raw, 'scheduler_token_file', '')),
  };
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
