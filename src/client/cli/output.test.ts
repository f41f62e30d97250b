import { describe, expect, it } from 'vitest';
import { renderRecord, renderTable, toYaml, uniquePrefixes } from './output.js';

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

  it('stays within 120 columns when cutting the shrinkable cells is not enough, never narrowing a fixed column', () => {
    const r = [
      {
        uuid: 'u'.repeat(36),
        state: 'pending_cleaning,burned,maintaining,unhealthy',
        a: 'a'.repeat(40),
        b: 'b'.repeat(40),
      },
    ];
    const table = renderTable(r, [
      { header: 'uuid', get: (x) => x.uuid, fixed: true },
      { header: 'state', get: (x) => x.state },
      { header: 'a', get: (x) => x.a, shrink: true },
      { header: 'b', get: (x) => x.b },
    ]).split('\n');
    for (const l of table) expect([...l].length).toBeLessThanOrEqual(120);
    expect(table[1]).toContain('u'.repeat(36));
  });

  it('wraps a wrap column onto further lines under itself', () => {
    const reason =
      'the function has no IOMMU group, so it cannot be isolated from the host and is never offered';
    const table = renderTable(
      [{ address: '0000:00:1f.2', reason }],
      [
        { header: 'address', get: (x) => x.address, fixed: true },
        { header: 'reason', get: (x) => x.reason, wrap: true },
      ],
      { width: 50 },
    ).split('\n');
    for (const l of table) expect(l.length).toBeLessThanOrEqual(50);
    expect(table.length).toBeGreaterThan(2);
    expect(
      table
        .slice(1)
        .map((l) => l.slice(15).trim())
        .join(' '),
    ).toBe(reason);
    expect(table[2]!.startsWith(' '.repeat(15))).toBe(true);
  });

  it('wraps a long value of a record under its first line (device show attributes)', () => {
    const attributes = Array.from({ length: 40 }, (_, i) => `k${i}=v${i}`).join(', ');
    const lines = renderRecord({ uuid: 'u', attributes }).split('\n');
    expect(lines.length).toBeGreaterThan(2);
    for (const l of lines) expect(l.length).toBeLessThanOrEqual(120);
    expect(lines[1]).toMatch(/^attributes: {2}k0=v0, /);
    expect(lines[2]).toMatch(/^ {13}k\d+=v\d+/);
    expect(
      lines
        .slice(1)
        .map((l) => l.slice(13))
        .join(' ')
        .replace(/ {2,}/g, ' '),
    ).toBe(attributes);
  });

  it('writes YAML that a YAML 1.1 reader takes back as strings (checked with PyYAML in the e2e test)', () => {
    const text = toYaml({ a: 'yes', b: ['no', 'on', '0000:00:04.0', '1_000', '=', '<<'], c: true, d: 7 });
    expect(text).toBe(
      'a: "yes"\nb:\n  - "no"\n  - "on"\n  - "0000:00:04.0"\n  - "1_000"\n  - "="\n  - "<<"\nc: true\nd: 7\n',
    );
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
