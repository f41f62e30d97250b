/**
 * Wakes stream handlers (WatchDevices, WatchCleanup) when the store changed.
 * The store's event log is the source of truth; the hub only says "look again",
 * so a missed or coalesced wake-up loses nothing. (With several scheduler
 * replicas on PostgreSQL, a LISTEN/NOTIFY or a poll feeds the same hub.)
 */
export class EventHub {
  private waiters = new Set<() => void>();
  private closed = false;

  notify(): void {
    const ws = this.waiters;
    this.waiters = new Set();
    for (const w of ws) w();
  }

  /** Resolves at the next notify, when the signal fires, after `maxWaitMs`, or at close. */
  wait(signal?: AbortSignal, maxWaitMs = 30_000): Promise<void> {
    if (this.closed || signal?.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.waiters.delete(done);
        signal?.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, maxWaitMs);
      timer.unref();
      this.waiters.add(done);
      signal?.addEventListener('abort', done, { once: true });
    });
  }

  close(): void {
    this.closed = true;
    this.notify();
  }

  get isClosed(): boolean {
    return this.closed;
  }
}
