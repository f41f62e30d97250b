/**
 * store-ab: the bind use case through the SQLite Store of this tree against
 * the same Store of another checkout (`--base DIR`, e.g. main exported with
 * `git archive main | tar -x -C DIR`, its node_modules linked), in ONE
 * process, rounds interleaved (ABBA…), so machine load hits both alike. For
 * changes to the store layer: the gRPC bind bench (bind.ts) swings ±20%
 * between runs on a loaded machine, this one by a few percent.
 *
 * Each side: 200 hosts × 8 plain PCI devices (not cleaned, so a deleted ARQ
 * frees its device), one profile; a round creates 1,024 ARQs (untimed), binds
 * them from 64 concurrent callers (group commit as in production), then
 * deletes them (untimed). Reported: median binds/s per side, and the median
 * CPU time of this process per bind (less sensitive to other processes).
 *
 *   npx tsx bench/store-ab.ts --base DIR [--sync FULL|OFF] [--memory] [--rounds N]
 *
 * `--memory` puts both databases in memory (CPU only); otherwise they are
 * files on /var/tmp with the given synchronous mode (default FULL).
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs as parseNodeArgs } from 'node:util';
import { parseHostName, type Uuid } from '../src/identifiers.js';
import { instanceId, pciFacts } from '../src/server/scheduler/domain/fixtures.support.js';
import { validateProfile } from '../src/server/scheduler/domain/profile.js';
import type { SqliteStore } from '../src/server/scheduler/stores.js';
import { emit, round, sorted } from './lib.js';

const { values } = parseNodeArgs({
  options: {
    base: { type: 'string' },
    sync: { type: 'string', default: 'FULL' },
    memory: { type: 'boolean', default: false },
    rounds: { type: 'string', default: '16' },
    quick: { type: 'boolean', default: false },
  },
});
if (!values.base) {
  console.error('store-ab: --base DIR (another checkout, with node_modules) is required');
  process.exit(2);
}
const sync = values.sync === 'OFF' ? 'OFF' : 'FULL';
const rounds = values.quick ? 2 : Number(values.rounds);
const HOSTS = 200;
const CONCURRENCY = 64;
const PER_ROUND = values.quick ? 128 : 1024;
/** Where a checkout opens a SQLite store: the composition root since issue 41 item 8, the store module before. */
const storeModule = (root: string): string =>
  ['src/server/scheduler/stores.ts', 'src/server/scheduler/store/sqlite-store.ts']
    .map((p) => resolve(root, p))
    .find((p) => existsSync(p))!;
const sides = { base: storeModule(values.base), tree: storeModule(resolve(import.meta.dirname, '..')) };
type Side = keyof typeof sides;

async function open(side: Side, dir: string): Promise<SqliteStore> {
  const mod = (await import(sides[side])) as { openSqliteStore(path: string): Promise<SqliteStore> };
  const store = await mod.openSqliteStore(values.memory ? ':memory:' : join(dir, `${side}.db`));
  store.db.connection.pragma('synchronous = OFF');
  for (let h = 0; h < HOSTS; h++) {
    const host = parseHostName('host', `h${h}`);
    await store.registerHost({
      name: host,
      endpoint: `${host}:1`,
      bootId: 'b',
      agentEpoch: 'e',
      agentVersion: 'v',
      features: [],
      drivers: ['pci'],
    });
    const devices = Array.from({ length: 8 }, (_, i) => pciFacts({ index: i }));
    await store.upsertInventory(host, { kind: 'snapshot', revision: 1, devices });
  }
  await store.createProfile(
    validateProfile({ name: 'p', groups: [{ resourceClass: 'CUSTOM_PCI_10DE_25B6' }] }),
  );
  store.db.connection.pragma(`synchronous = ${sync}`);
  return store;
}

/** One round: binds/s, and CPU µs of this process per bind. */
async function bindRound(store: SqliteStore, r: number): Promise<{ rate: number; cpu: number }> {
  const ids: Uuid[] = [];
  for (let i = 0; i < PER_ROUND; i++) ids.push((await store.createArqs({ profileName: 'p' }))[0]!.uuid);
  let next = 0;
  const t0 = process.hrtime.bigint();
  const c0 = process.cpuUsage();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      for (let i = next++; i < ids.length; i = next++) {
        await store.bindArqs([
          {
            arqUuid: ids[i]!,
            instanceUuid: instanceId(`vm-${r}-${i}`),
            host: parseHostName('host', `h${i % HOSTS}`),
          },
        ]);
      }
    }),
  );
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  const c = process.cpuUsage(c0);
  for (let i = 0; i < ids.length; i += 100) await store.deleteArqs({ uuids: ids.slice(i, i + 100) });
  return { rate: (ids.length / ms) * 1000, cpu: (c.user + c.system) / ids.length };
}

const median = (xs: number[]) => sorted(xs)[Math.floor(xs.length / 2)]!;

const dir = mkdtempSync('/var/tmp/berth-bench-store-ab-');
try {
  const stores = { base: await open('base', dir), tree: await open('tree', dir) };
  const rate: Record<Side, number[]> = { base: [], tree: [] };
  const cpu: Record<Side, number[]> = { base: [], tree: [] };
  for (const side of ['base', 'tree'] as const) await bindRound(stores[side], -1); // warm-up
  for (let r = 0; r < rounds; r++) {
    for (const side of r % 2 === 0 ? (['base', 'tree'] as const) : (['tree', 'base'] as const)) {
      const out = await bindRound(stores[side], r);
      rate[side].push(out.rate);
      cpu[side].push(out.cpu);
    }
  }
  emit({
    name: 'store_ab',
    value: median(rate.tree),
    baseline: median(rate.base),
    ratio: median(rate.tree) / median(rate.base),
    goal: 'informational (this tree against --base, same process)',
    pass: true,
    unit: 'binds/s',
    cpu_us_per_bind: round(median(cpu.tree), 1),
    base_cpu_us_per_bind: round(median(cpu.base), 1),
    cpu_ratio: round(median(cpu.tree) / median(cpu.base), 3),
    rounds,
    db: values.memory ? 'memory' : `/var/tmp (synchronous=${sync})`,
    base: values.base,
  });
  await stores.base.close();
  await stores.tree.close();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
