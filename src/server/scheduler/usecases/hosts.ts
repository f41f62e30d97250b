/** Use cases: hosts (registration, heartbeats, agent restarts). */

import { randomUUID } from 'node:crypto';
import { invalidArgument } from '../../../errors.js';
import { agentRestarted, type DeviceRecord, reportedHeldByAgent } from '../domain/device-state.js';
import type { HeldDeviceReport, HostRecord, HostRegistration } from '../store/store.js';
import { FOR_UPDATE } from '../store/unit-of-work.js';
import { read, type UseCaseDeps, write } from './context.js';
import { createJob, finishJob, mustHost, withCount, writeDevice, writeHost } from './records.js';

export async function registerHost(deps: UseCaseDeps, reg: HostRegistration): Promise<HostRecord> {
  if (!reg.name) throw invalidArgument('host', 'a host name is required');
  return write(deps, async (tx) => {
    const now = tx.now();
    const prev = await tx.uow.host(reg.name, FOR_UPDATE);
    return writeHost(tx, {
      ...reg,
      // The first principal stays: registering with another one is refused before this.
      ...(prev?.principal || reg.principal ? { principal: prev?.principal ?? reg.principal } : {}),
      features: [...reg.features],
      drivers: [...reg.drivers],
      registrations: (prev?.registrations ?? 0) + 1,
      connected: prev?.connected ?? false,
      registeredAt: now,
      lastSeen: now,
      // A new agent process numbers its inventory afresh.
      inventoryRevision: prev && prev.agentEpoch === reg.agentEpoch ? prev.inventoryRevision : 0,
      deviceCount: 0,
    });
  });
}

/** Invariant 3: cleaning devices go to error (job interrupted); pending_cleaning ones are re-dispatched. */
export async function reconcileAgentRestart(
  deps: UseCaseDeps,
  host: string,
): Promise<{ interrupted: DeviceRecord[]; toDispatch: DeviceRecord[] }> {
  return write(deps, async (tx) => {
    await mustHost(tx.uow, host);
    const now = tx.now();
    const interrupted: DeviceRecord[] = [];
    const toDispatch: DeviceRecord[] = [];
    const held = await tx.uow.devices({ host, states: ['cleaning', 'pending_cleaning'] }, FOR_UPDATE);
    for (const d of held) {
      if (d.deviceState === 'pending_cleaning') {
        toDispatch.push(d);
        continue;
      }
      const jobId = d.cleanupJobId;
      const next = await writeDevice(tx, d, agentRestarted(d, now));
      if (jobId) await finishJob(tx, jobId, 'interrupted', next.errorReason);
      interrupted.push(next);
    }
    return { interrupted, toDispatch };
  });
}

/**
 * Invariant 9, the agent's side: a device its agent records as holding tenant
 * data is never offered, whatever this database says. One it thinks available
 * (the binding was lost: a restored or rolled-back database, a lost WAL) goes
 * to pending_cleaning with a job; devices the inventory has not brought in yet
 * are reconciled at the next registration (until then RecordBinding refuses
 * to let them be bound).
 */
export async function reconcileHeldDevices(
  deps: UseCaseDeps,
  host: string,
  held: readonly HeldDeviceReport[],
): Promise<DeviceRecord[]> {
  if (held.length === 0) return [];
  // Most heartbeats change nothing: look before taking locks.
  const suspects = await read(deps, async (r) => {
    const out: string[] = [];
    for (const h of held) {
      const d = await r.device({ host, address: h.address });
      if (d?.deviceState === 'available') out.push(h.address);
    }
    return out;
  });
  if (suspects.length === 0) return [];
  return write(deps, async (tx) => {
    const moved: DeviceRecord[] = [];
    for (const address of suspects) {
      const d = await tx.uow.device({ host, address }, FOR_UPDATE);
      if (d?.deviceState !== 'available') continue;
      const jobId = randomUUID();
      const next = await writeDevice(tx, d, reportedHeldByAgent(d, jobId));
      if (next.deviceState === 'pending_cleaning') await createJob(tx, next, jobId, 'agent');
      moved.push(next);
    }
    return moved;
  });
}

/** Stamp the host: a heartbeat (lastSeen), and optionally its link state. */
export async function touchHost(
  deps: UseCaseDeps,
  name: string,
  patch: { connected?: boolean } = {},
): Promise<HostRecord> {
  return write(deps, async (tx) => {
    const h = await mustHost(tx.uow, name, FOR_UPDATE);
    return writeHost(tx, { ...h, ...patch, lastSeen: tx.now() });
  });
}

export async function getHost(deps: UseCaseDeps, name: string): Promise<HostRecord> {
  return read(deps, async (r) => withCount(r, await mustHost(r, name)));
}

export async function listHosts(deps: UseCaseDeps): Promise<HostRecord[]> {
  return read(deps, async (r) => {
    const out: HostRecord[] = [];
    for (const h of await r.hosts()) out.push(await withCount(r, h));
    return out;
  });
}
