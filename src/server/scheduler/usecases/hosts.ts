/** Use cases: hosts (registration, heartbeats, agent restarts, the agent's reports, deletion). */

import { randomUUID } from 'node:crypto';
import type { PublicJwk } from '../../../erasure/certificate.js';
import { failedPrecondition, invalidArgument } from '../../../errors.js';
import type { HostName, PciAddress } from '../../../identifiers.js';
import { agentRestarted, type DeviceRecord, reportedHeldByAgent } from '../domain/device-state.js';
import {
  checkPin,
  type HeldDeviceReport,
  type HostRecord,
  type HostRegistered,
  type HostRegistration,
  registrationChange,
} from '../domain/host.js';
import type { PageRequest } from '../domain/inventory.js';
import { pageKeyOf, pageSizeOf, pageTokenOf } from '../domain/pages.js';
import { pinAgentKey } from './certificates.js';
import { read, type Tx, type UseCaseDeps } from './context.js';
import { createJob, finishJob, mustHost, withCount, writeDevice, writeHost } from './records.js';
import { write } from './unit.js';
import { FOR_UPDATE, type UnitOfWork } from './unit-of-work.js';

/** A page of hosts; nextPageToken is '' on the last page. */
export interface HostPage {
  hosts: HostRecord[];
  nextPageToken: string;
}

/**
 * An agent registers (at its start, then as a heartbeat), all in one unit:
 * the host's principal pin (invariant 10: another principal than the first is
 * refused, even when two first registrations race), what changed (domain/
 * host.ts `registrationChange`: a heartbeat writes only lastSeen), the host
 * record, and after an agent restart (a new epoch) the restart reconcile of
 * invariant 3 — devices it was cleaning go to error, their jobs interrupted;
 * pending cleanups are returned to be dispatched again under their job id.
 * `opensLink`: this scheduler starts to follow the host now (a registration,
 * not a heartbeat, even when nothing else changed). A new agent epoch resets
 * the followed inventory revision (the new agent process numbers its
 * inventory afresh).
 */
export async function registerHost(
  deps: UseCaseDeps,
  reg: HostRegistration,
  opts: { opensLink?: boolean; signingKey?: PublicJwk; retiredSigningKeys?: readonly PublicJwk[] } = {},
): Promise<HostRegistered> {
  if (!reg.name) throw invalidArgument('host', 'a host name is required');
  return write(deps, async (tx) => {
    const now = tx.now();
    // The row may not exist yet (a first registration): serialise on the name.
    await lockHostName(tx.uow, reg.name);
    const prev = await tx.uow.host(reg.name, FOR_UPDATE);
    const principal = checkPin(reg.name, prev?.principal, reg.principal);
    const pinnedKey = await pinAgentKey(tx.uow, reg.name, opts.signingKey, now, opts.retiredSigningKeys);
    const change = registrationChange(prev, reg, opts.opensLink ?? true);
    if (prev && change === 'heartbeat') {
      return {
        host: await writeHost(tx, { ...prev, lastSeen: now }),
        change,
        interrupted: [],
        toDispatch: [],
        pinnedKey,
      };
    }
    const host = await writeHost(tx, {
      ...reg,
      ...(principal ? { principal } : {}),
      features: [...reg.features],
      drivers: [...reg.drivers],
      registrations: (prev?.registrations ?? 0) + 1,
      connected: prev?.connected ?? false,
      registeredAt: now,
      lastSeen: now,
      inventoryRevision: prev && change !== 'restarted' ? prev.inventoryRevision : 0,
      deviceCount: 0,
    });
    const { interrupted, toDispatch } =
      change === 'restarted' ? await reconcileRestart(tx, reg.name) : { interrupted: [], toDispatch: [] };
    return { host, change, interrupted, toDispatch, pinnedKey };
  });
}

/**
 * Serialises the units that register one host, whether or not its row exists:
 * a row lock cannot, before the first registration wrote it. (The port's
 * per-key transaction lock, under a key no instance id can take: those have
 * no space.)
 */
const lockHostName = (uow: UnitOfWork, name: string) => uow.lockInstance(`host ${name}`);

/** Invariant 3: cleaning devices go to error (job interrupted); pending_cleaning ones are re-dispatched. */
async function reconcileRestart(
  tx: Tx,
  host: HostName,
): Promise<{ interrupted: DeviceRecord[]; toDispatch: DeviceRecord[] }> {
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
  host: HostName,
  held: readonly HeldDeviceReport[],
): Promise<DeviceRecord[]> {
  if (held.length === 0) return [];
  // Most heartbeats change nothing: look before taking locks.
  const suspects = await read(deps, async (r) => {
    const out: PciAddress[] = [];
    for (const h of held) {
      const d = await r.device({ host, address: h.address });
      if (d?.deviceState !== 'available') continue;
      // A heartbeat composed just before the agent cleared its record can arrive
      // after the cleanup's success: that binding was already cleaned (both times
      // are the agent's clock), so the report is stale.
      const last = await r.latestCleanupJob(d.uuid);
      if (h.since && last?.state === 'succeeded' && last.finishedAt && last.finishedAt >= h.since) continue;
      out.push(h.address);
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

/** Whether this scheduler's link to the host's agent is up (stamps lastSeen too). */
export async function setHostConnected(
  deps: UseCaseDeps,
  name: HostName,
  connected: boolean,
): Promise<HostRecord> {
  return write(deps, async (tx) => {
    const h = await mustHost(tx.uow, name, FOR_UPDATE);
    return writeHost(tx, { ...h, connected, lastSeen: tx.now() });
  });
}

export async function getHost(deps: UseCaseDeps, name: HostName): Promise<HostRecord> {
  return read(deps, async (r) => withCount(r, await mustHost(r, name)));
}

/**
 * A page of hosts by name (the first `limit` after `after`), without their
 * device counts: for walking a fleet of any size in bounded memory.
 */
export async function hostsPage(deps: UseCaseDeps, after: string, limit: number): Promise<HostRecord[]> {
  return read(deps, (r) => r.hosts({ after, limit: Math.max(1, Math.trunc(limit)) }));
}

/** ListHosts: a page of hosts by name, each with its device count. */
export async function listHosts(deps: UseCaseDeps, page: PageRequest = {}): Promise<HostPage> {
  const size = pageSizeOf(page);
  const after = page.pageToken ? pageKeyOf(page.pageToken, 1)[0]! : '';
  return read(deps, async (r) => {
    const rows = await r.hosts({ after, limit: size + 1 });
    const hosts: HostRecord[] = [];
    for (const h of rows.slice(0, size)) hosts.push(await withCount(r, h));
    const last = hosts[hosts.length - 1];
    return { hosts, nextPageToken: rows.length > size && last ? pageTokenOf([last.name]) : '' };
  });
}

/** Device states in which a device is in use or may hold a tenant's data. */
const IN_USE = new Set(['allocated', 'pending_cleaning', 'cleaning']);

/**
 * An operator removes a host and its devices. Refused while its agent is
 * connected (it would register again at its next heartbeat) and while any
 * device is in use or may hold tenant data (reserved: allocated, being
 * cleaned, or in error after a cleanup that did not prove erasure) — those
 * must be cleaned first, or a reinstalled host would offer them afresh.
 * The host's pinned principal goes with it.
 */
export async function deleteHost(deps: UseCaseDeps, name: HostName): Promise<DeviceRecord[]> {
  return write(deps, async (tx) => {
    const h = await mustHost(tx.uow, name, FOR_UPDATE);
    if (h.connected) {
      throw failedPrecondition(
        'HOST_CONNECTED',
        `host ${name} is connected (its agent at ${h.endpoint} is serving): stop the agent, and revoke its credential if it should not come back, then delete the host`,
        { host: name },
      );
    }
    const devices = await tx.uow.devices({ host: name }, FOR_UPDATE);
    const busy = devices.filter((d) => IN_USE.has(d.deviceState) || d.reserved > 0);
    if (busy.length > 0) {
      const named = busy
        .slice(0, 5)
        .map((d) => `${d.address} (${d.deviceState})`)
        .join(', ');
      throw failedPrecondition(
        'HOST_HAS_DEVICES_IN_USE',
        `host ${name} has ${busy.length} device(s) in use or holding tenant data: ${named}${busy.length > 5 ? ', …' : ''}; release and clean them first`,
        { host: name, count: String(busy.length) },
      );
    }
    const now = tx.now();
    for (const d of devices) {
      await tx.uow.appendDeviceEvent({ ...d, updatedAt: now }, true);
      await tx.uow.deleteDevice(d.uuid);
    }
    await tx.uow.deleteHost(name);
    return devices;
  });
}
