/**
 * A sample cleanup listener for one-time-use devices (specs/one-time-use-devices.txt:
 * "a sample cleanup listener script"), to start from: it follows the
 * scheduler's WatchDevices and, for every burned one-time-use device that is
 * no longer in use, runs a command of the operator's and then releases the
 * device (ReleaseDevice), returning it to the pool.
 *
 *   node --import tsx examples/one-time-use-listener.ts [--endpoint HOST:PORT] [--token TOKEN] \
 *     [--host NAME] [--resource-class RC] [--timeout SECONDS] -- COMMAND [ARG...]
 *
 * The command runs once per device, with the listener's environment (without
 * BERTH_TOKEN: the command gets no admin credential) plus BERTH_DEVICE_UUID,
 * BERTH_DEVICE_HOST, BERTH_DEVICE_ADDRESS, BERTH_DEVICE_VENDOR_ID and
 * BERTH_DEVICE_PRODUCT_ID; its output goes to the listener's stderr. Exit 0
 * means "the device is clean": only then is it released. Anything else (an
 * exit code, a signal, or --timeout passing, default 3600 s, when its whole
 * process group is killed) is logged and the device stays burned; it is tried
 * again when the listener restarts.
 *
 * The scheduler holds all the state, so a restart is safe: the listing that
 * starts every watch shows the devices still burned, and those are handled
 * again — a device whose command succeeded but whose release was lost to a
 * crash gets the command a second time, so the command must be safe to repeat.
 * A released device is never touched again. The release names the generation
 * the device had when its command started: if the device changed meanwhile
 * (released by hand and burned again by a new tenant) the scheduler answers
 * ABORTED and the device stays burned, to be cleaned at its new generation — a
 * new tenant's data is never released uncleaned.
 *
 * Devices are handled one at a time. The log is one JSON object per line on
 * stdout. The endpoint and token come from --endpoint/--token, then
 * BERTH_ENDPOINT/BERTH_TOKEN, then the berth CLI's client configuration (what
 * `berth up` writes). SIGTERM/SIGINT stop it (a running command is killed and
 * its device stays burned). Exit codes: 0 stopped by a signal, 1 the scheduler
 * refused the watch (e.g. the token), 2 usage.
 *
 * Outside this checkout, import `SchedulerClient` and `BerthClientError` from
 * `berth/sdk` and the device types from `berth/api/scheduler/v1/device`, and
 * pass the endpoint and token yourself.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { resolveClient } from '../src/client/client-config.js';
import { BerthClientError, SchedulerClient } from '../src/client/sdk.js';
import { type Device, DeviceState } from '../src/gen/berth/scheduler/v1/device.js';

const USAGE =
  'usage: one-time-use-listener [--endpoint HOST:PORT] [--token TOKEN] [--host NAME] [--resource-class RC] [--timeout SECONDS] -- COMMAND [ARG...]';
const DEFAULT_TIMEOUT_S = 3600;
const MAX_BACKOFF_MS = 30_000;

type Fields = Record<string, unknown>;

function log(level: 'info' | 'warn' | 'error', msg: string, fields: Fields = {}): void {
  process.stdout.write(`${JSON.stringify({ time: new Date().toISOString(), level, msg, ...fields })}\n`);
}

const deviceFields = (d: Device): Fields => ({
  device: d.uuid,
  host: d.host,
  address: d.address,
  generation: d.generation,
});

/** Burned (used once) and no longer held: allocated, pending cleaning or cleaning devices wait. */
const needsCleaning = (d: Device): boolean =>
  d.burned && d.deviceState === DeviceState.DEVICE_STATE_AVAILABLE;

const uuidRef = (uuid: string) => ({ ref: { $case: 'uuid' as const, value: uuid } });

interface CommandResult {
  ok: boolean;
  detail: Fields;
}

/** How a device's last handling at a generation ended: the command failed, or it succeeded. */
type Outcome = { generation: number; cleaned: boolean };

class Listener {
  /** Devices to handle, oldest first, each with the newest state the watch showed. */
  private readonly pending = new Map<string, Device>();
  private readonly outcomes = new Map<string, Outcome>();
  private worker: Promise<void> | null = null;
  private child: ChildProcess | null = null;
  stopping = false;

  constructor(
    private readonly client: SchedulerClient,
    private readonly command: string[],
    private readonly timeoutMs: number,
  ) {}

  /** A device as the watch shows it: queue it if it needs this listener. */
  observe(d: Device): void {
    const o = this.outcomes.get(d.uuid);
    // A command that failed at this generation is not run again until a restart.
    if (!needsCleaning(d) || (o && o.generation === d.generation && !o.cleaned)) {
      this.pending.delete(d.uuid);
      return;
    }
    this.pending.set(d.uuid, d);
    this.kick();
  }

  private kick(): void {
    if (this.worker || this.stopping) return;
    this.worker = this.drain().finally(() => {
      this.worker = null;
      // A device queued while the worker was finishing.
      if (this.pending.size > 0) this.kick();
    });
  }

  private async drain(): Promise<void> {
    for (;;) {
      const next = this.pending.keys().next();
      if (next.done || this.stopping) return;
      this.pending.delete(next.value);
      try {
        await this.handle(next.value);
      } catch (err) {
        // An API error (the scheduler went away, the device is gone): the device stays burned, and
        // the listing after a reconnect brings it back if it still needs cleaning.
        log('error', 'handling failed; the device stays burned', { device: next.value, error: String(err) });
      }
    }
  }

  private async handle(uuid: string): Promise<void> {
    // The queued state may be old: decide on the current one.
    const d = (await this.client.devices.getDevice({ device: uuidRef(uuid) })).device!;
    if (!needsCleaning(d)) return;
    const o = this.outcomes.get(uuid);
    if (o && o.generation === d.generation) {
      if (!o.cleaned) return;
      log('info', 'command already succeeded for this burn; releasing', deviceFields(d));
    } else {
      log('info', 'running the cleanup command', { ...deviceFields(d), command: this.command });
      const r = await this.run(d);
      if (this.stopping) return;
      this.outcomes.set(uuid, { generation: d.generation, cleaned: r.ok });
      if (!r.ok) {
        log('error', 'cleanup command failed; the device stays burned', { ...deviceFields(d), ...r.detail });
        return;
      }
    }
    await this.release(d);
  }

  private async release(d: Device): Promise<void> {
    try {
      const released = (
        await this.client.devices.releaseDevice({ device: uuidRef(d.uuid), generation: d.generation })
      ).device!;
      this.outcomes.delete(d.uuid);
      log('info', 'released', { ...deviceFields(d), released_generation: released.generation });
    } catch (err) {
      if (!(err instanceof BerthClientError) || err.codeName !== 'ABORTED') throw err;
      // The device changed while the command ran. A release of ours whose answer was
      // lost looks the same: tell them apart by whether it is still burned.
      const now = (await this.client.devices.getDevice({ device: uuidRef(d.uuid) })).device!;
      if (!now.burned) {
        this.outcomes.delete(d.uuid);
        log('info', 'released (the device was no longer burned)', deviceFields(now));
      } else {
        log(
          'warn',
          'the device changed while its command ran; not released (handled again at its new state)',
          {
            ...deviceFields(d),
            now_generation: now.generation,
          },
        );
      }
    }
  }

  private run(d: Device): Promise<CommandResult> {
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      BERTH_DEVICE_UUID: d.uuid,
      BERTH_DEVICE_HOST: d.host,
      BERTH_DEVICE_ADDRESS: d.address,
      BERTH_DEVICE_VENDOR_ID: d.vendorId,
      BERTH_DEVICE_PRODUCT_ID: d.productId,
    };
    delete env.BERTH_TOKEN;
    return new Promise((resolve) => {
      // Its own process group, so a timeout or a stop ends everything it started.
      const child = spawn(this.command[0]!, this.command.slice(1), {
        env,
        stdio: ['ignore', 2, 2],
        detached: true,
      });
      this.child = child;
      let timedOut = false;
      const timer = setTimeout(() => {
        timedOut = true;
        killGroup(child, 'SIGKILL');
      }, this.timeoutMs);
      const done = (r: CommandResult) => {
        clearTimeout(timer);
        this.child = null;
        resolve(r);
      };
      child.once('error', (err) => done({ ok: false, detail: { error: err.message } }));
      child.once('exit', (code, signal) => {
        if (timedOut) done({ ok: false, detail: { timeout_seconds: this.timeoutMs / 1000 } });
        else if (code === 0) done({ ok: true, detail: {} });
        else done({ ok: false, detail: code !== null ? { exit_code: code } : { signal } });
      });
    });
  }

  /** Stop: kill a running command (its device stays burned) and wait for the worker. */
  async stop(): Promise<void> {
    this.stopping = true;
    if (this.child) killGroup(this.child, 'SIGTERM');
    await this.worker;
  }
}

function killGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  try {
    if (child.pid) process.kill(-child.pid, signal);
  } catch {
    // Already gone.
  }
}

async function main(): Promise<number> {
  let parsed: ReturnType<typeof parseOptions>;
  try {
    parsed = parseOptions();
  } catch (err) {
    console.error(`one-time-use-listener: ${(err as Error).message}\n${USAGE}`);
    return 2;
  }
  const { values, command, timeoutMs } = parsed;
  const resolved = await resolveClient({ endpoint: values.endpoint, token: values.token });
  const client = new SchedulerClient({ endpoint: resolved.endpoint, token: resolved.token });
  const listener = new Listener(client, command, timeoutMs);
  const stop = new AbortController();
  for (const sig of ['SIGTERM', 'SIGINT'] as const) process.once(sig, () => stop.abort());
  const stopped = new Promise<void>((resolve) => stop.signal.addEventListener('abort', () => resolve()));
  const filter = {
    host: values.host ?? '',
    type: 0,
    state: 0,
    resourceClass: values['resource-class'] ?? '',
  };
  log('info', 'started', { endpoint: resolved.endpoint, filter, command });

  const watching = (async () => {
    let backoff = 1000;
    while (!listener.stopping) {
      try {
        // From 0: the current state first (which is what makes a restart safe), then changes.
        const watch = client.watchDevicesRelisting({ filter, fromRevision: 0 }, (e) =>
          log('warn', 're-listing', { reason: e.message }),
        );
        for await (const m of watch) {
          backoff = 1000;
          if (m.synced) log('info', 'synced', { revision: m.revision });
          else if (m.device && !m.removed) listener.observe(m.device);
        }
      } catch (err) {
        if (listener.stopping) break;
        if (!(err instanceof BerthClientError) || err.codeName !== 'UNAVAILABLE') throw err;
        log('warn', 'watch lost; reconnecting', { error: err.message, retry_ms: backoff });
      }
      await sleep(backoff, undefined, { signal: stop.signal }).catch(() => {});
      backoff = Math.min(MAX_BACKOFF_MS, backoff * 2);
    }
  })();

  try {
    await Promise.race([stopped, watching]);
    log('info', 'stopping');
    return 0;
  } catch (err) {
    log('error', 'the scheduler refused the watch', { error: (err as Error).message });
    return 1;
  } finally {
    await listener.stop();
    // Closing the client does not end the watch stream it carries; the exit does.
    watching.catch(() => {});
  }
}

function parseOptions() {
  const { values, positionals } = parseArgs({
    options: {
      endpoint: { type: 'string' },
      token: { type: 'string' },
      host: { type: 'string' },
      'resource-class': { type: 'string' },
      timeout: { type: 'string' },
    },
    allowPositionals: true,
  });
  if (positionals.length === 0) throw new Error('a command to run for each device is required');
  const timeout = values.timeout === undefined ? DEFAULT_TIMEOUT_S : Number(values.timeout);
  if (!Number.isInteger(timeout) || timeout < 1 || timeout > 604_800) {
    throw new Error(`--timeout "${values.timeout}" is not a whole number of seconds in 1..604800`);
  }
  return { values, command: positionals, timeoutMs: timeout * 1000 };
}

process.exit(await main());
