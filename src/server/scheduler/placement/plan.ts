/**
 * What Berth would write to make one provider in Placement what Berth says it
 * is (decision 43): a pure function of the desired provider (desired.ts) and
 * what Placement holds (read by executor.ts), no I/O. The reporter's pass and
 * an operator's `berth placement sync --dry-run` both go through it: the dry
 * run prints the plan's changes, the pass hands the plan to the executor.
 *
 * Order within a plan: a new provider gets its traits before its inventory
 * (it cannot be scheduled before it is marked); a hold (reserved going up, a
 * provider Berth cannot make right) is written before anything else.
 */
import { isResourceClass, isTrait, type ResourceClass, type Trait } from '../../../identifiers.js';
import type { Inventories } from './api.js';
import type { DesiredProvider } from './desired.js';
import { OWNER_TRAIT } from './names.js';
import type { PlacementChange } from './port.js';

/** What Placement holds for one provider, as Berth last read or wrote it. */
export interface ActualProvider {
  uuid: string;
  name: string;
  generation: number;
  parent: string | null;
  traits: string[];
  inventories: Inventories;
}

/** The compute node provider a desired provider goes under. */
export type RootState =
  /** There, a root: its uuid. */
  | { kind: 'present'; uuid: string }
  /** Absent, and Berth makes roots (no Nova): created with this uuid. */
  | { kind: 'create'; uuid: string }
  /** Absent, and nova-compute makes it: waited for. */
  | { kind: 'missing' }
  /** A provider by the compute node's name that has a parent. */
  | { kind: 'not-root'; uuid: string };

/** What Berth wants of one provider. */
export interface Want {
  name: string;
  /** null: Berth has no device for it (its provider goes, unless allocations hold it). */
  provider: DesiredProvider | null;
  /** The host it was last seen for (the changes of a provider Berth no longer wants name it). */
  host: string;
}

/** What Placement holds that the plan depends on. */
export interface Actual {
  /** The provider by the name (null: none). */
  provider: ActualProvider | null;
  /** The compute node's provider: read when a provider is wanted. */
  root?: RootState;
  /** Consumers holding allocations against a provider of Berth's it no longer wants (sorted). */
  consumers?: string[];
}

/** One write, in the order given. Traits and resource classes in `ensure` are made first if Placement lacks them. */
export type PlanStep =
  | { kind: 'create-root'; name: string; uuid: string }
  | { kind: 'create'; name: string; uuid: string; parent: string }
  | { kind: 'traits'; traits: string[]; ensure: Trait[] }
  | { kind: 'inventories'; inventories: Inventories; ensure: ResourceClass[] }
  | { kind: 'delete'; uuid: string };

export interface ProviderPlan {
  steps: PlanStep[];
  /** What the steps change, as the reporter and the dry run show it. */
  changes: PlacementChange[];
  /** Why the provider cannot be made right ('' when it can): the steps (a hold) are written, then it waits. */
  problem: string;
  /** Allocations keep a provider Berth would delete: it stays, reserved, until they go. */
  kept: { uuid: string; consumers: string[] } | null;
}

const sameSet = (a: readonly string[], b: readonly string[]) =>
  a.length === b.length && [...a].sort().join() === [...b].sort().join();

function describeInventory(inv: Inventories): string {
  return (
    Object.entries(inv)
      .map(([rc, r]) => `${rc} total ${r.total} reserved ${r.reserved}`)
      .join(', ') || 'none'
  );
}

/** `CUSTOM_X: reserved 0 → 1` for what changes in a class kept; the whole inventories otherwise. */
function inventoryChange(cur: Inventories, want: Inventories): string {
  const rcs = Object.keys(want);
  if (rcs.length !== Object.keys(cur).length || !rcs.every((rc) => cur[rc])) {
    return `inventory ${describeInventory(cur)} → ${describeInventory(want)}`;
  }
  return rcs
    .map((rc) => {
      const a = cur[rc]!;
      const w = want[rc]!;
      const fields = (Object.keys(w) as Array<keyof typeof w>).filter((k) => a[k] !== w[k]);
      return fields.length ? `${rc}: ${fields.map((k) => `${k} ${a[k]} → ${w[k]}`).join(', ')}` : '';
    })
    .filter(Boolean)
    .join('; ');
}

function change(
  action: PlacementChange['action'],
  name: string,
  uuid: string,
  desired: DesiredProvider | null,
  details: string[],
  host = desired?.host ?? '',
): PlacementChange {
  return {
    provider: name,
    providerUuid: uuid,
    host,
    action,
    details,
    deviceAddresses: desired?.devices.map((d) => d.address) ?? [],
  };
}

/** The writes that make `actual` what `want` says, and the changes they make. */
/** Whether writing this provider holds a device back (those are written first): new, unread, or more reserved. */
export function holdsBack(d: DesiredProvider | undefined, a: ActualProvider | null | undefined): boolean {
  if (!d || a === undefined || a === null) return true;
  const inv = a.inventories[d.resourceClass];
  return !inv || d.reserved > inv.reserved;
}

export function plan(want: Want, actual: Actual): ProviderPlan {
  const { name, provider: desired } = want;
  const current = actual.provider;
  if (!desired) {
    if (!current?.traits.includes(OWNER_TRAIT)) return { steps: [], changes: [], problem: '', kept: null };
    const consumers = actual.consumers ?? [];
    if (consumers.length > 0) {
      // Berth would delete it, but a consumer holds it: it stays, unschedulable, and Berth says so.
      const holdAll: Inventories = {};
      let raise = false;
      for (const [rc, r] of Object.entries(current.inventories)) {
        holdAll[rc] = { ...r, reserved: r.total };
        raise ||= r.reserved < r.total;
      }
      return {
        steps: raise ? [{ kind: 'inventories', inventories: holdAll, ensure: [] }] : [],
        changes: [
          change(
            'keep',
            name,
            current.uuid,
            null,
            [`allocations of ${consumers.join(', ')} hold it${raise ? '; reserved → total' : ''}`],
            want.host,
          ),
        ],
        problem: '',
        kept: { uuid: current.uuid, consumers },
      };
    }
    return {
      steps: [{ kind: 'delete', uuid: current.uuid }],
      changes: [change('delete', name, current.uuid, null, ['its device is gone'], want.host)],
      problem: '',
      kept: null,
    };
  }

  const steps: PlanStep[] = [];
  const changes: PlacementChange[] = [];
  const blocked = (problem: string): ProviderPlan => ({ steps, changes, problem, kept: null });
  const root = actual.root ?? { kind: 'missing' };
  if (root.kind === 'not-root') {
    return blocked(
      `provider "${desired.nodename}" (${root.uuid}) is not a root provider: a compute node's provider has no parent`,
    );
  }
  if (root.kind === 'missing') {
    return blocked(
      `waiting for the compute node provider "${desired.nodename}" (nova-compute creates it; without Nova, start the scheduler with --placement-create-roots)`,
    );
  }
  if (root.kind === 'create') {
    steps.push({ kind: 'create-root', name: desired.nodename, uuid: root.uuid });
    changes.push(change('create', desired.nodename, root.uuid, null, ['root provider'], desired.host));
  }
  let cur = current;
  if (!cur) {
    if (desired.problem) return blocked(`${name}: ${desired.problem}`);
    steps.push({ kind: 'create', name, uuid: desired.uuid, parent: root.uuid });
    cur = { uuid: desired.uuid, name, generation: 0, parent: root.uuid, traits: [], inventories: {} };
    changes.push(change('create', name, cur.uuid, desired, [`under ${desired.nodename}`]));
  } else if (!cur.traits.includes(OWNER_TRAIT)) {
    // Ours only if it carries Berth's mark, or it is the bare provider Berth created before a crash.
    const bare = cur.traits.length === 0 && Object.keys(cur.inventories).length === 0;
    if (!bare || cur.uuid !== desired.uuid) {
      return blocked(
        `a provider named ${name} (${cur.uuid}) exists and is not Berth's (traits: ${cur.traits.join(', ') || 'none'}): ` +
          'Berth leaves it alone (is Nova reporting this device too? [pci] report_in_placement must be off for devices Berth reports)',
      );
    }
  }
  if (cur.parent !== root.uuid) {
    return blocked(
      `${name} (${cur.uuid}) is under ${cur.parent ?? 'no parent'}, not under compute node ${desired.nodename} (${root.uuid})`,
    );
  }
  const wantTraits = desired.problem ? [...new Set([...cur.traits, OWNER_TRAIT])].sort() : desired.traits;
  const wantInv: Inventories = {};
  if (desired.problem) {
    for (const [rc, r] of Object.entries(cur.inventories)) wantInv[rc] = { ...r, reserved: r.total };
  } else {
    wantInv[desired.resourceClass] = {
      total: desired.total,
      reserved: desired.reserved,
      min_unit: 1,
      max_unit: desired.total,
      step_size: 1,
      allocation_ratio: 1,
    };
  }
  const have = cur;
  const invSame =
    Object.keys(have.inventories).length === Object.keys(wantInv).length &&
    Object.entries(wantInv).every(([rc, w]) => {
      const a = have.inventories[rc];
      return (
        a !== undefined &&
        a.total === w.total &&
        a.reserved === w.reserved &&
        a.min_unit === w.min_unit &&
        a.max_unit === w.max_unit &&
        a.step_size === w.step_size &&
        a.allocation_ratio === w.allocation_ratio
      );
    });
  const traitsStep = (): [PlanStep, string] | null => {
    if (sameSet(have.traits, wantTraits)) return null;
    const added = wantTraits.filter((t) => !have.traits.includes(t));
    const removed = have.traits.filter((t) => !wantTraits.includes(t));
    const ensure = added.filter((t): t is Trait => isTrait(t) && t.startsWith('CUSTOM_'));
    return [
      { kind: 'traits', traits: [...wantTraits], ensure },
      [...added.map((t) => `traits + ${t}`), ...removed.map((t) => `traits - ${t}`)].join(', '),
    ];
  };
  const inventoryStep = (): [PlanStep, string] | null => {
    if (invSame) return null;
    const ensure = Object.keys(wantInv).filter(
      (rc): rc is ResourceClass => isResourceClass(rc) && rc.startsWith('CUSTOM_'),
    );
    return [
      { kind: 'inventories', inventories: wantInv, ensure },
      inventoryChange(have.inventories, wantInv),
    ];
  };
  const prev = have.inventories[desired.resourceClass];
  const holding = desired.problem !== '' || !prev || desired.reserved > prev.reserved;
  // A new provider gets its traits before it can be scheduled; a hold is written before anything else.
  const order =
    holding && Object.keys(have.inventories).length > 0
      ? [inventoryStep, traitsStep]
      : [traitsStep, inventoryStep];
  const details: string[] = [];
  for (const next of order) {
    const s = next();
    if (!s) continue;
    steps.push(s[0]);
    if (s[1]) details.push(s[1]);
  }
  if (desired.problem) details.push(desired.problem);
  if (details.length > 0) {
    const created = changes.find((c) => c.provider === name && c.action === 'create');
    if (created) created.details.push(...details);
    else changes.push(change('update', name, have.uuid, desired, details));
  }
  return { steps, changes, problem: desired.problem ? `${name}: ${desired.problem}` : '', kept: null };
}
