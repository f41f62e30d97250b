/**
 * The plugin host: loads every enabled driver, runs initHost (a failing driver
 * stops the agent with its message), and runs discovery across drivers. It owns
 * the cross-driver rules: two drivers claiming one PCI address is a
 * configuration error (fatal at start, an exclusion later), and a device whose
 * IOMMU group holds functions Berth does not manage is not allocatable.
 */
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { ConfigError } from '../../errors.js';
import { isPciAddress } from '../../identifiers.js';
import type { CleanupPolicy } from '../../plugins/cleanup-evidence.js';
import { parseCleanupPolicy } from '../../plugins/cleanup-policy.js';
import { show } from '../../plugins/device-spec/messages.js';
import type { Cleanup, CleanupContext, HostContext } from '../../plugins/driver.js';
import { ExecRunner } from '../../plugins/exec-runner.js';
import { type AgentCensus, agentCensusFor, hasNvmeCensus } from '../../plugins/nvme/agent-census.js';
import type { NvmeCensus } from '../../plugins/nvme/census.js';
import { mediaIdentityProblem, slotIdentity } from '../../plugins/pci/media-identity.js';
import { readPciFunction } from '../../plugins/pci/sysfs-reader.js';
import type { DiscoveredDevice, DiscoveryResult, ExcludedDevice } from '../../plugins/types.js';
import type { AgentConfig } from './config.js';
import { driverKey } from './config.js';
import { type HostedDriver, type LoadedDriver, loadDriver } from './driver-registry.js';

export class DuplicateClaimError extends ConfigError {
  constructor(
    readonly address: string,
    readonly drivers: string[],
  ) {
    super(
      `InvalidConfiguration: PCI device ${address} is claimed by more than one driver (${drivers.join(', ')}); ` +
        'narrow the device_spec entries so that exactly one driver matches it',
    );
    this.name = 'DuplicateClaimError';
  }
}

/** A ConfigError unless `root/bus/pci/devices` is a directory. */
async function requireSysfs(root: string): Promise<void> {
  const devices = join(root, 'bus', 'pci', 'devices');
  let problem: string;
  try {
    if ((await stat(devices)).isDirectory()) return;
    problem = `${devices} is not a directory`;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    problem =
      code === 'ENOENT' || code === 'ENOTDIR'
        ? `it has no bus/pci/devices directory`
        : (err as Error).message;
  }
  throw new ConfigError(`sysfs_root: ${show(root)} is not a sysfs tree (${problem})`);
}

export interface HostDiscovery extends DiscoveryResult {
  /** Drivers whose discovery failed this time; their devices keep their last state. */
  failedDrivers: string[];
}

export class PluginHost {
  private constructor(
    readonly loaded: LoadedDriver[],
    private readonly ctx: HostContext,
    /** Each driver's cleanup policy (its section's `verify`), by driver name. */
    private readonly policies: Map<string, CleanupPolicy>,
    /** The agent's census for each driver's devices (its section's nvme-cli), by driver name. */
    private readonly censuses: Map<string, AgentCensus>,
  ) {}

  /**
   * Loads and constructs every enabled driver (config errors surface here),
   * after checking that sysfs_root is a sysfs tree: without one, discovery
   * would report no device at all, silently.
   */
  /** Loads the configured drivers with the host context the configuration names (its roots, state dir, host). */
  static loadFor(
    config: AgentConfig,
    o: { logger: HostContext['logger']; runner?: HostContext['runner']; readOnly?: boolean },
  ): Promise<PluginHost> {
    return PluginHost.load(config, {
      sysfsRoot: config.sysfsRoot,
      devRoot: config.devRoot,
      procRoot: config.procRoot,
      stateDir: config.stateDir,
      ...(o.readOnly ? { readOnly: true } : {}),
      hostname: config.host,
      runner: o.runner ?? new ExecRunner(),
      logger: o.logger,
    });
  }

  static async load(config: AgentConfig, ctx: HostContext): Promise<PluginHost> {
    await requireSysfs(ctx.sysfsRoot);
    const loaded: LoadedDriver[] = [];
    const policies = new Map<string, CleanupPolicy>();
    const censuses = new Map<string, AgentCensus>();
    for (const entry of config.enabledDrivers) {
      const key = driverKey(entry);
      const section = config.driverSections[key] ?? {};
      const l = await loadDriver(entry, section, config.baseDir, { key, logger: ctx.logger });
      loaded.push(l);
      policies.set(l.driver.name, parseCleanupPolicy(key, section));
      censuses.set(l.driver.name, agentCensusFor(key, section));
    }
    const names = loaded.map((l) => l.driver.name);
    const dup = names.find((n, i) => names.indexOf(n) !== i);
    if (dup) throw new ConfigError(`enabled_drivers: two entries load a driver named ${JSON.stringify(dup)}`);
    return new PluginHost(loaded, ctx, policies, censuses);
  }

  /** Whether the agent takes a census of this device's media around a cleanup (NVMe: by type or by PCI class). */
  hasCensus(device: DiscoveredDevice): boolean {
    return hasNvmeCensus(device);
  }

  /**
   * The agent's own census of a device's media, whichever driver manages it:
   * for NVMe, every allocated namespace of the subsystem and its capacity,
   * read with the nvme-cli the driver's section names (src/plugins/nvme/agent-census.ts).
   * `probe`: also ask whether namespace management works where that decides
   * the coverage. Throws when it cannot be taken; null when the device has none.
   */
  async takeCensus(
    d: HostedDriver,
    device: DiscoveredDevice,
    signal: AbortSignal,
    probe: boolean,
  ): Promise<NvmeCensus | null> {
    if (!this.hasCensus(device)) return null;
    const census = this.censuses.get(d.name) ?? agentCensusFor(d.name, {});
    return census.take(device, this.ctx, signal, probe);
  }

  /** The driver's cleanup capability, or null when it scrubs nothing. */
  cleaner(d: HostedDriver): Cleanup | null {
    return d.cleanup ?? null;
  }

  /** The policy the agent judges a driver's cleanup evidence by. */
  policy(d: HostedDriver): CleanupPolicy {
    return this.policies.get(d.name) ?? parseCleanupPolicy(d.name, {});
  }

  get drivers(): HostedDriver[] {
    return this.loaded.map((l) => l.driver);
  }

  driver(name: string): HostedDriver | undefined {
    return this.drivers.find((d) => d.name === name);
  }

  /** Runs every driver's initHost; the first failure stops the agent. */
  async initHost(): Promise<void> {
    for (const d of this.drivers) {
      try {
        await d.initHost?.(this.childCtx(d));
      } catch (err) {
        throw new Error(
          `driver ${JSON.stringify(d.name)} failed to initialise the host: ${(err as Error).message}`,
          {
            cause: err,
          },
        );
      }
    }
  }

  childCtx(d: HostedDriver): HostContext {
    return { ...this.ctx, logger: this.ctx.logger.child({ driver: d.name }) };
  }

  cleanupCtx(d: HostedDriver, extra: Pick<CleanupContext, 'jobId' | 'signal' | 'progress'>): CleanupContext {
    return { ...this.childCtx(d), ...extra, policy: this.policy(d) };
  }

  /** Whether the driver gave `dev` a well-formed media identity; a malformed one is logged. */
  private hasMedia(dev: DiscoveredDevice): boolean {
    if (!dev.media) return false;
    const problem = mediaIdentityProblem(dev.media);
    if (problem === null) return true;
    this.ctx.logger.warn(
      { address: dev.address, driver: dev.driver },
      `driver ${dev.driver} reported an unusable media identity (${problem}); the slot's is used instead`,
    );
    return false;
  }

  /**
   * The device with the slot's media identity, for a device whose driver gave
   * none that can be used (hasMedia; docs/media-identity.md). A copy: a
   * driver's record is never changed.
   */
  private async withMedia(dev: DiscoveredDevice): Promise<DiscoveredDevice> {
    const fn = isPciAddress(dev.address) ? await readPciFunction(this.ctx.sysfsRoot, dev.address) : null;
    return { ...dev, media: slotIdentity(this.ctx.hostname, fn ?? dev) };
  }

  /**
   * Discovers across all drivers. With `strict`, a device claimed by two
   * drivers throws DuplicateClaimError (agent start); otherwise both claims
   * are excluded with the reason and logged (a rediscovery must not crash a
   * running agent).
   */
  async discover(options: { strict: boolean }): Promise<HostDiscovery> {
    return this.merge(await this.ask((d) => d.discover(this.childCtx(d))), options.strict, () => false);
  }

  /**
   * Discovery of some functions only (hotplug): each driver's `discoverAt`,
   * or its `discover` filtered to them. The same rules as a full pass, with
   * `managedElsewhere` saying which functions outside `addresses` Berth
   * manages (the inventory's), for the IOMMU group rule. Never strict.
   */
  async discoverAt(
    addresses: readonly string[],
    managedElsewhere: (address: string) => boolean,
  ): Promise<HostDiscovery> {
    const wanted = new Set(addresses);
    const list = [...wanted].sort();
    const results = await this.ask(async (d) => {
      const r = d.discoverAt
        ? await d.discoverAt(this.childCtx(d), list)
        : await d.discover(this.childCtx(d));
      return {
        devices: r.devices.filter((x) => wanted.has(x.address)),
        excluded: r.excluded.filter((x) => wanted.has(x.address)),
      };
    });
    return this.merge(results, false, managedElsewhere);
  }

  /** Runs `pass` for every driver at once; a driver that throws is logged and reported failed. */
  private ask(
    pass: (d: HostedDriver) => Promise<DiscoveryResult>,
  ): Promise<{ d: HostedDriver; result: DiscoveryResult | null; error: Error | null }[]> {
    return Promise.all(
      this.drivers.map(async (d) => {
        try {
          return { d, result: await pass(d), error: null };
        } catch (err) {
          this.ctx.logger.error(
            { err, driver: d.name },
            'driver discovery failed; its devices are kept as they were',
          );
          return { d, result: null, error: err as Error };
        }
      }),
    );
  }

  /** The drivers' results as one discovery: media identities, duplicate claims, IOMMU groups. */
  private async merge(
    results: { d: HostedDriver; result: DiscoveryResult | null; error: Error | null }[],
    strict: boolean,
    managedElsewhere: (address: string) => boolean,
  ): Promise<HostDiscovery> {
    const options = { strict };
    const failed = results.filter((r) => r.error !== null);
    if (options.strict && failed.length > 0) {
      const f = failed[0]!;
      throw new Error(`driver ${JSON.stringify(f.d.name)} failed its first discovery: ${f.error!.message}`, {
        cause: f.error,
      });
    }
    const claims: DiscoveredDevice[] = [];
    const excluded: ExcludedDevice[] = [];
    for (const { d, result } of results) {
      if (!result) continue;
      for (const dev of result.devices) {
        // The built-in drivers fill in their name; anything else gets a copy that says it.
        const named = dev.driver === d.name ? dev : { ...dev, driver: d.name };
        // No await for a device whose driver gave its media (every device of the
        // built-in drivers): the merge's share of a pass, bench/README.md.
        claims.push(this.hasMedia(named) ? named : await this.withMedia(named));
      }
      for (const ex of result.excluded) excluded.push(ex.driver ? ex : { ...ex, driver: d.name });
    }
    // Sorted by address (stable: claims of one address stay in driver order),
    // an address claimed twice is a run of equal addresses.
    claims.sort(byAddress);
    const devices: DiscoveredDevice[] = [];
    for (let i = 0; i < claims.length; ) {
      const address = claims[i]!.address;
      let end = i + 1;
      while (end < claims.length && claims[end]!.address === address) end++;
      if (end === i + 1) {
        devices.push(claims[i]!);
      } else {
        const list = claims.slice(i, end);
        const err = new DuplicateClaimError(
          address,
          list.map((x) => x.driver),
        );
        if (options.strict) throw err;
        this.ctx.logger.error({ address, drivers: err.drivers }, err.message);
        for (const x of list) excluded.push({ address, driver: x.driver, reason: err.message });
      }
      i = end;
    }
    markSharedIommuGroups(devices, managedElsewhere);
    excluded.sort(byAddress);
    return { devices, excluded, failedDrivers: failed.map((f) => f.d.name) };
  }
}

function byAddress(a: { address: string }, b: { address: string }): number {
  return a.address < b.address ? -1 : a.address > b.address ? 1 : 0;
}

/**
 * A device whose IOMMU group also holds functions Berth does not manage cannot
 * be handed to a guest safely (VFIO gives the guest the whole group), so it is
 * reported unallocatable with the reason. Functions of one group that Berth all
 * manages stay allocatable; the scheduler keeps them from different tenants.
 * A marked device is replaced in the list by a copy: the record a driver
 * returned is never changed (a driver may keep it for its next pass).
 */
export function markSharedIommuGroups(
  devices: DiscoveredDevice[],
  managedElsewhere: (address: string) => boolean = () => false,
): void {
  // Most functions sit alone in their group: the set is built only when one does not.
  if (devices.every((d) => d.iommuGroupPeers.length === 0)) return;
  const managed = new Set(devices.map((d) => d.address));
  devices.forEach((d, i) => {
    if (d.iommuGroupPeers.length === 0 || d.unallocatableReason !== '') return;
    const foreign = d.iommuGroupPeers.filter((p) => !managed.has(p) && !managedElsewhere(p));
    if (foreign.length > 0) {
      devices[i] = {
        ...d,
        unallocatableReason: `IOMMU group ${d.iommuGroup} also holds ${foreign.join(', ')}, which Berth does not manage`,
      };
    }
  });
}
