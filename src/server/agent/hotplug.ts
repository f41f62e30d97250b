/**
 * How the agent learns that a PCI function came or went: the kernel's
 * uevents, read from `udevadm monitor --kernel` run as a supervised child
 * (decision 56 in docs/decisions.md, with its failure modes). This file holds
 * the two parts that are not the agent's own business:
 *
 * - UdevadmSource runs the child, reads its lines, says when it is listening
 *   (the empty line ending udevadm's header), and when it cannot start or
 *   dies, says so and starts it again with a backoff (1 s doubling to 60 s;
 *   back to 1 s once it ran a minute).
 * - Coalescer gathers the addresses events name and hands them over as one
 *   batch once no event came for `settleMs` (at most `maxDelayMs`, two
 *   settles by default, after the first), never two batches at once: enabling 256 VFs is 256 events and a
 *   handful of batches, not 256 passes.
 *
 * Neither touches sysfs or the inventory; the agent does (agent.ts).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import type { Logger } from 'pino';
import { LineSplitter, parseUeventLine, type Uevent } from './uevent.js';

/** Where the kernel's events come from, and whether they are followed now. */
export type HotplugState =
  /** No event source configured: the agent polls at discovery_interval. */
  | 'off'
  /** The source was started and has not said it listens yet. */
  | 'starting'
  /** Events are followed; a full rescan runs at rescan_interval as a safety net. */
  | 'following'
  /** The source could not start or died: the agent polls at discovery_interval and retries it. */
  | 'failed';

export interface SourceStatus {
  state: HotplugState;
  /** Why it is not following ('' while it is). */
  message: string;
  since: Date;
  /** Times the source was started again after it failed. */
  restarts: number;
}

/** The subsystems whose events can change what discovery reads of a PCI function. */
export const UEVENT_SUBSYSTEMS = ['pci', 'nvme', 'block'] as const;

export function udevadmArgs(): string[] {
  return ['monitor', '--kernel', ...UEVENT_SUBSYSTEMS.map((s) => `--subsystem-match=${s}`)];
}

export interface UdevadmSourceOptions {
  /** The udevadm program (a path, or a name found in PATH). */
  command: string;
  logger: Logger;
  onEvent(e: Uevent): void;
  /** Every change of state; `following` comes each time the source (re)starts listening. */
  onStatus(s: SourceStatus): void;
  /** A source that printed no header end by then is killed and counts as failed. Default 10 s. */
  readyTimeoutMs?: number;
  /** First retry delay and its cap. Default 1 s and 60 s. */
  backoffMs?: { initial: number; max: number };
}

/** Lines of the child's stderr kept for the failure message. */
const STDERR_LINES = 5;

export class UdevadmSource {
  private child: ChildProcess | null = null;
  private retryTimer: NodeJS.Timeout | null = null;
  private readyTimer: NodeJS.Timeout | null = null;
  private stopped = false;
  private delayMs: number;
  private startedAt = 0;
  private current: SourceStatus = { state: 'starting', message: '', since: new Date(), restarts: 0 };
  private readonly readyTimeoutMs: number;
  private readonly backoff: { initial: number; max: number };

  constructor(private readonly options: UdevadmSourceOptions) {
    this.readyTimeoutMs = options.readyTimeoutMs ?? 10_000;
    this.backoff = options.backoffMs ?? { initial: 1_000, max: 60_000 };
    this.delayMs = this.backoff.initial;
  }

  get status(): SourceStatus {
    return this.current;
  }

  /** The running child's pid (tests kill it to show what a dying source does). */
  get pid(): number | null {
    return this.child?.pid ?? null;
  }

  start(): void {
    if (this.stopped || this.child) return;
    const { command, logger } = this.options;
    const args = udevadmArgs();
    let child: ChildProcess;
    try {
      // stdin stays a pipe the child never reads: when the agent dies it closes, and a
      // child that watches it (the simulator's udevadm) exits with the agent.
      // SYSTEMD_IGNORE_CHROOT: udevadm does nothing in a chroot ("Running in chroot, ignoring
      // request.", exit 0), but the kernel's events reach a chroot all the same.
      child = spawn(command, args, {
        stdio: ['pipe', 'pipe', 'pipe'],
        env: { ...process.env, SYSTEMD_IGNORE_CHROOT: '1' },
      });
    } catch (err) {
      this.fail(`cannot run ${command}: ${(err as Error).message}`);
      return;
    }
    this.child = child;
    this.startedAt = Date.now();
    if (this.current.state !== 'starting') this.setStatus('starting', '');
    const stdout = new LineSplitter();
    const stderr: string[] = [];
    let listening = false;
    const ready = () => {
      if (listening) return;
      listening = true;
      if (this.readyTimer) clearTimeout(this.readyTimer);
      this.readyTimer = null;
      logger.info({ command, pid: child.pid }, 'following the kernel uevents');
      this.setStatus('following', '');
    };
    this.readyTimer = setTimeout(() => {
      this.readyTimer = null;
      if (listening || this.child !== child) return;
      stderr.push(`no header from ${command} within ${this.readyTimeoutMs} ms`);
      child.kill('SIGKILL');
    }, this.readyTimeoutMs);
    this.readyTimer.unref();
    child.stdout!.setEncoding('utf8');
    child.stdout!.on('data', (chunk: string) => {
      for (const line of stdout.push(chunk)) {
        const e = parseUeventLine(line);
        if (e) {
          // An event before the header's end: listening all the same.
          ready();
          this.options.onEvent(e);
        } else if (line === '' && !listening) {
          ready();
        }
      }
    });
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (chunk: string) => {
      stderr.push(...chunk.split('\n').filter((l) => l.trim() !== ''));
      stderr.splice(0, Math.max(0, stderr.length - STDERR_LINES));
    });
    // The child's stdin is ours only to close: an EPIPE there is its exit, reported below.
    child.stdin!.on('error', () => {});
    child.on('error', (err) => {
      stderr.push(`cannot run ${command}: ${(err as NodeJS.ErrnoException).code ?? err.message}`);
    });
    child.on('close', (code, signal) => {
      if (this.child !== child) return;
      this.child = null;
      if (this.readyTimer) clearTimeout(this.readyTimer);
      this.readyTimer = null;
      if (this.stopped) return;
      const how = code === null ? `was killed by ${signal}` : `exited with code ${code}`;
      const said = stderr.length > 0 ? `: ${stderr.join(' | ')}` : '';
      const spawnFailed = stderr.some((l) => l.startsWith('cannot run '));
      this.fail(spawnFailed ? stderr.join(' | ') : `${command} ${args.join(' ')} ${how}${said}`);
    });
  }

  private fail(message: string): void {
    // A source that ran for a minute failed anew: start the backoff again.
    if (this.startedAt > 0 && Date.now() - this.startedAt >= 60_000) this.delayMs = this.backoff.initial;
    const retryIn = this.delayMs;
    this.delayMs = Math.min(this.backoff.max, this.delayMs * 2);
    this.options.logger.error(
      { command: this.options.command, retryInMs: retryIn },
      `the kernel uevent source failed (${message}); polling at discovery_interval until it runs again, next try in ${retryIn / 1000} s`,
    );
    this.setStatus('failed', message);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      if (this.stopped) return;
      this.current = { ...this.current, restarts: this.current.restarts + 1 };
      this.start();
    }, retryIn);
    this.retryTimer.unref();
  }

  private setStatus(state: HotplugState, message: string): void {
    this.current = { state, message, since: new Date(), restarts: this.current.restarts };
    this.options.onStatus(this.current);
  }

  /** Stops the child and every retry; resolves once the child is gone. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    if (this.readyTimer) clearTimeout(this.readyTimer);
    const child = this.child;
    this.child = null;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const gone = new Promise<void>((resolve) => child.once('close', () => resolve()));
    child.stdin?.destroy();
    child.kill('SIGTERM');
    const force = setTimeout(() => child.kill('SIGKILL'), 2_000);
    await gone;
    clearTimeout(force);
  }
}

export interface CoalescerOptions {
  /** Quiet time after the last address before a batch goes. */
  settleMs: number;
  /**
   * A batch goes at most this long after its first address, however busy the
   * source. Default: two settles. Batches never overlap, so under a steady
   * stream (a PF's VFs, as the kernel adds them one by one) this is the first
   * batch's wait; each later one goes a settle after the previous run
   * (decision 93). Ten settles (500 ms) were half of a burst's one-second
   * budget, spent idle before its first pass (decision 97).
   */
  maxDelayMs?: number;
  /** Handles one batch; the next waits for it. Errors are the caller's to log. */
  run(batch: Set<string>): Promise<void>;
}

/**
 * Gathers keys (PCI addresses) into batches: a batch goes `settleMs` after
 * the last key added, or `maxDelayMs` after its first, and never while the
 * previous one runs (keys added meanwhile make the next batch, which goes
 * `settleMs` after that run at the latest).
 */
export class Coalescer {
  private pending = new Set<string>();
  /** When the pending batch goes at the latest, however busy the source (Infinity: nothing pending). */
  private deadline = Number.POSITIVE_INFINITY;
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private closed = false;

  private readonly maxDelayMs: number;

  constructor(private readonly options: CoalescerOptions) {
    this.maxDelayMs = options.maxDelayMs ?? options.settleMs * 2;
  }

  get size(): number {
    return this.pending.size;
  }

  add(keys: Iterable<string>): void {
    if (this.closed) return;
    let added = false;
    for (const k of keys) {
      added = true;
      this.pending.add(k);
    }
    if (!added) return;
    if (this.deadline === Number.POSITIVE_INFINITY) this.deadline = performance.now() + this.maxDelayMs;
    this.schedule();
  }

  private schedule(): void {
    if (this.running || this.pending.size === 0 || this.closed) return;
    if (this.timer) clearTimeout(this.timer);
    const delay = Math.max(0, Math.min(this.options.settleMs, this.deadline - performance.now()));
    this.timer = setTimeout(() => this.flush(), delay);
  }

  private flush(): void {
    this.timer = null;
    if (this.running || this.pending.size === 0 || this.closed) return;
    const batch = this.pending;
    this.pending = new Set();
    this.deadline = Number.POSITIVE_INFINITY;
    this.running = this.options
      .run(batch)
      .catch(() => {})
      .finally(() => {
        this.running = null;
        if (this.pending.size > 0) {
          // Keys that came during the run have waited already: they go after one settle at most,
          // however busy the source (more keys do not push that back).
          this.deadline = Math.min(this.deadline, performance.now() + this.options.settleMs);
          this.schedule();
        }
      });
  }

  /** Resolves when nothing is pending or running (tests, and stop). */
  async idle(): Promise<void> {
    while (this.running || this.pending.size > 0) {
      if (this.running) await this.running;
      else await new Promise((r) => setTimeout(r, this.options.settleMs));
    }
  }

  /** Drops what is pending; a running batch finishes. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.pending.clear();
    await this.running;
  }
}
