/**
 * The Container Device Interface spec of a prepared claim (decision 75), and
 * of a device plugin allocation's container (decision 74, `cdi: true`): one
 * JSON file per claim (or container) in the CDI directory, which containerd, CRI-O and
 * podman read. Kind `<driver>/pci`; one CDI device per allocated device,
 * named `<claim uid>-<DRA device name>`. Whatever device of the claim a
 * container gets, it gets the spec's own edits too: the VFIO container node
 * `/dev/vfio/vfio` and KubeVirt's `PCI_RESOURCE_<NAME>` with the claim's PCI
 * addresses of that resource. Each device adds its IOMMU group's node
 * `/dev/vfio/<group>` (once per group) and `BERTH_<DEVICE NAME>=<address>`.
 */
import { unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { writeAtomically } from './dra-checkpoint.js';

/** The newest CDI version podman 4.3 (Debian 12) reads; this spec uses nothing later (hostPath is 0.5.0's). */
export const CDI_VERSION = '0.5.0';

export interface CdiInput {
  /** The CDI device's name within the kind. */
  name: string;
  address: string;
  iommuGroup: number | null;
  /** KubeVirt's variable for this device's resource (`PCI_RESOURCE_…`). */
  variable: string;
  /** This device's own variable (`BERTH_PCI_…`). */
  own: string;
}

interface DeviceNode {
  path: string;
  hostPath: string;
  type: 'c';
  permissions: 'rw';
}

export const cdiKind = (driver: string) => `${driver}/pci`;

/** A device's own variable, from its DRA-style name: `pci-0000-01-00-0` → `BERTH_PCI_0000_01_00_0`. */
export const ownVariable = (device: string) => `BERTH_${device.toUpperCase().replace(/-/g, '_')}`;

export const cdiId = (driver: string, name: string) => `${cdiKind(driver)}=${name}`;

export function cdiSpecPath(dir: string, driver: string, claimUid: string): string {
  return join(dir, `${driver}-${claimUid}.json`);
}

/** The spec of one claim's devices; `devRoot` is where the host's `vfio/` nodes are. */
export function cdiSpec(driver: string, devRoot: string, devices: readonly CdiInput[]): object {
  const node = (n: string): DeviceNode => ({
    path: `/dev/vfio/${n}`,
    hostPath: join(devRoot, 'vfio', n),
    type: 'c',
    permissions: 'rw',
  });
  const variables = new Map<string, string[]>();
  for (const d of devices) variables.set(d.variable, [...(variables.get(d.variable) ?? []), d.address]);
  const groups = new Set<number>();
  return {
    cdiVersion: CDI_VERSION,
    kind: cdiKind(driver),
    containerEdits: {
      env: [...variables].map(([k, v]) => `${k}=${v.join(',')}`),
      deviceNodes: [node('vfio')],
    },
    devices: devices.map((d) => {
      const fresh = d.iommuGroup !== null && !groups.has(d.iommuGroup);
      if (d.iommuGroup !== null) groups.add(d.iommuGroup);
      return {
        name: d.name,
        containerEdits: {
          env: [`${d.own}=${d.address}`],
          ...(fresh ? { deviceNodes: [node(String(d.iommuGroup))] } : {}),
        },
      };
    }),
  };
}

export async function writeCdiSpec(path: string, spec: object): Promise<void> {
  await writeAtomically(path, `${JSON.stringify(spec, null, 2)}\n`);
}

/** Removes a claim's spec; one already gone is fine. */
export async function removeCdiSpec(path: string): Promise<void> {
  await unlink(path).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'ENOENT') throw err;
  });
}
