/**
 * A template for vendor NVMe drivers — copy this directory to write your own.
 *
 * How a vendor driver fits in (DESIGN.md "The driver contract"):
 *
 * - It is a definition (`defineDriver`, driver API 3) that composes the NVMe
 *   kit (`nvmeKit`) and writes only its `cleanup`. Discovery, traits, the
 *   resource class, the `nvme:`-style config keys (device_spec,
 *   cleanup_timeout, nvme_cli, poll_interval, verify — `nvmeConfigSchema`,
 *   parsed and typed before `create` runs) and the nvme-cli check are the
 *   kit's, so the scheduler sees the same device it would see with the
 *   generic driver.
 * - `name` is what operators put in `enabled_drivers`; the config section
 *   with the same name is parsed with `config(section)` and handed to
 *   `create` (the section's name only appears in error messages). Two drivers must not claim the same device, so an operator
 *   moves a device_spec entry from `nvme:` to this section, never copies it.
 * - Wrap the work in `kit.guard`: it takes the per-device lock, fires
 *   the signal at cleanup_timeout as well as when the agent stops, and turns an
 *   abort into a clear "timed out" / "aborted" error. Run nvme-cli through
 *   `kit.runner(ctx)` so a
 *   timeout kills the tool and its children, and a failure throws with the
 *   NVMe status text and hex — you never look at exit codes yourself.
 * - Re-resolve the controller with `kit.resolveController` — never trust a
 *   controller name from discovery, it changes when the device is rebound.
 * - Cover the whole NVM subsystem, not what sysfs shows: a tenant may have
 *   created namespaces and left them detached, or deleted them (their blocks
 *   stay in the unallocated capacity, and a namespace created over them shows
 *   them again). `kit.reachEveryNamespace` consolidates the subsystem into one
 *   namespace over the whole capacity where namespace management works, and
 *   otherwise attaches every namespace this controller does not have; erase
 *   and read back what it returns. The agent takes its own census of the
 *   media (`nvme list-ns --all`, `id-ns`, `id-ctrl` capacities) and refuses
 *   a proof that covers less, whatever the driver says.
 * - Return evidence, never a verdict. `cleanup` returns a CleanupEvidence
 *   (src/plugins/cleanup-evidence.ts): the action, every namespace the tenant
 *   could address (`targets`, with their nsid), what you wrote, and what you
 *   read back — use `kit.verifyZeroed`, which reads every byte with direct I/O
 *   (or the sample the operator chose with `verify: sample`). The agent
 *   judges it: a namespace of its census without proof, a non-zero byte, or
 *   a sample the policy does not allow fails the cleanup. A vendor tool's
 *   exit code 0 proves nothing.
 * - Report each step with `ctx.progress` (phases preparing → sanitizing /
 *   namespace_reset → zeroing → verifying; percent never decreasing).
 *
 * This example brings every namespace of the subsystem within reach, scrubs
 * with Format NVM, Secure Erase Setting 1 (user data erase), on each, then
 * reads each back. It gives the kit two options: `cleanupAction`, what
 * discovery reports as the devices' locked-in action, and `satisfiedPolicies`,
 * the device_spec policies that action honours. The policy matrix still binds a vendor
 * driver: a device whose entry asks for anything else (here clear_strategy
 * crypto — SES=1 is not a cryptographic erase —, clear_action sanitize — it is
 * not a sanitize —, or clear_action zero — it writes no zeroes) is excluded at
 * discovery, with the reason in the dry run.
 */

import type { CleanupEvidence } from '../cleanup-evidence.js';
import { type CleanupContext, DRIVER_API_VERSION, type Driver, defineDriver } from '../driver.js';
import { nvmeConfigSchema } from '../nvme/config.js';
import { CleanupFailedError, type NvmeKit, nvmeKit, targetOf } from '../nvme/index.js';
import type { DiscoveredDevice } from '../types.js';

/** OACS bit 1: the controller supports Format NVM. */
const OACS_FORMAT = 1 << 1;
/** FNA bit 3: Format does NOT accept NSID FFFFFFFFh — format namespace by namespace. */
const FNA_NO_BROADCAST = 1 << 3;
/** SES=1 on big drives takes long; nvme-cli's default ioctl timeout (600 s) would let the kernel abort it. */
const FORMAT_TIMEOUT_MS = 3_600_000;
/** What this driver's cleanup does, reported as the devices' locked-in action. */
const ACTION = 'vendor-format-ses1';
const NAME = 'nvme-vendor-example';

export const vendorExampleDriver = defineDriver({
  apiVersion: DRIVER_API_VERSION,
  name: NAME,
  config: nvmeConfigSchema,
  create: (config) => {
    const kit = nvmeKit({
      name: NAME,
      config,
      cleanupAction: ACTION,
      // A user-data erase of every block: what auto/auto and auto/block ask for, nothing stricter.
      satisfiedPolicies: [
        ['auto', 'auto'],
        ['auto', 'block'],
      ],
    });
    return {
      name: NAME,
      initHost: kit.initHost,
      discover: kit.discover,
      discoverAt: kit.discoverAt,
      cleanup: (device, ctx) => kit.guard(device, ctx, (ctx) => formatAndReadBack(kit, device, ctx)),
    } satisfies Driver;
  },
});

/** Every namespace of the subsystem within reach, Format NVM SES=1, every namespace read back. */
async function formatAndReadBack(
  kit: NvmeKit,
  device: DiscoveredDevice,
  ctx: CleanupContext,
): Promise<CleanupEvidence> {
  const r = await kit.resolveController(device, ctx);
  if (!(r.id.oacs & OACS_FORMAT)) {
    throw new CleanupFailedError(
      `${device.address}: ${r.ctrl.name} does not support Format NVM (OACS bit 1)`,
    );
  }
  // Every namespace of the subsystem, and its unallocated capacity, on this controller's block devices.
  const { namespaces, notes } = await kit.reachEveryNamespace(r, ctx);
  const run = kit.runner(ctx);
  const nsids = r.id.fna & FNA_NO_BROADCAST ? namespaces.map((ns) => String(ns.nsid)) : ['0xffffffff'];
  for (const [i, nsid] of nsids.entries()) {
    ctx.progress({
      phase: 'zeroing',
      step: 'format',
      percent: Math.round((i / nsids.length) * 100),
      message: `nvme format -n ${nsid} -s 1`,
    });
    // --force: without it 2.3 prints a warning and sleeps 10 s; -t: see FORMAT_TIMEOUT_MS.
    await run(
      ['format', r.ctrlDev, '-n', nsid, '-s', '1', '--force', '-t', String(FORMAT_TIMEOUT_MS)],
      FORMAT_TIMEOUT_MS,
    );
  }
  ctx.progress({ phase: 'zeroing', step: 'format', percent: 100 });
  // The proof: every namespace read back (SES=1 returns zeros on the drives this template targets).
  const readBack = [];
  for (const ns of namespaces) readBack.push(await kit.verifyZeroed(r, ns, ctx));
  return {
    action: ACTION,
    targets: namespaces.map(targetOf),
    writes: namespaces.map((ns) => ({
      target: ns.name,
      method: 'format-ses1',
      ranges: [[0, ns.sizeBytes] as const],
      bytes: ns.sizeBytes,
    })),
    readBack,
    notes,
  };
}
