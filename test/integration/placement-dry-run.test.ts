/**
 * `berth placement sync --dry-run` against a real OpenStack Placement: it
 * prints the plan (placement/plan.ts) that would make Placement what Berth
 * says, and changes nothing there. Placement is changed by hand behind
 * Berth's back (drift checks and resyncs are off, so only a sync looks): a
 * device reserved by hand, a trait taken off, a provider deleted.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { demoHostDefinition } from '../../src/sim/host.js';
import { tempDir } from '../helpers/agent.js';
import { berth, cliEnv } from '../helpers/berth-cli.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import {
  type PlacementServer,
  type ProviderView,
  providerView,
  startPlacementServer,
  testPlacementOptions,
} from '../helpers/placement.js';
import { available, placementApi } from '../helpers/prerequisites.js';
import { eventually } from '../helpers/wait.js';

const HOST = 'sim-host-1';
const GPU = '0000:3c:00.0';
const NVME0 = '0000:3d:00.0';
const NVME1 = '0000:3e:00.0';
const NVME_RC = 'CUSTOM_PCI_144D_A824';
const rp = (address: string) => `${HOST}_${address.toUpperCase()}`;
const SLOW = 240_000;
const have = available(placementApi(), 'the Placement dry-run test');

describe.skipIf(!have)('berth placement sync --dry-run prints the plan and changes nothing', () => {
  let placement: PlacementServer;
  let c: Cluster;
  let env: NodeJS.ProcessEnv;
  let dir: Awaited<ReturnType<typeof tempDir>>;

  beforeAll(async () => {
    dir = await tempDir('berth-placement-dry-run-');
    env = cliEnv(join(dir.path, 'client.yaml'));
    placement = await startPlacementServer();
    c = await startCluster([demoHostDefinition(HOST)], {
      scheduler: { placement: testPlacementOptions(placement.url) },
    });
    await c.waitForDevices(HOST, 9);
    const revision = await c.scheduler.useCases.currentRevision();
    await eventually(
      () => c.client.placement.getPlacementStatus({}),
      (r) => r.status!.reachable && r.status!.pendingProviders === 0 && r.status!.appliedRevision >= revision,
      30_000,
    );
  }, SLOW);

  afterAll(async () => {
    await c?.stop();
    await placement?.stop();
    await dir?.cleanup();
  });

  /** Every provider Placement holds, by name, as it shows them (generations included). */
  async function everything(): Promise<Record<string, ProviderView | null>> {
    const list = await placement.ok<{ resource_providers: Array<{ name: string }> }>(
      'GET',
      '/resource_providers',
    );
    const out: Record<string, ProviderView | null> = {};
    for (const p of list.resource_providers) out[p.name] = await providerView(placement, p.name);
    return out;
  }

  it(
    'a hand-made reservation, a trait taken off and a deleted provider: the plan names each, Placement keeps them',
    async () => {
      const nvme0 = (await providerView(placement, rp(NVME0)))!;
      const inv = await placement.ok<{ inventories: Record<string, Record<string, number>> }>(
        'GET',
        `/resource_providers/${nvme0.uuid}/inventories`,
      );
      await placement.ok('PUT', `/resource_providers/${nvme0.uuid}/inventories`, {
        resource_provider_generation: nvme0.generation,
        inventories: { [NVME_RC]: { ...inv.inventories[NVME_RC], reserved: 1 } },
      });
      const gpu = (await providerView(placement, rp(GPU)))!;
      expect(gpu.traits).toContain('CUSTOM_HW_PCI_ONE_TIME_USE');
      await placement.ok('PUT', `/resource_providers/${gpu.uuid}/traits`, {
        resource_provider_generation: gpu.generation,
        traits: gpu.traits.filter((t) => t !== 'CUSTOM_HW_PCI_ONE_TIME_USE'),
      });
      const nvme1 = (await providerView(placement, rp(NVME1)))!;
      await placement.ok('DELETE', `/resource_providers/${nvme1.uuid}`);
      const before = await everything();
      expect(before[rp(NVME1)]).toBeUndefined();

      const dry = await berth(
        ['placement', 'sync', '--dry-run', '--endpoint', c.scheduler.address],
        env,
        SLOW,
      );
      expect(dry.code, dry.stderr).toBe(0);
      const rows = dry.stdout.trim().split('\n');
      expect(rows[0]).toMatch(/^WOULD\s+PROVIDER\s+HOST\s+WHAT/);
      const esc = (s: string) => s.replace(/[.]/g, '\\.');
      expect(rows.slice(1).sort()).toEqual([
        // The table shrinks the long column to the terminal ("…"): the plan's first details.
        expect.stringMatching(
          new RegExp(`^create\\s+${esc(rp(NVME1))}\\s+${HOST}\\s+under ${HOST}; traits \\+ CUSTOM_`),
        ),
        expect.stringMatching(
          new RegExp(`^update\\s+${esc(rp(GPU))}\\s+${HOST}\\s+traits \\+ CUSTOM_HW_PCI_ONE_TIME_USE$`),
        ),
        expect.stringMatching(
          new RegExp(`^update\\s+${esc(rp(NVME0))}\\s+${HOST}\\s+${NVME_RC}: reserved 1 → 0$`),
        ),
      ]);
      // Nothing written: every provider, its generation included, is as it was.
      expect(await everything()).toEqual(before);

      // The same plan, carried out, puts it right; then there is nothing left to plan.
      const done = (await c.client.placement.syncPlacement({ dryRun: false })).changes;
      expect(done.map((ch) => `${ch.action} ${ch.provider}`).sort()).toEqual([
        `create ${rp(NVME1)}`,
        `update ${rp(GPU)}`,
        `update ${rp(NVME0)}`,
      ]);
      expect((await providerView(placement, rp(NVME0)))!.inventories[NVME_RC]!.reserved).toBe(0);
      expect((await providerView(placement, rp(GPU)))!.traits).toContain('CUSTOM_HW_PCI_ONE_TIME_USE');
      expect(await providerView(placement, rp(NVME1))).not.toBeNull();
      expect((await c.client.placement.syncPlacement({ dryRun: true })).changes).toEqual([]);
    },
    SLOW,
  );
});
