import { describe, expect, it } from 'vitest';
import type { ClearAction, ClearStrategy } from '../device-spec/index.js';
import { type CleanupAction, type NvmeCapabilities, resolveCleanupAction } from './policy.js';

/**
 * The spec's matrix transcribed as preference chains: each step names the
 * capability it needs (null = always available: shred needs nothing) and the
 * action it yields. An empty result means the policy is unsatisfiable; 'invalid'
 * means the combination is a configuration error whatever the hardware.
 */
type Step = [need: 'ces' | 'bes' | 'wzs' | null, action: CleanupAction];
const CES: Step = ['ces', 'sanitize-crypto'];
const BES: Step = ['bes', 'sanitize-block'];
const WZ: Step = ['wzs', 'write-zeroes'];
const SHRED: Step = [null, 'shred'];

const MATRIX: Record<ClearAction, Record<ClearStrategy, Step[] | 'invalid'>> = {
  auto: { auto: [CES, BES, WZ, SHRED], crypto: [CES], block: [BES, WZ, SHRED] },
  sanitize: { auto: [CES, BES], crypto: [CES], block: [BES] },
  zero: { auto: [WZ, SHRED], block: [WZ, SHRED], crypto: 'invalid' },
};

const ALL_CAPS: NvmeCapabilities[] = Array.from({ length: 16 }, (_, bits) => ({
  ces: (bits & 1) !== 0,
  bes: (bits & 2) !== 0,
  wzs: (bits & 4) !== 0,
  nsManagement: (bits & 8) !== 0,
}));

const capsName = (c: NvmeCapabilities) =>
  ['ces', 'bes', 'wzs', 'nsManagement'].filter((k) => c[k as keyof NvmeCapabilities]).join('+') || 'none';

const cases: [ClearAction, ClearStrategy, NvmeCapabilities][] = [];
for (const action of ['auto', 'sanitize', 'zero'] as const) {
  for (const strategy of ['auto', 'crypto', 'block'] as const) {
    for (const caps of ALL_CAPS) cases.push([action, strategy, caps]);
  }
}

describe('resolveCleanupAction', () => {
  it('covers 9 combinations × 16 capability sets', () => {
    expect(cases).toHaveLength(144);
  });

  it.each(cases.map(([a, s, c]) => [a, s, capsName(c), c] as const))(
    '%s/%s with %s',
    (action, strategy, _n, caps) => {
      const row = MATRIX[action][strategy];
      const result = resolveCleanupAction(action, strategy, caps);
      if (row === 'invalid') {
        expect(result).toEqual({ error: expect.stringContaining('invalid configuration') });
        return;
      }
      const step = row.find(([need]) => need === null || caps[need]);
      if (step) {
        expect(result).toEqual({ action: step[1] });
      } else {
        expect(result).toEqual({ error: expect.stringContaining('does not report') });
        expect('error' in result && result.error).toContain(
          `clear_action=${action} clear_strategy=${strategy}`,
        );
      }
    },
  );

  // A few rows spelt out literally, so a mistake in the transcription above cannot hide one in the code.
  const none = { ces: false, bes: false, wzs: false, nsManagement: false };
  it.each([
    ['auto', 'auto', { ...none, ces: true, bes: true, wzs: true }, { action: 'sanitize-crypto' }],
    ['auto', 'auto', { ...none, bes: true, wzs: true }, { action: 'sanitize-block' }],
    ['auto', 'auto', { ...none, wzs: true }, { action: 'write-zeroes' }],
    ['auto', 'auto', none, { action: 'shred' }],
    ['auto', 'block', { ...none, ces: true, wzs: true }, { action: 'write-zeroes' }],
    ['auto', 'block', { ...none, ces: true }, { action: 'shred' }],
    ['auto', 'crypto', { ...none, bes: true, wzs: true }, 'error'],
    ['sanitize', 'auto', { ...none, bes: true }, { action: 'sanitize-block' }],
    ['sanitize', 'auto', { ...none, wzs: true, nsManagement: true }, 'error'],
    ['sanitize', 'crypto', { ...none, bes: true }, 'error'],
    ['sanitize', 'block', { ...none, ces: true }, 'error'],
    ['sanitize', 'block', { ...none, ces: true, bes: true }, { action: 'sanitize-block' }],
    ['zero', 'auto', { ...none, ces: true, bes: true }, { action: 'shred' }],
    ['zero', 'block', { ...none, ces: true, bes: true, wzs: true }, { action: 'write-zeroes' }],
    ['zero', 'crypto', { ...none, ces: true, bes: true, wzs: true }, 'error'],
  ] as const)('literal: %s/%s %o → %o', (action, strategy, caps, expected) => {
    const result = resolveCleanupAction(action, strategy, caps);
    if (expected === 'error') expect(result).toHaveProperty('error');
    else expect(result).toEqual(expected);
  });
});
