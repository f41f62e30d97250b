/**
 * The NVMe driver as a class to extend: driver API 2, deprecated (decision
 * 82). A version-2 vendor package extends it and overrides its protected
 * members; every one of them now delegates to the NVMe kit (kit.ts), which is
 * what a version-3 driver composes instead. It stays until driver API 4.
 */
import type { CleanupEvidence, StorageTarget } from '../cleanup-evidence.js';
import type { CommandResult, RunOptions } from '../command-runner.js';
import type { ClearAction, ClearStrategy, DeviceSpecEntry } from '../device-spec/index.js';
import type { CleanupContext, HostContext } from '../driver.js';
import { type DriverOptions, GenericDriver } from '../driver-v2.js';
import type { DiscoveredDevice, DiscoveryResult } from '../types.js';
import { type NvmeConfig, parseNvmeConfig } from './config.js';
import type { ResolvedController, RunNvme } from './controller.js';
import { type NvmeKit, nvmeKit } from './kit.js';
import { policyCleanup } from './nvme-driver.js';
import type { IdCtrl } from './nvme-output.js';
import type { NvmeNamespaceInfo } from './sysfs-nvme.js';
import { runTool } from './tool.js';
import type { readNamespaceBack } from './zero-flow.js';

type ToolOptions = Pick<RunOptions, 'signal' | 'timeoutMs' | 'onStderr' | 'onStdout'>;

/** @deprecated Driver API 2: compose `nvmeKit` in a `defineDriver` definition instead. */
export class NvmeDriver extends GenericDriver {
  /** Config section name used in messages; a subclass with its own section overrides it. */
  protected static readonly section: string = 'nvme';

  readonly name: string = 'nvme';
  override readonly supportsCleaning: boolean = true;
  /** A vendor's own cleanup method's name, reported as the devices' locked-in action (kit.ts). */
  protected readonly cleanupActionName: string | null = null;
  /** With `cleanupActionName`: the device_spec policies that method satisfies (kit.ts). */
  protected readonly satisfiedPolicies: ReadonlyArray<readonly [ClearAction, ClearStrategy]> = [
    ['auto', 'auto'],
  ];
  readonly entries: DeviceSpecEntry[];
  /** cleanup_timeout in ms. */
  readonly cleanupTimeoutMs: number;
  readonly nvmeCli: string;
  readonly pollIntervalMs: number;

  readonly #config: NvmeConfig;
  #kit: NvmeKit | null = null;

  constructor(options: DriverOptions) {
    super(options);
    const section = (this.constructor as typeof NvmeDriver).section;
    this.#config = parseNvmeConfig(section, options.config);
    this.entries = this.#config.entries;
    this.cleanupTimeoutMs = this.#config.cleanupTimeoutMs;
    this.nvmeCli = this.#config.nvmeCli;
    this.pollIntervalMs = this.#config.pollIntervalMs;
  }

  /** Built on first use: a subclass's fields (name, cleanupActionName) are set after this constructor ran. */
  private get kit(): NvmeKit {
    this.#kit ??= nvmeKit({
      name: this.name,
      config: this.#config,
      ...(this.cleanupActionName ? { cleanupAction: this.cleanupActionName } : {}),
      satisfiedPolicies: this.satisfiedPolicies,
    });
    return this.#kit;
  }

  /** nvme-cli's version as initHost found it. */
  get nvmeCliVersion(): string | null {
    return this.kit.tool.version;
  }

  override initHost(ctx: HostContext): Promise<void> {
    return this.kit.initHost(ctx);
  }

  discover(ctx: HostContext): Promise<DiscoveryResult> {
    return this.kit.discover(ctx);
  }

  override discoverAt(ctx: HostContext, addresses: readonly string[]): Promise<DiscoveryResult> {
    return this.kit.discoverAt(ctx, addresses);
  }

  override cleanup(device: DiscoveredDevice, ctx: CleanupContext): Promise<CleanupEvidence> {
    return policyCleanup(this.kit)(device, ctx);
  }

  protected identify(ctx: HostContext, ctrlDev: string, signal?: AbortSignal): Promise<IdCtrl> {
    return this.kit.tool.identify(ctx, ctrlDev, signal);
  }

  protected nvme(
    ctx: HostContext,
    args: readonly string[],
    options: ToolOptions = {},
  ): Promise<CommandResult> {
    return this.kit.tool.run(ctx, args, options);
  }

  protected runTool(
    ctx: HostContext,
    file: string,
    args: readonly string[],
    options: ToolOptions,
    label: string,
  ): Promise<CommandResult> {
    return runTool(ctx, file, args, options, label);
  }

  protected subsystemNamespaces(r: ResolvedController, ctx: CleanupContext): Promise<StorageTarget[]> {
    return this.kit.subsystemNamespaces(r, ctx);
  }

  protected reachEveryNamespace(
    r: ResolvedController,
    ctx: CleanupContext,
  ): Promise<{ namespaces: NvmeNamespaceInfo[]; notes: string[] }> {
    return this.kit.reachEveryNamespace(r, ctx);
  }

  protected runner(ctx: CleanupContext): RunNvme {
    return this.kit.runner(ctx);
  }

  protected withCleanupGuard<T>(
    device: DiscoveredDevice,
    ctx: CleanupContext,
    fn: (ctx: CleanupContext) => Promise<T>,
  ): Promise<T> {
    return this.kit.guard(device, ctx, fn);
  }

  protected resolveController(device: DiscoveredDevice, ctx: CleanupContext): Promise<ResolvedController> {
    return this.kit.resolveController(device, ctx);
  }

  protected verifyZeroed(
    r: ResolvedController,
    ns: NvmeNamespaceInfo,
    ctx: CleanupContext,
  ): ReturnType<typeof readNamespaceBack> {
    return this.kit.verifyZeroed(r, ns, ctx);
  }
}
