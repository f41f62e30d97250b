/**
 * What Placement should show for Berth's devices, computed from Berth's own
 * state alone (pure): one provider per PCI function or PF, one per PF for its
 * VFs (total = the VFs), under the host's compute node provider;
 * `reserved` = the devices Berth would not hand out now. The reporter
 * (reporter.ts) makes Placement say this.
 */
import { type HostName, isResourceClass, isTrait, type PciAddress, type Uuid } from '../../../identifiers.js';
import { type DeviceRecord, unallocatableReasons } from '../domain/device-state.js';
import {
  placementResourceClass,
  placementTraits,
  providerAddress,
  providerNameFor,
  providerUuid,
} from './names.js';

export interface HostView {
  name: HostName;
  connected: boolean;
}

/** One device as its provider counts it. */
export interface CountedDevice {
  uuid: Uuid;
  host: HostName;
  address: PciAddress;
  /** Why Berth holds it back ('' when Berth would hand it out). */
  heldBecause: string;
}

export interface DesiredProvider {
  name: string;
  uuid: string;
  host: string;
  /** The compute node provider's name (the hypervisor hostname). */
  nodename: string;
  resourceClass: string;
  traits: string[];
  total: number;
  reserved: number;
  devices: CountedDevice[];
  /**
   * Set when Berth cannot say one class and one set of traits for the provider
   * (VFs of one PF configured differently, which Nova refuses too): the
   * provider is then only held (reserved = total), never created or changed.
   */
  problem: string;
}

export interface DesiredOptions {
  /** The compute node provider name of a Berth host (default: the host name). */
  nodename: (host: string) => string;
  /** Traits this Placement knows as standard. */
  standardTraits: ReadonlySet<string>;
  /** Whether this scheduler speaks for the host (with a shared database: the hosts it follows). */
  ownsHost: (host: string) => boolean;
}

/** Why a device has no provider of its own making ('' when it has one). */
export function notReportedBecause(d: DeviceRecord): string {
  if (!d.present)
    return 'not seen by the last discovery: its provider goes (unless Placement holds an allocation)';
  if (d.attributes.physical_network) {
    return `physical_network ${d.attributes.physical_network}: a Neutron SR-IOV port, which Nova's translator does not report either`;
  }
  return '';
}

/** Why Placement must count the device as reserved ('' when Berth would hand it out). */
export function heldBecause(d: DeviceRecord, host: HostView | undefined): string {
  const reasons = unallocatableReasons(d);
  if (!host?.connected) reasons.push(`host ${d.host}'s agent is not connected`);
  return reasons.join('; ');
}

/** The provider name a device is counted under (whether or not it is reported). */
export const providerNameOf = (d: DeviceRecord, nodename: (host: string) => string): string =>
  providerNameFor(nodename(d.host), providerAddress(d));

export function desiredProviders(
  devices: Iterable<DeviceRecord>,
  hosts: ReadonlyMap<string, HostView>,
  opts: DesiredOptions,
): Map<string, DesiredProvider> {
  const out = new Map<string, DesiredProvider>();
  const sorted = [...devices].sort((a, b) =>
    a.host === b.host ? a.address.localeCompare(b.address) : a.host.localeCompare(b.host),
  );
  for (const d of sorted) {
    if (!opts.ownsHost(d.host) || notReportedBecause(d)) continue;
    const nodename = opts.nodename(d.host);
    const name = providerNameFor(nodename, providerAddress(d));
    const rc = placementResourceClass(d);
    const traits = placementTraits(d, opts.standardTraits);
    const held = heldBecause(d, hosts.get(d.host));
    const counted: CountedDevice = { uuid: d.uuid, host: d.host, address: d.address, heldBecause: held };
    // A name Placement would refuse (an agent that did not normalise it) is never sent: the provider is only held.
    const invalid = [
      ...(isResourceClass(rc) ? [] : [`resource class ${JSON.stringify(rc)}`]),
      ...traits.filter((t) => !isTrait(t)).map((t) => `trait ${JSON.stringify(t)}`),
    ];
    const problem =
      invalid.length > 0
        ? `${d.address} has ${invalid.join(', ')}, not a valid Placement name (CUSTOM_[A-Z0-9_]+ or a standard name, at most 255 characters)`
        : '';
    const p = out.get(name);
    if (!p) {
      out.set(name, {
        name,
        uuid: providerUuid(name),
        host: d.host,
        nodename,
        resourceClass: rc,
        traits,
        total: 1,
        reserved: held ? 1 : 0,
        devices: [counted],
        problem,
      });
      continue;
    }
    p.devices.push(counted);
    p.total += 1;
    if (held) p.reserved += 1;
    if (!p.problem && problem) {
      p.problem = problem;
    } else if (!p.problem && p.resourceClass !== rc) {
      p.problem = `the VFs of ${providerAddress(d)} have different resource classes (${p.resourceClass}, ${rc}): give them one (Nova refuses this too)`;
    } else if (!p.problem && p.traits.join() !== traits.join()) {
      p.problem = `the VFs of ${providerAddress(d)} have different traits ([${p.traits.join(', ')}], [${traits.join(', ')}]): give them one set (Nova refuses this too)`;
    }
  }
  for (const p of out.values()) if (p.problem) p.reserved = p.total;
  return out;
}
