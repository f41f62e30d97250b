/**
 * The generic NVMe driver (specs/nvme-secure-cleanup.txt; DESIGN.md "NVMe
 * cleanup policy"), built from the NVMe kit (kit.ts). Discovery identifies
 * every matched controller with `nvme id-ctrl`, reports its capabilities as
 * traits and locks in a cleanup action from the policy matrix. Cleanup runs
 * exactly that action and returns the evidence (what the sanitize log showed,
 * what was written and read back); the agent judges it, so success is never
 * an exit code, nor the driver's say.
 *
 * Every host effect goes through `ctx` (runner, sysfs root, /dev root) so the
 * same code runs on a real host and on the simulator.
 */
import type { StorageTarget } from '../cleanup-evidence.js';
import { type Cleanup, DRIVER_API_VERSION, type Driver, defineDriver } from '../driver.js';
import { nvmeConfigSchema } from './config.js';
import type { ResolvedController } from './controller.js';
import { CleanupFailedError } from './errors.js';
import { type NvmeKit, nvmeKit } from './kit.js';
import { isCleanupAction } from './policy.js';
import { runSanitize } from './sanitize-flow.js';
import { runZeroing } from './zero-flow.js';

/** A driver built on the NVMe kit: its steps stay reachable (tests, the census's nvme-cli). */
export interface NvmeKitDriver extends Driver {
  readonly kit: NvmeKit;
  initHost: NonNullable<Driver['initHost']>;
  discoverAt: NonNullable<Driver['discoverAt']>;
  readonly cleanup: Cleanup;
}

/** The generic NVMe driver; built in under the name `nvme`. */
export const nvmeDriver = defineDriver({
  apiVersion: DRIVER_API_VERSION,
  name: 'nvme',
  config: nvmeConfigSchema,
  create: (config): NvmeKitDriver => {
    const kit = nvmeKit({ name: 'nvme', config });
    return {
      name: kit.name,
      kit,
      initHost: kit.initHost,
      discover: kit.discover,
      discoverAt: kit.discoverAt,
      cleanup: policyCleanup(kit),
    };
  },
});

/**
 * The policy matrix's cleanup: scrubs the device with its locked-in action
 * (sanitize, or zeroing with a read-back) and returns the evidence — what the
 * sanitize log showed before and after, or what was written and read back.
 * The agent judges it; this driver never declares success.
 */
export function policyCleanup(kit: NvmeKit): Cleanup {
  return (device, ctx) =>
    kit.guard(device, ctx, async (cctx) => {
      const action = device.cleanupAction;
      if (!isCleanupAction(action)) {
        throw new CleanupFailedError(
          `${device.address}: no locked-in NVMe cleanup action (${JSON.stringify(action)}); rediscover the device`,
        );
      }
      const r = await kit.resolveController(device, cctx);
      const run = kit.runner(cctx);
      switch (action) {
        case 'sanitize-crypto':
        case 'sanitize-block': {
          const { evidence, notes } = await runSanitize(r, action, cctx, {
            run,
            pollIntervalMs: kit.config.pollIntervalMs,
          });
          return {
            action,
            targets: await sanitizeTargets(kit, r, cctx),
            sanitize: evidence,
            writes: [],
            readBack: [],
            notes: [
              ...notes,
              'sanitize erases the whole NVM subsystem, every namespace and the unallocated capacity',
            ],
          };
        }
        case 'write-zeroes':
        case 'shred':
          return { action, ...(await runZeroing(r, action, cctx, run)) };
      }
    });
}

/**
 * What a sanitize covers: every allocated namespace of the subsystem,
 * attached to this controller or not (a sanitize is subsystem-wide), or the
 * controller's capacity when there is none.
 */
async function sanitizeTargets(
  kit: NvmeKit,
  r: ResolvedController,
  ctx: Parameters<Cleanup>[1],
): Promise<StorageTarget[]> {
  const all = await kit.subsystemNamespaces(r, ctx);
  if (all.length > 0) return all;
  if (r.id.tnvmcap > 0n) return [{ name: r.ctrl.name, sizeBytes: Number(r.id.tnvmcap), blockSize: 512 }];
  throw new CleanupFailedError(
    `${r.fn.address}: ${r.ctrl.name} has no namespace and reports no capacity: nothing to name as sanitized`,
  );
}
