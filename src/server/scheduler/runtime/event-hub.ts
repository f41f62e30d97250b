/**
 * Wakes stream handlers (WatchDevices, WatchCleanup, Placement reporting) when
 * the store changed: the scheduler notifies it after every committed unit (the
 * use cases' `onChange`; with several schedulers on PostgreSQL, the others'
 * commits too, through LISTEN/NOTIFY). The store's event log is the source of
 * truth; the hub only says "look again". Every notify bumps a version: a
 * handler reads the version before it reads the store and waits for a version
 * after it, so a change committed between its read and its wait is never
 * slept through.
 */
export class EventHub {
  private waiters = new Set<() => void>();
  private closed = false;
  private v = 0;
  /**
   * Per abort signal (one per stream), the waits it must end. A stream waits
   * once per change; one 'abort' listener per signal instead of one added and
   * removed per wait (EventTarget listeners were half the hub's cost with a
   * thousand watchers, bench/watch.ts).
   */
  private readonly bySignal = new WeakMap<AbortSignal, Set<() => void>>();

  /** Increases at every notify. */
  get version(): number {
    return this.v;
  }

  notify(): void {
    this.v++;
    const ws = this.waiters;
    this.waiters = new Set();
    for (const w of ws) w();
  }

  /**
   * Resolves once the version is past `seen` (at once if it already is), when
   * the signal fires, after `maxWaitMs`, or at close.
   */
  wait(signal?: AbortSignal, seen = this.v, maxWaitMs = 30_000): Promise<void> {
    if (this.closed || signal?.aborted || this.v > seen) return Promise.resolve();
    return new Promise((resolve) => {
      const aborts = signal ? this.abortSet(signal) : null;
      const done = () => {
        clearTimeout(timer);
        this.waiters.delete(done);
        aborts?.delete(done);
        resolve();
      };
      const timer = setTimeout(done, maxWaitMs);
      timer.unref();
      this.waiters.add(done);
      aborts?.add(done);
    });
  }

  /** The waits `signal` ends, with its one listener registered the first time. */
  private abortSet(signal: AbortSignal): Set<() => void> {
    let set = this.bySignal.get(signal);
    if (!set) {
      const waits = new Set<() => void>();
      signal.addEventListener(
        'abort',
        () => {
          for (const done of [...waits]) done();
        },
        { once: true },
      );
      this.bySignal.set(signal, waits);
      set = waits;
    }
    return set;
  }

  close(): void {
    this.closed = true;
    this.notify();
  }

  get isClosed(): boolean {
    return this.closed;
  }
}
