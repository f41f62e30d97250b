/**
 * The generic PCI driver: offers the functions its device_spec matches, as
 * they are, with no cleanup. SR-IOV follows the SR-IOV device plugin: a PF
 * with enabled VFs is never offered itself (its VFs are), a PF without enabled
 * VFs is a plain function.
 */
import { section as configSection, parseConfig } from '../../config-schema.js';
import {
  compileMatcher,
  type DeviceSpecEntry,
  deviceSpecListSchema,
  exactAddress,
  type FunctionLookup,
  isValidPciAddress,
} from '../device-spec/index.js';
import { DRIVER_API_VERSION, type Driver, defineDriver, type HostContext } from '../driver.js';
import { type DriverOptions, GenericDriver } from '../driver-v2.js';
import { type HostUseRoots, readHostUse } from '../host-use.js';
import type {
  DiscoveredDevice,
  DiscoveryResult,
  ExcludedDevice,
  FunctionKind,
  MediaIdentity,
  PciFunction,
} from '../types.js';
import { readDeviceSerialNumber } from './device-serial-number.js';
import { dsnIdentity, slotIdentity } from './media-identity.js';
import {
  readIommuGroupMembers,
  readPciFunctionSync,
  readPciFunctions,
  resolveNetdevAddress,
} from './sysfs-reader.js';

/** The `pci:` section: device_spec entries with Nova's keys, nothing else. */
export const pciSectionSchema = (section = 'pci') =>
  configSection({ device_spec: deviceSpecListSchema(section, false) }).describe(
    'the generic PCI driver: device_spec entries (Nova [pci] device_spec keys)',
  );

/** Everything matching needs about the host, read once per discovery. */
export interface HostFunctions {
  functions: PciFunction[];
  byAddress: Map<string, PciFunction>;
  lookup: FunctionLookup;
  /** IOMMU group number → member addresses. */
  groups: Map<number, string[]>;
}

/** Where what the host uses is read from: the host context's roots. */
export function hostUseRoots(ctx: HostContext): HostUseRoots {
  return { sysfsRoot: ctx.sysfsRoot, devRoot: ctx.devRoot, procRoot: ctx.procRoot ?? '/proc' };
}

export async function readHostFunctions(
  ctx: HostContext,
  entries: readonly DeviceSpecEntry[],
): Promise<HostFunctions> {
  const [functions, hostUse] = await Promise.all([
    readPciFunctions(ctx.sysfsRoot),
    readHostUse(hostUseRoots(ctx)),
  ]);
  for (const f of functions) {
    const use = hostUse.get(f.address);
    if (use) f.hostUse = use;
  }
  const byAddress = new Map(functions.map((f) => [f.address, f]));
  const netdevs = new Map<string, string | null>();
  await Promise.all(
    entries
      .filter((e) => e.devname !== null)
      .map(async (e) => netdevs.set(e.devname!, await resolveNetdevAddress(ctx.sysfsRoot, e.devname!))),
  );
  const groups = new Map<number, string[]>();
  for (const f of functions) {
    if (f.iommuGroup === null) continue;
    const g = groups.get(f.iommuGroup) ?? [];
    g.push(f.address);
    groups.set(f.iommuGroup, g);
  }
  return {
    functions,
    byAddress,
    groups,
    lookup: { get: (a) => byAddress.get(a), netdevAddress: (n) => netdevs.get(n) ?? null },
  };
}

/**
 * HostFunctions for some functions only (a hotplug pass): `functions` holds
 * those of `addresses` that are present, in address order, each read as
 * readHostFunctions would read it; `byAddress` also holds their PFs (a VF's
 * media identity is its PF's serial), `groups` the present members of their
 * IOMMU groups, and `lookup` reads any other function on demand (a
 * device_spec entry naming a PF).
 */
export async function readHostFunctionsAt(
  ctx: HostContext,
  entries: readonly DeviceSpecEntry[],
  addresses: readonly string[],
): Promise<HostFunctions> {
  const read = new Map<string, PciFunction | null>();
  const get = (a: string): PciFunction | undefined => {
    let f = read.get(a);
    if (f === undefined) {
      f = isValidPciAddress(a) ? readPciFunctionSync(ctx.sysfsRoot, a) : null;
      read.set(a, f);
    }
    return f ?? undefined;
  };
  const functions = [...new Set(addresses)]
    .sort()
    .map(get)
    .filter((f): f is PciFunction => f !== undefined);
  if (functions.length > 0) {
    // What the host uses is read whole (its mounts, swaps and routes), and set on these functions.
    const hostUse = await readHostUse(hostUseRoots(ctx));
    for (const f of functions) {
      const use = hostUse.get(f.address);
      if (use) f.hostUse = use;
    }
  }
  const byAddress = new Map(functions.map((f) => [f.address, f]));
  for (const f of functions) {
    const pf = f.physfn === null ? undefined : get(f.physfn);
    if (pf) byAddress.set(pf.address, pf);
  }
  const groups = new Map<number, string[]>();
  for (const f of functions) {
    if (f.iommuGroup === null || groups.has(f.iommuGroup)) continue;
    groups.set(
      f.iommuGroup,
      readIommuGroupMembers(ctx.sysfsRoot, f.iommuGroup).filter((a) => get(a)?.iommuGroup === f.iommuGroup),
    );
  }
  const netdevs = new Map<string, string | null>();
  await Promise.all(
    entries
      .filter((e) => e.devname !== null)
      .map(async (e) => netdevs.set(e.devname!, await resolveNetdevAddress(ctx.sysfsRoot, e.devname!))),
  );
  return { functions, byAddress, groups, lookup: { get, netdevAddress: (n) => netdevs.get(n) ?? null } };
}

export function functionKind(fn: PciFunction): FunctionKind {
  if (fn.physfn) return 'VF';
  if (fn.sriovTotalVfs > 0) return 'PF';
  return 'PCI';
}

export function baseTraits(entry: DeviceSpecEntry, extra: string[] = []): string[] {
  const traits = new Set(['OWNER_BERTH', ...extra, ...entry.traits]);
  if (entry.liveMigratable) traits.add('HW_PCI_LIVE_MIGRATABLE');
  if (entry.oneTimeUse) traits.add('HW_ONE_TIME_USE');
  return [...traits].sort();
}

/** Whether `entry` names `fn` by its full address (no wildcard), as the allow_* keys require. */
function namesExactly(entry: DeviceSpecEntry, fn: PciFunction): boolean {
  return exactAddress(entry) === fn.address;
}

/**
 * Why a matched function is not offered at all, or null. Shared by drivers
 * that build on PCI functions. Besides the SR-IOV rules: a function without an
 * IOMMU group (nothing isolates it from the host: the IOMMU is off, or the
 * platform has none), and a function the host itself uses (its disk is
 * mounted, its interface carries an address or a route) — each unless the
 * entry names that function by its full address and says so
 * (`allow_no_iommu: true`, `allow_host_device: true`).
 */
export function exclusionReason(fn: PciFunction, entry: DeviceSpecEntry): string | null {
  if (fn.sriovNumVfs > 0) {
    return `SR-IOV PF with ${fn.sriovNumVfs} VFs enabled: only its VFs are offered (${entry.source})`;
  }
  if (entry.oneTimeUse && fn.physfn) {
    return `one_time_use applies to PFs and plain functions, not to VFs (${entry.source})`;
  }
  if (fn.iommuGroup === null && !(entry.allowNoIommu && namesExactly(entry, fn))) {
    return `no IOMMU group: nothing isolates the function from the host (is the IOMMU on? intel_iommu=on or amd_iommu=on); to offer it anyway, name it by its address with allow_no_iommu: true (${entry.source})`;
  }
  if (fn.hostUse && !(entry.allowHostDevice && namesExactly(entry, fn))) {
    return `the host uses it: ${fn.hostUse.join('; ')}; to offer it anyway, name it by its address with allow_host_device: true (${entry.source})`;
  }
  return null;
}

/** The device record common to all PCI-based drivers. */
export function deviceFromFunction(
  fn: PciFunction,
  entry: DeviceSpecEntry,
  host: HostFunctions,
  fields: { driver: string; type: DiscoveredDevice['type']; resourceClass: string; traits: string[] },
): DiscoveredDevice {
  const peers =
    fn.iommuGroup === null ? [] : (host.groups.get(fn.iommuGroup) ?? []).filter((a) => a !== fn.address);
  const attributes: Record<string, string> = { ...entry.attributes, device_spec: entry.source };
  if (fn.netdevs.length > 0) attributes.netdevs = fn.netdevs.join(',');
  // Offered only because the operator said so for this function: shown where an operator looks.
  if (fn.hostUse) attributes.host_use = fn.hostUse.join('; ');
  if (fn.iommuGroup === null) attributes.iommu = 'none (allow_no_iommu)';
  return {
    address: fn.address,
    vendorId: fn.vendorId,
    productId: fn.productId,
    classCode: fn.classCode,
    kernelDriver: fn.kernelDriver,
    driver: fields.driver,
    type: fields.type,
    functionKind: functionKind(fn),
    physfn: fn.physfn,
    iommuGroup: fn.iommuGroup,
    iommuGroupPeers: peers,
    numaNode: fn.numaNode,
    resourceClass: fields.resourceClass,
    traits: fields.traits,
    managed: entry.managed,
    liveMigratable: entry.liveMigratable,
    oneTimeUse: entry.oneTimeUse,
    supportsCleaning: false,
    cleanupAction: null,
    health: fn.kernelDriver ? 'healthy' : 'unhealthy',
    healthReason: fn.kernelDriver ? '' : 'no kernel driver is bound to the function',
    unallocatableReason: '',
    attributes,
    // One-time use only (the parser refuses it elsewhere): vouched unused when Berth has no record of it.
    ...(entry.assumeClean ? { assumeClean: true as const } : {}),
  };
}

/** The generic PCI driver; built in under the name `pci`. No cleanup capability: it scrubs nothing. */
export const pciDriver = defineDriver({
  apiVersion: DRIVER_API_VERSION,
  name: 'pci',
  config: (section) => pciSectionSchema(section),
  create: (config, _section): Driver => {
    const entries = config.device_spec;
    return {
      name: 'pci',
      discover: async (ctx) => offerPciFunctions('pci', entries, ctx, await readHostFunctions(ctx, entries)),
      // Hotplug: the same decisions for some functions, read on their own.
      discoverAt: async (ctx, addresses) =>
        offerPciFunctions('pci', entries, ctx, await readHostFunctionsAt(ctx, entries, addresses)),
    };
  },
});

/** @deprecated Driver API 2: the PCI driver as a class to extend; compose `pciDriver` or its functions instead. */
export class PciDriver extends GenericDriver {
  readonly name: string = 'pci';
  readonly entries: DeviceSpecEntry[];

  constructor(options: DriverOptions) {
    super(options);
    this.entries = parseConfig(pciSectionSchema(), options.config, ['pci']).device_spec;
  }

  async discover(ctx: HostContext): Promise<DiscoveryResult> {
    return offerPciFunctions(this.name, this.entries, ctx, await readHostFunctions(ctx, this.entries));
  }

  override async discoverAt(ctx: HostContext, addresses: readonly string[]): Promise<DiscoveryResult> {
    return offerPciFunctions(
      this.name,
      this.entries,
      ctx,
      await readHostFunctionsAt(ctx, this.entries, addresses),
    );
  }
}

/** The devices and exclusions of `host.functions` that `entries` match, as driver `name` offers them. */
function offerPciFunctions(
  name: string,
  entries: readonly DeviceSpecEntry[],
  ctx: HostContext,
  host: HostFunctions,
): DiscoveryResult {
  const devices: DiscoveredDevice[] = [];
  const excluded: ExcludedDevice[] = [];
  const match = compileMatcher(entries, host.lookup);
  const serials = new Map<string, string | null>();
  // Every device of an entry gets the same traits: worked out once per entry
  // and shared, frozen, so that no holder can change another device's.
  const traits = new Map<DeviceSpecEntry, string[]>();
  for (const fn of host.functions) {
    const entry = match(fn);
    if (!entry) continue;
    const reason = exclusionReason(fn, entry);
    if (reason) {
      excluded.push({ address: fn.address, driver: name, reason });
      continue;
    }
    let entryTraits = traits.get(entry);
    if (entryTraits === undefined) {
      entryTraits = Object.freeze(baseTraits(entry)) as string[];
      traits.set(entry, entryTraits);
    }
    const device = deviceFromFunction(fn, entry, host, {
      driver: name,
      type: 'PCI',
      resourceClass:
        entry.resourceClass ?? `CUSTOM_PCI_${fn.vendorId.toUpperCase()}_${fn.productId.toUpperCase()}`,
      traits: entryTraits,
    });
    device.media = functionMedia(ctx, fn, host, serials);
    devices.push(device);
  }
  return { devices, excluded };
}

/**
 * A PCI function's media identity (media-identity.ts): its card's Device
 * Serial Number (a VF's is its PF's, with its VF index), else its slot.
 * `serials` memoises each PF's serial for the pass (its VFs ask for it).
 */
export function functionMedia(
  ctx: HostContext,
  fn: PciFunction,
  host: HostFunctions,
  serials: Map<string, string | null>,
): MediaIdentity {
  const pf = fn.physfn === null ? undefined : host.byAddress.get(fn.physfn);
  if (pf) {
    // The serial first: the VF's index is looked for (among up to 256) only on a card that has one.
    const dsn = serialOf(ctx, serials, pf.address);
    const index = dsn ? pf.virtfns.indexOf(fn.address) : -1;
    if (dsn && index >= 0) return dsnIdentity(pf.vendorId, dsn, fn.address, { pfAddress: pf.address, index });
  } else if (fn.physfn === null) {
    const dsn = serialOf(ctx, serials, fn.address);
    if (dsn) return dsnIdentity(fn.vendorId, dsn, fn.address);
  }
  return slotIdentity(ctx.hostname, fn);
}

/** The serial of `address`, read once a pass (a module function: no closure made per device). */
function serialOf(ctx: HostContext, serials: Map<string, string | null>, address: string): string | null {
  let dsn = serials.get(address);
  if (dsn === undefined) {
    dsn = readDeviceSerialNumber(ctx.sysfsRoot, address);
    serials.set(address, dsn);
  }
  return dsn;
}
