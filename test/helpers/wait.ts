/**
 * Waiting in tests, in one place. A test waits for something it can observe —
 * a state it polls, a stream's message, a log line, a counter, the other
 * side's acknowledgement — never for a fixed time: on a loaded machine a
 * fixed sleep is either too short (a flake) or proves nothing. A check that
 * something did NOT happen first waits for what would have come before it
 * (the attempt that was refused, the pass that would have acted, the peer's
 * answer), then asserts (test/README.md, "Waiting").
 */

/** Polls `fn` every 50 ms until `predicate` holds; its last value, or an error naming the last value seen. */
export async function eventually<T>(
  fn: () => Promise<T> | T,
  predicate: (v: T) => boolean,
  timeoutMs = 10_000,
): Promise<T> {
  const start = Date.now();
  let last: T;
  for (;;) {
    last = await fn();
    if (predicate(last)) return last;
    if (Date.now() - start > timeoutMs)
      throw new Error(
        `condition not met after ${timeoutMs} ms; last: ${JSON.stringify(last)?.slice(0, 2000)}`,
      );
    await sleep(50);
  }
}

/** Polls `cond` every 20 ms until it holds; throws naming `what` after `timeoutMs`. */
export async function waitFor(
  cond: () => boolean | Promise<boolean>,
  timeoutMs = 10_000,
  what = 'the condition',
): Promise<void> {
  const start = Date.now();
  while (!(await cond())) {
    if (Date.now() - start > timeoutMs)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(20);
  }
}

/**
 * Resolves after `ms`. For pacing only — a poll's interval, a retry's pause,
 * a load generator's rhythm — never as the wait before asserting that
 * something did not happen.
 */
export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
