/**
 * A template for vendor NVMe drivers — copy this directory to write your own.
 *
 * How a vendor driver fits in (DESIGN.md "The driver contract"):
 *
 * - It extends NvmeDriver and overrides only `cleanup` (and declares the two
 *   members below). Discovery, traits,
 *   the resource class, the `nvme:`-style config keys (device_spec,
 *   cleanup_timeout, nvme_cli, poll_interval, verify) and initHost's nvme-cli
 *   check are inherited unchanged, so the scheduler sees the same device it
 *   would see with the generic driver.
 * - `name` is what operators put in `enabled_drivers`; the config section
 *   with the same name is passed to the constructor (`section` is only used in
 *   error messages). Two drivers must not claim the same device, so an operator
 *   moves a device_spec entry from `nvme:` to this section, never copies it.
 * - Wrap the work in `withCleanupGuard`: it takes the per-device lock, fires
 *   the signal at cleanup_timeout as well as when the agent stops, and turns an
 *   abort into a clear "timed out" / "aborted" error. Run nvme-cli through
 *   `this.runner(ctx)` (or `this.nvme(ctx, args, …)` with `ctx.signal`) so a
 *   timeout kills the tool and its children, and a failure throws with the
 *   NVMe status text and hex — you never look at exit codes yourself.
 * - Re-resolve the controller with `resolveController` — never trust a
 *   controller name from discovery, it changes when the device is rebound.
 * - Cover the whole NVM subsystem, not what sysfs shows: a tenant may have
 *   created namespaces and left them detached, or deleted them (their blocks
 *   stay in the unallocated capacity, and a namespace created over them shows
 *   them again). `reachEveryNamespace` consolidates the subsystem into one
 *   namespace over the whole capacity where namespace management works, and
 *   otherwise attaches every namespace this controller does not have; erase
 *   and read back what it returns. The agent takes its own census of the
 *   media (`nvme list-ns --all`, `id-ns`, `id-ctrl` capacities) and refuses
 *   a proof that covers less, whatever the driver says.
 * - Return evidence, never a verdict. `cleanup` returns a CleanupEvidence
 *   (src/plugins/cleanup-evidence.ts): the action, every namespace the tenant
 *   could address (`targets`, with their nsid), what you wrote, and what you
 *   read back — use `verifyZeroed`, which reads every byte with direct I/O
 *   (or the sample the operator chose with `verify: sample`). The agent
 *   judges it: a namespace of its census without proof, a non-zero byte, or
 *   a sample the policy does not allow fails the cleanup. A vendor tool's
 *   exit code 0 proves nothing.
 * - Report each step with `ctx.progress` (phases preparing → sanitizing /
 *   namespace_reset → zeroing → verifying; percent never decreasing).
 *
 * This example brings every namespace of the subsystem within reach, scrubs
 * with Format NVM, Secure Erase Setting 1 (user data erase), on each, then
 * reads each back. Besides
 * `cleanup` it sets two members: `cleanupActionName`, what discovery reports
 * as the devices' locked-in action, and `satisfiedPolicies`, the device_spec
 * policies that action honours. The policy matrix still binds a vendor
 * driver: a device whose entry asks for anything else (here clear_strategy
 * crypto — SES=1 is not a cryptographic erase —, clear_action sanitize — it is
 * not a sanitize —, or clear_action zero — it writes no zeroes) is excluded at
 * discovery, with the reason in the dry run.
 */

import type { CleanupEvidence } from '../cleanup-evidence.js';
import type { CleanupContext } from '../driver.js';
import { CleanupFailedError, NvmeDriver } from '../nvme/index.js';
import type { DiscoveredDevice } from '../types.js';

/** OACS bit 1: the controller supports Format NVM. */
const OACS_FORMAT = 1 << 1;
/** FNA bit 3: Format does NOT accept NSID FFFFFFFFh — format namespace by namespace. */
const FNA_NO_BROADCAST = 1 << 3;
/** SES=1 on big drives takes long; nvme-cli's default ioctl timeout (600 s) would let the kernel abort it. */
const FORMAT_TIMEOUT_MS = 3_600_000;

export class VendorExampleNvmeDriver extends NvmeDriver {
  protected static override readonly section: string = 'nvme-vendor-example';
  override readonly name: string = 'nvme-vendor-example';
  /** What this driver's cleanup does, reported as the devices' locked-in action. */
  protected override readonly cleanupActionName: string = 'vendor-format-ses1';
  /** A user-data erase of every block: what auto/auto and auto/block ask for, nothing stricter. */
  protected override readonly satisfiedPolicies = [
    ['auto', 'auto'],
    ['auto', 'block'],
  ] as const;

  override async cleanup(device: DiscoveredDevice, ctx: CleanupContext): Promise<CleanupEvidence> {
    return this.withCleanupGuard(device, ctx, async (ctx) => {
      const r = await this.resolveController(device, ctx);
      if (!(r.id.oacs & OACS_FORMAT)) {
        throw new CleanupFailedError(
          `${device.address}: ${r.ctrl.name} does not support Format NVM (OACS bit 1)`,
        );
      }
      // Every namespace of the subsystem, and its unallocated capacity, on this controller's block devices.
      const { namespaces, notes } = await this.reachEveryNamespace(r, ctx);
      const run = this.runner(ctx);
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
      for (const ns of namespaces) readBack.push(await this.verifyZeroed(r, ns, ctx));
      return {
        action: this.cleanupActionName,
        targets: namespaces.map((ns) => ({
          name: ns.name,
          sizeBytes: ns.sizeBytes,
          blockSize: ns.lbaSize,
          nsid: ns.nsid,
        })),
        writes: namespaces.map((ns) => ({
          target: ns.name,
          method: 'format-ses1',
          ranges: [[0, ns.sizeBytes] as const],
          bytes: ns.sizeBytes,
        })),
        readBack,
        notes,
      };
    });
  }
}
