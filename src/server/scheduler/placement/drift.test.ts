import { describe, expect, it } from 'vitest';
import type { PlacementApi, Provider } from './api.js';
import { DriftCheck, type DriftTree } from './drift.js';

/** A Placement that answers GET /resource_providers?in_tree= from `trees`, and counts the calls. */
function fakeApi(trees: Record<string, Record<string, number>>) {
  const asked: string[] = [];
  const api = {
    async providers(q: Record<string, string>): Promise<Provider[]> {
      const root = q.in_tree ?? '';
      asked.push(root);
      return Object.entries(trees[root] ?? {}).map(([name, generation]) => ({
        uuid: `${name}-uuid`,
        name,
        generation,
        parent_provider_uuid: root,
        root_provider_uuid: root,
      }));
    },
  } as unknown as PlacementApi;
  return { api, asked };
}

const tree = (root: string, known: Record<string, number | null>): DriftTree => ({
  root,
  known: new Map(Object.entries(known)),
});

describe('the drift check', () => {
  it('reports a moved generation, a provider gone and one that appeared; nothing for the rest', async () => {
    const { api } = fakeApi({ r1: { a: 3, b: 7, c: 1 } });
    const found = await new DriftCheck(api).check([tree('r1', { a: 3, b: 5, c: null, d: 2 })]);
    expect(found).toEqual([
      { name: 'b', was: 5, now: 7 },
      { name: 'c', was: null, now: 1 },
      { name: 'd', was: 2, now: null },
    ]);
  });

  it('lists at most its page of trees per check, and the next ones at the next check', async () => {
    const { api, asked } = fakeApi({});
    const check = new DriftCheck(api, 2);
    const trees = ['r3', 'r1', 'r2', 'r5', 'r4'].map((r) => tree(r, {}));
    await check.check(trees);
    expect(asked).toEqual(['r1', 'r2']);
    await check.check(trees);
    await check.check(trees);
    expect(asked).toEqual(['r1', 'r2', 'r3', 'r4', 'r5', 'r1']);
    expect(await check.check([])).toEqual([]);
  });
});
