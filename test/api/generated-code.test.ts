/**
 * Generated code is never edited by hand: regenerating from proto/ must give
 * exactly what is committed under src/gen (stubs and the descriptor set that
 * reflection serves).
 */
import { execFile } from 'node:child_process';
import { readdir, readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { tempDir } from '../helpers/agent.js';

const run = promisify(execFile);
const buf = join(process.cwd(), 'node_modules/.bin/buf');

async function listFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (e.isFile()) out.push(relative(dir, join(e.parentPath, e.name)));
  }
  return out.sort();
}

describe('generated code', () => {
  const dirs: Array<() => Promise<void>> = [];
  afterAll(async () => {
    for (const d of dirs) await d();
  });

  it('is exactly what buf generate and buf build produce from proto/', async () => {
    const tmp = await tempDir('berth-gen-');
    dirs.push(tmp.cleanup);
    await run(buf, ['generate', '--output', tmp.path], { timeout: 60_000 });
    await run(buf, ['build', '-o', join(tmp.path, 'src/gen/berth.binpb')], { timeout: 60_000 });
    const fresh = join(tmp.path, 'src/gen');
    const committed = join(process.cwd(), 'src/gen');
    const files = await listFiles(fresh);
    expect(await listFiles(committed)).toEqual(files);
    for (const f of files) {
      const a = await readFile(join(fresh, f));
      const b = await readFile(join(committed, f));
      expect(a.equals(b), `src/gen/${f} differs from a fresh generation; run npm run gen`).toBe(true);
    }
  }, 120_000);
});
