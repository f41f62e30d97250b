/**
 * Listen failures of the serving commands (`up`, `scheduler serve`, `agent
 * serve`), with what to do appended. Kept apart from client-common so `berth
 * agent serve` does not load the SDK.
 */
import { BerthError, isBerthError } from '../../errors.js';

/**
 * A listen address that failed (port in use, not this machine's address),
 * with what to do appended: `port 127.0.0.1:7070 is in use (another berth
 * up? use --listen)`. `flags` maps each address the command listens on to
 * the flag that sets it.
 */
export function withListenHint(err: unknown, flags: Record<string, string>, who: string): unknown {
  if (!isBerthError(err) || (err.reason !== 'ADDRESS_IN_USE' && err.reason !== 'ADDRESS_NOT_AVAILABLE')) {
    return err;
  }
  const flag = flags[err.metadata.address ?? ''];
  if (!flag) return err;
  const hint = err.reason === 'ADDRESS_IN_USE' ? `${who}? use ${flag}` : `use ${flag}`;
  return new BerthError(err.code, `${err.message} (${hint})`, {
    reason: err.reason,
    metadata: err.metadata,
    cause: err,
  });
}
