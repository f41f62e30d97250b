/**
 * Accelerator requests (ARQs): `initial → bind_started → bound | bind_failed`,
 * and on delete `→ deleting → gone`. The allowed transitions are a table, and
 * every change goes through `transitionArq`, so an ARQ cannot skip a state.
 */

import { type BerthError, failedPrecondition, invalidArgument } from '../../../errors.js';
import {
  type HostName,
  type InstanceId,
  newUuid,
  type PciAddress,
  pciAddressParts,
  type Tag,
  type Uuid,
} from '../../../identifiers.js';
import type { DeviceRecord } from './device-state.js';
import type { HostRecord } from './host.js';
import type { RequestGroup } from './profile.js';

export const ARQ_STATES = ['initial', 'bind_started', 'bound', 'bind_failed', 'deleting'] as const;
export type ArqState = (typeof ARQ_STATES)[number];

/** How the hypervisor finds a PCI device; lower-case hex without 0x, as Cyborg reports it. */
export interface PciAttachHandle {
  domain: string;
  bus: string;
  device: string;
  function: string;
  /** Always present: false when the operator pre-binds the device. */
  managed: boolean;
}

export interface Arq {
  uuid: Uuid;
  profileName: string;
  /** Index of the profile's request group this ARQ serves. */
  groupId: number;
  /** The group as it was when the ARQ was created: deleting the profile later changes nothing. */
  group: RequestGroup;
  state: ArqState;
  instanceUuid: string | null;
  host: HostName | null;
  deviceUuid: Uuid | null;
  deviceAddress: PciAddress | null;
  attachHandle: PciAttachHandle | null;
  tag: string;
  /** Why the last bind failed; '' otherwise. */
  error: string;
  createdAt: string;
  /** The device type a tag is unique within ('PCI', 'NVME'); set at bind. */
  deviceType: string;
  /**
   * Guest PCI address (`0000:00:10.0`) Berth assigned to this binding, null
   * until first rendered. Kept until the ARQ is deleted, and across a live
   * migration, so the guest never sees its device move. A store always sets
   * it (null or an address); optional only so ARQ literals built outside a
   * store (tests of pure code) need not spell it out.
   */
  guestAddress?: string | null;
  /**
   * The project (Keystone) that created it through the Cyborg API; absent for
   * ARQs created over gRPC, which know no projects (docs/decisions.md 57).
   */
  project?: string;
  /**
   * The `accelerator-request-bound` event Nova is still owed for this ARQ's
   * bind (a bind asked through the Cyborg API): written in the same unit as
   * the bind's outcome, cleared once Nova took it. The ARQ record is the
   * outbox, so an event is neither lost by a crash nor sent for a bind that
   * never committed (docs/decisions.md 57).
   */
  novaEvent?: NovaEvent | null;
  /**
   * A bind the Cyborg API runs on this ARQ (claimed before its 202, let go
   * once the bind is final): a second bind or an unbind meanwhile is refused,
   * by whichever scheduler of the database it reaches (docs/decisions.md 81).
   */
  bindClaim?: BindClaim | null;
}

/** Who runs a bind of an ARQ, and until when the claim holds if it is never let go (its holder died). */
export interface BindClaim {
  /** The binding scheduler's id. */
  holder: string;
  /** ISO time, by the database's clock (docs/decisions.md 89). */
  expires: string;
  /**
   * The instance the bind is for: a claim covers its instance too, so a bind of
   * other ARQs to it is a hot add while this one runs (absent in claims of
   * schedulers before decision 89).
   */
  instanceUuid?: string;
}

/**
 * How a scheduler judges a bind claim: its own id, and whether it is alone on
 * its database (SQLite, whose instance lock keeps others out), where a claim
 * of another holder was left by an earlier run of this one and binds nothing.
 */
export interface ClaimJudge {
  self: string;
  alone: boolean;
}

/** Whether a bind of `arq` runs now (its claim is live at `now`) as `judge` sees it. */
export function bindRunning(arq: Arq, now: string, judge: ClaimJudge): boolean {
  const c = arq.bindClaim;
  if (!c || Date.parse(c.expires) <= Date.parse(now)) return false;
  return c.holder === judge.self || !judge.alone;
}

/** The refusal of a bind or unbind of `uuid` while another bind of it runs (Cyborg's 409). */
export const bindRunningError = (uuid: string): BerthError =>
  failedPrecondition('ARQ_BIND_RUNNING', `${uuid}: a bind of ARQ ${uuid} is running`, { arq_uuid: uuid });

/** The refusal of a bind of `arq` to `instanceUuid` when it is bound to another instance (Cyborg's 409). */
export const boundElsewhereError = (arq: Arq): BerthError =>
  failedPrecondition(
    'ARQ_ALREADY_BOUND',
    `${arq.uuid}: ARQ ${arq.uuid} is already bound to instance ${arq.instanceUuid}`,
    { arq_uuid: arq.uuid },
  );

/**
 * Cyborg's refusal of a hot add: instance `instance` already has ARQs
 * (`others`: bound, failed, or claimed by a bind that runs) besides those
 * asked. Their uuids are named only when `viewer` may see them.
 */
export function hotAddError(instance: string, others: readonly Arq[], viewer: ArqViewer): BerthError {
  const shown = others.filter((a) => visibleTo(viewer, a)).map((a) => a.uuid);
  return invalidArgument(
    'instance_uuid',
    `Instance ${instance} already has accelerator requests${shown.length > 0 ? ` (${shown.join(', ')})` : ''}. Cannot bind additional ARQs.`,
  );
}

/** Who reads ARQs through the Cyborg API: a project, or an admin (who sees every project's). */
export interface ArqViewer {
  project: string;
  admin: boolean;
}

/** A project's ARQs are its own; an admin sees all (ARQs made over gRPC have no project: admins only). */
export const visibleTo = (viewer: ArqViewer, a: Arq): boolean =>
  viewer.admin || (a.project !== undefined && a.project === viewer.project);

/** An event owed to Nova: the instance, and how the bind ended. */
export interface NovaEvent {
  instanceUuid: string;
  status: 'completed' | 'failed';
}

const ALLOWED: Record<ArqState, readonly ArqState[]> = {
  initial: ['bind_started', 'deleting'],
  bind_started: ['bound', 'bind_failed', 'deleting'],
  // A bind its device's agent did not confirm (RecordBinding) is undone;
  // an unbind (Cyborg's PATCH remove) releases the device and keeps the ARQ.
  bound: ['deleting', 'bind_failed', 'initial'],
  // A failed bind may be retried, or the ARQ unbound.
  bind_failed: ['bind_started', 'deleting', 'initial'],
  deleting: [],
};

/** A new ARQ for one request group of a profile: `initial`, bound to nothing (the one place an ARQ is made). */
export function newArq(o: {
  profileName: string;
  groupId: number;
  group: RequestGroup;
  tag: string;
  createdAt: string;
  /** The creating project (the Cyborg API); none over gRPC. */
  project?: string | undefined;
}): Arq {
  return {
    uuid: newUuid(),
    profileName: o.profileName,
    groupId: o.groupId,
    group: o.group,
    state: 'initial',
    instanceUuid: null,
    host: null,
    deviceUuid: null,
    deviceAddress: null,
    attachHandle: null,
    tag: o.tag,
    error: '',
    createdAt: o.createdAt,
    deviceType: '',
    guestAddress: null,
    ...(o.project ? { project: o.project } : {}),
  };
}

export const canTransition = (from: ArqState, to: ArqState): boolean => ALLOWED[from].includes(to);

export function transitionArq(arq: Arq, to: ArqState, patch: Partial<Arq> = {}): Arq {
  if (!canTransition(arq.state, to)) {
    throw failedPrecondition('ARQ_STATE_CONFLICT', `ARQ ${arq.uuid} cannot go from ${arq.state} to ${to}`, {
      arq_uuid: arq.uuid,
      arq_state: arq.state,
    });
  }
  return { ...arq, ...patch, state: to };
}

/** The attach handle for a PCI address such as 0000:3b:00.1. */
export function attachHandleFromAddress(address: PciAddress, managed: boolean): PciAttachHandle {
  const { domain, bus, slot, function: fn } = pciAddressParts(address);
  return { domain, bus, device: slot, function: fn, managed };
}

/** The ARQ now holds the device: bind_started → bound with the attach handle. */
export function arqBound(arq: Arq, device: DeviceRecord, instanceUuid: string, tag: string): Arq {
  return transitionArq(arq, 'bound', {
    instanceUuid,
    host: device.host,
    deviceUuid: device.uuid,
    deviceAddress: device.address,
    attachHandle: attachHandleFromAddress(device.address, device.managed),
    deviceType: device.type,
    tag,
    error: '',
  });
}

/**
 * A bind the device's agent did not confirm: bound → bind_failed, holding nothing.
 * It keeps its instance (as Cyborg's BindFailed does), so deleting the instance's
 * ARQs (`DELETE ?instance=`) removes it.
 */
export function arqUnconfirmed(arq: Arq, error: string): Arq {
  return transitionArq(arq, 'bind_failed', {
    ...(arq.novaEvent && arq.instanceUuid
      ? { novaEvent: { instanceUuid: arq.instanceUuid, status: 'failed' as const } }
      : {}),
    host: null,
    deviceUuid: null,
    deviceAddress: null,
    attachHandle: null,
    deviceType: '',
    guestAddress: null,
    error,
  });
}

/** Unbound (Cyborg's PATCH remove): back to initial, holding nothing, owing Nova nothing. */
export function arqUnbound(arq: Arq): Arq {
  if (arq.state === 'initial') return arq;
  return transitionArq(arq, 'initial', {
    instanceUuid: null,
    host: null,
    deviceUuid: null,
    deviceAddress: null,
    attachHandle: null,
    deviceType: '',
    guestAddress: null,
    error: '',
    novaEvent: null,
  });
}

/** Whether a bind request is a retry of the binding this ARQ already has. */
export const sameBinding = (arq: Arq, b: { instanceUuid: string; host: string }): boolean =>
  arq.state === 'bound' && arq.instanceUuid === b.instanceUuid && arq.host === b.host;

export interface CreateArqsRequest {
  profileName: string;
  /** The creating project (Cyborg API); none over gRPC. */
  project?: string;
  /** Idempotency key: the same id returns the same ARQs. */
  requestId?: string;
  /** Parsed where they enter ('' is no tag). */
  tags?: Tag[];
}

/** One ARQ to bind; its identifiers are parsed where they enter (a request, Nova's PATCH), never again. */
export interface ArqBinding {
  arqUuid: Uuid;
  /** An instance id from the orchestration layer: a uuid in practice, any safe id accepted (not a `Uuid`). */
  instanceUuid: InstanceId;
  host: HostName;
  /** Overrides the tag given at creation when non-empty. */
  tag?: Tag;
  /**
   * Only these devices (uuids) may serve the binding: the devices of the
   * Placement provider Nova allocated (Cyborg's device_rp_uuid). Absent: any
   * device of the host.
   */
  devices?: string[];
  /**
   * Owe Nova an accelerator-request-bound event for the outcome (the Cyborg
   * API's binds), held by the binding scheduler until the bind is final.
   */
  notifyNova?: NovaHold;
  /**
   * The bind runs under its ARQs' bind claims (the Cyborg API's, taken by
   * `claimBinds`), which therefore do not refuse it; any other bind (gRPC's) of
   * an ARQ with a live claim is refused ARQ_BIND_RUNNING (docs/decisions.md 89).
   */
  claimed?: true;
}

/**
 * Who holds the event a bind owes Nova while the bind is not final (its agents
 * have not confirmed it, or it is being undone), and for how long at most: the
 * bind's unit claims the event for `holder` (docs/decisions.md 77), so no
 * scheduler tells Nova `completed` for a bind that may still be undone.
 */
export interface NovaHold {
  /** The binding scheduler's id. */
  holder: string;
  /** Longer than the confirmation can last: past it, a holder that died is taken over. */
  holdMs: number;
}

/**
 * Whether a device that is cleaned may be bound on a host (its agent is
 * connected and records bindings), judged inside the bind's unit from the
 * host's record as the unit just locked it: null, or the error to refuse with
 * before anything is allocated. It must be pure — it may read the record and
 * what the scheduler holds in memory (the links it follows), never make or
 * close a client or touch anything else outside the store: a unit may run
 * again and has no effect outside the store (usecases/unit-of-work.ts,
 * docs/decisions.md 67 and 91). A host it cannot vouch for is refused.
 */
export type BindGate = (host: HostRecord) => BerthError | null;

export interface BindResult {
  arqs: Arq[];
  devices: DeviceRecord[];
  /** The ARQs this call bound (the others were already bound so: a retried request). */
  newlyBound: string[];
  /**
   * The hosts the unit locked to allocate on, as it read them: what the calls
   * to their agents after the commit are made from, without reading them again.
   */
  hosts: ReadonlyMap<string, HostRecord>;
}

export interface DeleteArqsResult {
  deletedUuids: string[];
  /** Devices that went through release; pending_cleaning ones get a cleanup dispatched. */
  released: DeviceRecord[];
}
