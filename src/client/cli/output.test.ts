import { describe, expect, it } from 'vitest';
import { renderRecord, renderTable, uniquePrefixes } from './output.js';

describe('kubectl-style output', () => {
  const rows = [
    { id: 'a', host: 'sim-host-1', note: 'x'.repeat(150) },
    { id: 'bb', host: 'h', note: 'short' },
  ];

  it('prints no borders, upper-case headers, columns three spaces apart', () => {
    expect(
      renderTable(rows.slice(1), [
        { header: 'id', get: (r) => r.id },
        { header: 'host name', get: (r) => r.host },
      ]),
    ).toBe('ID   HOST NAME\nbb   h');
  });

  it('fits the default view into 120 columns by cutting the shrinkable cells, and -o wide shows them whole', () => {
    const cols = [
      { header: 'id', get: (r: (typeof rows)[number]) => r.id },
      { header: 'host', get: (r: (typeof rows)[number]) => r.host },
      { header: 'note', get: (r: (typeof rows)[number]) => r.note, shrink: true },
      { header: 'extra', get: () => 'only wide', only: 'wide' as const },
    ];
    const table = renderTable(rows, cols).split('\n');
    for (const l of table) expect(l.length).toBeLessThanOrEqual(120);
    expect(table[1]).toMatch(/^a {4}sim-host-1 {3}x+…$/);
    expect(table[0]).not.toContain('EXTRA');
    const wide = renderTable(rows, cols, { wide: true }).split('\n');
    expect(wide[1]).toContain('x'.repeat(150));
    expect(wide[0]).toMatch(/EXTRA$/);
  });

  it('shows one object as aligned key: value lines', () => {
    expect(renderRecord({ uuid: 'u', device_state: 'available', traits: ['A', 'B'] })).toBe(
      'uuid:          u\ndevice_state:  available\ntraits:        A,B',
    );
  });

  it('abbreviates ids to the shortest unique prefix of at least 8 characters, as git does', () => {
    const p = uniquePrefixes(['0123456789ab', '0123456799ff', 'ffffffff0000']);
    expect(p.get('0123456789ab')).toBe('012345678');
    expect(p.get('0123456799ff')).toBe('012345679');
    expect(p.get('ffffffff0000')).toBe('ffffffff');
  });
});
