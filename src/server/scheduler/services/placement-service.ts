/** PlacementService: how Berth keeps OpenStack Placement in step (placement/). */

import type { Logger } from 'pino';
import { BerthError, failedPrecondition } from '../../../errors.js';
import {
  type PlacementChange as PlacementChangePb,
  PlacementMode,
  type PlacementServiceServer,
  PlacementServiceService,
  type PlacementStatus as PlacementStatusPb,
  type SyncPlacementRequest,
} from '../../../gen/berth/scheduler/v1/placement.js';
import { callerOf } from '../../grpc/caller.js';
import { unary } from '../../grpc/handlers.js';
import type { ServiceBinding } from '../../grpc/server.js';
import { PlacementUnreachable } from '../placement/api.js';
import { PlacementIncompatible } from '../placement/connection.js';
import type { PlacementChange, PlacementPort, PlacementStatus } from '../placement/port.js';

const date = (iso: string | null) => (iso ? new Date(iso) : undefined);

export function placementStatusToProto(s: PlacementStatus): PlacementStatusPb {
  return {
    mode:
      s.mode === 'report'
        ? PlacementMode.PLACEMENT_MODE_REPORT
        : PlacementMode.PLACEMENT_MODE_CLEAN_ONE_TIME_USE,
    url: s.url,
    microversion: s.microversion,
    serverMaxVersion: s.serverMaxVersion,
    credentials: s.credentials,
    reachable: s.reachable,
    lastError: s.lastError,
    unreachableSince: date(s.unreachableSince),
    lastContactAt: date(s.lastContactAt),
    appliedRevision: s.appliedRevision,
    storeRevision: s.storeRevision,
    pendingProviders: s.pendingProviders,
    lagSeconds: s.lagSeconds,
    lastFullSyncAt: date(s.lastFullSyncAt),
    problems: s.problems.map((p) => ({ provider: p.provider, host: p.host, note: p.note })),
    held: s.held.map((h) => ({ provider: h.provider, host: h.host, consumers: h.consumers })),
    scrubsInProgress: s.scrubsInProgress,
    generationConflicts: s.generationConflicts,
  };
}

const changeToProto = (c: PlacementChange): PlacementChangePb => ({
  provider: c.provider,
  providerUuid: c.providerUuid,
  host: c.host,
  action: c.action,
  details: c.details,
  deviceAddresses: c.deviceAddresses,
});

function configured(placement: PlacementPort | null): PlacementPort {
  if (!placement) {
    throw failedPrecondition(
      'PLACEMENT_NOT_CONFIGURED',
      'this scheduler does not use Placement (start it with --placement-url and --placement-auth, or --placement-config)',
    );
  }
  return placement;
}

export function placementServiceBinding(port: PlacementPort | null, logger: Logger): ServiceBinding {
  const impl: PlacementServiceServer = {
    getPlacementStatus: unary('GetPlacementStatus', logger, async () => ({
      status: placementStatusToProto(configured(port).status()),
    })),
    syncPlacement: unary('SyncPlacement', logger, async (req: SyncPlacementRequest, ctx) => {
      const placement = configured(port);
      let changes: PlacementChange[];
      try {
        changes = await placement.sync({ dryRun: req.dryRun });
      } catch (err) {
        if (err instanceof PlacementUnreachable) {
          throw new BerthError('UNAVAILABLE', `Placement does not answer: ${err.message}`, {
            reason: 'PLACEMENT_UNREACHABLE',
          });
        }
        if (err instanceof PlacementIncompatible) {
          throw failedPrecondition('PLACEMENT_INCOMPATIBLE', err.message);
        }
        throw err;
      }
      if (!req.dryRun) {
        logger.info(
          { changes: changes.length, by: callerOf(ctx.metadata).subject },
          'Placement sync asked by an operator',
        );
      }
      return { changes: changes.map(changeToProto), dryRun: req.dryRun };
    }),
  };
  return {
    name: 'berth.scheduler.v1.PlacementService',
    definition: PlacementServiceService,
    implementation: impl,
  };
}
