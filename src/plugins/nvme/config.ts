/**
 * The `nvme:` section of the agent configuration. Parsed once, in the driver's
 * constructor, so every mistake stops the agent at start with a message that
 * names the key and the value — never at 3 a.m. in the middle of a cleanup.
 */
import { ConfigError } from '../../errors.js';
import type { VerifyMode } from '../cleanup-evidence.js';
import { parseCleanupPolicy, VERIFY_KEY } from '../cleanup-policy.js';
import type { DeviceSpecEntry } from '../device-spec/index.js';
import { show } from '../device-spec/messages.js';
import { parseSection } from '../pci/pci-driver.js';

export interface NvmeConfig {
  entries: DeviceSpecEntry[];
  /** cleanup_timeout in milliseconds (the key is in seconds). */
  cleanupTimeoutMs: number;
  /** Path or name of nvme-cli. */
  nvmeCli: string;
  /** sanitize-log polling interval in milliseconds (the key is in seconds, fractions allowed). */
  pollIntervalMs: number;
  /** How much of a zeroed namespace is read back (the agent judges by the same key). */
  verify: VerifyMode;
}

const KNOWN_KEYS: ReadonlySet<string> = new Set([
  'device_spec',
  'cleanup_timeout',
  'nvme_cli',
  'poll_interval',
  VERIFY_KEY,
]);

export const DEFAULT_CLEANUP_TIMEOUT_S = 900;
export const DEFAULT_POLL_INTERVAL_S = 5;

/** A number from YAML, or a numeric string (env-style overrides); undefined otherwise. */
function numeric(value: unknown): number | undefined {
  if (typeof value === 'number') return value;
  if (typeof value === 'string' && /^\s*\d+(\.\d+)?\s*$/.test(value)) return Number(value);
  return undefined;
}

function positiveInteger(section: string, key: string, value: unknown, fallback: number): number {
  if (value === undefined || value === null) return fallback;
  const n = numeric(value);
  if (n === undefined || !Number.isSafeInteger(n) || n <= 0) {
    throw new ConfigError(`${section}.${key}: ${show(value)} is not a positive whole number of seconds`);
  }
  return n;
}

function positiveSeconds(section: string, key: string, value: unknown, fallback: number): number {
  if (value === undefined || value === null) return fallback;
  const n = numeric(value);
  if (n === undefined || !Number.isFinite(n) || n <= 0 || n > 3600) {
    throw new ConfigError(`${section}.${key}: ${show(value)} is not a number of seconds in (0, 3600]`);
  }
  return n;
}

function program(section: string, key: string, value: unknown, fallback: string): string {
  if (value === undefined || value === null) return fallback;
  if (typeof value !== 'string' || value.trim() === '' || value.includes('\0')) {
    throw new ConfigError(`${section}.${key}: ${show(value)} is not a program name or path`);
  }
  return value.trim();
}

/** Parses the section; `section` is the name it appears under (nvme, or a vendor driver's name). */
export function parseNvmeConfig(section: string, config: Record<string, unknown>): NvmeConfig {
  if (config.shred !== undefined) {
    throw new ConfigError(
      `${section}.shred: no longer used: the host-side zero path writes with Berth's own direct-I/O writer (docs/decisions.md); remove the key`,
    );
  }
  const entries = parseSection(section, config, KNOWN_KEYS, true);
  return {
    entries,
    cleanupTimeoutMs:
      positiveInteger(section, 'cleanup_timeout', config.cleanup_timeout, DEFAULT_CLEANUP_TIMEOUT_S) * 1000,
    nvmeCli: program(section, 'nvme_cli', config.nvme_cli, 'nvme'),
    pollIntervalMs: Math.max(
      1,
      Math.round(
        positiveSeconds(section, 'poll_interval', config.poll_interval, DEFAULT_POLL_INTERVAL_S) * 1000,
      ),
    ),
    verify: parseCleanupPolicy(section, config).verify,
  };
}
