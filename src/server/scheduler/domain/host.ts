/**
 * Hosts: what an agent's registration says, what the scheduler records of a
 * host, and whose host it is (invariant 10: a principal acts only for its own
 * host). An agent's principal (a static token's or JWT's subject, or
 * `cert:<CN>` for a client certificate) names exactly one host: the host of
 * that name, or the one an operator's table maps it to. The first agent
 * registration of a host pins its principal; another principal for that host
 * is refused (inside the unit that writes the host). Admins (operators) and a
 * server with authentication off are not agent principals.
 */

import { permissionDenied } from '../../../errors.js';
import { type HostName, isHostName, type PciAddress } from '../../../identifiers.js';
import type { AgentKeyRecord } from './certificate.js';
import type { DeviceRecord } from './device-state.js';

export interface HostRegistration {
  name: HostName;
  endpoint: string;
  bootId: string;
  /** The agent process's own epoch id (Register.epoch): a new one means the agent restarted. */
  agentEpoch: string;
  agentVersion: string;
  features: string[];
  drivers: string[];
  /**
   * The authenticated principal the host is pinned to (its first agent
   * registration's subject; invariant 10). Absent with authentication off.
   */
  principal?: string;
}

export interface HostRecord extends HostRegistration {
  /** How many times the host registered (reconnects included). */
  registrations: number;
  connected: boolean;
  registeredAt: string;
  lastSeen: string;
  /** The agent inventory revision the scheduler last applied. */
  inventoryRevision: number;
  deviceCount: number;
}

/**
 * What a registration changed, decided inside the unit that writes the host:
 * a host never seen (`new`), an agent that restarted (a new epoch), an agent
 * at a new endpoint (`moved`), a host this scheduler starts to follow again
 * (`relinked`), or nothing but a heartbeat (only lastSeen is written).
 */
export type RegistrationChange = 'new' | 'restarted' | 'moved' | 'relinked' | 'heartbeat';

export interface HostRegistered {
  host: HostRecord;
  change: RegistrationChange;
  /** On `restarted` (invariant 3): devices it was cleaning, now in error with their jobs interrupted. */
  interrupted: DeviceRecord[];
  /** On `restarted`: devices pending a cleanup, dispatched again under their job id. */
  toDispatch: DeviceRecord[];
  /** The agent's signing key, when this registration pinned it (the host's first with a key). */
  pinnedKey?: AgentKeyRecord | null;
}

/** A device an agent's journal records as handed to a guest and not cleaned since. */
export interface HeldDeviceReport {
  address: PciAddress;
  arqUuid: string;
  instanceUuid: string;
  /** When the agent recorded the binding (ISO 8601, the agent's clock); absent from older agents. */
  since?: string;
}

/**
 * What a registration changes, given what is stored (`prev`): an agent whose
 * epoch and endpoint are the same is a heartbeat unless this scheduler opens
 * a link to it now.
 */
export function registrationChange(
  prev: HostRecord | null,
  reg: HostRegistration,
  opensLink: boolean,
): RegistrationChange {
  if (!prev) return 'new';
  if (prev.agentEpoch !== reg.agentEpoch) return 'restarted';
  if (prev.endpoint !== reg.endpoint) return 'moved';
  return opensLink ? 'relinked' : 'heartbeat';
}

// --- whose host it is (invariant 10) ------------------------------------------

/** Who called, as the auth interceptor established it. */
export interface Caller {
  subject: string;
  roles: readonly string[];
}

/** The host a principal speaks for, or null when its subject names none. */
export function hostOfSubject(subject: string, table: ReadonlyMap<string, string>): string | null {
  const mapped = table.get(subject);
  if (mapped !== undefined) return mapped;
  const name = subject.startsWith('cert:') ? subject.slice('cert:'.length) : subject;
  return isHostName(name) && !subject.startsWith('static:') ? name : null;
}

/** Whether the caller is an agent principal, bound to one host (not an admin, auth on). */
export const isAgentPrincipal = (c: Caller): boolean =>
  c.roles.includes('agent') && !c.roles.includes('admin');

/**
 * Refuses an agent principal that registers (or reports for) another host
 * than its own. Returns the principal to pin, or undefined when the caller is
 * not an agent principal. Whether the host is pinned to another principal is
 * decided where the host is read and written (`checkPin`).
 */
export function principalFor(
  caller: Caller,
  host: string,
  table: ReadonlyMap<string, string>,
): string | undefined {
  if (!isAgentPrincipal(caller)) return undefined;
  const own = hostOfSubject(caller.subject, table);
  if (own !== host) {
    throw permissionDenied(
      'PRINCIPAL_NOT_FOR_HOST',
      `principal ${caller.subject} may speak only for ${own === null ? 'no host (its subject names none; map it in host_principals)' : `host ${own}`}, not for host ${host}`,
      { principal: caller.subject, host },
    );
  }
  return caller.subject;
}

/**
 * The host a host-scoped client acts for (role `host-client`, decision 90: a
 * host's kubelet plugin), or undefined when the caller is not one: it holds a
 * role in `wider` (the roles the call allows for any host), or auth is off
 * (every role). A host-client whose subject names no host is refused here.
 */
export function hostClientOf(
  caller: Caller,
  wider: readonly string[],
  table: ReadonlyMap<string, string>,
): string | undefined {
  if (!caller.roles.includes('host-client') || caller.roles.some((r) => wider.includes(r))) return undefined;
  const own = hostOfSubject(caller.subject, table);
  if (own === null) {
    throw permissionDenied(
      'PRINCIPAL_NOT_FOR_HOST',
      `principal ${caller.subject} (host-client) names no host (its subject names none; map it in host_principals)`,
      { principal: caller.subject },
    );
  }
  return own;
}

/** Refuses a host-client (`own`, from hostClientOf) acting on another host's `what`; undefined `own` passes. */
export function requireOwnHost(
  principal: string,
  own: string | undefined,
  host: string | null,
  what: string,
): void {
  if (own === undefined || host === null || host === own) return;
  throw permissionDenied(
    'PRINCIPAL_NOT_FOR_HOST',
    `principal ${principal} may act only for host ${own}, not for host ${host} (${what})`,
    { principal, host },
  );
}

/**
 * The principal the host stays pinned to: the first one; another principal
 * is refused (HOST_PINNED_TO_ANOTHER_PRINCIPAL). `principal` undefined (not
 * an agent principal) changes no pin.
 */
export function checkPin(
  host: string,
  pinned: string | undefined,
  principal: string | undefined,
): string | undefined {
  if (pinned && principal && pinned !== principal) {
    throw permissionDenied(
      'HOST_PINNED_TO_ANOTHER_PRINCIPAL',
      `host ${host} is pinned to principal ${pinned}; principal ${principal} may not speak for it (berth host delete ${host} first, if the host was reinstalled)`,
      { principal, host, pinned },
    );
  }
  return pinned || principal;
}
