/**
 * The driver contract, version 3 (DESIGN.md "The driver contract";
 * docs/drivers.md; decision 82). A driver package's default export (or its
 * `Driver` export) is a DriverDefinition: the API version it was written
 * against, the schema of its config section, and `create`, which gets the
 * parsed, typed section and returns a Driver — a plain object of a few
 * functions. Nothing is inherited: the NVMe driver's steps are a kit
 * (`nvmeKit`, src/plugins/nvme/kit.ts) that a vendor driver composes.
 *
 * Cleaning is a capability: a driver that scrubs devices has `cleanup`, one
 * that does not has none, and the plugin host asks for it. There is no flag
 * beside it that could disagree with it.
 *
 * A version-2 driver (a class extending GenericDriver, driver-v2.ts) still
 * loads, with a deprecation line, until version 4.
 */
import type { Logger } from 'pino';
import type { z } from 'zod';
import { parseConfig } from '../config-schema.js';
import type { CleanupEvidence, CleanupPolicy } from './cleanup-evidence.js';
import type { CommandRunner } from './command-runner.js';
import type { CleanupProgress, DiscoveredDevice, DiscoveryResult } from './types.js';

/**
 * Major version of this contract; a driver written for another major is refused
 * (version 2 still loads, deprecated: docs/drivers.md).
 * 2: `cleanup()` returns CleanupEvidence, which the agent judges; the default fails.
 * 3: a definition (typed config, `create`) and a plain Driver object; cleanup is an
 *    optional capability; the NVMe driver's steps are a kit, not a base class.
 */
export const DRIVER_API_VERSION = '3';

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

/**
 * The cleanup capability: scrub a device with its locked-in action and return
 * the evidence — what was observed on the controller, what was written and
 * what was read back. The agent judges it against `ctx.policy`; evidence that
 * proves less than every byte the tenant could address is a failed cleanup.
 * Throw an Error whose message says what failed when the scrub itself fails.
 */
export type Cleanup = (device: DiscoveredDevice, ctx: CleanupContext) => Promise<CleanupEvidence>;

/** A driver, as `create` returns it. */
export interface Driver {
  /** Unique name, used in enabled_drivers and as the devices' `driver`. */
  readonly name: string;
  /** Optional: validate the host (tools present, versions); throw to stop the agent. */
  initHost?(ctx: HostContext): Promise<void>;
  /** Read-only: report the devices this driver manages on the host. */
  discover(ctx: HostContext): Promise<DiscoveryResult>;
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
  /** The cleanup capability; absent when the driver scrubs nothing. */
  readonly cleanup?: Cleanup;
}

/** What a driver package exports (default, or as `Driver`): `defineDriver({...})`. */
export interface DriverDefinition<C = unknown, D extends Driver = Driver> {
  /** The contract version the driver was written against (DRIVER_API_VERSION when written). */
  readonly apiVersion: string;
  /** The driver's name; also the config section a test or a tool passes when it names none. */
  readonly name: string;
  /** The schema of the driver's config section; `section` is the name it appears under, for messages. */
  config(section: string): z.ZodType<C>;
  /** Builds the driver from its parsed section; `section` is the key it was read from. */
  create(config: C, section: string): D;
}

/** Declares a driver: the config's type is the schema's output, checked by the type checker. */
export function defineDriver<S extends z.ZodType, D extends Driver>(definition: {
  apiVersion: string;
  name: string;
  config: (section: string) => S;
  create: (config: z.output<S>, section: string) => D;
}): DriverDefinition<z.output<S>, D> {
  // S's output is z.output<S> by definition; the checker only sees S's constraint here.
  return definition as DriverDefinition<z.output<S>, D>;
}

/**
 * Parses `section` with the definition's schema (a mistake is a ConfigError
 * naming `<key>.<path>` and the value) and creates the driver.
 */
export function instantiateDriver<C, D extends Driver>(
  definition: DriverDefinition<C, D>,
  section: Record<string, unknown> = {},
  key: string = definition.name,
): D {
  return definition.create(parseConfig(definition.config(key), section, [key]), key);
}
