import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ERROR_REASONS, relayedReason } from './error-reasons.js';

/** The rows of docs/api.md's "Error reasons" table: reason → [codes, meaning]. */
function documented(): Map<string, [string[], string]> {
  const md = readFileSync(new URL('../docs/api.md', import.meta.url), 'utf8');
  const section = md.split('\n## Error reasons\n')[1]?.split('\n## ')[0] ?? '';
  const rows = new Map<string, [string[], string]>();
  for (const line of section.split('\n')) {
    const m = /^\| `([A-Z0-9_]+)` \| (.+?) \| (.+) \|$/.exec(line);
    if (!m) continue;
    expect(rows.has(m[1]!), `${m[1]} is listed twice`).toBe(false);
    const codes = [...m[2]!.matchAll(/`([A-Z_]+)`/g)].map((c) => c[1]!);
    rows.set(m[1]!, [codes, m[3]!.replaceAll('\\|', '|')]);
  }
  return rows;
}

describe('the catalogue of error reasons', () => {
  it("is docs/api.md's table, row for row", () => {
    const doc = documented();
    const code = new Map(
      Object.entries(ERROR_REASONS).map(([r, e]) => [r, [[...e.codes], e.meaning] as [string[], string]]),
    );
    expect([...doc.keys()].sort()).toEqual([...code.keys()].sort());
    for (const [r, row] of code) expect(doc.get(r), r).toEqual(row);
  });

  it('gives every reason a one-line meaning and at least one code', () => {
    for (const [r, e] of Object.entries(ERROR_REASONS)) {
      expect(e.codes.length, r).toBeGreaterThan(0);
      expect(e.meaning, r).toMatch(/^[A-Z].*\.$/);
      expect(e.meaning, r).not.toContain('\n');
    }
  });

  it('keeps a relayed reason only when the catalogue lists it for the code', () => {
    expect(relayedReason('FAILED_PRECONDITION', 'MEDIA_CHANGED', 'AGENT_REFUSED_BINDING')).toBe(
      'MEDIA_CHANGED',
    );
    // Listed, but for another code; unknown; absent: the fallback.
    expect(relayedReason('FAILED_PRECONDITION', 'STORE_DISK_FULL', 'AGENT_REFUSED_BINDING')).toBe(
      'AGENT_REFUSED_BINDING',
    );
    expect(relayedReason('FAILED_PRECONDITION', 'NEWER_REASON', 'AGENT_REFUSED_BINDING')).toBe(
      'AGENT_REFUSED_BINDING',
    );
    expect(relayedReason('FAILED_PRECONDITION', undefined, 'AGENT_REFUSED_RELEASE')).toBe(
      'AGENT_REFUSED_RELEASE',
    );
  });
});
