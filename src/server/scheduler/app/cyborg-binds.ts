/**
 * The Cyborg API's bind and unbind (PATCH /v2/accelerator_requests, from Nova
 * and openstacksdk), as a workflow (decision 55: more than one unit, and it
 * reaches Placement's providers and the agents). The REST edge
 * (cyborg/server.ts) parses and authorizes the request, calls `bind` or
 * `unbind`, and answers 202.
 *
 * - A bind is checked whole before anything is done: every ARQ visible to
 *   the caller, none bound to another instance, none with a bind running, the
 *   provider Nova allocated one of Berth's devices on the host named, and one
 *   project for the instance.
 * - Then its ARQs are claimed in the database (`claimBinds`, one unit): of two
 *   binds of one ARQ, on one scheduler or on two over one database, one runs
 *   and the other is refused (ARQ_BIND_RUNNING, Cyborg's 409) — the rule a
 *   per-process set of running binds used to keep on one process only
 *   (docs/decisions.md 81). The claim names the instance, and the same unit,
 *   under the instance's lock, refuses a hot add (the instance has other ARQs,
 *   bound or claimed: Cyborg's 400), so two binds to one instance cannot both
 *   pass (89). Claims are judged by the database's time. `bind` resolves
 *   once claimed: the bind itself (app/binding.ts: the unit, each agent
 *   records it, undo) runs on, and Nova is told how it ended by the event its
 *   units wrote.
 * - When the bind is final its hold on Nova's events is let go (confirmed
 *   binds), then its claim. A scheduler that dies meanwhile leaves the claim
 *   until it expires (`claimTtlMs`); on SQLite, where a scheduler is alone on
 *   its file, the next run does not wait for it.
 * - An unbind is refused while a bind of one of its ARQs runs, in the unbind's
 *   own unit.
 */
import type { Logger } from 'pino';
import {
  BerthError,
  invalidArgument,
  isBerthError,
  notFoundReason,
  unlessNotFound,
} from '../../../errors.js';
import { instanceIdOf, type Uuid } from '../../../identifiers.js';
import {
  type Arq,
  type ArqBinding,
  type ArqViewer,
  bindRunning,
  bindRunningError,
  boundElsewhereError,
  type ClaimJudge,
  type NovaHold,
  visibleTo,
} from '../domain/arq.js';
import type { PlacementPort } from '../placement/port.js';
import type { UseCases } from '../usecases/use-cases.js';
import type { Binding } from './binding.js';

/** One ARQ of a bind, as Nova patches it (parsed at the edge). */
export interface CyborgBindPatch {
  arqUuid: Uuid;
  hostname: string;
  deviceRpUuid: Uuid;
  instanceUuid: Uuid;
  /** The instance's project, given by an admin; null: the ARQ's own. */
  projectId: string | null;
}

/** What a bind tells Nova through: the hold its unit takes on its events, and a nudge to the sender. */
export interface NovaNotices {
  readonly hold: NovaHold;
  poke(): void;
}

/**
 * How long a bind's claim holds if its scheduler never lets it go: longer than
 * a bind lasts (the gate's read, the unit, the agents' RecordBinding at 10 s
 * each side by side, the undo), so a live bind is never taken over.
 */
export const BIND_CLAIM_TTL_MS = 120_000;

export interface CyborgBindsDeps {
  useCases: UseCases;
  binding: Binding;
  /** Placement's providers: device_rp_uuid → the devices it stands for. */
  placement: Pick<PlacementPort, 'devicesOfProvider'>;
  /** Berth host → the name Nova knows its compute node by (Placement's compute_nodes). */
  nodename: (host: string) => string;
  /** This scheduler's id (the holder of its claims), and whether it is alone on its database (SQLite). */
  judge: ClaimJudge;
  /** Nova's events; null without a Nova (none is owed). */
  nova: NovaNotices | null;
  claimTtlMs?: number;
  logger: Logger;
}

export class CyborgBinds {
  private readonly running = new Set<Promise<void>>();

  constructor(private readonly deps: CyborgBindsDeps) {}

  /**
   * Checks the bind of `patches` (one instance's ARQs) whole and claims its
   * ARQs; resolves once claimed, with the bind running on (`settled` waits for it).
   */
  async bind(viewer: ArqViewer, patches: CyborgBindPatch[]): Promise<void> {
    const { useCases, placement, judge } = this.deps;
    const instance = patches[0]!.instanceUuid;
    const bindings: ArqBinding[] = [];
    /** ARQs already bound as asked (Nova retrying): their bind holds nothing, and what their event's sender claims is not let go. */
    const retried = new Set<string>();
    let owner: string | null = null;
    // Claims are judged by the database's time, never this scheduler's clock (docs/decisions.md 89).
    const now = await useCases.databaseNow();
    for (const p of patches) {
      const arq = await visibleArq(useCases, viewer, p.arqUuid);
      if (arq.state === 'bound' && arq.instanceUuid !== p.instanceUuid) throw boundElsewhereError(arq);
      if (bindRunning(arq, now, judge)) throw bindRunningError(arq.uuid);
      const devices = await placement.devicesOfProvider(p.deviceRpUuid, p.hostname);
      if (devices.length === 0) {
        throw invalidArgument(
          `${p.arqUuid}/device_rp_uuid`,
          `${p.deviceRpUuid} is not the Placement provider of a device of Berth's`,
        );
      }
      const host = devices[0]!.host;
      if (p.hostname !== host && p.hostname !== this.deps.nodename(host)) {
        throw invalidArgument(
          `${p.arqUuid}/hostname`,
          `${p.hostname} is not the host of provider ${p.deviceRpUuid} (${host})`,
        );
      }
      const project = p.projectId ?? arq.project ?? null;
      if (bindings.length > 0 && project !== owner) {
        throw invalidArgument(
          `${p.arqUuid}/project_id`,
          `ARQ ${arq.uuid} is of project ${project ?? '(none)'}, the others of ${owner ?? '(none)'}: one instance's ARQs are one project's`,
        );
      }
      owner = project;
      if (arq.state === 'bound') retried.add(arq.uuid);
      bindings.push({
        arqUuid: arq.uuid,
        instanceUuid: instanceIdOf(p.instanceUuid),
        host,
        devices: devices.map((d) => d.deviceUuid),
        ...(this.deps.nova ? { notifyNova: this.deps.nova.hold } : {}),
        claimed: true,
      });
    }
    // The claim, in the database: checked again under the ARQs' row locks, so no other bind runs
    // too; and, under the instance's lock, no hot add (Cyborg: an instance that has other ARQs,
    // or another bind's claim, cannot bind more), so two binds to one instance cannot both pass.
    const claimed = await useCases.claimBinds({
      bindings,
      judge,
      ttlMs: this.deps.claimTtlMs ?? BIND_CLAIM_TTL_MS,
      viewer,
    });
    // Bound meanwhile as asked (another scheduler's bind ended): a retry now.
    for (const a of claimed) if (a.state === 'bound') retried.add(a.uuid);
    const run = this.run(bindings, retried, owner, instance).finally(() => this.running.delete(run));
    this.running.add(run);
  }

  /** Cyborg's unbind: the ARQs go back to Initial, their devices through release; refused while one's bind runs. */
  async unbind(viewer: ArqViewer, uuids: Uuid[]): Promise<void> {
    for (const u of uuids) await visibleArq(this.deps.useCases, viewer, u);
    await this.deps.useCases.unbindArqs(uuids, this.deps.judge);
  }

  /** Resolves once every bind accepted so far has ended. */
  async settled(): Promise<void> {
    await Promise.allSettled([...this.running]);
  }

  /** The claimed bind, to its end: then its hold on Nova's events (confirmed) and its claim are let go. */
  private async run(
    bindings: ArqBinding[],
    retried: Set<string>,
    owner: string | null,
    instance: string,
  ): Promise<void> {
    const { useCases, judge, logger } = this.deps;
    const arqs = bindings.map((b) => b.arqUuid);
    try {
      // The instance is the ARQs' project's: it reads the instance's erasure certificates.
      await this.deps.binding.bind(bindings, owner ?? undefined, owner ?? '');
      // Confirmed: the bind is final, and its `completed` events anyone's to send. (An undone
      // bind's `failed` events replaced the held ones, unclaimed, in the undo's unit.)
      const fresh = arqs.filter((u) => !retried.has(u));
      if (this.deps.nova && fresh.length > 0) {
        await useCases
          .releaseNovaEvents(fresh, judge.self)
          .catch((err: unknown) =>
            logger.warn(
              { err: (err as Error).message, arqs: fresh },
              'Cyborg API: the hold on Nova events of a confirmed bind was not let go; they are sent once it expires',
            ),
          );
      }
    } catch (err) {
      const level = isBerthError(err) && err.code !== 'INTERNAL' ? 'info' : 'error';
      logger[level]({ err: (err as Error).message, arqs, instance }, 'Cyborg API: bind failed; Nova is told');
    } finally {
      await useCases
        .releaseBindClaims(arqs, judge.self)
        .catch((err: unknown) =>
          logger.warn(
            { err: (err as Error).message, arqs },
            'Cyborg API: the claim of an ended bind was not let go; its ARQs take binds again once it expires',
          ),
        );
      this.deps.nova?.poke();
    }
  }
}

/**
 * ARQ `uuid` when `viewer` may see it (its project's, or any for an admin);
 * else NOT_FOUND as for none (Cyborg's 404), so another project's ARQs are not told.
 */
export async function visibleArq(useCases: UseCases, viewer: ArqViewer, uuid: Uuid): Promise<Arq> {
  const arq = await useCases.getArq(uuid).catch(unlessNotFound);
  if (!arq || !visibleTo(viewer, arq)) {
    throw new BerthError('NOT_FOUND', `Accelerator request ${uuid} could not be found.`, {
      reason: notFoundReason('accelerator request'),
      metadata: { kind: 'accelerator request', id: uuid },
    });
  }
  return arq;
}
