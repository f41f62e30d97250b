/**
 * Listen failures of the serving commands (`up`, `scheduler serve`, `agent
 * serve`), with what to do appended. Kept apart from command-errors.ts so `berth
 * agent serve` does not load the SDK.
 */
import { BerthError, ConfigError, isBerthError } from '../../errors.js';

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

/**
 * `--db` as a user may write it: a file path, a `sqlite://` URL of one
 * (`sqlite:///var/lib/x.db` is `/var/lib/x.db`, `sqlite://x.db` the relative
 * `x.db`), or a `postgres://` URL, which is passed on as it is.
 */
export function dbLocation(value: string): string {
  const m = /^sqlite:\/\/(.*)$/i.exec(value.trim());
  if (!m) return value;
  if (m[1] === '' || m[1] === '/')
    throw new ConfigError(
      `--db ${value}: a sqlite:// URL needs a file path, e.g. sqlite:///var/lib/berth/sched.db`,
    );
  return decodeURIComponent(m[1]!);
}

/**
 * An error opening the database that does not say which (SQLite's "Cannot
 * open database because the directory does not exist"), as a configuration
 * error naming the flag, the value and the file. Berth's own errors already
 * name what they are about and pass unchanged.
 */
export function withDbPath(err: unknown, flag: string, value: string, path: string): unknown {
  if (isBerthError(err) || !(err instanceof Error)) return err;
  const where = path === value ? `${flag} ${value}` : `${flag} ${value} (${path})`;
  return new ConfigError(`${where}: ${err.message}`, { cause: err });
}
