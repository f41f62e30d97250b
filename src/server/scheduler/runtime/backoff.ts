/** Exponential backoff with full jitter, capped; reset after a success. */
export class Backoff {
  private attempt = 0;

  constructor(
    private readonly baseMs = 200,
    private readonly capMs = 15_000,
  ) {}

  next(): number {
    const ceiling = Math.min(this.capMs, this.baseMs * 2 ** Math.min(this.attempt, 16));
    this.attempt++;
    return Math.round(ceiling / 2 + Math.random() * (ceiling / 2));
  }

  reset(): void {
    this.attempt = 0;
  }
}

export const sleep = (ms: number, signal?: AbortSignal): Promise<void> =>
  new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      resolve();
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
