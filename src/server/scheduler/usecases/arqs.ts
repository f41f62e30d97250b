/** Use cases: accelerator requests — created from a profile, bound to devices, deleted into release. */

import { BerthError, failedPrecondition, invalidArgument } from '../../../errors.js';
import type { Uuid } from '../../../identifiers.js';
import { describeRejections, type PickFn, pickDevice } from '../domain/allocation.js';
import type {
  ArqBinding,
  ArqViewer,
  BindGate,
  BindResult,
  CreateArqsRequest,
  DeleteArqsResult,
} from '../domain/arq.js';
import {
  type Arq,
  arqBound,
  arqUnbound,
  arqUnconfirmed,
  bindRunning,
  bindRunningError,
  boundElsewhereError,
  type ClaimJudge,
  hotAddError,
  newArq,
  sameBinding,
  transitionArq,
} from '../domain/arq.js';
import { bind, type DeviceRecord, recordedByAgent } from '../domain/device-state.js';
import type { HostRecord } from '../domain/host.js';
import type { RequestGroup } from '../domain/profile.js';
import { duplicateTags } from '../domain/tags.js';
import { pickOnHost } from './allocate.js';
import { read, type Tx, type UseCaseDeps } from './context.js';
import { abortPlanned } from './live-migrations.js';
import {
  idempotent,
  mustArq,
  mustDevice,
  mustHost,
  mustProfile,
  releaseHeld,
  remember,
  requestIdSpent,
  writeArq,
  writeDevice,
} from './records.js';
import { write } from './unit.js';
import { FOR_UPDATE } from './unit-of-work.js';

export async function createArqs(deps: UseCaseDeps, req: CreateArqsRequest): Promise<Arq[]> {
  const tags = req.tags ?? [];
  return write(deps, async (tx) => {
    const key = req.requestId ? `arqs:${req.requestId}` : undefined;
    const fingerprint = { profile: req.profileName, tags };
    const seen = await idempotent<string[]>(tx.uow, key, fingerprint);
    if (seen) {
      const again: Arq[] = [];
      for (const u of seen) {
        const arq = await tx.uow.arq(u);
        if (!arq) throw requestIdSpent(key!, `ARQs ${seen.join(', ')}`);
        again.push(arq);
      }
      return again;
    }
    const profile = await mustProfile(tx.uow, req.profileName);
    const total = profile.groups.reduce((n, g) => n + g.count, 0);
    if (tags.length > total) {
      throw invalidArgument(
        'tags',
        `${tags.length} tags for profile "${profile.name}" which makes ${total} ARQs`,
      );
    }
    const now = tx.now();
    const out: Arq[] = [];
    for (const [groupId, group] of profile.groups.entries()) {
      for (let k = 0; k < group.count; k++) {
        out.push(
          await writeArq(
            tx,
            newArq({
              profileName: profile.name,
              groupId,
              group,
              tag: tags[out.length] ?? '',
              createdAt: now,
              project: req.project,
            }),
          ),
        );
      }
    }
    await remember(
      tx,
      key,
      fingerprint,
      out.map((a) => a.uuid),
    );
    return out;
  });
}

export async function getArq(deps: UseCaseDeps, uuid: Uuid): Promise<Arq> {
  return read(deps, (r) => mustArq(r, uuid));
}

export async function listArqs(deps: UseCaseDeps, instanceUuid?: string): Promise<Arq[]> {
  return read(deps, (r) => r.arqs(instanceUuid ? { instanceUuid } : {}));
}

/**
 * Bind every ARQ to an allocatable device on its host, all or nothing, in one
 * unit: lock the host, pick among its candidates, bind, update the ARQ. A
 * retried identical binding returns the same devices. A device that is cleaned
 * is bound only when `gate`, judging the host's record as the unit locked it,
 * lets it: its agent can record the binding. The result carries those records
 * (the agents are called from them after the commit). `owner`, the principal
 * that binds, owns each instance that has no owner yet, in the same commit
 * (who may read its erasure certificates: decision 95). On failure nothing
 * is bound and no owner recorded; recording the failure on the ARQs is the
 * caller's next unit (`recordBindFailure`).
 */
export async function bindArqs(
  deps: UseCaseDeps,
  bindings: ArqBinding[],
  pick: PickFn = pickDevice,
  gate?: BindGate,
  judge?: ClaimJudge,
  owner?: string,
): Promise<BindResult> {
  const seenUuids = new Set<string>();
  // The identifiers and tags were parsed where they entered (branded types); what is left is the request's own rule.
  bindings.forEach((b, i) => {
    if (seenUuids.has(b.arqUuid)) {
      throw invalidArgument(`bindings[${i}].arq_uuid`, `ARQ ${b.arqUuid} appears twice in one request`);
    }
    seenUuids.add(b.arqUuid);
  });
  return write(deps, async (tx) => {
    const arqs: Arq[] = [];
    const devices: DeviceRecord[] = [];
    const newlyBound: string[] = [];
    const hosts = new Map<string, HostRecord>();
    /** The database's time, read once an ARQ has a bind claim to judge. */
    let now: string | undefined;
    for (const [i, b] of bindings.entries()) {
      await tx.uow.lockInstance(b.instanceUuid);
      const arq = await mustArq(tx.uow, b.arqUuid, FOR_UPDATE);
      // A Cyborg bind runs on this ARQ (its claim): no other bind meanwhile, retry or not.
      if (judge && arq.bindClaim && !b.claimed) {
        now ??= await tx.uow.databaseNow();
        if (bindRunning(arq, now, judge)) throw bindRunningError(arq.uuid);
      }
      if (sameBinding(arq, b)) {
        arqs.push(arq);
        devices.push(await mustDevice(tx.uow, { uuid: arq.deviceUuid! }));
        continue;
      }
      if (arq.state === 'bound') {
        throw failedPrecondition(
          'ARQ_ALREADY_BOUND',
          `ARQ ${arq.uuid} is already bound to instance ${arq.instanceUuid} on host ${arq.host}`,
          { arq_uuid: arq.uuid },
        );
      }
      const only = b.devices ? new Set(b.devices) : null;
      // Allocation reads the host's devices and IOMMU groups: lock it first.
      // Asked for together, in this order (one round trip where the backend
      // can): each read is a statement of its own, started once the host's
      // lock is held (the port's rule, decision 95); the instance's other ARQs
      // are read under its lock, taken above.
      const [host, { result, candidates }, instanceArqs] = await Promise.all([
        mustHost(tx.uow, b.host, FOR_UPDATE),
        pickOnHost(
          tx.uow,
          b.host,
          arq.group,
          only
            ? (g, c, ctx) =>
                pick(
                  g,
                  c.filter((d) => only.has(d.uuid)),
                  ctx,
                )
            : pick,
        ),
        tx.uow.arqs({ instanceUuid: b.instanceUuid }),
      ]);
      hosts.set(host.name, host);
      const started = transitionArq(arq, 'bind_started');
      if (!result.device) {
        throw failedPrecondition(
          'NO_ALLOCATABLE_DEVICE',
          `no allocatable device on host ${b.host}${only ? ` among ${[...only].join(', ')}` : ''} for ARQ ${arq.uuid} (${describeGroup(arq.group)}): ${
            (only ? candidates.filter((d) => only.has(d.uuid)) : candidates).length === 0
              ? 'no available candidates'
              : describeRejections(result.rejected)
          }`,
          { arq_uuid: arq.uuid, host: b.host },
        );
      }
      // A device that is cleaned or one-time-use needs its agent to record the
      // binding (invariants 9 and 13): refuse before anything is allocated when it cannot.
      const refusal = gate && recordedByAgent(result.device) ? gate(host) : null;
      if (refusal) throw refusal;
      const device = await writeDevice(
        tx,
        result.device,
        bind(result.device, { arqUuid: arq.uuid, instanceUuid: b.instanceUuid }),
      );
      const bound = {
        ...arqBound(started, device, b.instanceUuid, b.tag || arq.tag),
        ...(b.notifyNova
          ? { novaEvent: { instanceUuid: b.instanceUuid, status: 'completed' as const } }
          : {}),
      };
      const others = instanceArqs.filter((a) => a.uuid !== arq.uuid && a.state === 'bound');
      const dups = duplicateTags(
        [...others, bound].map((a) => ({
          field: a.uuid === arq.uuid ? `bindings[${i}].tag` : `ARQ ${a.uuid}`,
          // PCI and NVMe alike are `passthrough` entries in the guest's metadata: one tag scope.
          deviceType: 'passthrough',
          tag: a.tag,
        })),
      );
      if (dups[0]) throw invalidArgument(dups[0].field, dups[0].description);
      arqs.push(await writeArq(tx, bound));
      // The event is the binder's until the bind is final: confirmed (released) or undone (replaced).
      if (b.notifyNova) await tx.uow.holdNovaEvent(arq.uuid, b.notifyNova.holder, b.notifyNova.holdMs);
      devices.push(device);
      newlyBound.push(arq.uuid);
    }
    // A retried bind records it too (a first principal's owner is kept: the insert does nothing then).
    if (owner) {
      for (const instance of new Set(bindings.map((b) => b.instanceUuid)))
        await tx.uow.putInstanceOwner(instance, owner, tx.now());
    }
    return { arqs, devices, newlyBound, hosts };
  });
}

/**
 * Undo a committed bind that a device's agent did not confirm (RecordBinding
 * unreachable or refused): every ARQ given, still bound as asked, goes to
 * bind_failed with the reason, and its device is released the normal way —
 * into a cleanup for devices that are cleaned (invariant 2: the agent may have
 * recorded the binding before its answer was lost, and a refused device holds
 * another tenant's data).
 */
export async function revertUnconfirmedBind(
  deps: UseCaseDeps,
  bindings: ArqBinding[],
  reason: string,
): Promise<DeviceRecord[]> {
  return write(deps, async (tx) => {
    const released: DeviceRecord[] = [];
    for (const b of bindings) {
      await tx.uow.lockInstance(b.instanceUuid);
      const arq = await tx.uow.arq(b.arqUuid, FOR_UPDATE);
      if (!arq || !sameBinding(arq, b)) continue;
      const d = await releaseIfHeld(tx, arq);
      if (d) released.push(d);
      await writeArq(tx, arqUnconfirmed(arq, reason));
    }
    return released;
  });
}

/**
 * After a bind that failed (`bindArqs` threw `err`, nothing bound), record why
 * on the ARQs that could have been bound: a refusal (FAILED_PRECONDITION), or
 * anything that stopped a bind Nova waits for — it ends in an event whatever
 * stopped it (an agent away, a bad tag too). Not for an ARQ bound elsewhere
 * (ARQ_ALREADY_BOUND): that one stays bound; nor one whose Cyborg bind runs (ARQ_BIND_RUNNING). Its own unit, after the bind's.
 * Each keeps the instance it was asked for (Cyborg's BindFailed), so the
 * instance's deletion (`DELETE ?instance=`) finds it.
 */
export async function recordBindFailure(
  deps: UseCaseDeps,
  bindings: ArqBinding[],
  err: unknown,
): Promise<void> {
  const owed = bindings.some((b) => b.notifyNova);
  // Refusals that are another bind's ARQ: bound to it, or its bind running.
  if (!(err instanceof BerthError) || err.reason === 'ARQ_ALREADY_BOUND' || err.reason === 'ARQ_BIND_RUNNING')
    return;
  if (err.code !== 'FAILED_PRECONDITION' && !owed) return;
  const message = err.message;
  await write(deps, async (tx) => {
    for (const b of bindings) {
      const arq = await tx.uow.arq(b.arqUuid, FOR_UPDATE);
      if (!arq || (arq.state !== 'initial' && arq.state !== 'bind_failed')) continue;
      const started = transitionArq(arq, 'bind_started');
      await writeArq(
        tx,
        transitionArq(started, 'bind_failed', {
          error: message,
          instanceUuid: b.instanceUuid,
          ...(b.notifyNova ? { novaEvent: { instanceUuid: b.instanceUuid, status: 'failed' as const } } : {}),
        }),
      );
    }
  });
}

/**
 * Claims ARQs for a bind the Cyborg API runs (before it answers 202), all or
 * nothing, in one unit: a compare-and-set on each ARQ's record, under its row
 * lock, so of two schedulers of one database claiming one ARQ, one gets it and
 * the other ARQ_BIND_RUNNING. Refused too: an ARQ bound to another instance
 * (ARQ_ALREADY_BOUND), and a hot add — the instance has other ARQs, bound,
 * failed or claimed by a bind that runs (INVALID_ARGUMENT, Cyborg's 400,
 * their uuids told to `viewer` when it may see them). The claim covers its
 * instance, and the instance is locked first, so of two binds of different
 * ARQs to one new instance the second sees the first (docs/decisions.md 89).
 * Times are the database's: the claim lasts `ttlMs` from its now if its holder
 * never lets it go (`releaseBindClaims`). Returns the ARQs as they were before the claim.
 */
export async function claimBinds(
  deps: UseCaseDeps,
  req: {
    bindings: Array<{ arqUuid: Uuid; instanceUuid: string }>;
    judge: ClaimJudge;
    ttlMs: number;
    viewer: ArqViewer;
  },
): Promise<Arq[]> {
  const asked = new Set<string>(req.bindings.map((b) => b.arqUuid));
  return write(deps, async (tx) => {
    const instances = [...new Set(req.bindings.map((b) => b.instanceUuid))].sort();
    // The port's lock order, instance before ARQ: two claims for one instance decide one after the other.
    for (const instance of instances) await tx.uow.lockInstance(instance);
    const now = await tx.uow.databaseNow();
    const expires = new Date(Date.parse(now) + req.ttlMs).toISOString();
    const before = new Map<string, Arq>();
    // In uuid order: two claims of overlapping ARQs lock them in one order.
    for (const b of [...req.bindings].sort((x, y) => x.arqUuid.localeCompare(y.arqUuid))) {
      const arq = await mustArq(tx.uow, b.arqUuid, FOR_UPDATE);
      if (bindRunning(arq, now, req.judge)) throw bindRunningError(arq.uuid);
      if (arq.state === 'bound' && arq.instanceUuid !== b.instanceUuid) throw boundElsewhereError(arq);
      before.set(arq.uuid, arq);
    }
    for (const instance of instances) {
      const others = [
        ...(await tx.uow.arqs({ instanceUuid: instance })),
        // Claimed for it by a bind that runs, not yet bound to it.
        ...(await tx.uow.arqs({ bindClaimFor: instance })).filter(
          (a) => a.instanceUuid !== instance && bindRunning(a, now, req.judge),
        ),
      ].filter((a) => !asked.has(a.uuid));
      if (others.length > 0) throw hotAddError(instance, others, req.viewer);
    }
    for (const b of req.bindings) {
      const arq = before.get(b.arqUuid)!;
      await writeArq(tx, {
        ...arq,
        bindClaim: { holder: req.judge.self, expires, instanceUuid: b.instanceUuid },
      });
    }
    return req.bindings.map((b) => before.get(b.arqUuid)!);
  });
}

/** The database's time now: what bind claims are judged by (`claimBinds`). */
export async function databaseNow(deps: UseCaseDeps): Promise<string> {
  return read(deps, (r) => r.databaseNow());
}

/** Lets go of `holder`'s bind claims on ARQs `uuids` (its bind is final); an ARQ gone or claimed by another is left. */
export async function releaseBindClaims(deps: UseCaseDeps, uuids: string[], holder: string): Promise<void> {
  await write(deps, async (tx) => {
    for (const u of [...uuids].sort()) {
      const arq = await tx.uow.arq(u, FOR_UPDATE);
      if (arq?.bindClaim?.holder === holder) await writeArq(tx, { ...arq, bindClaim: null });
    }
  });
}

/**
 * By uuids or instance; devices go through release. Deleting what is gone is a
 * no-op. `mayDelete` (the caller's authorization, decided by the edge) sees
 * every ARQ as locked in this unit before anything is deleted, and throws to
 * refuse them all.
 */
export async function deleteArqs(
  deps: UseCaseDeps,
  selector: { uuids?: Uuid[]; instanceUuid?: string },
  mayDelete?: (arq: Arq) => void,
): Promise<DeleteArqsResult> {
  if (!selector.uuids?.length && !selector.instanceUuid) {
    throw invalidArgument('uuids', 'give ARQ uuids or an instance_uuid');
  }
  return write(deps, async (tx) => {
    const arqs: Arq[] = [];
    if (selector.uuids?.length) {
      for (const u of selector.uuids) {
        const a = await tx.uow.arq(u, FOR_UPDATE);
        if (a) arqs.push(a);
      }
    } else {
      await tx.uow.lockInstance(selector.instanceUuid!);
      arqs.push(...(await tx.uow.arqs({ instanceUuid: selector.instanceUuid! }, FOR_UPDATE)));
    }
    for (const arq of arqs) mayDelete?.(arq);
    const instances = new Set(arqs.flatMap((a) => (a.instanceUuid ? [a.instanceUuid] : [])));
    // By uuids, the instances are known only now (the one exception to the lock order).
    if (selector.uuids?.length) for (const instance of instances) await tx.uow.lockInstance(instance);
    for (const arq of arqs) transitionArq(arq, 'deleting');
    const released = await releaseArqs(tx, arqs, instances, (arq) => tx.uow.deleteArq(arq.uuid));
    return { deletedUuids: arqs.map((a) => a.uuid), released };
  });
}

/**
 * Unbind ARQs (Cyborg's PATCH remove): each keeps its uuid and profile and
 * goes back to `initial`; its device goes through release like a delete's
 * (a cleanup for devices that are cleaned). Unbinding an unbound ARQ is a no-op.
 * With `judge`, an ARQ whose bind runs (`claimBinds`) is refused, with nothing
 * unbound: ARQ_BIND_RUNNING.
 */
export async function unbindArqs(
  deps: UseCaseDeps,
  uuids: string[],
  judge?: ClaimJudge,
): Promise<{ arqs: Arq[]; released: DeviceRecord[] }> {
  if (uuids.length === 0) throw invalidArgument('uuids', 'give ARQ uuids');
  return write(deps, async (tx) => {
    const arqs: Arq[] = [];
    const now = judge ? await tx.uow.databaseNow() : '';
    for (const u of uuids) {
      const arq = await mustArq(tx.uow, u, FOR_UPDATE);
      if (judge && bindRunning(arq, now, judge)) throw bindRunningError(arq.uuid);
      arqs.push(arq);
    }
    const instances = new Set(arqs.flatMap((a) => (a.instanceUuid ? [a.instanceUuid] : [])));
    // As deleteArqs by uuids: the instances are known only now.
    for (const instance of instances) await tx.uow.lockInstance(instance);
    const out: Arq[] = [];
    const released = await releaseArqs(tx, arqs, instances, async (arq) => {
      const next = arqUnbound(arq);
      out.push(next === arq ? arq : await writeArq(tx, next));
    });
    return { arqs: out, released };
  });
}

const describeGroup = (g: RequestGroup) =>
  g.resourceClass ? `resource class ${g.resourceClass}` : `vendor ${g.vendorId} product ${g.productId}`;

/** The device `arq` holds, locked, or null when it holds none. */
async function heldDevice(tx: Tx, arq: Arq): Promise<DeviceRecord | null> {
  if (!arq.deviceUuid) return null;
  const d = await tx.uow.device({ uuid: arq.deviceUuid }, FOR_UPDATE);
  return d?.deviceState === 'allocated' && d.arqUuid === arq.uuid ? d : null;
}

/** The device `arq` holds, released in this unit (see records.ts releaseHeld), or null when it holds none. */
async function releaseIfHeld(tx: Tx, arq: Arq): Promise<DeviceRecord | null> {
  const d = await heldDevice(tx, arq);
  return d && releaseHeld(tx, d, { arqUuid: arq.uuid });
}

/**
 * Releases the devices `arqs` hold (`each` then writes the ARQ) and aborts the
 * planned migrations of `instances`: a planned migration no longer matches an
 * instance that lost ARQs, and its destination claims would stay allocated to
 * nobody. The rows are asked for together, the migrations before the devices
 * (the port's lock order; one round trip where the backend can, decision 95).
 * Returns every device released, the ARQs' first.
 */
async function releaseArqs(
  tx: Tx,
  arqs: readonly Arq[],
  instances: ReadonlySet<string>,
  each: (arq: Arq) => Promise<void>,
): Promise<DeviceRecord[]> {
  const [planned, held] = await Promise.all([
    Promise.all([...instances].map((i) => tx.uow.plannedMigrations(i, FOR_UPDATE))),
    Promise.all(arqs.map((a) => heldDevice(tx, a))),
  ]);
  const released: DeviceRecord[] = [];
  for (const [i, arq] of arqs.entries()) {
    const d = held[i];
    if (d) released.push(await releaseHeld(tx, d, { arqUuid: arq.uuid }));
    await each(arq);
  }
  for (const m of planned.flat()) released.push(...(await abortPlanned(tx, m)).released);
  return released;
}
