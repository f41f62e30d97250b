/**
 * Driver API version 2, deprecated (decision 82): a driver is a class
 * extending GenericDriver, constructed with its raw config section, with a
 * `supportsCleaning` flag beside a `cleanup` whose default throws. The agent
 * still loads such a driver until version 4 — it adapts it to the version-3
 * contract (`fromV2`) and logs one deprecation line naming the package — so a
 * vendor has one major version to move to `defineDriver`.
 */
import type { CleanupEvidence } from './cleanup-evidence.js';
import type { CleanupContext, Driver, HostContext } from './driver.js';
import type { DiscoveredDevice, DiscoveryResult } from './types.js';

/** The deprecated major version the agent still loads. */
export const DRIVER_API_V2 = '2';

/** What the plugin host passes to a version-2 driver's constructor. */
export interface DriverOptions {
  /** The driver's own config section (e.g. the `nvme:` mapping), as parsed from YAML; {} when absent. */
  config: Record<string, unknown>;
}

/** @deprecated Driver API 2: write a `defineDriver` definition (driver.ts) instead. */
export abstract class GenericDriver {
  /** Unique name, used in enabled_drivers. */
  abstract readonly name: string;
  /** The contract version the driver was written against. */
  readonly apiVersion: string = DRIVER_API_V2;
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

  /** Optional, read-only: `discover` of these functions only (driver.ts, Driver.discoverAt). */
  discoverAt?(ctx: HostContext, addresses: readonly string[]): Promise<DiscoveryResult>;

  /**
   * Scrub a device and return the evidence (driver.ts, Cleanup). The default
   * fails: a driver that sets `supportsCleaning` must implement it.
   */
  async cleanup(device: DiscoveredDevice, _ctx: CleanupContext): Promise<CleanupEvidence> {
    throw new Error(
      `driver ${JSON.stringify(this.name)} says it cleans ${device.address} but does not implement cleanup(): nothing was scrubbed`,
    );
  }
}

export type DriverClass = new (options: DriverOptions) => GenericDriver;

/**
 * A version-2 driver as a version-3 one: its `supportsCleaning` decides
 * whether it has the cleanup capability (a driver that says it cleans and
 * forgot `cleanup` keeps failing closed, with the base class's error).
 */
export function fromV2(d: GenericDriver): Driver {
  return {
    name: d.name,
    initHost: (ctx) => d.initHost(ctx),
    discover: (ctx) => d.discover(ctx),
    ...(d.discoverAt ? { discoverAt: (ctx, addresses) => d.discoverAt!(ctx, addresses) } : {}),
    ...(d.supportsCleaning ? { cleanup: (device, ctx) => d.cleanup(device, ctx) } : {}),
  };
}
