/**
 * Carries out a plan (plan.ts) against the Placement API, one provider at a
 * time: reads what Placement holds (or trusts what Berth last read or wrote),
 * plans, and writes the plan's steps. Every write carries the provider
 * generation Berth read; a 409 re-reads the provider and plans again (5
 * times, then the provider is a problem, retried later). A dry run reads
 * everything fresh and writes nothing: the plan is the answer.
 */
import type { Logger } from 'pino';
import { type PlacementApi, PlacementRefused } from './api.js';
import type { DesiredProvider } from './desired.js';
import { OWNER_TRAIT, providerUuid } from './names.js';
import {
  type Actual,
  type ActualProvider,
  type ProviderPlan,
  plan,
  type RootState,
  type Want,
} from './plan.js';

/** A provider Berth cannot make right now: reported in the status, looked at again later. */
export class ProviderProblem extends Error {}

export interface PlanExecutorOptions {
  api: PlacementApi;
  log: Logger;
  /** No Nova: Berth creates a root provider per host (else it waits for nova-compute's). */
  createRoots: boolean;
  /** How long a missing compute node provider is not looked for again (ms). */
  pollMs: number;
}

export class PlanExecutor {
  private readonly api: PlacementApi;
  private readonly log: Logger;
  /** What Placement holds per provider name, as Berth last read or wrote it (null: absent). */
  readonly actual = new Map<string, ActualProvider | null>();
  /** Compute node providers by name: their uuid, or until when one is not looked for again. */
  readonly roots = new Map<string, { uuid: string } | { missingUntil: number }>();
  private readonly knownRcs = new Set<string>();
  private readonly knownTraits = new Set<string>([OWNER_TRAIT]);
  /** 409s on a provider generation, re-read and retried (since start). */
  generationConflicts = 0;

  constructor(private readonly o: PlanExecutorOptions) {
    this.api = o.api;
    this.log = o.log;
  }

  /** Reads (or trusts the cache), plans, writes; a generation conflict re-reads and plans again. */
  async reconcile(want: Want, dryRun: boolean): Promise<ProviderPlan> {
    const { name } = want;
    let fresh = dryRun;
    for (let attempt = 0; attempt < 5; attempt++) {
      let current = fresh ? undefined : this.actual.get(name);
      if (current === undefined) {
        current = await this.readActual(name);
        if (!dryRun) this.actual.set(name, current);
      }
      try {
        const p = plan(want, await this.gather(want.provider, current, dryRun));
        if (!dryRun) await this.execute(name, p, current);
        return p;
      } catch (err) {
        const conflict =
          err instanceof PlacementRefused &&
          (err.isGenerationConflict ||
            (err.status === 409 &&
              (err.code === 'placement.duplicate_name' || err.code === 'placement.resource_provider.inuse')));
        if (!conflict) throw err;
        this.generationConflicts++;
        this.log.info(
          { provider: name, attempt: attempt + 1 },
          `Placement: ${err.message}; reading the provider again`,
        );
        this.actual.delete(name);
        fresh = true;
      }
    }
    throw new ProviderProblem(
      `${name}: the provider kept changing under Berth (5 generation conflicts in a row)`,
    );
  }

  private async readActual(name: string): Promise<ActualProvider | null> {
    const p = await this.api.providerByName(name);
    if (!p) return null;
    try {
      for (let i = 0; ; i++) {
        const t = await this.api.traits(p.uuid);
        const inv = await this.api.inventories(p.uuid);
        if (t.generation === inv.generation || i >= 3) {
          return {
            uuid: p.uuid,
            name,
            generation: inv.generation,
            parent: p.parent_provider_uuid,
            traits: t.traits,
            inventories: inv.inventories,
          };
        }
      }
    } catch (err) {
      // Deleted between the reads (by its owner, or by Berth's own earlier pass): absent.
      if (err instanceof PlacementRefused && err.status === 404) return null;
      throw err;
    }
  }

  /** The rest of what the plan depends on: the compute node's provider, or the allocations that keep one. */
  private async gather(
    desired: DesiredProvider | null,
    provider: ActualProvider | null,
    dryRun: boolean,
  ): Promise<Actual> {
    if (desired) return { provider, root: await this.root(desired.nodename, dryRun) };
    if (!provider?.traits.includes(OWNER_TRAIT)) return { provider };
    const allocs = await this.api.allocations(provider.uuid);
    return { provider, consumers: Object.keys(allocs.consumers).sort() };
  }

  private async root(nodename: string, dryRun: boolean): Promise<RootState> {
    const c = this.roots.get(nodename);
    if (c && 'uuid' in c) return { kind: 'present', uuid: c.uuid };
    if (c && c.missingUntil > Date.now() && !dryRun) return { kind: 'missing' };
    const p = await this.api.providerByName(nodename);
    if (p) {
      if (p.parent_provider_uuid !== null) return { kind: 'not-root', uuid: p.uuid };
      this.roots.set(nodename, { uuid: p.uuid });
      return { kind: 'present', uuid: p.uuid };
    }
    if (!this.o.createRoots) {
      this.roots.set(nodename, { missingUntil: Date.now() + this.o.pollMs });
      return { kind: 'missing' };
    }
    return { kind: 'create', uuid: providerUuid(nodename) };
  }

  /** Writes the plan's steps in order, keeping the cache to what was written. */
  private async execute(name: string, p: ProviderPlan, read: ActualProvider | null): Promise<void> {
    const api = this.api;
    let cur = read;
    for (const step of p.steps) {
      switch (step.kind) {
        case 'create-root': {
          const made = await api.createProvider({ name: step.name, uuid: step.uuid });
          await api.putTraits(made.uuid, made.generation, [OWNER_TRAIT], step.name);
          this.roots.set(step.name, { uuid: made.uuid });
          this.log.info(
            { provider: step.name, uuid: made.uuid },
            'Placement: created a root provider (no compute node provider: running without Nova)',
          );
          break;
        }
        case 'create': {
          const made = await api.createProvider({ name, uuid: step.uuid, parent: step.parent });
          cur = {
            uuid: made.uuid,
            name,
            generation: made.generation,
            parent: step.parent,
            traits: [],
            inventories: {},
          };
          this.actual.set(name, cur);
          break;
        }
        case 'traits': {
          for (const t of step.ensure) {
            if (this.knownTraits.has(t)) continue;
            await api.ensureTrait(t);
            this.knownTraits.add(t);
          }
          const c = cur!;
          c.generation = await api.putTraits(c.uuid, c.generation, step.traits, name);
          c.traits = [...step.traits];
          break;
        }
        case 'inventories': {
          for (const rc of step.ensure) {
            if (this.knownRcs.has(rc)) continue;
            await api.ensureResourceClass(rc);
            this.knownRcs.add(rc);
          }
          const c = cur!;
          c.generation = await api.putInventories(c.uuid, c.generation, step.inventories, name);
          c.inventories = structuredClone(step.inventories);
          break;
        }
        case 'delete':
          await api.deleteProvider(step.uuid, name);
          this.actual.set(name, null);
          break;
      }
    }
  }
}
