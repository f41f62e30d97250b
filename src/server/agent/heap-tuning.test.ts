/**
 * keepYoungGenerationSmall takes effect when called at run time, on the Node
 * this runs on: the same allocation (many young objects that survive, as
 * module loading and a large discovery make) grows the nursery without it and
 * leaves it at the size it had when the flag was set with it. A Node whose V8
 * ignored the flag at run time would fail here, not silently cost the agent
 * 25 MiB.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const MODULE = fileURLToPath(new URL('./heap-tuning.ts', import.meta.url));
const MiB = 1024 * 1024;

/** Nursery capacity (new_space) after allocating ~300k surviving objects, in a fresh process. */
async function nurseryAfterAllocating(tuned: boolean): Promise<number> {
  const script = `
    import { getHeapSpaceStatistics } from 'node:v8';
    import { keepYoungGenerationSmall } from ${JSON.stringify(MODULE)};
    if (process.argv.includes('tuned')) keepYoungGenerationSmall();
    const keep = [];
    for (let i = 0; i < 300000; i++) keep.push({ i, s: String(i) });
    const nursery = getHeapSpaceStatistics().find((s) => s.space_name === 'new_space');
    console.log(String(nursery.space_size), keep.length);
  `;
  const { stdout } = await run(
    process.execPath,
    ['--import', 'tsx', '--input-type=module', '-e', script, ...(tuned ? ['tuned'] : [])],
    { timeout: 60_000 },
  );
  return Number(stdout.trim().split(' ')[0]);
}

describe('keepYoungGenerationSmall', () => {
  it('stops the nursery growing where it otherwise grows to its maximum', async () => {
    const [grown, small] = await Promise.all([nurseryAfterAllocating(false), nurseryAfterAllocating(true)]);
    // Without: two 16 MiB semi-spaces. With: what it was when the flag was
    // set (tsx's own loading has grown it to 4 MiB by then; the agent sets it
    // before its modules load, at 2 MiB).
    expect(grown).toBeGreaterThanOrEqual(16 * MiB);
    expect(small).toBeLessThanOrEqual(4 * MiB);
  });
});
