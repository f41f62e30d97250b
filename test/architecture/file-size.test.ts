/**
 * Rooms a newcomer can hold (issue 41): no production source file outside
 * src/gen (generated) and src/sim (the simulator) is over MAX_LINES lines.
 * Test code (`*.test.ts`, `*.support.ts`, `*.soak.ts`: the same pattern as
 * .dependency-cruiser.cjs's TEST) is not production. The check is a function
 * over a tree, run on this repository and on a planted tree it must catch.
 */
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const REPO = join(import.meta.dirname, '../..');
const MAX_LINES = 650;

/**
 * Files allowed over the limit, each with why. Keep it empty: an entry whose
 * file is back under the limit (or gone) fails the last test.
 */
const ALLOWED: Readonly<Record<string, string>> = {
  // Empty since the last three files were split (issue 41 item 10, decision 80's
  // addendum): agent.ts, placement/reporter.ts and store/sql/unit.ts.
};

const TEST_CODE = /(\.test\.ts|\.support\.ts|\.soak\.ts)$/;
const EXEMPT_DIRS = ['src/gen/', 'src/sim/'];

async function* tsFiles(dir: string): AsyncGenerator<string> {
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) yield* tsFiles(p);
    else if (e.isFile() && e.name.endsWith('.ts')) yield p;
  }
}

/** Production source files of `root` over `max` lines, as `path: lines`, paths relative to `root`. */
async function oversizedSources(root: string, max = MAX_LINES): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for await (const file of tsFiles(join(root, 'src'))) {
    const rel = relative(root, file).split('\\').join('/');
    if (TEST_CODE.test(rel) || EXEMPT_DIRS.some((d) => rel.startsWith(d))) continue;
    const text = await readFile(file, 'utf8');
    const lines = text.split('\n').length - (text.endsWith('\n') ? 1 : 0);
    if (lines > max) out.set(rel, lines);
  }
  return out;
}

describe('no production source file is over 650 lines', () => {
  it('holds for this repository (but for the commented allow-list)', async () => {
    const over = await oversizedSources(REPO);
    const unexpected = [...over].filter(([f]) => !(f in ALLOWED)).map(([f, n]) => `${f}: ${n} lines`);
    expect(unexpected, `split these (one concern a module, about 300 lines)`).toEqual([]);
  });

  describe('on a planted tree', () => {
    let root: string;
    const lines = (n: number) => Array.from({ length: n }, (_, i) => `export const v${i} = ${i};`).join('\n');
    beforeAll(async () => {
      root = await mkdtemp(join(tmpdir(), 'berth-file-size-'));
      const plant = async (path: string, text: string) => {
        await mkdir(dirname(join(root, path)), { recursive: true });
        await writeFile(join(root, path), text);
      };
      await plant('src/server/planted-long.ts', `${lines(651)}\n`);
      await plant('src/client/planted-no-final-newline.ts', lines(700));
      await plant('src/server/at-the-limit.ts', `${lines(650)}\n`);
      await plant('src/gen/berth/generated.ts', lines(5000));
      await plant('src/sim/simulator.ts', lines(5000));
      await plant('src/server/long.test.ts', lines(5000));
      await plant('src/server/store/contract.support.ts', lines(5000));
      await plant('src/server/notes.md', lines(5000));
    });
    afterAll(async () => {
      await rm(root, { recursive: true, force: true });
    });

    it('reports the long production files, and only them', async () => {
      expect(Object.fromEntries(await oversizedSources(root))).toEqual({
        'src/server/planted-long.ts': 651,
        'src/client/planted-no-final-newline.ts': 700,
      });
    });
  });

  it('allows only files that are still over the limit', async () => {
    const over = await oversizedSources(REPO);
    const stale = Object.keys(ALLOWED).filter((f) => !over.has(f));
    expect(stale, 'these are split: remove them from ALLOWED').toEqual([]);
  });
});
