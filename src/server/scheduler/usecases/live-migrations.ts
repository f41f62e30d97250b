/** Use cases: live migrations — plan (destination claims), details, commit, abort. */

import { failedPrecondition, invalidArgument } from '../../../errors.js';
import { newUuid, type Uuid } from '../../../identifiers.js';
import { describeRejections, type PickFn, pickDevice } from '../domain/allocation.js';
import { arqBound } from '../domain/arq.js';
import { adoptClaim, claimForMigration, type DeviceRecord } from '../domain/device-state.js';
import type { MigrationOutcome, MigrationRecord, PlanMigrationRequest } from '../domain/migration.js';
import type { RequestGroup } from '../domain/profile.js';
import { pickOnHost } from './allocate.js';
import { read, type Tx, type UseCaseDeps } from './context.js';
import {
  idempotent,
  mustDevice,
  mustHost,
  mustMigration,
  releaseHeld,
  remember,
  writeArq,
  writeDevice,
  writeMigration,
} from './records.js';
import { write } from './unit.js';
import { FOR_UPDATE, type UnitOfWork } from './unit-of-work.js';

/**
 * Check that every device bound to the instance is live-migratable and claim
 * a matching device on the destination for each, atomically.
 */
export async function planMigration(
  deps: UseCaseDeps,
  req: PlanMigrationRequest,
  pick: PickFn = pickDevice,
): Promise<MigrationRecord> {
  if (!req.instanceUuid) throw invalidArgument('instance_uuid', 'is required');
  if (!req.destinationHost) throw invalidArgument('destination_host', 'is required');
  return write(deps, async (tx) => {
    const key = req.requestId ? `migration:${req.requestId}` : undefined;
    const fingerprint = { instance: req.instanceUuid, destination: req.destinationHost };
    const seen = await idempotent<{ uuid: string }>(tx.uow, key, fingerprint);
    if (seen) return mustMigration(tx.uow, seen.uuid);
    await tx.uow.lockInstance(req.instanceUuid);
    await mustHost(tx.uow, req.destinationHost, FOR_UPDATE);
    const [open] = await tx.uow.plannedMigrations(req.instanceUuid);
    if (open) {
      throw failedPrecondition(
        'MIGRATION_IN_PROGRESS',
        `instance ${req.instanceUuid} already has planned migration ${open.uuid}`,
        { migration_uuid: open.uuid },
      );
    }
    const sources = [];
    for (const arq of await tx.uow.arqs({ instanceUuid: req.instanceUuid })) {
      if (arq.state === 'bound')
        sources.push({ arq, device: await mustDevice(tx.uow, { uuid: arq.deviceUuid! }) });
    }
    const sourceHost = sources[0]?.device.host ?? '';
    if (sourceHost === req.destinationHost) {
      throw invalidArgument('destination_host', `"${req.destinationHost}" is the instance's current host`);
    }
    // Only a profile that asked for live_migratable: yes makes its devices follow
    // the guest (live-migration-variant-drivers.txt); unset or no pins the guest,
    // even when the device it happened to get could move.
    const unasked = sources.filter((s) => s.arq.group.liveMigratable !== 'yes');
    if (unasked.length > 0) {
      const named = unasked.map(
        (s) =>
          `${s.device.address} (profile ${s.arq.profileName}, live_migratable ${s.arq.group.liveMigratable})`,
      );
      throw failedPrecondition(
        'PROFILE_NOT_LIVE_MIGRATABLE',
        `instance ${req.instanceUuid} cannot be live-migrated: its devices' profiles did not ask for live_migratable: yes: ${named.join(', ')}`,
        { devices: unasked.map((s) => s.device.address).join(',') },
      );
    }
    const stuck = sources.filter((s) => !s.device.liveMigratable).map((s) => s.device.address);
    if (stuck.length > 0) {
      throw failedPrecondition(
        'DEVICE_NOT_LIVE_MIGRATABLE',
        `instance ${req.instanceUuid} has devices that are not live-migratable on ${sourceHost}: ${stuck.join(', ')}`,
        { devices: stuck.join(',') },
      );
    }
    const uuid = newUuid();
    const addressMap: Record<string, string> = {};
    const claims: Record<Uuid, Uuid> = {};
    for (const { arq, device: src } of sources) {
      // The destination must match the source's identity, as PrepareMigration checks.
      const group: RequestGroup = {
        ...arq.group,
        resourceClass: '',
        vendorId: src.vendorId,
        productId: src.productId,
        liveMigratable: 'yes',
      };
      const { result } = await pickOnHost(tx.uow, req.destinationHost, group, pick);
      if (!result.device) {
        throw failedPrecondition(
          'NO_ALLOCATABLE_DEVICE',
          `no live-migratable ${src.vendorId}:${src.productId} device free on ${req.destinationHost} for ${src.address}: ${describeRejections(result.rejected)}`,
          { host: req.destinationHost },
        );
      }
      const dest = await writeDevice(
        tx,
        result.device,
        claimForMigration(result.device, { migrationUuid: uuid, instanceUuid: req.instanceUuid }),
      );
      addressMap[src.address] = dest.address;
      claims[src.uuid] = dest.uuid;
    }
    const m = await writeMigration(tx, {
      uuid,
      instanceUuid: req.instanceUuid,
      sourceHost,
      destinationHost: req.destinationHost,
      state: 'planned',
      addressMap,
      claims,
      destinationXml: '',
      readiness: [],
      requestId: req.requestId ?? null,
      createdAt: tx.now(),
    });
    await remember(tx, key, fingerprint, { uuid });
    return m;
  });
}

export async function setMigrationDetails(
  deps: UseCaseDeps,
  uuid: string,
  details: { destinationXml?: string; readiness?: MigrationRecord['readiness'] },
): Promise<MigrationRecord> {
  return write(deps, async (tx) => {
    const m = await mustMigration(tx.uow, uuid, FOR_UPDATE);
    return writeMigration(tx, {
      ...m,
      destinationXml: details.destinationXml ?? m.destinationXml,
      readiness: details.readiness ?? m.readiness,
    });
  });
}

export async function getMigration(deps: UseCaseDeps, uuid: string): Promise<MigrationRecord> {
  return read(deps, (r) => mustMigration(r, uuid));
}

/** ARQs move to the destination devices; source devices are released. Idempotent. */
export async function commitMigration(deps: UseCaseDeps, uuid: Uuid): Promise<MigrationOutcome> {
  return write(deps, async (tx) => {
    const m = await plannedOrDone(tx.uow, uuid, 'committed');
    if (m.state === 'committed') return { migration: m, released: [] };
    const released: DeviceRecord[] = [];
    for (const arq of await tx.uow.arqs({ instanceUuid: m.instanceUuid }, FOR_UPDATE)) {
      const destUuid = arq.deviceUuid ? m.claims[arq.deviceUuid] : undefined;
      if (!destUuid || !arq.deviceUuid) continue;
      const src = await mustDevice(tx.uow, { uuid: arq.deviceUuid }, FOR_UPDATE);
      const dest = await mustDevice(tx.uow, { uuid: destUuid }, FOR_UPDATE);
      if (src.arqUuid === arq.uuid) released.push(await releaseHeld(tx, src, { arqUuid: arq.uuid }));
      const adopted = await writeDevice(tx, dest, adoptClaim(dest, uuid, arq.uuid));
      // Move the ARQ: bound → bound on the destination (same state, new device).
      const moved = arqBound({ ...arq, state: 'bind_started' }, adopted, m.instanceUuid, arq.tag);
      // The guest keeps the managed mode it was bound with (the destination XML keeps the source's).
      await writeArq(tx, {
        ...moved,
        attachHandle: { ...moved.attachHandle!, managed: arq.attachHandle?.managed ?? adopted.managed },
      });
    }
    return { migration: await writeMigration(tx, { ...m, state: 'committed' }), released };
  });
}

/** Destination claims are released. Idempotent. */
export async function abortMigration(deps: UseCaseDeps, uuid: Uuid): Promise<MigrationOutcome> {
  return write(deps, async (tx) => {
    const m = await plannedOrDone(tx.uow, uuid, 'aborted');
    if (m.state === 'aborted') return { migration: m, released: [] };
    return abortPlanned(tx, m);
  });
}

/**
 * The migration, locked after its instance (the lock order); FAILED_PRECONDITION
 * unless it is planned or already in the state asked for (a retry).
 */
async function plannedOrDone(
  uow: UnitOfWork,
  uuid: string,
  target: 'committed' | 'aborted',
): Promise<MigrationRecord> {
  await uow.lockInstance((await mustMigration(uow, uuid)).instanceUuid);
  const m = await mustMigration(uow, uuid, FOR_UPDATE);
  if (m.state !== 'planned' && m.state !== target) {
    throw failedPrecondition('MIGRATION_NOT_PLANNED', `migration ${uuid} is ${m.state}`, {
      migration_uuid: uuid,
    });
  }
  return m;
}

/** Release a planned migration's destination claims and mark it aborted (inside a unit). */
export async function abortPlanned(tx: Tx, m: MigrationRecord): Promise<MigrationOutcome> {
  const released: DeviceRecord[] = [];
  for (const destUuid of Object.values(m.claims)) {
    const d = await tx.uow.device({ uuid: destUuid }, FOR_UPDATE);
    if (d && d.migrationUuid === m.uuid) released.push(await releaseHeld(tx, d, { migrationUuid: m.uuid }));
  }
  return { migration: await writeMigration(tx, { ...m, state: 'aborted' }), released };
}
