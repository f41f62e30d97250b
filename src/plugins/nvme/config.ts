/**
 * The `nvme:` section of the agent configuration, a zod schema (part of
 * schema/agent-config.schema.json). Parsed once, in the driver's constructor,
 * so every mistake stops the agent at start with a message that names the key
 * and the value — never at 3 a.m. in the middle of a cleanup.
 */
import { z } from 'zod';
import { section as configSection, parseConfig } from '../../config-schema.js';
import { VERIFY_MODES, type VerifyMode } from '../cleanup-evidence.js';
import { VERIFY_KEY } from '../cleanup-policy.js';
import { type DeviceSpecEntry, deviceSpecListSchema } from '../device-spec/index.js';
import { show } from '../device-spec/messages.js';

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

export const DEFAULT_CLEANUP_TIMEOUT_S = 900;
export const DEFAULT_POLL_INTERVAL_S = 5;
/** Ranges (seconds), documented in docs/operator-guide.md: a week at most for one scrub, 10 ms at least between polls. */
export const CLEANUP_TIMEOUT_RANGE = [1, 604_800] as const;
export const POLL_INTERVAL_RANGE = [0.01, 3_600] as const;

/** A number from YAML, or a numeric string (env-style overrides); anything else as it is. */
const numeric = (value: unknown) =>
  typeof value === 'string' && /^\s*\d+(\.\d+)?\s*$/.test(value) ? Number(value) : value;

const wholeSeconds = ([min, max]: readonly [number, number]) => {
  const error = (iss: { input?: unknown }) =>
    `${show(iss.input)} is not a whole number of seconds in [${min}, ${max}]`;
  return z.preprocess(numeric, z.number({ error }).int({ error }).min(min, { error }).max(max, { error }));
};

const fractionalSeconds = ([min, max]: readonly [number, number]) => {
  const error = (iss: { input?: unknown }) =>
    `${show(iss.input)} is not a number of seconds in [${min}, ${max}]`;
  return z.preprocess(numeric, z.number({ error }).min(min, { error }).max(max, { error }));
};

const program = () => {
  const error = (iss: { input?: unknown }) => `${show(iss.input)} is not a program name or path`;
  return z
    .string({ error })
    .refine((v) => v.trim() !== '' && !v.includes('\0'), { error })
    .transform((v) => v.trim());
};

const verifyMode = () => {
  const error = (iss: { input?: unknown }) =>
    `${show(iss.input)} is not one of ${VERIFY_MODES.join(', ')} (full reads back every byte and is the default)`;
  return z.preprocess(
    (v) => (typeof v === 'string' ? v.trim().toLowerCase() : v),
    z.enum(VERIFY_MODES as unknown as [VerifyMode, ...VerifyMode[]], { error }),
  );
};

/** The `nvme:` section (and a vendor NVMe driver's, which takes the same keys); `section` is its name. */
export const nvmeSectionSchema = (section: string) =>
  configSection({
    device_spec: deviceSpecListSchema(section, true),
    cleanup_timeout: wholeSeconds(CLEANUP_TIMEOUT_RANGE)
      .nullish()
      .describe('seconds a cleanup may take before it fails (default 900)'),
    nvme_cli: program().nullish().describe('nvme-cli: a program name or path (default nvme)'),
    poll_interval: fractionalSeconds(POLL_INTERVAL_RANGE)
      .nullish()
      .describe('seconds between sanitize-log polls, fractions allowed (default 5)'),
    [VERIFY_KEY]: verifyMode()
      .nullish()
      .describe('how much of a zeroed namespace is read back: full (every byte, the default) or sample'),
  }).describe('the NVMe driver: device_spec entries with clear_action/clear_strategy, and its tools');

const SHRED_GONE =
  "no longer used: the host-side zero path writes with Berth's own direct-I/O writer (docs/decisions.md); remove the key";

/**
 * The section parsed into an NvmeConfig, defaults applied: what a driver
 * built on the NVMe kit declares as its config (driver API 3, `defineDriver`).
 */
export const nvmeConfigSchema = (section: string) =>
  z
    .unknown()
    .superRefine((v, ctx) => {
      if (typeof v === 'object' && v !== null && (v as { shred?: unknown }).shred !== undefined)
        ctx.addIssue({ code: 'custom', path: ['shred'], message: SHRED_GONE });
    })
    .pipe(nvmeSectionSchema(section))
    .transform(
      (c): NvmeConfig => ({
        entries: c.device_spec,
        cleanupTimeoutMs: (c.cleanup_timeout ?? DEFAULT_CLEANUP_TIMEOUT_S) * 1000,
        nvmeCli: c.nvme_cli ?? 'nvme',
        pollIntervalMs: Math.round((c.poll_interval ?? DEFAULT_POLL_INTERVAL_S) * 1000),
        verify: c[VERIFY_KEY] ?? 'full',
      }),
    );

/** Parses the section; `section` is the name it appears under (nvme, or a vendor driver's name). */
export function parseNvmeConfig(section: string, config: Record<string, unknown>): NvmeConfig {
  return parseConfig(nvmeConfigSchema(section), config, [section]);
}
