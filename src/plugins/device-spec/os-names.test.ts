/**
 * os-names.ts is what scripts/gen-os-names.py writes from the installed
 * os-resource-classes and os-traits: the lists Nova's placement translator
 * keeps as standard names, taken from the packages, not by hand.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { available, osPlacementNames, PYTHON } from '../../../test/helpers/prerequisites.js';
import { OS_RESOURCE_CLASSES, OS_TRAITS } from './os-names.js';

const canCompare = available(osPlacementNames(), 'os-names.ts against the packages');

describe('os-names.ts', () => {
  it.skipIf(!canCompare)('is exactly what scripts/gen-os-names.py makes of the installed packages', () => {
    const generated = execFileSync(PYTHON, ['scripts/gen-os-names.py'], { timeout: 60_000 }).toString();
    expect(readFileSync('src/plugins/device-spec/os-names.ts', 'utf8')).toBe(generated);
  });

  it('holds the standard classes Nova keeps, the packet-rate ones included', () => {
    expect(OS_RESOURCE_CLASSES).toContain('PCI_DEVICE');
    expect(OS_RESOURCE_CLASSES).toContain('NET_PACKET_RATE_KILOPACKET_PER_SEC');
    expect(OS_RESOURCE_CLASSES).toContain('NET_PACKET_RATE_EGR_KILOPACKET_PER_SEC');
    expect(OS_RESOURCE_CLASSES).toContain('NET_PACKET_RATE_IGR_KILOPACKET_PER_SEC');
    expect(OS_TRAITS).toContain('COMPUTE_MANAGED_PCI_DEVICE');
    expect(new Set(OS_TRAITS).size).toBe(OS_TRAITS.length);
  });
});
