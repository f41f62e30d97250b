/**
 * The kill -9 soak, short: 30 cleanups on a simulated host with the four NVMe
 * actions while the agent (and sometimes the scheduler) is SIGKILLed at seeded
 * random points and restarted (test/soak/cleanup-kill-driver.support.ts). The seed is
 * printed; SOAK_SEED replays it. The long run is test/soak/cleanup-kill.soak.ts.
 */
import { describe, it } from 'vitest';
import { soakAndAssert } from '../soak/cleanup-kill-assert.support.js';

// 30 keeps the normal suite's run short (CI's budget); each run draws a new
// seed, and `npm run soak` runs 200.
const CLEANUPS = 30;
const BUDGET_MS = 200_000;

describe('kill -9 during cleanups (seeded, child processes)', () => {
  it(
    '30 cleanups under agent/scheduler kills: never available without a successful cleanup, invariant 1 on every observation, no device lost',
    async () => {
      await soakAndAssert(CLEANUPS, BUDGET_MS);
    },
    BUDGET_MS + 60_000,
  );
});
