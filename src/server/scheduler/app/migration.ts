/**
 * Live migration of a guest with passthrough devices
 * (specs/live-migration-variant-drivers.txt), in three steps.
 *
 * Plan: one unit checks every bound device is live-migratable and claims a
 * matching device on the destination for each, atomically (so two plans
 * racing for the same destination devices cannot both win). The destination
 * agent then checks each claimed device (PrepareMigration) and records the
 * claimed devices that are cleaned (RecordBinding, invariant 9); if any is not
 * ready, or the agent cannot be reached, the claims are released before the
 * error is returned — a refused plan never leaves devices reserved. Otherwise
 * the destination XML is the instance's XML with only the host source
 * addresses replaced: guest addresses and aliases stay as they are.
 *
 * Commit hands the instance's ARQs to the destination devices and sends the
 * source devices down their normal release path (cleanup or burn); abort
 * releases the destination claims. Both are idempotent. Released devices'
 * cleanups are dispatched when the unit commits (the use cases' change feed).
 */
import { BerthError, failedPrecondition, notFound } from '../../../errors.js';
import type { Uuid } from '../../../identifiers.js';
import { recordedByAgent } from '../domain/device-state.js';
import {
  claimPairs,
  type MigrationRecord,
  type PlanMigrationRequest,
  type Readiness,
} from '../domain/migration.js';
import { rewriteSourceAddresses } from '../guest/hostdev-xml.js';
import type { UseCases } from '../usecases/use-cases.js';
import { type AgentPort, MIGRATION_FEATURE, type PreparedDevice } from './agent-port.js';
import type { Binding } from './binding.js';
import type { Instances } from './instances.js';

/** How long the destination agent gets to check every claimed device. */
const PREPARE_TIMEOUT_MS = 30_000;

/** The feature an agent advertises when it prepares migrations. */

export interface MigrationsDeps {
  useCases: UseCases;
  agents: AgentPort;
  binding: Binding;
  instances: Instances;
}

/** A plan the destination refused, as the caller sees it (also for a retried request). */
function notReadyError(m: MigrationRecord, readiness: readonly Readiness[]): BerthError {
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
}

export class Migrations {
  constructor(private readonly deps: MigrationsDeps) {}

  /** PlanLiveMigration: claim, prepare on the destination, render its XML. */
  async plan(req: PlanMigrationRequest): Promise<MigrationRecord> {
    const { useCases } = this.deps;
    const instance = req.instanceUuid;
    const arqs = await useCases.listArqs(instance);
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
    await useCases.assignGuestAddresses(instance);
    const m = await useCases.planMigration(req);
    // A retried request: report what the first attempt ended in.
    if (m.state === 'aborted' && m.readiness.some((r) => !r.ready)) throw notReadyError(m, m.readiness);
    if (m.state !== 'planned' || m.destinationXml !== '') return m;
    return this.prepare(m);
  }

  /** CommitMigration: FAILED_PRECONDITION until the plan was prepared. */
  async commit(uuid: Uuid): Promise<MigrationRecord> {
    const { useCases } = this.deps;
    const current = await useCases.getMigration(uuid);
    if (current.state === 'planned' && current.destinationXml === '') {
      throw failedPrecondition(
        'MIGRATION_NOT_PREPARED',
        `migration ${uuid} has not been prepared on ${current.destinationHost} yet`,
        { migration_uuid: uuid },
      );
    }
    return (await useCases.commitMigration(uuid)).migration;
  }

  /** Release the destination claims of a plan that will not go ahead. */
  private async release(m: MigrationRecord, readiness: Readiness[]): Promise<void> {
    await this.deps.useCases.setMigrationDetails(m.uuid, { readiness });
    await this.deps.useCases.abortMigration(m.uuid);
  }

  /** What to send the destination agent: its device, the source's identity, and whether it must be pre-bound. */
  private async migrationDevices(m: MigrationRecord): Promise<PreparedDevice[]> {
    const out: PreparedDevice[] = [];
    for (const [srcUuid, dstUuid] of claimPairs(m)) {
      const src = await this.deps.useCases.getDevice({ uuid: srcUuid });
      const dst = await this.deps.useCases.getDevice({ uuid: dstUuid });
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
  private async recordDestinationBindings(
    m: MigrationRecord,
  ): Promise<{ address: string; error: BerthError } | null> {
    const arqs = await this.deps.useCases.listArqs(m.instanceUuid);
    // The instance's project, when its ARQs came through the Cyborg API (their owner is a project).
    const project = arqs.some((a) => a.project)
      ? ((await this.deps.useCases.instanceOwner(m.instanceUuid)) ?? '')
      : '';
    for (const [srcUuid, dstUuid] of claimPairs(m)) {
      const dst = await this.deps.useCases.getDevice({ uuid: dstUuid });
      if (!recordedByAgent(dst)) continue;
      const arq = arqs.find((a) => a.deviceUuid === srcUuid);
      const error = await this.deps.binding.record(
        dst,
        arq?.uuid ?? '',
        m.instanceUuid,
        `migration ${m.uuid} was refused and its claims released`,
        project,
      );
      if (error) return { address: dst.address, error };
    }
    return null;
  }

  /** PrepareMigration on the destination, then the destination XML; claims released on any failure. */
  private async prepare(m: MigrationRecord): Promise<MigrationRecord> {
    const { agents, useCases, instances } = this.deps;
    const devices = await this.migrationDevices(m);
    const refuseAll = (reason: string): Readiness[] =>
      devices.map((d) => ({ address: d.address, ready: false, reason }));
    // The destination may be followed by another scheduler sharing the database.
    await agents.refresh([m.destinationHost]);
    const unreachable = async (why: string): Promise<never> => {
      const reason = `destination agent on ${m.destinationHost} unreachable: ${why}`;
      await this.release(m, refuseAll(reason));
      throw new BerthError(
        'UNAVAILABLE',
        `migration ${m.uuid}: ${reason}; the destination claims were released, plan again with a new request_id`,
        { reason: 'AGENT_UNAVAILABLE', metadata: { host: m.destinationHost, migration_uuid: m.uuid } },
      );
    };
    const link = agents.get(m.destinationHost);
    if (!link) return unreachable('the agent has not registered with any scheduler');
    if (!link.has(MIGRATION_FEATURE)) {
      const reason = `the agent on ${m.destinationHost} does not support ${MIGRATION_FEATURE}`;
      await this.release(m, refuseAll(reason));
      throw failedPrecondition('AGENT_CANNOT_MIGRATE', `migration ${m.uuid}: ${reason}`, {
        host: m.destinationHost,
      });
    }
    let responses: Readiness[];
    try {
      responses = await link.prepareMigration(m.uuid, devices, PREPARE_TIMEOUT_MS);
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      if (agents.failure(err).unreachable) return unreachable(message);
      const reason = `the destination agent refused PrepareMigration: ${message}`;
      await this.release(m, refuseAll(reason));
      throw failedPrecondition('MIGRATION_PREPARE_FAILED', `migration ${m.uuid}: ${reason}`, {
        migration_uuid: m.uuid,
      });
    }
    const readiness: Readiness[] = devices.map((d) => {
      const r = responses.find((x) => x.address === d.address);
      return r
        ? { address: d.address, ready: r.ready, reason: r.reason }
        : { address: d.address, ready: false, reason: 'the destination agent reported nothing for it' };
    });
    if (readiness.some((r) => !r.ready)) {
      await this.release(m, readiness);
      throw notReadyError(m, readiness);
    }
    // Invariant 9: the destination agent records every claimed device that is
    // cleaned before the plan is acknowledged — the guest may write to it from
    // the moment it moves. An agent that cannot undoes the plan (the claims go
    // through their cleanup, as on abort).
    const refused = await this.recordDestinationBindings(m);
    if (refused) {
      await this.release(
        m,
        readiness.map((r) =>
          r.address === refused.address ? { ...r, ready: false, reason: refused.error.message } : r,
        ),
      );
      throw refused.error;
    }
    try {
      const { xml } = await instances.hostdevs(m.instanceUuid);
      const destinationXml = rewriteSourceAddresses(xml, m.addressMap);
      return await useCases.setMigrationDetails(m.uuid, { readiness, destinationXml });
    } catch (err) {
      await this.release(m, readiness);
      throw err;
    }
  }
}
