/**
 * The generic NVMe driver (specs/nvme-secure-cleanup.txt; DESIGN.md "NVMe
 * cleanup policy"). Discovery identifies every matched controller with
 * `nvme id-ctrl`, reports its capabilities as traits and locks in a cleanup
 * action from the policy matrix. Cleanup runs exactly that action and fails
 * closed: success is what the sanitize log or a read-back of the namespace
 * says, never an exit code.
 *
 * Every host effect goes through `ctx` (runner, sysfs root, /dev root) so the
 * same code runs on a real host and on the simulator.
 */
import { open, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { BerthError, failedPrecondition } from '../../errors.js';
import type { CommandResult, RunOptions } from '../command-runner.js';
import { type DeviceSpecEntry, isValidPciAddress, matchDevice } from '../device-spec/index.js';
import { type CleanupContext, type DriverOptions, GenericDriver, type HostContext } from '../driver.js';
import {
  baseTraits,
  deviceFromFunction,
  exclusionReason,
  type HostFunctions,
  readHostFunctions,
} from '../pci/pci-driver.js';
import {
  assertPciAddress,
  type NvmeControllerInfo,
  type NvmeNamespaceInfo,
  readNvmeController,
  readPciFunction,
} from '../pci/sysfs-reader.js';
import type {
  CleanupProgress,
  DiscoveredDevice,
  DiscoveryResult,
  ExcludedDevice,
  PciFunction,
} from '../types.js';
import { parseNvmeConfig } from './config.js';
import {
  capabilitiesOf,
  hex,
  type IdCtrl,
  isSanitizeInProgress,
  type NvmeStatus,
  parseCreatedNsid,
  parseIdCtrl,
  parseNvmeStatus,
  parseNvmeVersion,
  parseSanitizeLog,
  SANITIZE_COMPLETED,
  SANITIZE_COMPLETED_DEALLOC,
  SANITIZE_FAILED,
  SANITIZE_IN_PROGRESS,
  SANITIZE_NEVER,
  type SanitizeLog,
} from './nvme-output.js';
import { type CleanupAction, isCleanupAction, resolveCleanupAction } from './policy.js';
import { readBackZeroes } from './read-back.js';
import { ShredProgressParser } from './shred-progress.js';

/** Per-command bound for read-only commands (id-ctrl, version) run outside a cleanup. */
const IDENTIFY_TIMEOUT_MS = 30_000;
/** `nvme write-zeroes -c` is a 0-based u16: at most 65536 blocks per command. */
const WRITE_ZEROES_MAX_BLOCKS = 65536;
/** How long the kernel may take to show a rescanned namespace in sysfs. */
const RESCAN_WAIT_MS = 10_000;
/** Minimum interval between progress events of one tight loop (chunks, read-back). */
const PROGRESS_EVERY_MS = 250;

/** An nvme-cli (or shred) command that failed; carries the NVMe status when there is one. */
export class NvmeCommandError extends BerthError {
  readonly status: NvmeStatus | null;
  constructor(message: string, status: NvmeStatus | null) {
    super('INTERNAL', message, {
      reason: 'CLEANUP_FAILED',
      metadata: status ? { nvme_status: hex(status.value) } : {},
    });
    this.name = 'NvmeCommandError';
    this.status = status;
  }
}

/** A cleanup that ran but could not prove the device clean. */
export class CleanupFailedError extends BerthError {
  constructor(message: string, metadata: Record<string, string> = {}) {
    super('INTERNAL', message, { reason: 'CLEANUP_FAILED', metadata });
    this.name = 'CleanupFailedError';
  }
}

/** The controller a cleanup works on, resolved fresh from sysfs at the start of the cleanup. */
export interface ResolvedController {
  fn: PciFunction;
  ctrl: NvmeControllerInfo;
  /** `<devRoot>/nvmeX`: the controller character device. */
  ctrlDev: string;
  id: IdCtrl;
}

interface CachedIdentity {
  vendorId: string;
  productId: string;
  controller: string;
  id: IdCtrl;
}

/** The last line of a tool's stderr that says something, for messages. */
function lastLine(text: string): string {
  const lines = text
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean);
  return lines.at(-1) ?? '';
}

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
  readonly entries: DeviceSpecEntry[];
  /** cleanup_timeout in ms: the agent fires ctx.signal at this timeout; the driver also enforces it. */
  readonly cleanupTimeoutMs: number;
  readonly nvmeCli: string;
  readonly pollIntervalMs: number;
  readonly shred: string;
  /** nvme-cli's version as initHost found it. */
  nvmeCliVersion: string | null = null;

  /** Addresses being cleaned right now: a second concurrent cleanup of one device is refused. */
  private readonly cleaning = new Set<string>();
  /**
   * The last identify of each address. While a guest owns a device it is bound
   * to vfio-pci and has no controller to ask, yet it must stay in the inventory
   * with its locked-in action, so discovery reports it from here.
   */
  private readonly identities = new Map<string, CachedIdentity>();
  /** Whether the identities kept in the state dir were read (once, at the first discovery). */
  private identitiesLoaded = false;

  /** Where identities survive an agent restart: a guest may hold the device across it. */
  private identitiesFile(ctx: HostContext): string {
    return join(ctx.stateDir, `${this.name}-identities.json`);
  }

  private async loadIdentities(ctx: HostContext): Promise<void> {
    if (this.identitiesLoaded) return;
    this.identitiesLoaded = true;
    try {
      const raw = JSON.parse(await readFile(this.identitiesFile(ctx), 'utf8')) as Record<
        string,
        Omit<CachedIdentity, 'id'> & { id: Omit<IdCtrl, 'tnvmcap'> & { tnvmcap: string } }
      >;
      for (const [address, c] of Object.entries(raw)) {
        if (!isValidPciAddress(address) || this.identities.has(address)) continue;
        this.identities.set(address, { ...c, id: { ...c.id, tnvmcap: BigInt(c.id.tnvmcap) } });
      }
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
        ctx.logger.warn(
          { err },
          'cannot read the NVMe identities kept in the state dir; starting without them',
        );
      }
    }
  }

  private serializeIdentities(): string {
    const out: Record<string, unknown> = {};
    for (const [address, c] of [...this.identities].sort(([a], [b]) => a.localeCompare(b))) {
      out[address] = { ...c, id: { ...c.id, tnvmcap: c.id.tnvmcap.toString() } };
    }
    return JSON.stringify(out);
  }

  private async saveIdentities(ctx: HostContext, text: string): Promise<void> {
    const path = this.identitiesFile(ctx);
    try {
      await writeFile(`${path}.tmp`, text);
      await rename(`${path}.tmp`, path);
    } catch (err) {
      ctx.logger.warn({ err }, 'cannot keep the NVMe identities in the state dir');
    }
  }

  constructor(options: DriverOptions) {
    super(options);
    const section = (this.constructor as typeof NvmeDriver).section;
    const cfg = parseNvmeConfig(section, options.config);
    this.entries = cfg.entries;
    this.cleanupTimeoutMs = cfg.cleanupTimeoutMs;
    this.nvmeCli = cfg.nvmeCli;
    this.pollIntervalMs = cfg.pollIntervalMs;
    this.shred = cfg.shred;
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
    await this.loadIdentities(ctx);
    const known = this.serializeIdentities();
    const host = await readHostFunctions(ctx, this.entries);
    const devices: DiscoveredDevice[] = [];
    const excluded: ExcludedDevice[] = [];
    const work: Promise<void>[] = [];
    for (const fn of host.functions) {
      const entry = matchDevice(this.entries, fn, host.lookup);
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
    const now = this.serializeIdentities();
    if (now !== known) await this.saveIdentities(ctx, now);
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
    const cached = this.identities.get(fn.address);
    const usableCache =
      cached && cached.vendorId === fn.vendorId && cached.productId === fn.productId ? cached : null;

    const name = fn.nvmeControllers[0];
    const ctrl = name === undefined ? null : await readNvmeController(ctx.sysfsRoot, name);
    if (ctrl === null) {
      const why = `no NVMe controller: the function is bound to ${fn.kernelDriver ?? 'no driver'}`;
      return this.buildDevice(fn, entry, host, usableCache?.id ?? null, usableCache?.controller ?? null, {
        // A guest's device (vfio-pci) with a known identity is healthy: it is in use.
        unhealthy: usableCache ? null : `${why}, and it was never identified`,
        note: why,
        ctx,
      });
    }
    if (ctrl.transport !== 'pcie') {
      return exclude(`controller ${ctrl.name} has transport '${ctrl.transport}', not pcie`);
    }
    if (ctrl.state !== 'live') {
      return this.buildDevice(fn, entry, host, usableCache?.id ?? null, ctrl.name, {
        unhealthy: `controller ${ctrl.name} is '${ctrl.state}', not live`,
        ctx,
      });
    }
    let id: IdCtrl;
    try {
      id = await this.identify(ctx, `${ctx.devRoot}/${ctrl.name}`);
    } catch (e) {
      const reason = `nvme id-ctrl failed: ${(e as Error).message}`;
      ctx.logger.error({ address: fn.address, controller: ctrl.name, err: e }, reason);
      return exclude(reason);
    }
    this.identities.set(fn.address, {
      vendorId: fn.vendorId,
      productId: fn.productId,
      controller: ctrl.name,
      id,
    });
    const policy = resolveCleanupAction(entry.clearAction, entry.clearStrategy, capabilitiesOf(id));
    if ('error' in policy) {
      const reason = `${policy.error} (sanicap ${hex(id.sanicap)}, oncs ${hex(id.oncs)}; ${entry.source})`;
      ctx.logger.error({ address: fn.address, controller: ctrl.name }, `NVMe device excluded: ${reason}`);
      return exclude(reason);
    }
    return this.buildDevice(fn, entry, host, id, ctrl.name, { unhealthy: null, ctx, ctrl });
  }

  private buildDevice(
    fn: PciFunction,
    entry: DeviceSpecEntry,
    host: HostFunctions,
    id: IdCtrl | null,
    controller: string | null,
    opts: { unhealthy: string | null; note?: string; ctx: HostContext; ctrl?: NvmeControllerInfo },
  ): DiscoveredDevice | ExcludedDevice {
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
      type: 'NVME',
      resourceClass:
        entry.resourceClass ?? `CUSTOM_NVME_${fn.vendorId.toUpperCase()}_${fn.productId.toUpperCase()}`,
      traits: baseTraits(entry, capTraits),
    });
    device.driver = this.name;
    device.supportsCleaning = true;
    device.cleanupAction = action && this.cleanupActionName ? this.cleanupActionName : action;
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
      const status = parseNvmeStatus(r.stderr);
      const detail = status
        ? `NVMe status ${status.text} (${hex(status.value)})`
        : lastLine(r.stderr) || `exit ${r.code ?? r.signal}`;
      throw new NvmeCommandError(`${what} failed: ${detail}`, status);
    }
    return r;
  }

  // ---- cleanup -------------------------------------------------------------

  /**
   * Scrubs the device with its locked-in action. Resolves only when the scrub
   * is proven; throws otherwise (the agent then moves the device to error).
   */
  override async cleanup(device: DiscoveredDevice, ctx: CleanupContext): Promise<void> {
    await this.withCleanupGuard(device, ctx, async (cctx) => {
      const action = device.cleanupAction;
      if (!isCleanupAction(action)) {
        throw new CleanupFailedError(
          `${device.address}: no locked-in NVMe cleanup action (${JSON.stringify(action)}); rediscover the device`,
        );
      }
      const resolved = await this.resolveController(device, cctx);
      switch (action) {
        case 'sanitize-crypto':
        case 'sanitize-block':
          await this.sanitize(resolved, action, cctx);
          return;
        case 'write-zeroes':
        case 'shred':
          await this.zero(resolved, action, cctx);
          return;
      }
    });
  }

  /**
   * What every cleanup (this driver's and a vendor driver's) needs around its
   * steps: the per-device lock, a signal that also fires at cleanup_timeout,
   * and a clear "timed out" / "aborted" error when it fires. `fn` receives a
   * context whose `signal` is that combined signal.
   */
  protected async withCleanupGuard(
    device: DiscoveredDevice,
    ctx: CleanupContext,
    fn: (ctx: CleanupContext) => Promise<void>,
  ): Promise<void> {
    const address = assertPciAddress(device.address);
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
      await fn({ ...ctx, signal });
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
   * is the same device, live, and identifies it again.
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
    const fn = await readPciFunction(ctx.sysfsRoot, device.address);
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
    const ctrlDev = `${ctx.devRoot}/${ctrl.name}`;
    const id = await this.identify(ctx, ctrlDev, ctx.signal);
    ctx.progress({ phase: 'preparing', step: 'id-ctrl', message: `${ctrl.name}: ${id.mn} ${id.sn}` });
    return { fn, ctrl, ctrlDev, id };
  }

  protected nsDev(ctx: HostContext, ns: NvmeNamespaceInfo): string {
    return `${ctx.devRoot}/${ns.name}`;
  }

  // ---- sanitize ------------------------------------------------------------

  protected async sanitizeLog(ctx: CleanupContext, ctrlDev: string): Promise<SanitizeLog> {
    const r = await this.nvme(ctx, ['sanitize-log', ctrlDev, '-o', 'json'], {
      signal: ctx.signal,
      timeoutMs: IDENTIFY_TIMEOUT_MS,
    });
    return parseSanitizeLog(r.stdout);
  }

  private async sanitize(
    r: ResolvedController,
    action: 'sanitize-crypto' | 'sanitize-block',
    ctx: CleanupContext,
  ): Promise<void> {
    const before = await this.sanitizeLog(ctx, r.ctrlDev);
    ctx.progress({
      phase: 'sanitizing',
      step: 'sanitize-log',
      message: `before: (${before.status}) ${before.statusText}`,
    });
    let fingerprint: Fingerprint | null = null;
    if (before.status === SANITIZE_IN_PROGRESS) {
      // Starting another would fail with Sanitize In Progress (0x1d); the running one erases everything anyway.
      ctx.progress({
        phase: 'sanitizing',
        step: 'sanitize-log',
        message: 'a sanitize is already running: following it',
      });
    } else {
      fingerprint = await takeFingerprint(r.ctrl.namespaces.map((ns) => ({ ns, dev: this.nsDev(ctx, ns) })));
      const sanact = action === 'sanitize-crypto' ? '4' : '2';
      ctx.progress({
        phase: 'sanitizing',
        step: 'sanitize',
        percent: 0,
        message: `nvme sanitize -a ${sanact}`,
      });
      try {
        // Never -d (no-deallocate): with NDI set the controller would reject it, and we want deallocation anyway.
        await this.nvme(ctx, ['sanitize', r.ctrlDev, '-a', sanact], {
          signal: ctx.signal,
          timeoutMs: IDENTIFY_TIMEOUT_MS,
        });
      } catch (e) {
        if (!(e instanceof NvmeCommandError && e.status && isSanitizeInProgress(e.status))) throw e;
        // Someone started one between our log read and our command: follow it.
        fingerprint = null;
      }
    }
    const final = await this.pollSanitize(r, ctx);
    if (fingerprint) await checkFingerprintChanged(fingerprint, `sanitize (${action})`);
    ctx.progress({
      phase: 'sanitizing',
      step: 'sanitize-log',
      percent: 100,
      message: `(${final.status}) ${final.statusText}${final.globalErased ? ' [global data erased]' : ''}`,
    });
  }

  /** Polls the sanitize log until the operation completes (1 or 4) or fails (3). */
  private async pollSanitize(r: ResolvedController, ctx: CleanupContext): Promise<SanitizeLog> {
    let best = 0;
    for (;;) {
      const log = await this.sanitizeLog(ctx, r.ctrlDev);
      switch (log.status) {
        case SANITIZE_COMPLETED:
        case SANITIZE_COMPLETED_DEALLOC:
          return log;
        case SANITIZE_FAILED:
          throw new CleanupFailedError(
            `${r.fn.address}: sanitize failed on ${r.ctrl.name}: (3) ${log.statusText}`,
            {
              sstat: String(log.status),
            },
          );
        case SANITIZE_NEVER:
          throw new CleanupFailedError(
            `${r.fn.address}: the sanitize log of ${r.ctrl.name} says it was never sanitized after the sanitize command: nothing was erased`,
          );
        case SANITIZE_IN_PROGRESS: {
          const percent = Math.min(99.99, (log.sprog / 65536) * 100);
          best = Math.max(best, percent);
          ctx.progress({ phase: 'sanitizing', step: 'sanitize-log', percent: Math.round(best * 100) / 100 });
          break;
        }
        default:
          throw new CleanupFailedError(
            `${r.fn.address}: unknown sanitize status (${log.status}) ${log.statusText}`,
          );
      }
      await sleep(this.pollIntervalMs, undefined, { signal: ctx.signal });
    }
  }

  // ---- zero (write-zeroes / shred) ------------------------------------------

  private async zero(
    r: ResolvedController,
    action: 'write-zeroes' | 'shred',
    ctx: CleanupContext,
  ): Promise<void> {
    let namespaces = r.ctrl.namespaces;
    if (namespaces.length > 1 && capabilitiesOf(r.id).nsManagement) {
      namespaces = [await this.consolidateNamespaces(r, ctx)];
    }
    if (namespaces.length === 0) {
      throw new CleanupFailedError(`${r.fn.address}: controller ${r.ctrl.name} has no namespace to zero`);
    }
    const total = namespaces.reduce((s, ns) => s + ns.sizeBytes, 0);
    let base = 0;
    for (const ns of namespaces) {
      if (action === 'write-zeroes') await this.writeZeroes(ns, ctx, base, total);
      else await this.shredNamespace(ns, ctx, base, total);
      base += ns.sizeBytes;
    }
    for (const ns of namespaces) await this.verifyZeroed(ns, ctx, action);
  }

  /**
   * Deletes every namespace and creates one covering the whole capacity, so
   * no LBA escapes the zeroing (spec: zero path step 2). Needs OACS bit 3.
   */
  protected async consolidateNamespaces(
    r: ResolvedController,
    ctx: CleanupContext,
  ): Promise<NvmeNamespaceInfo> {
    const step = (s: string, message: string) => ctx.progress({ phase: 'namespace_reset', step: s, message });
    const lbaSize = await this.lbaFormat0Size(r, ctx);
    const sum = r.ctrl.namespaces.reduce((s, ns) => s + BigInt(ns.sizeBytes), 0n);
    const capacity = r.id.tnvmcap > 0n ? r.id.tnvmcap : sum;
    const blocks = capacity / BigInt(lbaSize);
    step('delete-ns', `deleting ${r.ctrl.namespaces.length} namespaces`);
    await this.nvme(ctx, ['delete-ns', r.ctrlDev, '-n', '0xFFFFFFFF'], {
      signal: ctx.signal,
      timeoutMs: 120_000,
    });
    step('create-ns', `creating one namespace of ${blocks} blocks of ${lbaSize} bytes`);
    const created = await this.nvme(
      ctx,
      ['create-ns', r.ctrlDev, '--nsze', blocks.toString(), '--ncap', blocks.toString(), '--flbas', '0'],
      { signal: ctx.signal, timeoutMs: 120_000 },
    );
    const nsid = parseCreatedNsid(created.stdout);
    if (nsid === null) {
      throw new CleanupFailedError(
        `${r.fn.address}: create-ns printed no nsid: ${JSON.stringify(created.stdout)}`,
      );
    }
    const cntlid = r.id.cntlid || r.ctrl.cntlid;
    step('attach-ns', `attaching nsid ${nsid} to controller ${cntlid}`);
    // Without -c, 2.3's attach-ns changes nothing (notes/nvme-cli.md gotcha 9).
    await this.nvme(ctx, ['attach-ns', r.ctrlDev, '-n', String(nsid), '-c', String(cntlid)], {
      signal: ctx.signal,
      timeoutMs: 120_000,
    });
    step('ns-rescan', 'rescanning namespaces');
    await this.nvme(ctx, ['ns-rescan', r.ctrlDev], { signal: ctx.signal, timeoutMs: IDENTIFY_TIMEOUT_MS });
    // The kernel adds the block device asynchronously; sysfs is the authority on its name.
    const deadline = Date.now() + RESCAN_WAIT_MS;
    for (;;) {
      const ctrl = await readNvmeController(ctx.sysfsRoot, r.ctrl.name);
      const ns = ctrl?.namespaces ?? [];
      if (ns.length === 1 && ns[0]!.nsid === nsid) {
        const only = ns[0]!;
        if (BigInt(only.sizeBytes) < sum) {
          throw new CleanupFailedError(
            `${r.fn.address}: the new namespace ${only.name} has ${only.sizeBytes} bytes, less than the ${sum} bytes of the namespaces it replaced`,
          );
        }
        step('ns-rescan', `one namespace: ${only.name} (${only.sizeBytes} bytes)`);
        return only;
      }
      if (Date.now() > deadline) {
        throw new CleanupFailedError(
          `${r.fn.address}: after ns-rescan sysfs shows [${ns.map((n) => n.name).join(', ')}], not the single namespace ${nsid}`,
        );
      }
      await sleep(100, undefined, { signal: ctx.signal });
    }
  }

  /** The data size of LBA format 0 (what `--flbas 0` creates), from id-ns; 512 when the controller will not say. */
  private async lbaFormat0Size(r: ResolvedController, ctx: CleanupContext): Promise<number> {
    const first = r.ctrl.namespaces[0];
    if (!first) return 512;
    try {
      const out = await this.nvme(ctx, ['id-ns', r.ctrlDev, '-n', String(first.nsid), '-o', 'json'], {
        signal: ctx.signal,
        timeoutMs: IDENTIFY_TIMEOUT_MS,
      });
      const json = JSON.parse(out.stdout) as { lbafs?: { ds?: number }[] };
      const ds = json.lbafs?.[0]?.ds;
      if (typeof ds === 'number' && ds >= 9 && ds <= 16) return 2 ** ds;
    } catch (e) {
      ctx.signal.throwIfAborted();
      ctx.logger.warn({ err: e }, 'id-ns failed; assuming LBA format 0 is 512 bytes');
    }
    return 512;
  }

  private progressThrottle(ctx: CleanupContext): (p: CleanupProgress, force?: boolean) => void {
    let last = 0;
    let lastPercent = -1;
    return (p, force = false) => {
      const now = Date.now();
      if (!force && now - last < PROGRESS_EVERY_MS) return;
      if (p.percent !== undefined) {
        if (p.percent < lastPercent) return;
        lastPercent = p.percent;
      }
      last = now;
      ctx.progress(p);
    };
  }

  /** `nvme write-zeroes` over the whole namespace in chunks of at most 65536 blocks. */
  private async writeZeroes(
    ns: NvmeNamespaceInfo,
    ctx: CleanupContext,
    base: number,
    total: number,
  ): Promise<void> {
    const dev = this.nsDev(ctx, ns);
    const blocks = Math.floor(ns.sizeBytes / ns.lbaSize);
    const report = this.progressThrottle(ctx);
    report(
      {
        phase: 'zeroing',
        step: 'write-zeroes',
        bytesDone: base,
        bytesTotal: total,
        percent: pct(base, total),
        message: dev,
      },
      true,
    );
    for (let slba = 0; slba < blocks; slba += WRITE_ZEROES_MAX_BLOCKS) {
      const count = Math.min(WRITE_ZEROES_MAX_BLOCKS, blocks - slba);
      await this.nvme(
        ctx,
        ['write-zeroes', dev, '-n', String(ns.nsid), '-s', String(slba), '-c', String(count - 1)],
        { signal: ctx.signal, timeoutMs: IDENTIFY_TIMEOUT_MS },
      );
      const done = base + (slba + count) * ns.lbaSize;
      report(
        {
          phase: 'zeroing',
          step: 'write-zeroes',
          bytesDone: done,
          bytesTotal: total,
          percent: pct(done, total),
        },
        slba + count >= blocks,
      );
    }
  }

  /** `shred -n 0 -z --verbose` on the namespace's block device (host-side zeroing, no WZS needed). */
  private async shredNamespace(
    ns: NvmeNamespaceInfo,
    ctx: CleanupContext,
    base: number,
    total: number,
  ): Promise<void> {
    const dev = this.nsDev(ctx, ns);
    const report = this.progressThrottle(ctx);
    report(
      {
        phase: 'zeroing',
        step: 'shred',
        bytesDone: base,
        bytesTotal: total,
        percent: pct(base, total),
        message: dev,
      },
      true,
    );
    const parser = new ShredProgressParser((p) => {
      if (p.percent === null) return;
      const done = base + Math.round((ns.sizeBytes * p.percent) / 100);
      report({
        phase: 'zeroing',
        step: 'shred',
        bytesDone: done,
        bytesTotal: total,
        percent: pct(done, total),
      });
    });
    await this.runTool(
      ctx,
      this.shred,
      ['-n', '0', '-z', '--verbose', dev],
      {
        signal: ctx.signal,
        timeoutMs: this.cleanupTimeoutMs,
        onStderr: (c) => parser.push(c),
      },
      'shred',
    );
    parser.end();
    const done = base + ns.sizeBytes;
    report(
      { phase: 'zeroing', step: 'shred', bytesDone: done, bytesTotal: total, percent: pct(done, total) },
      true,
    );
  }

  /**
   * Reads the namespace back (whole when small, sampled when big) and throws
   * at the first non-zero byte: the proof the zeroing took.
   */
  protected async verifyZeroed(ns: NvmeNamespaceInfo, ctx: CleanupContext, what: string): Promise<void> {
    const dev = this.nsDev(ctx, ns);
    const report = this.progressThrottle(ctx);
    report({ phase: 'verifying', step: 'read-back', percent: 0, message: dev }, true);
    const result = await readBackZeroes(dev, ns.sizeBytes, ns.lbaSize, {
      signal: ctx.signal,
      onProgress: (done, total) =>
        report({
          phase: 'verifying',
          step: 'read-back',
          bytesDone: done,
          bytesTotal: total,
          percent: pct(done, total),
        }),
    });
    if (result.firstNonZero !== null) {
      throw new CleanupFailedError(
        `${what} left data on ${ns.name}: read-back found a non-zero byte at offset ${result.firstNonZero}`,
        { namespace: ns.name, offset: String(result.firstNonZero) },
      );
    }
    report(
      {
        phase: 'verifying',
        step: 'read-back',
        percent: 100,
        message: `${ns.name}: ${result.full ? 'every byte' : `${result.bytesRead} sampled bytes`} read back as zero`,
      },
      true,
    );
  }
}

function pct(done: number, total: number): number {
  return total <= 0 ? 100 : Math.min(100, Math.round((done / total) * 10000) / 100);
}

// ---- sanitize fingerprint -----------------------------------------------------

/** Sampled blocks of each namespace before a sanitize, to prove afterwards that something changed. */
interface Fingerprint {
  samples: { dev: string; name: string; offset: number; data: Buffer }[];
}

const FINGERPRINT_BLOCKS = 16;

async function readAt(dev: string, offset: number, length: number): Promise<Buffer | null> {
  try {
    const fh = await open(dev, 'r');
    try {
      const buf = Buffer.alloc(length);
      const { bytesRead } = await fh.read(buf, 0, length, offset);
      return bytesRead === length ? buf : null;
    } finally {
      await fh.close();
    }
  } catch {
    return null;
  }
}

/**
 * Reads a few blocks (first, last, evenly spread) of every namespace. Blocks
 * that hold only zeros are dropped: after a block erase they may legitimately
 * read the same. A namespace that cannot be read is skipped — the sanitize log
 * remains the proof there.
 */
async function takeFingerprint(namespaces: { ns: NvmeNamespaceInfo; dev: string }[]): Promise<Fingerprint> {
  const samples: Fingerprint['samples'] = [];
  for (const { ns, dev } of namespaces) {
    const blocks = Math.floor(ns.sizeBytes / ns.lbaSize);
    const picks = new Set<number>();
    for (let i = 0; i < FINGERPRINT_BLOCKS; i++)
      picks.add(Math.floor((i * (blocks - 1)) / (FINGERPRINT_BLOCKS - 1)));
    for (const b of picks) {
      const data = await readAt(dev, b * ns.lbaSize, ns.lbaSize);
      if (data?.some((x) => x !== 0)) samples.push({ dev, name: ns.name, offset: b * ns.lbaSize, data });
    }
  }
  return { samples };
}

/**
 * After a sanitize the log said succeeded: any sampled tenant block that
 * still reads exactly as before means the erase did not touch the media.
 */
async function checkFingerprintChanged(fp: Fingerprint, what: string): Promise<void> {
  for (const s of fp.samples) {
    const now = await readAt(s.dev, s.offset, s.data.length);
    if (now?.equals(s.data)) {
      throw new CleanupFailedError(
        `${what} reported success but ${s.name} still holds the same data at offset ${s.offset}: nothing was erased`,
        { namespace: s.name, offset: String(s.offset) },
      );
    }
  }
}
