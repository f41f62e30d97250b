import { describe, expect, it } from 'vitest';
import { inventoryBoundBroken } from './inventory-bounds.js';
import { facts } from './test-fixtures.js';

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
  ])('%s is refused, naming the limit', (_what, patch, limit) => {
    expect(inventoryBoundBroken(facts(patch))).toContain(`(${limit})`);
  });
});
