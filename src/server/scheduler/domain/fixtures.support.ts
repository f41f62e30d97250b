/**
 * Device facts (and host registrations) for tests of the scheduler's domain and store, and for the
 * benchmarks: test support (`*.support.ts`), which no production module may import.
 */

import {
  type HostName,
  type InstanceId,
  type PciAddress,
  parseHostName,
  parseInstanceId,
  parsePciAddress,
  parseTag,
  type Tag,
  type Uuid,
} from '../../../identifiers.js';
import type { CleanupProof } from '../../../plugins/cleanup-evidence.js';
import type { MediaRecord } from '../../../plugins/types.js';
import type { DeviceFacts } from './device-state.js';
import type { HostRegistration } from './host.js';

/** A host name a test writes as text, parsed as at the edge. */
export const hostName = (name: string): HostName => parseHostName('host', name);
/** An instance id a test writes as text, parsed as at the edge. */
export const instanceId = (id: string): InstanceId => parseInstanceId('instance_uuid', id);
/** Device role tags a test writes as text, parsed as at the edge. */
export const tags = (...values: string[]): Tag[] => values.map((t) => parseTag('tag', t));
/** A PCI address a test writes as text, parsed as at the edge. */
export const pci = (address: string): PciAddress => parsePciAddress('address', address);
/** A test's stand-in for a uuid (`d-1`): the store keys records by it and never parses it. */
export const testUuid = (id: string): Uuid => id as Uuid;

/** An agent's registration of host `name` (no features, no drivers). */
export const hostRegistration = (name: string, agentEpoch = 'e'): HostRegistration => ({
  name: hostName(name),
  endpoint: `${name}:1`,
  bootId: 'b',
  agentEpoch,
  agentVersion: 'v',
  features: [],
  drivers: [],
});

export interface FactsOptions extends Partial<Omit<DeviceFacts, 'address'>> {
  /** Shorthand: device index → address 0000:<bus>:00.0 and IOMMU group. */
  index?: number;
  /** Parsed (pci()). */
  address?: string;
}

/** A healthy NVMe-like device (cleaned with sanitize-crypto) unless overridden. */
export function facts(opts: FactsOptions = {}): DeviceFacts {
  const i = opts.index ?? 0;
  const bus = (0x10 + i).toString(16).padStart(2, '0');
  const { index: _ignored, address, ...rest } = opts;
  return {
    address: pci(address ?? `0000:${bus}:00.0`),
    vendorId: '144d',
    productId: 'a808',
    classCode: '010802',
    kernelDriver: 'nvme',
    driver: 'nvme',
    type: 'NVME',
    functionKind: 'PCI',
    physfn: null,
    iommuGroup: 100 + i,
    iommuGroupPeers: [],
    numaNode: 0,
    resourceClass: 'CUSTOM_NVME_144D_A808',
    traits: ['OWNER_BERTH', 'HW_NVME_CES'],
    managed: true,
    liveMigratable: false,
    oneTimeUse: false,
    supportsCleaning: true,
    cleanupAction: 'sanitize-crypto',
    health: 'healthy',
    healthReason: '',
    unallocatableReason: '',
    attributes: {},
    media: null,
    agentMedia: null,
    ...rest,
  };
}

/** A plain PCI function that is not cleaned. */
export function pciFacts(opts: FactsOptions = {}): DeviceFacts {
  return facts({
    vendorId: '10de',
    productId: '25b6',
    classCode: '030200',
    kernelDriver: 'vfio-pci',
    driver: 'pci',
    type: 'PCI',
    resourceClass: 'CUSTOM_PCI_10DE_25B6',
    traits: ['OWNER_BERTH'],
    supportsCleaning: false,
    cleanupAction: null,
    ...opts,
  });
}

/**
 * The media identity of an NVMe controller of subsystem `nqn`, and its agent's
 * journal record (`condition`, default clean; `since` ms on the agent's clock).
 */
export function nvmeMedia(
  nqn: string,
  record: Partial<MediaRecord> | null = {},
): Pick<DeviceFacts, 'media' | 'agentMedia'> {
  const key = `nvme:${nqn}`;
  return {
    media: {
      key,
      kind: 'NVME_SUBSYSTEM',
      subsystemNqn: nqn,
      serial: nqn.split(':').at(-1) ?? '',
      model: 'Berth Sim NVMe',
      namespaces: [{ nsid: 1, nguid: '', eui64: '', uuid: '' }],
      deviceSerialNumber: '',
    },
    agentMedia:
      record === null
        ? null
        : {
            key,
            condition: 'clean',
            burned: false,
            since: 1,
            lastAddress: '',
            arqUuid: '',
            instanceUuid: '',
            reason: '',
            ...record,
          },
  };
}

/** A proof of erasure as an agent reports it with a successful cleanup. */
export const PROOF: CleanupProof = {
  method: 'sanitize',
  readBack: 'sample',
  bytesWritten: 0,
  bytesRead: 4096,
  bytesTotal: 1 << 20,
  findings: ['nvme0n1: the sanitize log shows this sanitize completed'],
};
