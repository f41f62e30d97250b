/**
 * The long kill -9 soak: `SOAK_CLEANUPS` releases (default 200) under seeded
 * SIGKILLs of the agent and the scheduler (see cleanup-kill-driver.support.ts). Not in
 * the normal suite (vitest.config.ts includes only *.test.ts); run it with
 * `SOAK_CLEANUPS=200 npx vitest run --config vitest.soak.config.ts`.
 */
import { describe, it } from 'vitest';
import { soakAndAssert } from './cleanup-kill-assert.support.js';

const CLEANUPS = Number(process.env.SOAK_CLEANUPS ?? 200);
/** About 3 s per release on a loaded two-core machine, plus slack. */
const BUDGET_MS = 120_000 + CLEANUPS * 4_000;

describe('kill -9 cleanup soak (long)', () => {
  it(
    `${CLEANUPS} cleanups under seeded agent/scheduler kills: invariants 1-4 hold, no device lost`,
    async () => {
      await soakAndAssert(CLEANUPS, BUDGET_MS);
    },
    BUDGET_MS + 60_000,
  );
});
