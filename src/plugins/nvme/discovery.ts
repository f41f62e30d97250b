/**
 * NVMe discovery (the kit's `discover` and `discoverAt`): every matched
 * controller identified with `nvme id-ctrl`, its capabilities reported as
 * traits, its media identity read from sysfs, and a cleanup action locked in
 * from the policy matrix — or, for a vendor driver with its own cleanup
 * method, that method's name, on devices whose entry's policy it satisfies.
 * The last identify of each address is kept across agent restarts
 * (identity-cache.ts), so a device a guest holds is still known.
 */
import type { ClearAction, ClearStrategy } from '../device-spec/index.js';
import { compileMatcher, type DeviceSpecEntry } from '../device-spec/index.js';
import type { HostContext } from '../driver.js';
import { readDeviceSerialNumber } from '../pci/device-serial-number.js';
import {
  baseTraits,
  deviceFromFunction,
  exclusionReason,
  type HostFunctions,
  readHostFunctions,
  readHostFunctionsAt,
} from '../pci/pci-driver.js';
import type {
  DiscoveredDevice,
  DiscoveryResult,
  ExcludedDevice,
  MediaIdentity,
  PciFunction,
  WriteCounters,
} from '../types.js';
import { IdentityCache } from './identity-cache.js';
import { fallbackNqn, nvmeMediaIdentity, readNamespaceIdentity, readSubsysNqn } from './media-identity.js';
import { capabilitiesOf, hex, type IdCtrl } from './nvme-output.js';
import { type CleanupAction, resolveCleanupAction } from './policy.js';
import { type NvmeControllerInfo, readNvmeController } from './sysfs-nvme.js';
import { IDENTIFY_TIMEOUT_MS, type NvmeTool } from './tool.js';
import { readWriteCounters } from './write-counters.js';

/** A device_spec policy: `[clear_action, clear_strategy]`. */
export type Policy = readonly [ClearAction, ClearStrategy];

export interface NvmeDiscoveryOptions {
  name: string;
  entries: readonly DeviceSpecEntry[];
  tool: NvmeTool;
  /**
   * A vendor driver whose cleanup is its own method, not the policy matrix's,
   * names that method here; discovery then reports it as the devices' locked-in
   * action, so jobs, metrics and operators see what really runs. The policy is
   * still resolved (a device the policy cannot serve stays excluded).
   */
  cleanupAction: string | null;
  /**
   * With `cleanupAction`: the device_spec policies that method satisfies. A
   * device whose entry asks for another is excluded, with the reason, at
   * discovery and in the dry run.
   */
  satisfiedPolicies: readonly Policy[];
}

export class NvmeDiscovery {
  private readonly name: string;
  private readonly entries: DeviceSpecEntry[];
  private readonly tool: NvmeTool;
  private readonly cleanupActionName: string | null;
  private readonly satisfiedPolicies: readonly Policy[];
  /** The last identify of each address, kept across agent restarts (identity-cache.ts). */
  private readonly identities: IdentityCache;

  constructor(o: NvmeDiscoveryOptions) {
    this.name = o.name;
    this.entries = [...o.entries];
    this.tool = o.tool;
    this.cleanupActionName = o.cleanupAction;
    this.satisfiedPolicies = o.satisfiedPolicies;
    this.identities = new IdentityCache(() => this.name);
  }

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
  async discoverAt(ctx: HostContext, addresses: readonly string[]): Promise<DiscoveryResult> {
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
      id = await this.tool.identify(ctx, `${ctx.devRoot}/${ctrl.name}`);
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
        (await this.tool.run(ctx, args, { timeoutMs: IDENTIFY_TIMEOUT_MS })).stdout;
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
}
