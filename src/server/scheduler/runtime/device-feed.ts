/**
 * The recent device events, read from the store once for every WatchDevices
 * stream: with a thousand watchers, a change is one query, not a thousand.
 * The feed holds the records as the store gave them, the same object for every
 * watcher, so the service converts and encodes each for the wire once (keyed
 * by the object). A watcher resuming from further back than the feed holds
 * reads the store itself. Plain records only: the application layer reads the
 * feed and reaches no transport through it (decision 55).
 */
import type { DeviceEvent } from '../domain/inventory.js';
import type { UseCases } from '../usecases/use-cases.js';

/** One change as the feed keeps it: a store event, one object shared by every watcher. */
export type FeedEvent = Readonly<DeviceEvent>;

const PAGE = 1000;

export class DeviceFeed {
  private events: FeedEvent[] = [];
  private head = -1;
  private refreshing: Promise<void> | null = null;
  private again = false;

  constructor(
    private readonly useCases: UseCases,
    private readonly keep = 20_000,
  ) {}

  /** Brings the feed up to the store's latest committed event (one reader at a time). */
  private refresh(): Promise<void> {
    if (this.refreshing) {
      // A change may have committed after the running read started: read again after it.
      this.again = true;
      return this.refreshing;
    }
    this.refreshing = (async () => {
      try {
        do {
          this.again = false;
          if (this.head < 0) this.head = await this.useCases.currentRevision();
          for (;;) {
            const page = await this.useCases.eventsSince(this.head, PAGE);
            this.events.push(...page);
            if (page.length > 0) this.head = page[page.length - 1]!.revision;
            if (page.length < PAGE) break;
          }
          if (this.events.length > this.keep) this.events.splice(0, this.events.length - this.keep);
        } while (this.again);
      } finally {
        this.refreshing = null;
      }
    })();
    return this.refreshing;
  }

  /** Events with revision > `revision`, oldest first, at most `limit`. */
  async since(revision: number, limit: number): Promise<FeedEvent[]> {
    await this.refresh();
    const first = this.events[0];
    const held = first ? first.revision <= revision + 1 : revision >= this.head;
    if (!held) {
      return this.useCases.eventsSince(revision, limit);
    }
    let lo = 0;
    let hi = this.events.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.events[mid]!.revision <= revision) lo = mid + 1;
      else hi = mid;
    }
    return this.events.slice(lo, lo + limit);
  }
}
