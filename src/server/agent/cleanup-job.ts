/**
 * One cleanup job as the agent runs it: an ordered list of events (sequence
 * 1, 2, ...) ending in a terminal phase, and any number of followers who get
 * the events so far and then the new ones. Followers come and go (a stream
 * that breaks, a scheduler that re-attaches); the job does not care.
 */
import type { CleanupProof } from '../../plugins/cleanup-evidence.js';
import { type CleanupJobPhase, endsCleanup } from '../../plugins/types.js';

export interface JobEvent {
  jobId: string;
  address: string;
  action: string;
  phase: CleanupJobPhase;
  step: string;
  percent: number;
  bytesDone: number;
  bytesTotal: number;
  message: string;
  /** Epoch milliseconds. */
  time: number;
  sequence: number;
  /** On a `succeeded` event: what the agent accepted as proof of erasure. */
  proof?: CleanupProof;
  /** On a `succeeded` event: the erasure certificate the agent signed (compact JWS), when it signs. */
  certificate?: string;
}

export class CleanupJob {
  readonly events: JobEvent[] = [];
  private readonly waiters = new Set<() => void>();

  constructor(
    readonly jobId: string,
    readonly address: string,
    readonly action: string,
    events: JobEvent[] = [],
  ) {
    this.events.push(...events);
  }

  get last(): JobEvent | undefined {
    return this.events[this.events.length - 1];
  }

  get finished(): boolean {
    const last = this.last;
    return last !== undefined && endsCleanup(last.phase);
  }

  /** Appends an event (sequence and time filled in) and wakes the followers. */
  push(e: Omit<JobEvent, 'sequence' | 'time' | 'jobId' | 'address' | 'action'>): JobEvent {
    if (this.finished) throw new Error(`cleanup job ${this.jobId} already ended`);
    const prev = this.last;
    const event: JobEvent = {
      jobId: this.jobId,
      address: this.address,
      action: this.action,
      ...e,
      // Percent and bytes never go backwards within a phase sequence.
      time: Date.now(),
      sequence: (prev?.sequence ?? 0) + 1,
    };
    this.events.push(event);
    for (const w of this.waiters) w();
    this.waiters.clear();
    return event;
  }

  /** The events after `fromSequence`, then new ones until the terminal event or the signal. */
  async *follow(fromSequence: number, signal?: AbortSignal): AsyncGenerator<JobEvent> {
    let next = fromSequence;
    for (;;) {
      while (next < this.events.length) {
        const e = this.events[next++]!;
        yield e;
        if (endsCleanup(e.phase)) return;
      }
      if (signal?.aborted) return;
      await new Promise<void>((resolve) => {
        const wake = () => {
          this.waiters.delete(wake);
          signal?.removeEventListener('abort', wake);
          resolve();
        };
        this.waiters.add(wake);
        signal?.addEventListener('abort', wake, { once: true });
      });
    }
  }
}
