/**
 * The generic NVMe driver (specs/nvme-secure-cleanup.txt; DESIGN.md "NVMe
 * cleanup policy"). Discovery identifies every matched controller with
 * `nvme id-ctrl`, reports its capabilities as traits and locks in a cleanup
 * action from the policy matrix. Cleanup runs exactly that action and returns
 * the evidence (what the sanitize log showed, what was written and read back);
 * the agent judges it, so success is never an exit code, nor the driver's say.
 *
 * Every host effect goes through `ctx` (runner, sysfs root, /dev root) so the
 * same code runs on a real host and on the simulator.
 */
import { BerthError, failedPrecondition } from '../../errors.js';
import { parsePciAddress } from '../../identifiers.js';
import type { CleanupEvidence, StorageTarget } from '../cleanup-evidence.js';
import type { CommandResult, RunOptions } from '../command-runner.js';
import {
  type ClearAction,
  type ClearStrategy,
  compileMatcher,
  type DeviceSpecEntry,
} from '../device-spec/index.js';
import { type CleanupContext, type DriverOptions, GenericDriver, type HostContext } from '../driver.js';
import { readDeviceSerialNumber } from '../pci/device-serial-number.js';
import {
  baseTraits,
  deviceFromFunction,
  exclusionReason,
  type HostFunctions,
  readHostFunctions,
  readHostFunctionsAt,
} from '../pci/pci-driver.js';
import { readPciFunction } from '../pci/sysfs-reader.js';
import type {
  DiscoveredDevice,
  DiscoveryResult,
  ExcludedDevice,
  MediaIdentity,
  PciFunction,
  WriteCounters,
} from '../types.js';
import { takeNvmeCensus } from './census.js';
import { parseNvmeConfig } from './config.js';
import type { ResolvedController, RunNvme } from './controller.js';
import { CleanupFailedError, NvmeCommandError } from './errors.js';
import { IdentityCache } from './identity-cache.js';
import { fallbackNqn, nvmeMediaIdentity, readNamespaceIdentity, readSubsysNqn } from './media-identity.js';
import {
  capabilitiesOf,
  hex,
  type IdCtrl,
  parseIdCtrl,
  parseNvmeVersion,
  toolFailure,
} from './nvme-output.js';
import { type CleanupAction, isCleanupAction, resolveCleanupAction } from './policy.js';
import { runSanitize } from './sanitize-flow.js';
import { type NvmeControllerInfo, type NvmeNamespaceInfo, readNvmeController } from './sysfs-nvme.js';
import { readWriteCounters } from './write-counters.js';
import { reachEveryNamespace, readNamespaceBack, runZeroing } from './zero-flow.js';

export type { ResolvedController } from './controller.js';
export { CleanupFailedError, NvmeCommandError } from './errors.js';

/** Per-command bound for read-only commands (id-ctrl, version) run outside a cleanup. */
const IDENTIFY_TIMEOUT_MS = 30_000;

export class NvmeDriver extends GenericDriver {
  /** Config section name used in messages; a subclass with its own section overrides it. */
  protected static readonly section: string = 'nvme';

  readonly name: string = 'nvme';
  override readonly supportsCleaning: boolean = true;
  /**
   * A vendor driver whose cleanup is its own method, not the policy matrix's,
   * names that method here; discovery then reports it as the devices' locked-in
   * action, so jobs, metrics and operators see what really runs. The policy is
   * still resolved (a device the policy cannot serve stays excluded).
   */
  protected readonly cleanupActionName: string | null = null;
  /**
   * With `cleanupActionName` (a vendor's own cleanup method): the device_spec
   * policies (`[clear_action, clear_strategy]`) that method satisfies. The
   * policy matrix still binds a vendor driver: a device whose entry asks for a
   * policy the method does not satisfy is excluded, with the reason, at
   * discovery and in the dry run. Default: only auto/auto (the operator left
   * the method to the driver).
   */
  protected readonly satisfiedPolicies: ReadonlyArray<readonly [ClearAction, ClearStrategy]> = [
    ['auto', 'auto'],
  ];
  readonly entries: DeviceSpecEntry[];
  /** cleanup_timeout in ms: the agent fires ctx.signal at this timeout; the driver also enforces it. */
  readonly cleanupTimeoutMs: number;
  readonly nvmeCli: string;
  readonly pollIntervalMs: number;
  /** nvme-cli's version as initHost found it. */
  nvmeCliVersion: string | null = null;

  /** Addresses being cleaned right now: a second concurrent cleanup of one device is refused. */
  private readonly cleaning = new Set<string>();
  /** The last identify of each address, kept across agent restarts (identity-cache.ts). */
  private readonly identities = new IdentityCache(() => this.name);

  constructor(options: DriverOptions) {
    super(options);
    const section = (this.constructor as typeof NvmeDriver).section;
    const cfg = parseNvmeConfig(section, options.config);
    this.entries = cfg.entries;
    this.cleanupTimeoutMs = cfg.cleanupTimeoutMs;
    this.nvmeCli = cfg.nvmeCli;
    this.pollIntervalMs = cfg.pollIntervalMs;
  }

  // ---- initHost ------------------------------------------------------------

  /** Checks that nvme-cli runs and reports a version; the agent refuses to start otherwise. */
  override async initHost(ctx: HostContext): Promise<void> {
    let result: CommandResult;
    try {
      result = await ctx.runner.run(this.nvmeCli, ['version'], { timeoutMs: IDENTIFY_TIMEOUT_MS });
    } catch (e) {
      const code = (e as { code?: string }).code ?? (e as Error).message;
      throw new Error(
        `nvme-cli not usable: '${this.nvmeCli}' cannot be run (${code}); install nvme-cli or set nvme.nvme_cli`,
        { cause: e },
      );
    }
    const version = result.code === 0 ? parseNvmeVersion(result.stdout) : null;
    if (version === null) {
      const why = result.timedOut
        ? `'version' did not finish within ${IDENTIFY_TIMEOUT_MS} ms`
        : `'version' exited ${result.code ?? result.signal} and printed ${JSON.stringify((result.stdout + result.stderr).slice(0, 200))}`;
      throw new Error(`nvme-cli not usable: '${this.nvmeCli}' ${why}`);
    }
    this.nvmeCliVersion = version;
    ctx.logger.info({ nvmeCli: this.nvmeCli, version }, 'nvme-cli found');
  }

  // ---- discovery -----------------------------------------------------------

  async discover(ctx: HostContext): Promise<DiscoveryResult> {
    await this.identities.load(ctx);
    const known = this.identities.serialize();
    const host = await readHostFunctions(ctx, this.entries);
    const result = await this.offer(ctx, host);
    // A function gone from the host takes its cached identity with it: what comes
    // back at that address (after a hot-plug or a reboot) is identified afresh.
    if (host.functions.length > 0) {
      for (const address of this.identities.addresses())
        if (!host.byAddress.has(address)) this.identities.delete(address);
    }
    await this.identities.keep(ctx, known);
    return result;
  }

  /**
   * Hotplug: these functions only. A controller that came is identified
   * (`nvme id-ctrl`) and gets its locked-in action like any; one that went
   * takes its cached identity with it.
   */
  override async discoverAt(ctx: HostContext, addresses: readonly string[]): Promise<DiscoveryResult> {
    await this.identities.load(ctx);
    const known = this.identities.serialize();
    const host = await readHostFunctionsAt(ctx, this.entries, addresses);
    const result = await this.offer(ctx, host);
    const present = new Set(host.functions.map((f) => f.address));
    for (const address of addresses) if (!present.has(address)) this.identities.delete(address);
    await this.identities.keep(ctx, known);
    return result;
  }

  /** The devices and exclusions of `host.functions`, identifying each matched controller. */
  private async offer(ctx: HostContext, host: HostFunctions): Promise<DiscoveryResult> {
    const devices: DiscoveredDevice[] = [];
    const excluded: ExcludedDevice[] = [];
    const work: Promise<void>[] = [];
    const match = compileMatcher(this.entries, host.lookup);
    for (const fn of host.functions) {
      const entry = match(fn);
      if (!entry) continue;
      // An NVMe function without a controller is one a guest owns (vfio-pci): still ours.
      if (fn.nvmeControllers.length === 0 && !fn.classCode.startsWith('0108')) continue;
      const reason = exclusionReason(fn, entry);
      if (reason) {
        excluded.push({ address: fn.address, driver: this.name, reason });
        continue;
      }
      work.push(
        this.discoverOne(fn, entry, host, ctx).then((r) => {
          if ('reason' in r) {
            excluded.push(r);
          } else {
            devices.push(r);
          }
        }),
      );
    }
    await Promise.all(work);
    devices.sort((a, b) => a.address.localeCompare(b.address));
    excluded.sort((a, b) => a.address.localeCompare(b.address));
    return { devices, excluded };
  }

  private async discoverOne(
    fn: PciFunction,
    entry: DeviceSpecEntry,
    host: HostFunctions,
    ctx: HostContext,
  ): Promise<DiscoveredDevice | ExcludedDevice> {
    const exclude = (reason: string): ExcludedDevice => ({ address: fn.address, driver: this.name, reason });
    const dsn = readDeviceSerialNumber(ctx.sysfsRoot, fn.address) ?? '';
    const usableCache = this.identities.usableFor(fn, dsn);

    const name = fn.nvmeControllers[0];
    const ctrl = name === undefined ? null : await readNvmeController(ctx.sysfsRoot, name);
    if (ctrl === null) {
      const why = `no NVMe controller: the function is bound to ${fn.kernelDriver ?? 'no driver'}`;
      return this.buildDevice(fn, entry, host, usableCache?.id ?? null, usableCache?.controller ?? null, {
        // A guest's device (vfio-pci) with a known identity is healthy: it is in use.
        unhealthy: usableCache ? null : `${why}, and it was never identified`,
        note: why,
        ctx,
        media: usableCache?.media ?? null,
      });
    }
    if (ctrl.transport !== 'pcie') {
      return exclude(`controller ${ctrl.name} has transport '${ctrl.transport}', not pcie`);
    }
    if (ctrl.state !== 'live') {
      return this.buildDevice(fn, entry, host, usableCache?.id ?? null, ctrl.name, {
        unhealthy: `controller ${ctrl.name} is '${ctrl.state}', not live`,
        ctx,
        media: usableCache?.media ?? null,
      });
    }
    let id: IdCtrl;
    // The write counters are read beside id-ctrl, not after it: a hotplug waits for one process, not two.
    const counters = this.writeCounters(ctx, ctrl);
    try {
      id = await this.identify(ctx, `${ctx.devRoot}/${ctrl.name}`);
    } catch (e) {
      const reason = `nvme id-ctrl failed: ${(e as Error).message}`;
      ctx.logger.error({ address: fn.address, controller: ctrl.name, err: e }, reason);
      return exclude(reason);
    }
    const media = nvmeMediaIdentity({
      subsystemNqn: readSubsysNqn(ctx.sysfsRoot, ctrl.name) || fallbackNqn(id),
      serial: id.sn,
      model: id.mn,
      namespaces: ctrl.namespaces.map((ns) => readNamespaceIdentity(ctx.sysfsRoot, ns.name, ns.nsid)),
      deviceSerialNumber: dsn || null,
    });
    this.identities.set(fn.address, {
      vendorId: fn.vendorId,
      productId: fn.productId,
      controller: ctrl.name,
      id,
      media,
      dsn,
    });
    const policy = resolveCleanupAction(entry.clearAction, entry.clearStrategy, capabilitiesOf(id));
    if ('error' in policy) {
      const reason = `${policy.error} (sanicap ${hex(id.sanicap)}, oncs ${hex(id.oncs)}; ${entry.source})`;
      ctx.logger.error({ address: fn.address, controller: ctrl.name }, `NVMe device excluded: ${reason}`);
      return exclude(reason);
    }
    const device = this.buildDevice(fn, entry, host, id, ctrl.name, { unhealthy: null, ctx, ctrl, media });
    const writeCounters = await counters;
    if (writeCounters && !('reason' in device)) device.writeCounters = writeCounters;
    return device;
  }

  /**
   * The controller's write counters (`nvme smart-log`), or null when they
   * cannot be read: logged, and the agent cannot judge the media by its
   * counters in this pass (its records still stand).
   */
  private async writeCounters(ctx: HostContext, ctrl: NvmeControllerInfo): Promise<WriteCounters | null> {
    try {
      const run = async (args: string[]) =>
        (await this.nvme(ctx, args, { timeoutMs: IDENTIFY_TIMEOUT_MS })).stdout;
      return await readWriteCounters(run, `${ctx.devRoot}/${ctrl.name}`, ctrl);
    } catch (e) {
      ctx.logger.warn(
        { controller: ctrl.name, err: e },
        `nvme smart-log failed: the write counters of ${ctrl.name} are not known in this pass`,
      );
      return null;
    }
  }

  /** Why this vendor driver's own cleanup cannot serve the entry's policy, or null (also null for the generic driver). */
  private vendorPolicyRefusal(entry: DeviceSpecEntry): string | null {
    if (!this.cleanupActionName) return null;
    const ok = this.satisfiedPolicies.some(
      ([a, st]) => a === entry.clearAction && st === entry.clearStrategy,
    );
    if (ok) return null;
    const serves = this.satisfiedPolicies.map(([a, st]) => `${a}/${st}`).join(', ');
    return (
      `clear_action=${entry.clearAction} clear_strategy=${entry.clearStrategy} (${entry.source}) asks for what ` +
      `driver ${this.name}'s cleanup (${this.cleanupActionName}) does not do; it satisfies ${serves}: ` +
      "change the entry's policy, or leave the device to a driver that satisfies it (nvme)"
    );
  }

  private buildDevice(
    fn: PciFunction,
    entry: DeviceSpecEntry,
    host: HostFunctions,
    id: IdCtrl | null,
    controller: string | null,
    opts: {
      unhealthy: string | null;
      note?: string;
      ctx: HostContext;
      ctrl?: NvmeControllerInfo;
      /** The media identity, when the controller was ever identified. */
      media: MediaIdentity | null;
    },
  ): DiscoveredDevice | ExcludedDevice {
    const refusal = this.vendorPolicyRefusal(entry);
    if (refusal) {
      opts.ctx.logger.error({ address: fn.address, controller }, `NVMe device excluded: ${refusal}`);
      return { address: fn.address, driver: this.name, reason: refusal };
    }
    const caps = id ? capabilitiesOf(id) : null;
    let action: CleanupAction | null = null;
    if (id && caps) {
      const policy = resolveCleanupAction(entry.clearAction, entry.clearStrategy, caps);
      if ('error' in policy) return { address: fn.address, driver: this.name, reason: policy.error };
      action = policy.action;
    }
    const capTraits: string[] = [];
    if (caps?.ces) capTraits.push('HW_NVME_CES');
    if (caps?.bes) capTraits.push('HW_NVME_BES');
    if (caps?.wzs) capTraits.push('HW_NVME_WZS');
    const device = deviceFromFunction(fn, entry, host, {
      driver: this.name,
      type: 'NVME',
      resourceClass:
        entry.resourceClass ?? `CUSTOM_NVME_${fn.vendorId.toUpperCase()}_${fn.productId.toUpperCase()}`,
      traits: baseTraits(entry, capTraits),
    });
    device.supportsCleaning = true;
    device.cleanupAction = action && this.cleanupActionName ? this.cleanupActionName : action;
    if (opts.media) device.media = opts.media;
    if (entry.assumeClean) device.assumeClean = true;
    if (opts.unhealthy) {
      device.health = 'unhealthy';
      device.healthReason = opts.unhealthy;
    } else if (device.health === 'unhealthy' && id) {
      // deviceFromFunction calls a driverless function unhealthy; a known NVMe device handed to a guest is not.
      device.health = 'healthy';
      device.healthReason = '';
    }
    const a = device.attributes;
    if (controller) a.nvme_controller = controller;
    if (opts.note) a.nvme_note = opts.note;
    if (id) {
      a.model = id.mn;
      a.serial = id.sn;
      a.firmware = id.fr;
      a.capacity_bytes = id.tnvmcap.toString();
      if (id.tnvmcap === 0n && opts.ctrl) {
        // "0" means unknown (QEMU): the namespaces are what there is to see.
        a.capacity_bytes = opts.ctrl.namespaces.reduce((s, n) => s + n.sizeBytes, 0).toString();
        a.capacity_source = 'namespaces (the controller reports 0)';
      }
      a.oacs = hex(id.oacs);
      a.oncs = hex(id.oncs);
      a.sanicap = hex(id.sanicap);
      a.fna = hex(id.fna);
      a.ns_management = String(caps?.nsManagement ?? false);
    }
    if (opts.ctrl) a.namespaces = opts.ctrl.namespaces.map((n) => n.name).join(',');
    return device;
  }

  /** `nvme id-ctrl <dev> -o json`, parsed and normalised. */
  protected async identify(ctx: HostContext, ctrlDev: string, signal?: AbortSignal): Promise<IdCtrl> {
    const r = await this.nvme(ctx, ['id-ctrl', ctrlDev, '-o', 'json'], {
      timeoutMs: IDENTIFY_TIMEOUT_MS,
      ...(signal ? { signal } : {}),
    });
    return parseIdCtrl(r.stdout);
  }

  // ---- running nvme-cli ----------------------------------------------------

  /**
   * Runs nvme-cli and returns its result when it exited 0. Anything else
   * throws: a program that cannot start, a timeout or abort, and exit 1 with
   * the NVMe status text and hex from stderr (the exit code carries nothing
   * more). Callers that can act on a status catch NvmeCommandError.
   */
  protected async nvme(
    ctx: HostContext,
    args: readonly string[],
    options: Pick<RunOptions, 'signal' | 'timeoutMs' | 'onStderr' | 'onStdout'> = {},
  ): Promise<CommandResult> {
    return this.runTool(ctx, this.nvmeCli, args, options, 'nvme');
  }

  protected async runTool(
    ctx: HostContext,
    file: string,
    args: readonly string[],
    options: Pick<RunOptions, 'signal' | 'timeoutMs' | 'onStderr' | 'onStdout'>,
    label: string,
  ): Promise<CommandResult> {
    const what = `${label} ${args.slice(0, 2).join(' ')}`;
    let r: CommandResult;
    try {
      r = await ctx.runner.run(file, args, options);
    } catch (e) {
      const code = (e as { code?: string }).code ?? (e as Error).message;
      throw new NvmeCommandError(`${what}: '${file}' cannot be run (${code})`, null);
    }
    if (r.aborted) options.signal?.throwIfAborted();
    if (r.aborted || r.timedOut) {
      throw new NvmeCommandError(
        `${what}: did not finish within ${options.timeoutMs} ms and was killed`,
        null,
      );
    }
    if (r.code !== 0) {
      const { status, detail } = toolFailure(r);
      throw new NvmeCommandError(`${what} failed: ${detail}`, status);
    }
    return r;
  }

  // ---- cleanup -------------------------------------------------------------

  /**
   * Scrubs the device with its locked-in action and returns the evidence:
   * what the sanitize log showed before and after, or what was written and
   * read back. The agent judges it; this driver never declares success.
   */
  override async cleanup(device: DiscoveredDevice, ctx: CleanupContext): Promise<CleanupEvidence> {
    return this.withCleanupGuard(device, ctx, async (cctx) => {
      const action = device.cleanupAction;
      if (!isCleanupAction(action)) {
        throw new CleanupFailedError(
          `${device.address}: no locked-in NVMe cleanup action (${JSON.stringify(action)}); rediscover the device`,
        );
      }
      const r = await this.resolveController(device, cctx);
      const run = this.runner(cctx);
      switch (action) {
        case 'sanitize-crypto':
        case 'sanitize-block': {
          const { evidence, notes } = await runSanitize(r, action, cctx, {
            run,
            pollIntervalMs: this.pollIntervalMs,
          });
          return {
            action,
            targets: await this.sanitizeTargets(r, cctx),
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
  private async sanitizeTargets(r: ResolvedController, ctx: CleanupContext): Promise<StorageTarget[]> {
    const all = await this.subsystemNamespaces(r, ctx);
    if (all.length > 0) return all;
    if (r.id.tnvmcap > 0n) return [{ name: r.ctrl.name, sizeBytes: Number(r.id.tnvmcap), blockSize: 512 }];
    throw new CleanupFailedError(
      `${r.fn.address}: ${r.ctrl.name} has no namespace and reports no capacity: nothing to name as sanitized`,
    );
  }

  /**
   * Every allocated namespace of the controller's NVM subsystem, attached to
   * it or not, as targets (nsid, size, block size): the same census the agent
   * takes and judges the evidence against (census.ts). A namespace without a
   * block device on this controller is named `<controller>:nsid<N>`.
   */
  protected async subsystemNamespaces(r: ResolvedController, ctx: CleanupContext): Promise<StorageTarget[]> {
    const census = await takeNvmeCensus(r.fn.address, {
      sysfsRoot: ctx.sysfsRoot,
      devRoot: ctx.devRoot,
      runner: ctx.runner,
      nvmeCli: this.nvmeCli,
      signal: ctx.signal,
    });
    return census.namespaces.map((n) => ({
      name: n.name || `${r.ctrl.name}:nsid${n.nsid}`,
      sizeBytes: n.sizeBytes,
      blockSize: n.blockSize,
      nsid: n.nsid,
    }));
  }

  /**
   * Makes every namespace of the subsystem, and its unallocated capacity,
   * reachable through this controller's block devices before an erase that
   * works on block devices (zeroing, Format NVM): consolidates into one
   * namespace covering the capacity where namespace management works, else
   * attaches those this controller does not have. Returns the namespaces to
   * erase and read back, and notes for the evidence (zero-flow.ts).
   */
  protected reachEveryNamespace(
    r: ResolvedController,
    ctx: CleanupContext,
  ): Promise<{ namespaces: NvmeNamespaceInfo[]; notes: string[] }> {
    return reachEveryNamespace(r, ctx, this.runner(ctx));
  }

  /** nvme-cli bound to a cleanup's abort signal, for the cleanup steps. */
  protected runner(ctx: CleanupContext): RunNvme {
    return (args, timeoutMs = IDENTIFY_TIMEOUT_MS) => this.nvme(ctx, args, { signal: ctx.signal, timeoutMs });
  }

  /**
   * What every cleanup (this driver's and a vendor driver's) needs around its
   * steps: the per-device lock, a signal that also fires at cleanup_timeout,
   * and a clear "timed out" / "aborted" error when it fires. `fn` receives a
   * context whose `signal` is that combined signal.
   */
  protected async withCleanupGuard<T>(
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
    const timer = setTimeout(() => own.abort(new Error('cleanup_timeout')), this.cleanupTimeoutMs);
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
            `${address}: NVMe cleanup timed out after ${this.cleanupTimeoutMs / 1000} s`,
            {
              reason: 'CLEANUP_TIMED_OUT',
              cause: e,
            },
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

  /**
   * Re-resolves the controller from the PCI address through sysfs — a name
   * from discovery may be stale (controllers renumber on rebind) — checks it
   * is the same device, live, that every namespace it reaches has a name, and
   * identifies it again.
   */
  protected async resolveController(
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
    const id = await this.identify(ctx, ctrlDev, ctx.signal);
    ctx.progress({ phase: 'preparing', step: 'id-ctrl', message: `${ctrl.name}: ${id.mn} ${id.sn}` });
    return { fn, ctrl, ctrlDev, id, devRoot: ctx.devRoot };
  }

  /**
   * Reads a namespace back — every byte under the default `verify: full`, the
   * documented sample under `verify: sample` — with large direct reads, and
   * returns what it found. The agent's judge rejects any non-zero byte and any
   * read-back that covers less than the policy asks.
   */
  protected verifyZeroed(
    r: ResolvedController,
    ns: NvmeNamespaceInfo,
    ctx: CleanupContext,
  ): ReturnType<typeof readNamespaceBack> {
    return readNamespaceBack(r, ns, ctx);
  }
}
