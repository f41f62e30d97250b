/**
 * Files Berth reads at run time (proto/, src/gen/berth.binpb, schema/,
 * bin/nvme-sim, package.json) are found from the repository root, not from
 * the module's own location, so the same code works from source (tsx, vitest)
 * and from the bundle bin/berth runs (node_modules/.cache/berth/cli).
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

function findRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pkg = join(dir, 'package.json');
    if (existsSync(pkg)) {
      try {
        if ((JSON.parse(readFileSync(pkg, 'utf8')) as { name?: string }).name === 'berth') return dir;
      } catch {
        // not ours; keep walking up
      }
    }
    const parent = dirname(dir);
    if (parent === dir)
      throw new Error(`cannot find the Berth repository root above ${fileURLToPath(import.meta.url)}`);
    dir = parent;
  }
}

/** The repository (package) root. */
export const REPO_ROOT = findRoot();

/** A path inside the repository. */
export const repoPath = (...parts: string[]): string => join(REPO_ROOT, ...parts);
