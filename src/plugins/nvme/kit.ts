/**
 * The NVMe kit: the generic NVMe driver's steps, for a driver to compose
 * (driver API 3, decision 82). The generic driver (nvme-driver.ts) is built
 * from it, and so is a vendor driver (src/plugins/nvme-vendor-example/): it
 * takes discovery, the host check and the config keys as they are, and writes
 * only its cleanup, from the same steps —
 *
 * - `guard(device, ctx, fn)`: the per-device lock, a signal that also fires at
 *   cleanup_timeout, and a clear "timed out" / "aborted" error when it fires;
 * - `resolveController(device, ctx)`: the controller fresh from sysfs (a name
 *   from discovery may be stale), checked to be the same device, identified;
 * - `reachEveryNamespace(r, ctx)`: every namespace of the subsystem, and its
 *   unallocated capacity, on this controller's block devices;
 * - `subsystemNamespaces(r, ctx)`: every allocated namespace, as targets;
 * - `runner(ctx)`: nvme-cli with the abort signal, throwing with the NVMe status;
 * - `verifyZeroed(r, ns, ctx)`: the read-back the policy asks for, as evidence.
 */
import { BerthError, failedPrecondition } from '../../errors.js';
import { parsePciAddress } from '../../identifiers.js';
import type { StorageTarget } from '../cleanup-evidence.js';
import type { CleanupContext, HostContext } from '../driver.js';
import { readPciFunction } from '../pci/sysfs-reader.js';
import type { DiscoveredDevice, DiscoveryResult } from '../types.js';
import { takeNvmeCensus } from './census.js';
import type { NvmeConfig } from './config.js';
import type { ResolvedController, RunNvme } from './controller.js';
import { NvmeDiscovery, type Policy } from './discovery.js';
import { CleanupFailedError } from './errors.js';
import { type NvmeNamespaceInfo, readNvmeController } from './sysfs-nvme.js';
import { NvmeTool } from './tool.js';
import { reachEveryNamespace, readNamespaceBack } from './zero-flow.js';

export interface NvmeKitOptions {
  /** The driver's name: its devices' `driver`, its exclusions', its identity cache's. */
  name: string;
  /** The parsed section (`nvmeConfigSchema`). */
  config: NvmeConfig;
  /**
   * A vendor's own cleanup method: its name, reported as the devices'
   * locked-in action (jobs, metrics and operators see what really runs). The
   * generic driver leaves it out: the policy matrix's action is locked in.
   */
  cleanupAction?: string;
  /**
   * With `cleanupAction`: the device_spec policies (`[clear_action,
   * clear_strategy]`) the method satisfies; a device whose entry asks for
   * another is excluded at discovery, with the reason. Default: auto/auto.
   */
  satisfiedPolicies?: readonly Policy[];
}

export interface NvmeKit {
  readonly name: string;
  readonly config: NvmeConfig;
  /** nvme-cli at the section's `nvme_cli`; `version` once `initHost` ran. */
  readonly tool: NvmeTool;
  /** Checks that nvme-cli runs and reports a version. */
  initHost(ctx: HostContext): Promise<void>;
  discover(ctx: HostContext): Promise<DiscoveryResult>;
  discoverAt(ctx: HostContext, addresses: readonly string[]): Promise<DiscoveryResult>;
  guard<T>(
    device: DiscoveredDevice,
    ctx: CleanupContext,
    fn: (ctx: CleanupContext) => Promise<T>,
  ): Promise<T>;
  resolveController(device: DiscoveredDevice, ctx: CleanupContext): Promise<ResolvedController>;
  reachEveryNamespace(
    r: ResolvedController,
    ctx: CleanupContext,
  ): Promise<{ namespaces: NvmeNamespaceInfo[]; notes: string[] }>;
  subsystemNamespaces(r: ResolvedController, ctx: CleanupContext): Promise<StorageTarget[]>;
  runner(ctx: CleanupContext): RunNvme;
  verifyZeroed(
    r: ResolvedController,
    ns: NvmeNamespaceInfo,
    ctx: CleanupContext,
  ): ReturnType<typeof readNamespaceBack>;
}

/** The NVMe steps for one driver; each driver (and each vendor driver) has its own. */
export function nvmeKit(o: NvmeKitOptions): NvmeKit {
  const tool = new NvmeTool(o.config.nvmeCli);
  const discovery = new NvmeDiscovery({
    name: o.name,
    entries: o.config.entries,
    tool,
    cleanupAction: o.cleanupAction ?? null,
    satisfiedPolicies: o.satisfiedPolicies ?? [['auto', 'auto']],
  });
  const guard = new CleanupGuard(o.config.cleanupTimeoutMs);
  return {
    name: o.name,
    config: o.config,
    tool,
    initHost: (ctx) => tool.checkHost(ctx),
    discover: (ctx) => discovery.discover(ctx),
    discoverAt: (ctx, addresses) => discovery.discoverAt(ctx, addresses),
    guard: (device, ctx, fn) => guard.run(device, ctx, fn),
    resolveController: (device, ctx) => resolveController(tool, device, ctx),
    reachEveryNamespace: (r, ctx) => reachEveryNamespace(r, ctx, tool.runner(ctx)),
    subsystemNamespaces: (r, ctx) => subsystemNamespaces(tool, r, ctx),
    runner: (ctx) => tool.runner(ctx),
    verifyZeroed: (r, ns, ctx) => readNamespaceBack(r, ns, ctx),
  };
}

/** The per-device lock and the cleanup_timeout around a cleanup's steps. */
class CleanupGuard {
  /** Addresses being cleaned right now: a second concurrent cleanup of one device is refused. */
  private readonly cleaning = new Set<string>();

  constructor(private readonly timeoutMs: number) {}

  /** Runs `fn` with a context whose `signal` also fires at cleanup_timeout. */
  async run<T>(
    device: DiscoveredDevice,
    ctx: CleanupContext,
    fn: (ctx: CleanupContext) => Promise<T>,
  ): Promise<T> {
    const address = parsePciAddress('address', device.address);
    if (this.cleaning.has(address)) {
      throw failedPrecondition(
        'CLEANUP_IN_PROGRESS',
        `${address}: a cleanup of this device is already running`,
        {
          address,
        },
      );
    }
    this.cleaning.add(address);
    const own = new AbortController();
    const timer = setTimeout(() => own.abort(new Error('cleanup_timeout')), this.timeoutMs);
    const signal = AbortSignal.any([ctx.signal, own.signal]);
    try {
      signal.throwIfAborted();
      return await fn({ ...ctx, signal });
    } catch (e) {
      if (signal.aborted) {
        const timedOut =
          own.signal.aborted || (ctx.signal.reason as { name?: string } | undefined)?.name === 'TimeoutError';
        if (timedOut) {
          throw new BerthError(
            'DEADLINE_EXCEEDED',
            `${address}: NVMe cleanup timed out after ${this.timeoutMs / 1000} s`,
            { reason: 'CLEANUP_TIMED_OUT', cause: e },
          );
        }
        const why = ctx.signal.reason instanceof Error ? `: ${ctx.signal.reason.message}` : '';
        throw new BerthError('CANCELLED', `${address}: NVMe cleanup aborted${why}`, {
          reason: 'CLEANUP_ABORTED',
          cause: e,
        });
      }
      throw e;
    } finally {
      clearTimeout(timer);
      this.cleaning.delete(address);
    }
  }
}

/**
 * Re-resolves the controller from the PCI address through sysfs — a name
 * from discovery may be stale (controllers renumber on rebind) — checks it
 * is the same device, live, that every namespace it reaches has a name, and
 * identifies it again.
 */
async function resolveController(
  tool: NvmeTool,
  device: DiscoveredDevice,
  ctx: CleanupContext,
): Promise<ResolvedController> {
  ctx.progress({
    phase: 'preparing',
    step: 'resolve-controller',
    message: `resolving the controller of ${device.address}`,
  });
  const fn = await readPciFunction(ctx.sysfsRoot, parsePciAddress('address', device.address));
  if (!fn) throw new CleanupFailedError(`${device.address}: the PCI function is gone`);
  if (fn.vendorId !== device.vendorId || fn.productId !== device.productId) {
    throw new CleanupFailedError(
      `${device.address}: now ${fn.vendorId}:${fn.productId}, discovered as ${device.vendorId}:${device.productId}; refusing to erase another device`,
    );
  }
  const name = fn.nvmeControllers[0];
  if (name === undefined) {
    throw new CleanupFailedError(
      `${device.address}: no NVMe controller (bound to ${fn.kernelDriver ?? 'no driver'}, not nvme)`,
    );
  }
  const ctrl = await readNvmeController(ctx.sysfsRoot, name);
  if (!ctrl || (ctrl.address !== '' && ctrl.address !== device.address)) {
    throw new CleanupFailedError(`${device.address}: controller ${name} does not belong to this function`);
  }
  if (ctrl.state !== 'live')
    throw new CleanupFailedError(`${device.address}: controller ${name} is '${ctrl.state}', not live`);
  if (ctrl.unresolvedPaths.length > 0) {
    throw new CleanupFailedError(
      `${device.address}: ${name} reaches namespaces through ${ctrl.unresolvedPaths.join(', ')}, which ${ctrl.subsystem || 'no nvme-subsystem'} does not show; they cannot be scrubbed or proven clean`,
    );
  }
  const ctrlDev = `${ctx.devRoot}/${ctrl.name}`;
  const id = await tool.identify(ctx, ctrlDev, ctx.signal);
  ctx.progress({ phase: 'preparing', step: 'id-ctrl', message: `${ctrl.name}: ${id.mn} ${id.sn}` });
  return { fn, ctrl, ctrlDev, id, devRoot: ctx.devRoot };
}

/**
 * Every allocated namespace of the controller's NVM subsystem, attached to
 * it or not, as targets (nsid, size, block size): the same census the agent
 * takes and judges the evidence against (census.ts). A namespace without a
 * block device on this controller is named `<controller>:nsid<N>`.
 */
async function subsystemNamespaces(
  tool: NvmeTool,
  r: ResolvedController,
  ctx: CleanupContext,
): Promise<StorageTarget[]> {
  const census = await takeNvmeCensus(r.fn.address, {
    sysfsRoot: ctx.sysfsRoot,
    devRoot: ctx.devRoot,
    runner: ctx.runner,
    nvmeCli: tool.file,
    signal: ctx.signal,
  });
  return census.namespaces.map((n) => ({
    name: n.name || `${r.ctrl.name}:nsid${n.nsid}`,
    sizeBytes: n.sizeBytes,
    blockSize: n.blockSize,
    nsid: n.nsid,
  }));
}
