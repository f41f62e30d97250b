/**
 * MigrationService: live migration of a guest with passthrough devices
 * (specs/live-migration-variant-drivers.txt), in three steps.
 *
 * Plan: the store checks every bound device is live-migratable and claims a
 * matching device on the destination for each, atomically (so two plans
 * racing for the same destination devices cannot both win). The destination
 * agent then checks each claimed device (PrepareMigration); if any is not
 * ready, or the agent cannot be reached, the claims are released before the
 * error is returned — a refused plan never leaves devices reserved. Otherwise
 * the destination XML is the instance's XML with only the host source
 * addresses replaced: guest addresses and aliases stay as they are.
 *
 * Commit hands the instance's ARQs to the destination devices and sends the
 * source devices down their normal release path (cleanup or burn); abort
 * releases the destination claims. Both are idempotent.
 */

import { BerthError, failedPrecondition, notFound } from '../../../errors.js';
import type { MigrationDevice, PrepareMigrationResponse } from '../../../gen/berth/agent/v1/agent.js';
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
import type { SchedulerCore } from '../core.js';
import { recordedByAgent } from '../domain/device-state.js';
import { rewriteSourceAddresses } from '../guest/hostdev-xml.js';
import { isUnreachable } from '../runtime/agent-link.js';
import { recordOne } from '../runtime/binding-recorder.js';
import type { MigrationRecord } from '../store/store.js';
import { dispatchReleased } from './arq-service.js';
import { renderInstanceHostdevs } from './instance-service.js';
import { optionalRequestId, requireHost, requireInstance, requireUuid } from './validate.js';

/** How long the destination agent gets to check every claimed device. */
const PREPARE_TIMEOUT_MS = 30_000;

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

type Readiness = MigrationRecord['readiness'];

const notReadyError = (m: MigrationRecord, readiness: Readiness): BerthError => {
  const bad = readiness.filter((r) => !r.ready);
  return failedPrecondition(
    'MIGRATION_DEVICE_NOT_READY',
    `migration ${m.uuid} of instance ${m.instanceUuid} to ${m.destinationHost} was refused and its claims released; ` +
      `destination devices not ready: ${bad.map((r) => `${r.address}: ${r.reason}`).join('; ')}`,
    {
      migration_uuid: m.uuid,
      devices: bad.map((r) => r.address).join(','),
    },
  );
};

export function migrationServiceBinding(core: SchedulerCore): ServiceBinding {
  const { store, hub, logger } = core;

  /** Release the destination claims of a plan that will not go ahead. */
  async function release(m: MigrationRecord, readiness: Readiness): Promise<void> {
    await store.setMigrationDetails(m.uuid, { readiness });
    const { released } = await store.abortMigration(m.uuid);
    hub.notify();
    dispatchReleased(core, released);
  }

  /** What to send the destination agent: its device, the source's identity, and whether it must be pre-bound. */
  async function migrationDevices(m: MigrationRecord): Promise<MigrationDevice[]> {
    const out: MigrationDevice[] = [];
    for (const [srcUuid, dstUuid] of Object.entries(m.claims)) {
      const src = await store.getDevice({ uuid: srcUuid });
      const dst = await store.getDevice({ uuid: dstUuid });
      out.push({
        address: dst.address,
        vendorId: src.vendorId,
        productId: src.productId,
        // The XML keeps the source's managed attribute; a destination device the
        // operator pre-binds must be on VFIO either way.
        managed: src.managed && dst.managed,
        sourceAddress: src.address,
      });
    }
    return out;
  }

  /** RecordBinding on the destination agent for each claimed device that is cleaned or one-time-use; the first refusal, or null. */
  async function recordDestinationBindings(
    m: MigrationRecord,
  ): Promise<{ address: string; error: BerthError } | null> {
    const arqs = await store.listArqs(m.instanceUuid);
    for (const [srcUuid, dstUuid] of Object.entries(m.claims)) {
      const dst = await store.getDevice({ uuid: dstUuid });
      if (!recordedByAgent(dst)) continue;
      const arq = arqs.find((a) => a.deviceUuid === srcUuid);
      const error = await recordOne(
        core,
        dst,
        arq?.uuid ?? '',
        m.instanceUuid,
        `migration ${m.uuid} was refused and its claims released`,
      );
      if (error) return { address: dst.address, error };
    }
    return null;
  }

  /** PrepareMigration on the destination, then the destination XML; claims released on any failure. */
  async function prepare(m: MigrationRecord): Promise<MigrationRecord> {
    const devices = await migrationDevices(m);
    // The destination may be followed by another scheduler sharing the database.
    await core.agents.refresh([m.destinationHost]);
    const unreachable = async (why: string): Promise<never> => {
      const reason = `destination agent on ${m.destinationHost} unreachable: ${why}`;
      await release(
        m,
        devices.map((d) => ({ address: d.address, ready: false, reason })),
      );
      throw new BerthError(
        'UNAVAILABLE',
        `migration ${m.uuid}: ${reason}; the destination claims were released, plan again with a new request_id`,
        { reason: 'AGENT_UNREACHABLE', metadata: { host: m.destinationHost, migration_uuid: m.uuid } },
      );
    };
    const link = core.agents.get(m.destinationHost);
    if (!link) return unreachable('the agent has not registered with any scheduler');
    if (!link.has('migration.v1')) {
      const reason = `the agent on ${m.destinationHost} does not support migration.v1`;
      await release(
        m,
        devices.map((d) => ({ address: d.address, ready: false, reason })),
      );
      throw failedPrecondition('AGENT_CANNOT_MIGRATE', `migration ${m.uuid}: ${reason}`, {
        host: m.destinationHost,
      });
    }
    let responses: PrepareMigrationResponse[];
    try {
      responses = await link.prepareMigration(m.uuid, devices, PREPARE_TIMEOUT_MS);
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      if (isUnreachable(err)) return unreachable(message);
      const reason = `the destination agent refused PrepareMigration: ${message}`;
      await release(
        m,
        devices.map((d) => ({ address: d.address, ready: false, reason })),
      );
      throw failedPrecondition('MIGRATION_PREPARE_FAILED', `migration ${m.uuid}: ${reason}`, {
        migration_uuid: m.uuid,
      });
    }
    const readiness: Readiness = devices.map((d) => {
      const r = responses.find((x) => x.address === d.address);
      return r
        ? { address: d.address, ready: r.ready, reason: r.reason }
        : { address: d.address, ready: false, reason: 'the destination agent reported nothing for it' };
    });
    if (readiness.some((r) => !r.ready)) {
      await release(m, readiness);
      throw notReadyError(m, readiness);
    }
    // Invariant 9: the destination agent records every claimed device that is
    // cleaned before the plan is acknowledged — the guest may write to it from
    // the moment it moves. An agent that cannot undoes the plan (the claims go
    // through their cleanup, as on abort).
    const refused = await recordDestinationBindings(m);
    if (refused) {
      await release(
        m,
        readiness.map((r) =>
          r.address === refused.address ? { ...r, ready: false, reason: refused.error.message } : r,
        ),
      );
      throw refused.error;
    }
    try {
      const { xml } = await renderInstanceHostdevs(store, m.instanceUuid);
      const destinationXml = rewriteSourceAddresses(xml, m.addressMap);
      return await store.setMigrationDetails(m.uuid, { readiness, destinationXml });
    } catch (err) {
      await release(m, readiness);
      throw err;
    }
  }

  const impl: MigrationServiceServer = {
    planLiveMigration: unary('PlanLiveMigration', logger, async (req: PlanLiveMigrationRequest) => {
      const instance = requireInstance('instance_uuid', req.instanceUuid);
      const destination = requireHost('destination_host', req.destinationHost);
      const requestId = optionalRequestId('request_id', req.requestId);
      const arqs = await store.listArqs(instance);
      if (arqs.length === 0) throw notFound('instance', instance);
      if (!arqs.some((a) => a.state === 'bound')) {
        throw failedPrecondition(
          'INSTANCE_NOT_BOUND',
          `instance ${instance} has no bound devices: bind its accelerator requests before planning a migration`,
          { instance_uuid: instance },
        );
      }
      // Guest addresses are fixed before the claim, so the destination XML
      // carries exactly the addresses the guest already sees.
      await store.assignGuestAddresses(instance);
      const m = await store.planMigration({
        instanceUuid: instance,
        destinationHost: destination,
        requestId,
      });
      hub.notify();
      // A retried request: report what the first attempt ended in.
      if (m.state === 'aborted' && m.readiness.some((r) => !r.ready)) throw notReadyError(m, m.readiness);
      if (m.state !== 'planned' || m.destinationXml !== '') return { migration: migrationToProto(m) };
      return { migration: migrationToProto(await prepare(m)) };
    }),

    commitMigration: unary('CommitMigration', logger, async (req: CommitMigrationRequest) => {
      const uuid = requireUuid('migration_uuid', req.migrationUuid);
      const current = await store.getMigration(uuid);
      if (current.state === 'planned' && current.destinationXml === '') {
        throw failedPrecondition(
          'MIGRATION_NOT_PREPARED',
          `migration ${uuid} has not been prepared on ${current.destinationHost} yet`,
          { migration_uuid: uuid },
        );
      }
      const { migration, released } = await store.commitMigration(uuid);
      hub.notify();
      dispatchReleased(core, released);
      return { migration: migrationToProto(migration) };
    }),

    abortMigration: unary('AbortMigration', logger, async (req: AbortMigrationRequest) => {
      const uuid = requireUuid('migration_uuid', req.migrationUuid);
      const { migration, released } = await store.abortMigration(uuid);
      hub.notify();
      dispatchReleased(core, released);
      return { migration: migrationToProto(migration) };
    }),
  };
  return {
    name: 'berth.scheduler.v1.MigrationService',
    definition: MigrationServiceService,
    implementation: impl,
  };
}
