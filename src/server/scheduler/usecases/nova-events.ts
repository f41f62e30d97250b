/**
 * Use cases: the events Nova is owed (`Arq.novaEvent`, the Cyborg API's
 * outbox), and the claims that decide which scheduler sends each one when
 * several share a database (docs/decisions.md 77). The sender
 * (cyborg/nova-events.ts) claims a page of owed events, tells Nova, and
 * records each as delivered; a bind holds its own event until it is final.
 */

import type { Arq, NovaEvent } from '../domain/arq.js';
import { read, type UseCaseDeps } from './context.js';
import { writeArq } from './records.js';
import { write } from './unit.js';
import { FOR_UPDATE } from './unit-of-work.js';

/**
 * Claims for `owner`, until `ttlMs` from now, up to `limit` owed events that no
 * live claim holds; the ARQs whose events are now `owner`'s to send.
 */
export async function claimNovaEvents(
  deps: UseCaseDeps,
  owner: string,
  ttlMs: number,
  limit: number,
): Promise<Arq[]> {
  return write(deps, (tx) => tx.uow.claimNovaEvents(owner, ttlMs, limit));
}

/** How many events Nova is owed, claimed or not. */
export async function novaEventsOwedCount(deps: UseCaseDeps): Promise<number> {
  return read(deps, (r) => r.novaEventsOwedCount());
}

/** `owner` lets go of its claims on these ARQs' events (a bind that is final, a send to retry). */
export async function releaseNovaEvents(
  deps: UseCaseDeps,
  uuids: readonly string[],
  owner: string,
): Promise<void> {
  if (uuids.length === 0) return;
  await write(deps, async (tx) => {
    for (const u of uuids) await tx.uow.releaseNovaEvent(u, owner);
  });
}

/** A scheduler alone on its database lets go of the claims its predecessors left; how many. */
export async function releaseOthersNovaClaims(deps: UseCaseDeps, owner: string): Promise<number> {
  return write(deps, (tx) => tx.uow.releaseNovaEventClaims(owner));
}

/**
 * Nova took (or will never take) the event `sent` of ARQ `uuid`, sent by
 * `owner`: cleared, unless the ARQ owes another one by now (a later bind).
 * Returns whether `owner` still held the claim: false when another scheduler
 * took it over meanwhile (this one's claim expired during the send, so Nova
 * may have been told twice), or the event was cleared or replaced.
 */
export async function novaEventDelivered(
  deps: UseCaseDeps,
  uuid: string,
  sent: NovaEvent,
  owner: string,
): Promise<boolean> {
  return write(deps, async (tx) => {
    const arq = await tx.uow.arq(uuid, FOR_UPDATE);
    // A claim goes with the event it was on: an event cleared or replaced meanwhile is not held.
    const held = arq !== null && (await tx.uow.novaEventClaimant(uuid)) === owner;
    const owed = arq?.novaEvent;
    if (!arq || !owed || owed.instanceUuid !== sent.instanceUuid || owed.status !== sent.status) return held;
    await writeArq(tx, { ...arq, novaEvent: null });
    return held;
  });
}
