/** Live migrations as the scheduler records them (specs/live-migration-variant-drivers.txt). */

import type { HostName, Uuid } from '../../../identifiers.js';
import type { DeviceRecord } from './device-state.js';

export type MigrationState = 'planned' | 'committed' | 'aborted';

/** Whether the destination agent found one claimed device ready (PrepareMigration). */
export interface Readiness {
  address: string;
  ready: boolean;
  reason: string;
}

export interface MigrationRecord {
  uuid: Uuid;
  instanceUuid: string;
  /** '' for an instance that had no bound device. */
  sourceHost: string;
  destinationHost: HostName;
  state: MigrationState;
  /** Source PCI address → destination PCI address. */
  addressMap: Record<string, string>;
  /** Source device uuid → claimed destination device uuid. */
  claims: Record<Uuid, Uuid>;
  destinationXml: string;
  readiness: Readiness[];
  requestId: string | null;
  createdAt: string;
}

export interface PlanMigrationRequest {
  instanceUuid: string;
  destinationHost: HostName;
  requestId?: string;
}

/** A plan's claims as (source device, destination device) pairs: the keys were written from device uuids. */
export const claimPairs = (m: Pick<MigrationRecord, 'claims'>): Array<[Uuid, Uuid]> =>
  Object.entries(m.claims) as Array<[Uuid, Uuid]>;

export interface MigrationOutcome {
  migration: MigrationRecord;
  released: DeviceRecord[];
}
