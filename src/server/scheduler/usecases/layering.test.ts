/**
 * The layering the use cases depend on, checked on the sources: the domain and
 * the use cases know no transport and no database driver; a backend knows no
 * use case (only the factory composes them).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..');
const imports = (dir: string) =>
  readdirSync(join(root, dir))
    .filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts'))
    .flatMap((f) =>
      [...readFileSync(join(root, dir, f), 'utf8').matchAll(/^import[^;]*?from '([^']+)';/gms)].map((m) => ({
        file: `${dir}/${f}`,
        from: m[1]!,
      })),
    );

describe('scheduler layering', () => {
  it('domain/ and usecases/ import no gRPC, no database driver and no backend', () => {
    const bad = [...imports('domain'), ...imports('usecases')].filter(({ from }) =>
      /^@grpc\/|^better-sqlite3$|^pg$|sqlite-store|services\/|runtime\//.test(from),
    );
    expect(bad).toEqual([]);
  });

  it('the store backend reaches the use cases only to compose the Store', () => {
    const bad = imports('store').filter(
      ({ file, from }) =>
        from.includes('usecases/') &&
        !(
          ['store/sqlite-store.ts', 'store/pg-store.ts'].includes(file) && from.endsWith('use-case-store.js')
        ),
    );
    expect(bad).toEqual([]);
    expect(imports('usecases').length).toBeGreaterThan(20);
  });
});
