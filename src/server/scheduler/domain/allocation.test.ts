import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { candidateQuery, describeRejections, pickDevice } from './allocation.js';
import {
  allocatable,
  bind,
  type DeviceRecord,
  inUse,
  newDevice,
  release,
  setStatus,
} from './device-state.js';
import { facts, hostName, pciFacts, testUuid } from './fixtures.support.js';
import type { RequestGroup } from './profile.js';

const NOW = '2026-01-01T00:00:00.000Z';
const group = (g: Partial<RequestGroup> = {}): RequestGroup => ({
  resourceClass: 'CUSTOM_NVME_144D_A808',
  vendorId: '',
  productId: '',
  requiredTraits: [],
  forbiddenTraits: [],
  liveMigratable: 'unset',
  count: 1,
  ...g,
});
const none = { busyIommuGroups: new Set<number>() };
const busyOf = (ds: DeviceRecord[]) =>
  new Set(ds.filter(inUse).flatMap((d) => (d.iommuGroup === null ? [] : [d.iommuGroup])));

describe('pickDevice', () => {
  const ds = [
    newDevice(hostName('h'), facts({ index: 3, numaNode: 1 }), testUuid('a'), NOW),
    newDevice(hostName('h'), facts({ index: 2, numaNode: -1 }), testUuid('b'), NOW),
    newDevice(
      hostName('h'),
      facts({ index: 1, numaNode: 1, traits: ['OWNER_BERTH', 'HW_NVME_CES', 'CUSTOM_X'] }),
      testUuid('c'),
      NOW,
    ),
    newDevice(hostName('h'), pciFacts({ index: 0, numaNode: 0 }), testUuid('d'), NOW),
  ];

  it('prefers the lowest NUMA node, then fewer traits, then the address; -1 NUMA last', () => {
    expect(pickDevice(group(), ds, none).device?.uuid).toBe('a');
    expect(pickDevice(group(), [ds[1]!, ds[2]!], none).device?.uuid).toBe('c');
  });

  it('filters by class or vendor/product, traits and live_migratable', () => {
    expect(pickDevice(group({ requiredTraits: ['CUSTOM_X'] }), ds, none).device?.uuid).toBe('c');
    expect(pickDevice(group({ forbiddenTraits: ['HW_NVME_CES'] }), ds, none).device).toBeNull();
    const byIds = group({ resourceClass: '', vendorId: '10de', productId: '25b6' });
    expect(pickDevice(byIds, ds, none).device?.uuid).toBe('d');
    expect(pickDevice({ ...byIds, liveMigratable: 'yes' }, ds, none).device).toBeNull();
    expect(pickDevice({ ...byIds, liveMigratable: 'no' }, ds, none).device?.uuid).toBe('d');
  });

  it('skips devices that are not allocatable or whose IOMMU group is busy, and says why', () => {
    const r = pickDevice(group(), [setStatus(ds[0]!, 'maintaining'), ds[1]!], {
      busyIommuGroups: new Set([102]),
    });
    expect(r.device).toBeNull();
    expect(describeRejections(r.rejected)).toBe(
      '1 status is maintaining, 1 IOMMU group 102 shared with a device in use',
    );
    expect(describeRejections({})).toBe('no candidates');
  });

  it('builds the store query from the group', () => {
    expect(candidateQuery('h', group())).toEqual({
      host: hostName('h'),
      resourceClass: 'CUSTOM_NVME_144D_A808',
    });
    expect(candidateQuery('h', group({ resourceClass: '', vendorId: '10de', productId: '25b6' }))).toEqual({
      host: hostName('h'),
      vendorId: '10de',
      productId: '25b6',
    });
  });

  it('property: the pick passes every filter, is the best by the preference order, and never shares a busy IOMMU group', () => {
    const deviceArb = fc.record({
      numaNode: fc.integer({ min: -1, max: 2 }),
      iommuGroup: fc.option(fc.integer({ min: 1, max: 4 }), { nil: null }),
      extraTrait: fc.boolean(),
      maintaining: fc.boolean(),
    });
    fc.assert(
      fc.property(
        fc.array(deviceArb, { minLength: 1, maxLength: 12 }),
        fc.array(fc.nat(11), { maxLength: 20 }),
        (specs, ops) => {
          let fleet = specs.map((s, i) => {
            const d = newDevice(
              hostName('h'),
              facts({
                index: i,
                numaNode: s.numaNode,
                iommuGroup: s.iommuGroup,
                traits: s.extraTrait ? ['A', 'B'] : ['A'],
              }),
              testUuid(`d${i}`),
              NOW,
            );
            return s.maintaining ? setStatus(d, 'maintaining') : d;
          });
          for (const [n, op] of ops.entries()) {
            const held = fleet.find((d) => d.arqUuid === `arq${op}`);
            if (held) {
              fleet = fleet.map((d) => (d === held ? release(d, { arqUuid: `arq${op}` }, `job${n}`) : d));
              continue;
            }
            const ctx = { busyIommuGroups: busyOf(fleet) };
            const { device } = pickDevice(group(), fleet, ctx);
            const eligible = fleet.filter(
              (d) => allocatable(d) && (d.iommuGroup === null || !ctx.busyIommuGroups.has(d.iommuGroup)),
            );
            if (device === null) {
              expect(eligible).toEqual([]);
              continue;
            }
            expect(eligible).toContain(device);
            // the pick is minimal by (NUMA with -1 last, trait count, address), lexicographically
            const key = (d: DeviceRecord) =>
              [d.numaNode < 0 ? 99 : d.numaNode, d.traits.length, d.address] as const;
            const lexLess = (a: readonly (number | string)[], b: readonly (number | string)[]) => {
              for (let k = 0; k < a.length; k++) if (a[k] !== b[k]) return a[k]! < b[k]!;
              return false;
            };
            for (const other of eligible) expect(lexLess(key(other), key(device))).toBe(false);
            fleet = fleet.map((d) =>
              d === device ? bind(d, { arqUuid: `arq${op}`, instanceUuid: 'i' }) : d,
            );
            const groups = fleet.filter(inUse).flatMap((d) => (d.iommuGroup === null ? [] : [d.iommuGroup]));
            expect(new Set(groups).size).toBe(groups.length);
          }
        },
      ),
      { numRuns: 200 },
    );
  });
});
