import { describe, expect, it } from 'vitest';
import { facts, nvmeMedia } from './fixtures.support.js';
import { InflowBudget, inventoryBoundBroken } from './inventory-bounds.js';

describe('inventory bounds', () => {
  it('a real device is within them', () => {
    expect(inventoryBoundBroken(facts())).toBeNull();
  });

  it.each([
    ['a 5 MiB attribute', { attributes: { model: 'x'.repeat(5 << 20) } }, 'attributeValueLength'],
    [
      'too many attributes',
      { attributes: Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`k${i}`, 'v'])) },
      'attributesPerDevice',
    ],
    ['a long attribute key', { attributes: { ['k'.repeat(65)]: 'v' } }, 'attributeKeyLength'],
    ['too many traits', { traits: Array.from({ length: 65 }, (_, i) => `CUSTOM_T${i}`) }, 'traitsPerDevice'],
    ['a long trait', { traits: [`CUSTOM_${'X'.repeat(300)}`] }, 'traitLength'],
    ['a long driver name', { driver: 'd'.repeat(2000) }, 'fieldLength'],
    [
      'attributes that add up',
      { attributes: Object.fromEntries(Array.from({ length: 32 }, (_, i) => [`k${i}`, 'v'.repeat(1000)])) },
      'deviceExtrasBytes',
    ],
    [
      'a media identity listing too many namespaces',
      {
        ...nvmeMedia('nqn.x'),
        media: {
          ...nvmeMedia('nqn.x').media!,
          namespaces: Array.from({ length: 1025 }, (_, i) => ({
            nsid: i + 1,
            nguid: '',
            eui64: '',
            uuid: '',
          })),
        },
      },
      'mediaNamespaces',
    ],
    [
      'a long media key',
      { media: { ...nvmeMedia('nqn.x').media!, key: `nvme:${'q'.repeat(2000)}` } },
      'fieldLength',
    ],
  ])('%s is refused, naming the limit', (_what, patch, limit) => {
    expect(inventoryBoundBroken(facts(patch))).toContain(`(${limit})`);
  });
});

describe("a host's inflow budget", () => {
  it('takes a burst, then refills at its rate; what does not fit is refused whole and says how long to wait', () => {
    const b = new InflowBudget({ bytesPerSecond: 1000, burstBytes: 5000 }, 0);
    expect(b.take(5000, 0)).toBe(true);
    expect(b.take(1, 0)).toBe(false);
    expect(b.waitMs(2000, 0)).toBe(2000);
    expect(b.take(2000, 1999)).toBe(false);
    expect(b.take(2000, 2000)).toBe(true);
    // Never more than the burst, however long it rested; an update larger than the burst waits for a full bucket.
    expect(b.take(5001, 60_000)).toBe(false);
    expect(b.waitMs(9999, 60_000)).toBe(0);
  });
});
