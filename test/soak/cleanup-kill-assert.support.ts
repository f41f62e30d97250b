/**
 * The assertions shared by the short (integration) and long (soak) runs of the
 * kill -9 cleanup soak, so both fail the same way and print the seed to replay.
 */
import { expect } from 'vitest';
import { runCleanupKillSoak, type SoakReport, soakSeed } from './cleanup-kill-driver.support.js';

/** Runs `cleanups` releases under seeded kills and asserts the invariants the driver checked. */
export async function soakAndAssert(cleanups: number, budgetMs: number): Promise<SoakReport> {
  const seed = soakSeed();
  console.log(`cleanup-kill soak: seed ${seed} (replay with SOAK_SEED=${seed}), ${cleanups} cleanups`);
  const report = await runCleanupKillSoak({
    cleanups,
    seed,
    budgetMs,
    log: process.env.SOAK_VERBOSE ? (l) => console.log(l) : undefined,
  });
  const { violations, lost, tenantData, finalStates, ...figures } = report;
  console.log(`cleanup-kill soak figures: ${JSON.stringify(figures)}`);
  const replay = `seed ${seed} (SOAK_SEED=${seed})`;
  expect(violations, `invariant violations, ${replay}`).toEqual([]);
  expect(lost, `lost devices, ${replay}`).toEqual([]);
  // The media, read from outside Berth: every available device is free of tenant data.
  expect(tenantData, `tenant data on devices offered as available, ${replay}`).toEqual([]);
  // The four NVMe controllers (one per action), all available at the end.
  expect(report.mediaChecked, replay).toBe(4);
  expect(report.planted, replay).toBeGreaterThanOrEqual(cleanups);
  expect(report.cleanups, `ran out of time, ${replay}`).toBe(cleanups);
  // The run really injected faults and really recovered from them.
  expect(report.agentKills, replay).toBeGreaterThan(0);
  // Every device ends clean and every release came back through a verified cleanup.
  for (const [address, state] of Object.entries(finalStates)) {
    expect(state, `${address} at the end, ${replay}`).toBe('DEVICE_STATE_AVAILABLE');
  }
  expect(report.verifiedReturns, `releases the watcher saw come back clean, ${replay}`).toBe(cleanups);
  return report;
}
