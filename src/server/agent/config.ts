/**
 * The agent's configuration file (YAML; JSON is valid YAML). Every mistake is a
 * ConfigError naming the key and the value; unknown top-level keys are refused
 * unless they are the section of an enabled driver.
 */
import { readFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { dirname, resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { ConfigError } from '../../errors.js';

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
  enabledDrivers: string[];
  /** Each driver's section by driver key (the enabled_drivers entry's key). */
  driverSections: Record<string, Record<string, unknown>>;
  /** Directory the config file lives in; relative driver module paths resolve from here. */
  baseDir: string;
}

const TOP_LEVEL_KEYS = new Set([
  'host',
  'listen',
  'advertise',
  'scheduler',
  'sysfs_root',
  'dev_root',
  'state_dir',
  'discovery_interval',
  'register_interval',
  'enabled_drivers',
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
    enabledDrivers: enabled,
    driverSections,
    baseDir,
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
    doc = parseYaml(text);
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
