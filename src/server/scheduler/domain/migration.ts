/** Live migrations as the scheduler records them (specs/live-migration-variant-drivers.txt). */

import type { DeviceRecord } from './device-state.js';

export type MigrationState = 'planned' | 'committed' | 'aborted';

/** Whether the destination agent found one claimed device ready (PrepareMigration). */
export interface Readiness {
  address: string;
  ready: boolean;
  reason: string;
}

export interface MigrationRecord {
  uuid: string;
  instanceUuid: string;
  sourceHost: string;
  destinationHost: string;
  state: MigrationState;
  /** Source PCI address → destination PCI address. */
  addressMap: Record<string, string>;
  /** Source device uuid → claimed destination device uuid. */
  claims: Record<string, string>;
  destinationXml: string;
  readiness: Readiness[];
  requestId: string | null;
  createdAt: string;
}

export interface PlanMigrationRequest {
  instanceUuid: string;
  destinationHost: string;
  requestId?: string;
}

export interface MigrationOutcome {
  migration: MigrationRecord;
  released: DeviceRecord[];
}
