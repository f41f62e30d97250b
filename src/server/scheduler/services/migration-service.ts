/** MigrationService: live migration of a guest with passthrough devices (app/migration.ts). */

import type { Logger } from 'pino';
import {
  type AbortMigrationRequest,
  type CommitMigrationRequest,
  type Migration,
  type MigrationServiceServer,
  MigrationServiceService,
  MigrationState,
  type PlanLiveMigrationRequest,
} from '../../../gen/berth/scheduler/v1/migration.js';
import { unary } from '../../grpc/handlers.js';
import type { ServiceBinding } from '../../grpc/server.js';
import type { Migrations } from '../app/migration.js';
import type { MigrationRecord } from '../domain/migration.js';
import type { UseCases } from '../usecases/use-cases.js';
import { optionalRequestId, requireHost, requireInstance, requireUuid } from './validate.js';

const STATES: Record<MigrationRecord['state'], MigrationState> = {
  planned: MigrationState.MIGRATION_STATE_PLANNED,
  committed: MigrationState.MIGRATION_STATE_COMMITTED,
  aborted: MigrationState.MIGRATION_STATE_ABORTED,
};

export function migrationToProto(m: MigrationRecord): Migration {
  return {
    uuid: m.uuid,
    instanceUuid: m.instanceUuid,
    sourceHost: m.sourceHost,
    destinationHost: m.destinationHost,
    state: STATES[m.state],
    pciDevMapSrcDst: { ...m.addressMap },
    destinationXml: m.destinationXml,
    readiness: m.readiness.map((r) => ({ ...r })),
    createdAt: new Date(m.createdAt),
  };
}

export function migrationServiceBinding(
  { useCases, migrations }: { useCases: UseCases; migrations: Migrations },
  logger: Logger,
): ServiceBinding {
  const impl: MigrationServiceServer = {
    planLiveMigration: unary('PlanLiveMigration', logger, async (req: PlanLiveMigrationRequest) => {
      const m = await migrations.plan({
        instanceUuid: requireInstance('instance_uuid', req.instanceUuid),
        destinationHost: requireHost('destination_host', req.destinationHost),
        requestId: optionalRequestId('request_id', req.requestId),
      });
      return { migration: migrationToProto(m) };
    }),

    commitMigration: unary('CommitMigration', logger, async (req: CommitMigrationRequest) => ({
      migration: migrationToProto(await migrations.commit(requireUuid('migration_uuid', req.migrationUuid))),
    })),

    abortMigration: unary('AbortMigration', logger, async (req: AbortMigrationRequest) => ({
      migration: migrationToProto(
        (await useCases.abortMigration(requireUuid('migration_uuid', req.migrationUuid))).migration,
      ),
    })),
  };
  return {
    name: 'berth.scheduler.v1.MigrationService',
    definition: MigrationServiceService,
    implementation: impl,
  };
}
