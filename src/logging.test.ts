import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createLogger } from './logging.js';

describe('the process logger', () => {
  it('writes one component per line: a child names its parent’s and its own (agent/cleanup)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'berth-log-'));
    try {
      const file = join(dir, 'log.jsonl');
      const root = createLogger({ level: 'info' }, file);
      const agent = root.child({ component: 'agent', host: 'h1' });
      agent.child({ component: 'cleanup' }).info('scrubbing');
      agent
        .child({ component: 'cleanup' })
        .child({ job: 'j1' })
        .child({ component: 'sanitize' })
        .warn('deep');
      agent.info('plain');
      root
        .child({ component: 'scheduler' })
        .child({ other: '"component":"x"' })
        .info('a value that looks like a key');
      const lines = readFileSync(file, 'utf8').trim().split('\n');
      for (const l of lines) expect(l.match(/"component":/g)?.length ?? 0, l).toBeLessThanOrEqual(1);
      expect(lines.map((l) => (JSON.parse(l) as { component?: string }).component)).toEqual([
        'agent/cleanup',
        'agent/cleanup/sanitize',
        'agent',
        'scheduler',
      ]);
      expect(JSON.parse(lines[1]!)).toMatchObject({ host: 'h1', job: 'j1', msg: 'deep' });
      expect(JSON.parse(lines[3]!)).toMatchObject({ other: '"component":"x"' });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
