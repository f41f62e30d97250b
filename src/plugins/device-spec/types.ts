/**
 * Types of a parsed `device_spec` entry (DESIGN.md "Device specifications").
 * Parsing normalises everything once, at agent start, so matching during every
 * discovery pass is plain string comparison and never has to re-validate.
 */
import type { PciFunction } from '../types.js';

/** What an NVMe device is scrubbed with between tenants; `auto` lets the driver pick from the controller's capabilities. */
export type ClearAction = 'auto' | 'sanitize' | 'zero';
/** How a sanitize/format erases: `crypto` (key destruction) or `block` (overwrite); `auto` lets the driver pick. */
export type ClearStrategy = 'auto' | 'crypto' | 'block';

/**
 * A glob address (`[[[domain]:]bus]:][slot][.[function]]`). Parts are
 * normalised lower-case and zero-padded (domain 4, bus 2, slot 2, function 1)
 * so matching is string equality; `'*'` matches anything.
 */
export interface AddressGlob {
  kind: 'glob';
  domain: string | '*';
  bus: string | '*';
  slot: string | '*';
  function: string | '*';
  /** No wildcard anywhere: the glob names exactly one function (and, if that is a PF, its VFs too). */
  exact: boolean;
}

/**
 * The object form of `address`: one Python regular expression per field
 * (translated by python-regex.ts), each anchored at the start of the field
 * only (Nova uses Python's `re.match`).
 * The stored RegExps are already start-anchored, so `re.test(field)` is the
 * whole check; a missing field is `undefined` and matches anything.
 */
export interface AddressRegex {
  kind: 'regex';
  domain?: RegExp;
  bus?: RegExp;
  slot?: RegExp;
  function?: RegExp;
  /**
   * Nova treats a regex address whose four fields are all given as plain hex
   * as naming one function (and checks whether it is a PF, so it matches that
   * PF's VFs). This is that address, when the four fields form a valid
   * lower-case PCI address; null otherwise.
   */
  singleAddress: string | null;
}

export interface DeviceSpecEntry {
  /** Position in the (flattened) list, for messages. */
  index: number;
  /** Where the entry came from, e.g. 'pci.device_spec[2]' (or 'pci.device_spec[2][0]' for a JSON string holding a list). */
  source: string;
  /** 4 lower-case hex digits; null = any. */
  vendorId: string | null;
  productId: string | null;
  address: AddressGlob | AddressRegex | null;
  /** Network interface whose PCI function (and, for a PF, its VFs) the entry names. */
  devname: string | null;
  /** Default true: libvirt detaches/reattaches the device. */
  managed: boolean;
  /** Default false. */
  liveMigratable: boolean;
  /** Default false. Only meaningful for PFs and plain functions; the driver decides about VFs. */
  oneTimeUse: boolean;
  /** Default 'auto'; only accepted when ParseOptions.cleanupKeys. */
  clearAction: ClearAction;
  /** Default 'auto'; only accepted when ParseOptions.cleanupKeys. */
  clearStrategy: ClearStrategy;
  /**
   * Default false: media Berth never cleaned is cleaned before its first
   * offer. True: it is declared clean instead (logged). Only accepted when
   * ParseOptions.cleanupKeys.
   */
  assumeClean: boolean;
  /** Normalised the Placement way (CUSTOM_ prefix, upper-case, [A-Z0-9_]); null = the driver's default. */
  resourceClass: string | null;
  /** Normalised, de-duplicated, in the order given. */
  traits: string[];
  /** physical_network, trusted, remote_managed when given (booleans as 'true'/'false'). */
  attributes: Record<string, string>;
  /**
   * `allow_no_iommu: true`: the function the entry's exact address names is
   * offered without an IOMMU group (absent = false; only with an exact address).
   */
  allowNoIommu?: true;
  /**
   * `allow_host_device: true`: the function the entry's exact address names is
   * offered although the host uses it (absent = false; only with an exact address).
   */
  allowHostDevice?: true;
}

export interface ParseOptions {
  /** The config section the list came from ('pci', 'nvme', a driver name); it prefixes every message. */
  section: string;
  /** Accept clear_action / clear_strategy / assume_clean (the NVMe driver); otherwise they are unknown keys. */
  cleanupKeys: boolean;
}

/**
 * What matching needs from the host: functions by address (to tell whether an
 * exact address names an SR-IOV PF) and netdev resolution for `devname`
 * (/sys/class/net/<name>/device). Injected so tests and the simulator need no sysfs.
 */
export interface FunctionLookup {
  get(address: string): PciFunction | undefined;
  /** The PCI address behind a network interface, null when there is none. */
  netdevAddress(name: string): string | null;
}
