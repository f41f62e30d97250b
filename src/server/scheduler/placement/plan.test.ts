import { describe, expect, it } from 'vitest';
import type { HostName, PciAddress, Uuid } from '../../../identifiers.js';
import type { Inventories } from './api.js';
import type { DesiredProvider } from './desired.js';
import { OWNER_TRAIT } from './names.js';
import { type Actual, type ActualProvider, type PlanStep, plan, type Want } from './plan.js';

const NAME = 'node1_0000:3D:00.0';
const ROOT = 'root-uuid';
const RC = 'CUSTOM_PCI_144D_A824';
const TRAITS = [OWNER_TRAIT, 'CUSTOM_BERTH_NVME'].sort();

const inv = (total: number, reserved: number): Inventories => ({
  [RC]: { total, reserved, min_unit: 1, max_unit: total, step_size: 1, allocation_ratio: 1 },
});

function desired(over: Partial<DesiredProvider> = {}): DesiredProvider {
  return {
    name: NAME,
    uuid: 'rp-uuid',
    host: 'node1',
    nodename: 'node1',
    resourceClass: RC,
    traits: TRAITS,
    total: 1,
    reserved: 0,
    devices: [
      {
        uuid: 'dev-uuid' as Uuid,
        host: 'node1' as HostName,
        address: '0000:3d:00.0' as PciAddress,
        heldBecause: '',
      },
    ],
    problem: '',
    ...over,
  };
}

function actual(over: Partial<ActualProvider> = {}): ActualProvider {
  return {
    uuid: 'rp-uuid',
    name: NAME,
    generation: 4,
    parent: ROOT,
    traits: TRAITS,
    inventories: inv(1, 0),
    ...over,
  };
}

const present = { kind: 'present', uuid: ROOT } as const;

interface Case {
  name: string;
  want: Partial<Want>;
  actual: Actual;
  steps: PlanStep['kind'][];
  /** action: details, per change. */
  changes: string[];
  problem?: RegExp;
  kept?: string[];
}

const CASES: Case[] = [
  {
    name: 'in step: nothing to write',
    want: { provider: desired() },
    actual: { provider: actual(), root: present },
    steps: [],
    changes: [],
  },
  {
    name: 'a new provider: created, traits before inventory',
    want: { provider: desired() },
    actual: { provider: null, root: present },
    steps: ['create', 'traits', 'inventories'],
    changes: [
      `create ${NAME}: under node1; traits + CUSTOM_BERTH_NVME, traits + ${OWNER_TRAIT}; inventory none → ${RC} total 1 reserved 0`,
    ],
  },
  {
    name: 'no compute node, Berth makes roots: the root first',
    want: { provider: desired() },
    actual: { provider: null, root: { kind: 'create', uuid: 'new-root' } },
    steps: ['create-root', 'create', 'traits', 'inventories'],
    changes: ['create node1: root provider', `create ${NAME}: under node1; traits + `],
  },
  {
    name: 'no compute node, nova-compute makes it: waits, writes nothing',
    want: { provider: desired() },
    actual: { provider: null, root: { kind: 'missing' } },
    steps: [],
    changes: [],
    problem: /waiting for the compute node provider "node1"/,
  },
  {
    name: 'the compute node name is a child provider: a problem',
    want: { provider: desired() },
    actual: { provider: actual(), root: { kind: 'not-root', uuid: 'x' } },
    steps: [],
    changes: [],
    problem: /"node1" \(x\) is not a root provider/,
  },
  {
    name: 'reserved going up (a bind): the hold is written before the traits',
    want: { provider: desired({ reserved: 1, traits: [OWNER_TRAIT] }) },
    actual: { provider: actual(), root: present },
    steps: ['inventories', 'traits'],
    changes: [`update ${NAME}: ${RC}: reserved 0 → 1; traits - CUSTOM_BERTH_NVME`],
  },
  {
    name: 'reserved going down (clean again): traits first, then the inventory',
    want: { provider: desired({ reserved: 0, traits: [OWNER_TRAIT] }) },
    actual: { provider: actual({ inventories: inv(1, 1) }), root: present },
    steps: ['traits', 'inventories'],
    changes: [`update ${NAME}: traits - CUSTOM_BERTH_NVME; ${RC}: reserved 1 → 0`],
  },
  {
    name: "someone else's provider by the name: left alone",
    want: { provider: desired() },
    actual: { provider: actual({ traits: ['CUSTOM_NOVA'], uuid: 'other' }), root: present },
    steps: [],
    changes: [],
    problem: /exists and is not Berth's \(traits: CUSTOM_NOVA\)/,
  },
  {
    name: 'the bare provider Berth created before a crash: taken up',
    want: { provider: desired() },
    actual: { provider: actual({ traits: [], inventories: {} }), root: present },
    steps: ['traits', 'inventories'],
    changes: [`update ${NAME}: traits + `],
  },
  {
    name: 'under another compute node: a problem',
    want: { provider: desired() },
    actual: { provider: actual({ parent: 'elsewhere' }), root: present },
    steps: [],
    changes: [],
    problem: /is under elsewhere, not under compute node node1 \(root-uuid\)/,
  },
  {
    name: 'a provider Berth cannot say one class for: only held (reserved = total), then a problem',
    want: { provider: desired({ problem: 'VFs of one PF configured differently' }) },
    actual: { provider: actual(), root: present },
    steps: ['inventories'],
    changes: [`update ${NAME}: ${RC}: reserved 0 → 1; VFs of one PF configured differently`],
    problem: /VFs of one PF configured differently/,
  },
  {
    name: 'a provider Berth cannot say one class for, absent: never created',
    want: { provider: desired({ problem: 'mixed' }) },
    actual: { provider: null, root: present },
    steps: [],
    changes: [],
    problem: /mixed/,
  },
  {
    name: 'the device is gone: its provider is deleted',
    want: { provider: null, host: 'node1' },
    actual: { provider: actual(), consumers: [] },
    steps: ['delete'],
    changes: [`delete ${NAME}: its device is gone`],
  },
  {
    name: 'the device is gone but allocations hold its provider: kept, reserved = total',
    want: { provider: null, host: 'node1' },
    actual: { provider: actual(), consumers: ['c1', 'c2'] },
    steps: ['inventories'],
    changes: [`keep ${NAME}: allocations of c1, c2 hold it; reserved → total`],
    kept: ['c1', 'c2'],
  },
  {
    name: 'kept and already reserved: nothing to write',
    want: { provider: null },
    actual: { provider: actual({ inventories: inv(1, 1) }), consumers: ['c1'] },
    steps: [],
    changes: [`keep ${NAME}: allocations of c1 hold it`],
    kept: ['c1'],
  },
  {
    name: "not wanted and not Berth's: left alone",
    want: { provider: null },
    actual: { provider: actual({ traits: ['CUSTOM_NOVA'] }) },
    steps: [],
    changes: [],
  },
];

describe('plan(desired, actual)', () => {
  it.each(CASES)('$name', (c) => {
    const p = plan({ name: NAME, provider: null, host: '', ...c.want }, c.actual);
    expect(p.steps.map((s) => s.kind)).toEqual(c.steps);
    const shown = p.changes.map((ch) => `${ch.action} ${ch.provider}: ${ch.details.join('; ')}`);
    expect(shown).toHaveLength(c.changes.length);
    for (const [i, s] of shown.entries()) {
      expect(s.startsWith(c.changes[i]!), `${s} starts with ${c.changes[i]}`).toBe(true);
    }
    if (c.problem) expect(p.problem).toMatch(c.problem);
    else expect(p.problem).toBe('');
    expect(p.kept?.consumers).toEqual(c.kept);
  });

  it('writes exactly what is wanted, and ensures only the custom traits and classes it adds', () => {
    const p = plan(
      {
        name: NAME,
        provider: desired({ traits: [OWNER_TRAIT, 'HW_GPU_API_VULKAN', 'CUSTOM_NEW'] }),
        host: '',
      },
      { provider: actual({ traits: [OWNER_TRAIT] }), root: present },
    );
    expect(p.steps).toEqual([
      { kind: 'traits', traits: [OWNER_TRAIT, 'HW_GPU_API_VULKAN', 'CUSTOM_NEW'], ensure: ['CUSTOM_NEW'] },
    ]);
    const q = plan(
      { name: NAME, provider: desired({ total: 2, reserved: 1 }), host: '' },
      { provider: actual(), root: present },
    );
    expect(q.steps).toEqual([{ kind: 'inventories', inventories: inv(2, 1), ensure: [RC] }]);
  });

  it('reads nothing and changes nothing it is given', () => {
    const a = actual({ inventories: inv(1, 1) });
    const before = structuredClone(a);
    plan(
      { name: NAME, provider: desired({ traits: [OWNER_TRAIT] }), host: '' },
      { provider: a, root: present },
    );
    plan({ name: NAME, provider: null, host: '' }, { provider: a, consumers: ['c'] });
    expect(a).toEqual(before);
  });
});
