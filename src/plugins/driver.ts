/**
 * The driver contract (DESIGN.md "The driver contract"). A driver is a class
 * extending GenericDriver; built-in ones load by name, external ones from a
 * module path or package name whose default export (or `Driver` export) is the
 * class. The plugin host checks `apiVersion` against DRIVER_API_VERSION.
 */
import type { Logger } from 'pino';
import type { CleanupEvidence, CleanupPolicy } from './cleanup-evidence.js';
import type { CommandRunner } from './command-runner.js';
import type { CleanupProgress, DiscoveredDevice, DiscoveryResult } from './types.js';

/**
 * Major version of this contract; a driver written for another major is refused.
 * 2: `cleanup()` returns CleanupEvidence, which the agent judges; the default fails.
 */
export const DRIVER_API_VERSION = '2';

/** What a driver gets from the host: every effect goes through here, so tests swap it. */
export interface HostContext {
  /** Root of sysfs: /sys, or a simulated tree. */
  sysfsRoot: string;
  /** Root of device nodes: /dev, or a simulated directory. */
  devRoot: string;
  /**
   * Root of procfs: /proc (the default when absent), or a simulated directory;
   * discovery reads the host's mounts and network routes there (host-use.ts).
   */
  procRoot?: string;
  /** Directory the driver may keep state in (already created, unless `readOnly`). */
  stateDir: string;
  /**
   * True in the operator's dry run (`berth agent discover`): read what the state
   * dir holds, never write it — the running agent's state is not the dry run's.
   */
  readOnly?: boolean;
  hostname: string;
  runner: CommandRunner;
  logger: Logger;
}

export interface CleanupContext extends HostContext {
  jobId: string;
  /** Fires at the cleanup timeout or when the agent stops; a driver must stop and kill its children. */
  signal: AbortSignal;
  /** Reports a step; the agent turns it into a CleanupEvent on the stream and in the journal. */
  progress(update: CleanupProgress): void;
  /** The rules the agent will judge the returned evidence by (e.g. how much to read back). */
  policy: CleanupPolicy;
}

/** What the plugin host passes to a driver's constructor. */
export interface DriverOptions {
  /** The driver's own config section (e.g. the `nvme:` mapping), as parsed from YAML; {} when absent. */
  config: Record<string, unknown>;
}

export abstract class GenericDriver {
  /** Unique name, used in enabled_drivers. */
  abstract readonly name: string;
  /** The contract version the driver was written against. */
  readonly apiVersion: string = DRIVER_API_VERSION;
  /** Whether cleanup() scrubs anything; the scheduler relies on it. */
  readonly supportsCleaning: boolean = false;

  protected readonly config: Record<string, unknown>;

  /** Parse and validate the config section here; throw ConfigError on any mistake. */
  constructor(options: DriverOptions) {
    this.config = options.config;
  }

  /** Validate the host (tools present, versions); throw to stop the agent. */
  async initHost(_ctx: HostContext): Promise<void> {}

  /** Read-only: report the devices this driver manages on the host. */
  abstract discover(ctx: HostContext): Promise<DiscoveryResult>;

  /**
   * Optional, read-only: what `discover` would report of these functions
   * only — their devices and exclusions; an address in neither is not this
   * driver's (or not on the host any more). The agent calls it when the
   * kernel says functions came, went or changed (hotplug), with those
   * functions and the ones that depend on them (a VF's PF, IOMMU group
   * peers), so a hotplug costs what the changed functions cost. A driver
   * without it is asked `discover` and its result is filtered.
   */
  discoverAt?(ctx: HostContext, addresses: readonly string[]): Promise<DiscoveryResult>;

  /**
   * Scrub a device with its locked-in action and return the evidence: what was
   * observed on the controller, what was written and what was read back. The
   * agent judges it against `ctx.policy`; evidence that proves less than every
   * byte the tenant could address is a failed cleanup. Throw an Error whose
   * message says what failed when the scrub itself fails.
   *
   * The default fails: a driver that sets `supportsCleaning` must implement it.
   */
  async cleanup(device: DiscoveredDevice, _ctx: CleanupContext): Promise<CleanupEvidence> {
    throw new Error(
      `driver ${JSON.stringify(this.name)} says it cleans ${device.address} but does not implement cleanup(): nothing was scrubbed`,
    );
  }
}

export type DriverClass = new (options: DriverOptions) => GenericDriver;
