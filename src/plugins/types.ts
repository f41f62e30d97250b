/**
 * Transport-neutral types shared by drivers, the agent and the simulator.
 * Nothing here imports grpc-js or generated code; the agent's gRPC layer
 * converts these to berth.agent.v1 messages.
 */

export type DeviceType = 'PCI' | 'NVME';
export type FunctionKind = 'PCI' | 'PF' | 'VF';
export type Health = 'healthy' | 'unhealthy';

/** One PCI function as read from sysfs, before any driver decides about it. */
export interface PciFunction {
  /** Lower-case full address, validated: 0000:3b:00.1 */
  address: string;
  /** Four lower-case hex digits. */
  vendorId: string;
  productId: string;
  /** Six lower-case hex digits (010802). */
  classCode: string;
  /** Subsystem vendor / device ids (four lower-case hex digits), when sysfs shows them. */
  subsystemVendorId?: string;
  subsystemProductId?: string;
  /** Kernel driver bound (basename of the driver link), null when none. */
  kernelDriver: string | null;
  /** The PF's address for a VF (physfn link), null otherwise. */
  physfn: string | null;
  /** Addresses of the VFs (virtfnN links), in N order. */
  virtfns: string[];
  /** sriov_totalvfs (0 when absent). */
  sriovTotalVfs: number;
  /** sriov_numvfs (0 when absent). */
  sriovNumVfs: number;
  /** IOMMU group number, null when the function has none. */
  iommuGroup: number | null;
  /** NUMA node, -1 when none. */
  numaNode: number;
  /** Network interfaces of the function (net/<name>). */
  netdevs: string[];
  /** NVMe controllers under the function (nvme/nvmeX). */
  nvmeControllers: string[];
  /**
   * Why the host itself uses the function (its disk holds a mounted file
   * system, its interface an address or a route; src/plugins/host-use.ts), when
   * it does. Filled in by discovery, not by the sysfs reader.
   */
  hostUse?: string[];
}

/**
 * A device as an agent reports it: proto berth.agent.v1.Device, field for
 * field (src/server/device-proto.ts maps it both ways), and the one record of
 * a device's facts: the scheduler's DeviceFacts is derived from it. A new
 * device field is written here and in the proto, and the mappers carry it
 * (docs/decisions.md 67).
 */
export interface ReportedDevice {
  address: string;
  vendorId: string;
  productId: string;
  classCode: string;
  kernelDriver: string | null;
  /** The Berth driver that manages it; the plugin host fills this in. */
  driver: string;
  type: DeviceType;
  functionKind: FunctionKind;
  physfn: string | null;
  iommuGroup: number | null;
  /** Other functions of the same IOMMU group. */
  iommuGroupPeers: string[];
  numaNode: number;
  resourceClass: string;
  traits: string[];
  managed: boolean;
  liveMigratable: boolean;
  oneTimeUse: boolean;
  supportsCleaning: boolean;
  /** Locked-in cleanup action, null when the device is not cleaned. */
  cleanupAction: string | null;
  health: Health;
  healthReason: string;
  /** Why the device must not be allocated on this host; '' when it may. */
  unallocatableReason: string;
  /** physical_network, trusted, remote_managed, nvme_controller, model, serial, ... */
  attributes: Record<string, string>;
  /**
   * The media the function gives access to (docs/media-identity.md). A driver
   * that leaves it out gets the weakest identity, the slot's, from the agent.
   */
  media?: MediaIdentity;
  /** What the agent's journal says of that media; the agent fills it in, never a driver. */
  mediaRecord?: MediaRecord;
}

/** A device a driver manages, as discovery reports it: what the agent reports, and what only the agent reads. */
export interface DiscoveredDevice extends ReportedDevice {
  /**
   * Its device_spec entry says `assume_clean`: media Berth never cleaned is
   * declared clean instead of cleaned before its first offer. Set by drivers
   * that clean devices, only when true.
   */
  assumeClean?: boolean;
  /**
   * NVMe: the write counters of the controller's SMART / Health log as
   * discovery read them (absent when it could not ask: no controller, or the
   * log could not be read). The agent judges them against its journal and
   * does not keep them in its inventory (they change with every write).
   */
  writeCounters?: WriteCounters;
}

/**
 * What a media counts of the writes it served (NVMe SMART / Health log, log
 * page 02h), as read through one controller: the counters are the
 * controller's, so they compare only with counters of the same one (its
 * cntlid). 128-bit counters as decimal strings: exact, and JSON-safe.
 */
export interface WriteCounters {
  /** The controller they were read through (nvmeX) and its id (cntlid). */
  controller: string;
  cntlid: number;
  dataUnitsWritten: string;
  hostWriteCommands: string;
  powerCycles: string;
  powerOnHours: string;
  /** ms since the epoch, the agent's clock: when they were read. */
  at: number;
}

/** What a media identity is read from (proto MediaIdentityKind). */
export type MediaIdentityKind = 'NVME_SUBSYSTEM' | 'PCI_DSN' | 'PCI_SLOT';

/** One NVMe namespace's identifiers; '' where the namespace reports none. */
export interface NamespaceIdentity {
  nsid: number;
  nguid: string;
  eui64: string;
  uuid: string;
}

/** The media behind a device (proto berth.agent.v1.MediaIdentity). */
export interface MediaIdentity {
  /** Equal keys reach the same media, on any host: `nvme:<subsysnqn>`, `pci-dsn:…`, `pci-slot:…`. */
  key: string;
  kind: MediaIdentityKind;
  subsystemNqn: string;
  serial: string;
  model: string;
  namespaces: NamespaceIdentity[];
  /** PCIe Device Serial Number as lspci prints it, '' when none. */
  deviceSerialNumber: string;
}

/** What an agent's journal says of the data on a media (proto MediaCondition). */
export type MediaCondition = 'clean' | 'held' | 'dirty' | 'declared_clean' | 'not_cleanable';

/** An agent journal's entry for one media (proto berth.agent.v1.MediaRecord). */
export interface MediaRecord {
  key: string;
  condition: MediaCondition;
  burned: boolean;
  /**
   * ms since the epoch, the agent's clock: when the condition or the burn last
   * changed; 0 when the journal keeps no record (a device not cleaned and never
   * burned).
   */
  since: number;
  lastAddress: string;
  /** While held: the binding it is held for ('' otherwise). */
  arqUuid: string;
  instanceUuid: string;
  /**
   * Why it is dirty, or burned without a binding (its custody broke, or a
   * one-time-use media was seen with no record); '' otherwise (and from an
   * agent before custody). Decision 62.
   */
  reason: string;
  /**
   * While clean or declared clean: the write counters the record was made
   * with (read right after the proven cleanup, or at the first look); a
   * media whose counters moved since is dirty (docs/media-identity.md).
   */
  writeCounters?: WriteCounters;
}

/** A function a driver's device_spec matched but that it will not offer. */
export interface ExcludedDevice {
  address: string;
  driver: string;
  reason: string;
}

export interface DiscoveryResult {
  devices: DiscoveredDevice[];
  excluded: ExcludedDevice[];
}

export type CleanupPhase = 'preparing' | 'sanitizing' | 'namespace_reset' | 'zeroing' | 'verifying';

const CLEANUP_ENDS = ['succeeded', 'failed', 'interrupted'] as const;
/** How a cleanup job ended: its last event's phase, and the job's state from then on. */
export type CleanupEnd = (typeof CLEANUP_ENDS)[number];
/**
 * The phase of a cleanup job's event (proto berth.agent.v1.CleanupPhase), the
 * agent's and the scheduler's alike: queued, the driver's phases, then how it ended.
 */
export type CleanupJobPhase = 'queued' | CleanupPhase | CleanupEnd;
/** Whether a phase (or a job's state) is one a cleanup job ends with. */
export const endsCleanup = (phase: string): phase is CleanupEnd =>
  (CLEANUP_ENDS as readonly string[]).includes(phase);

export interface CleanupProgress {
  phase: CleanupPhase;
  /** Finer step name: sanitize-log, write-zeroes, create-ns, shred, ... */
  step?: string;
  /** 0..100 */
  percent?: number;
  bytesDone?: number;
  bytesTotal?: number;
  message?: string;
}
