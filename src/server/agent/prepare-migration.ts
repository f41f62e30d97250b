/**
 * Destination-side readiness of a device for an incoming live migration: it is
 * present now (re-read from sysfs, not trusted from the last discovery), has
 * the source device's vendor/product, and, when the operator pre-binds it
 * (managed = false), is bound to a VFIO driver (vfio-pci or a variant driver).
 */

import type { MigrationDevice, PrepareMigrationResponse } from '../../gen/berth/agent/v1/agent.js';
import { parsePciAddress } from '../../identifiers.js';
import { readPciFunction } from '../../plugins/pci/sysfs-reader.js';
import type { AgentConfig } from './config.js';
import type { Inventory } from './inventory.js';

/** What the check reads of the agent (agent.ts imports this module through agent-service.ts). */
interface MigrationTarget {
  readonly inventory: Inventory;
  readonly config: Pick<AgentConfig, 'host' | 'sysfsRoot'>;
}

export async function checkMigrationDevice(
  agent: MigrationTarget,
  d: MigrationDevice,
  field: string,
): Promise<PrepareMigrationResponse> {
  const address = parsePciAddress(`${field}.address`, d.address);
  const notReady = (reason: string): PrepareMigrationResponse => ({
    address: d.address,
    ready: false,
    reason,
  });
  const known = agent.inventory.get(d.address);
  if (!known) return notReady(`device ${d.address} is not managed by Berth on ${agent.config.host}`);
  const fn = await readPciFunction(agent.config.sysfsRoot, address);
  if (!fn) return notReady(`device ${d.address} is no longer present on ${agent.config.host}`);
  if (fn.vendorId !== d.vendorId || fn.productId !== d.productId) {
    return notReady(
      `device ${d.address} is ${fn.vendorId}:${fn.productId}, the source device ${d.sourceAddress || ''} is ${d.vendorId}:${d.productId}`.replace(
        '  ',
        ' ',
      ),
    );
  }
  if (!d.managed && !(fn.kernelDriver ?? '').includes('vfio')) {
    return notReady(
      `device ${d.address} is unmanaged (pre-bound by the operator) but bound to ${fn.kernelDriver ?? 'no driver'}, not a VFIO driver`,
    );
  }
  if (known.health !== 'healthy') return notReady(`device ${d.address} is unhealthy: ${known.healthReason}`);
  return { address: d.address, ready: true, reason: '' };
}
