/**
 * The cleanup policy as an operator writes it: the `verify` key of a cleaning
 * driver's config section. The agent reads it to judge evidence and passes it
 * to the driver in `ctx.policy`; the driver's own config parser accepts the key
 * through the same function, so a bad value stops the agent at start.
 */
import { ConfigError } from '../errors.js';
import {
  type CleanupPolicy,
  DEFAULT_CLEANUP_POLICY,
  VERIFY_MODES,
  type VerifyMode,
} from './cleanup-evidence.js';
import { show } from './device-spec/messages.js';

/** The config key. */
export const VERIFY_KEY = 'verify';

export function parseCleanupPolicy(section: string, config: Record<string, unknown>): CleanupPolicy {
  const value = config[VERIFY_KEY];
  if (value === undefined || value === null) return DEFAULT_CLEANUP_POLICY;
  const mode = typeof value === 'string' ? value.trim().toLowerCase() : value;
  if (typeof mode !== 'string' || !(VERIFY_MODES as readonly string[]).includes(mode)) {
    throw new ConfigError(
      `${section}.${VERIFY_KEY}: ${show(value)} is not one of ${VERIFY_MODES.join(', ')} (full reads back every byte and is the default)`,
    );
  }
  return { verify: mode as VerifyMode };
}
