/**
 * An operator's view of Berth in Placement, end to end: the scheduler and a
 * simulated host in this process, a real placement-api, `bin/berth` as a child
 * process, and the result read with OpenStack's own CLI (`openstack resource
 * provider …`, osc-placement) rather than Berth's client.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { demoHostDefinition } from '../../src/sim/host.js';
import { tempDir } from '../helpers/agent.js';
import { berth, cliEnv, parseJson } from '../helpers/berth-cli.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import { type PlacementServer, startPlacementServer, testPlacementOptions } from '../helpers/placement.js';
import { available, openstackCli, placementApi } from '../helpers/prerequisites.js';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js';
import { eventually } from '../helpers/wait.js';

const HOST = 'sim-host-1';
const NVME = '0000:3d:00.0';
const RP = `${HOST}_${NVME.toUpperCase()}`;
const RC = 'CUSTOM_PCI_144D_A824';
const SLOW = 240_000;
const have =
  available(placementApi(), 'the Placement CLI tests') &&
  available(openstackCli(), 'the Placement CLI tests');

describe.skipIf(!have)(
  'berth placement, device show and health, read back with `openstack resource provider`',
  () => {
    let placement: PlacementServer;
    let proxy: TcpProxy;
    let c: Cluster;
    let env: NodeJS.ProcessEnv;
    let dir: Awaited<ReturnType<typeof tempDir>>;
    const run = (args: string[]) => berth([...args, '--endpoint', c.scheduler.address], env, SLOW);

    beforeAll(async () => {
      dir = await tempDir('berth-placement-cli-');
      env = cliEnv(join(dir.path, 'client.yaml'));
      placement = await startPlacementServer();
      proxy = await startTcpProxy(`127.0.0.1:${placement.port}`);
      c = await startCluster([demoHostDefinition(HOST)], {
        scheduler: {
          placement: testPlacementOptions(`http://${proxy.address}`),
        },
      });
      await c.waitForDevices(HOST, 9);
      // In step: every change the scheduler committed is in Placement.
      const revision = await c.scheduler.useCases.currentRevision();
      await eventually(
        () => c.client.placement.getPlacementStatus({}),
        (r) =>
          r.status!.reachable && r.status!.pendingProviders === 0 && r.status!.appliedRevision >= revision,
        30_000,
      );
    }, SLOW);

    afterAll(async () => {
      await c?.stop();
      await proxy?.close();
      await placement?.stop();
      await dir?.cleanup();
    });

    it(
      'device show names the provider, and osc-placement finds it there with its inventory and traits',
      async () => {
        const shown = await run(['device', 'show', `${HOST}/${NVME}`, '-o', 'json']);
        expect(shown.code, shown.stderr).toBe(0);
        const d = parseJson<{
          placement_provider: string;
          placement_provider_uuid: string;
          placement_synced_at: string;
        }>(shown);
        expect(d.placement_provider).toBe(RP);
        expect(Date.parse(d.placement_synced_at)).toBeGreaterThan(0);
        const table = await run(['device', 'show', `${HOST}/${NVME}`]);
        expect(table.stdout).toMatch(new RegExp(`placement_provider_uuid:\\s+${d.placement_provider_uuid}`));

        const list = await placement.openstack<
          Array<{ uuid: string; name: string; parent_provider_uuid: string }>
        >(['resource', 'provider', 'list', '--name', RP]);
        expect(list.map((p) => p.uuid)).toEqual([d.placement_provider_uuid]);
        const root = await placement.openstack<Array<{ uuid: string }>>([
          'resource',
          'provider',
          'list',
          '--name',
          HOST,
        ]);
        expect(list[0]!.parent_provider_uuid).toBe(root[0]!.uuid);
        const inv = await placement.openstack<
          Array<{ resource_class: string; total: number; reserved: number; used: number }>
        >(['resource', 'provider', 'inventory', 'list', d.placement_provider_uuid]);
        expect(inv).toEqual([
          expect.objectContaining({ resource_class: RC, total: 1, reserved: 0, used: 0 }),
        ]);
        const traits = await placement.openstack<Array<{ name: string }>>([
          'resource',
          'provider',
          'trait',
          'list',
          d.placement_provider_uuid,
        ]);
        expect(traits.map((t) => t.name)).toContain('CUSTOM_OWNER_BERTH');
        // Nova's scheduler's question, asked the way an operator checks it.
        const candidates = await placement.openstack<Array<{ allocations: string }>>([
          'allocation',
          'candidate',
          'list',
          '--resource',
          `${RC}=1`,
        ]);
        expect(candidates.length).toBe(4);
      },
      SLOW,
    );

    it(
      'sync --dry-run shows what Berth would put right and changes nothing; sync puts it right',
      async () => {
        const uuid = (
          await placement.openstack<Array<{ uuid: string }>>(['resource', 'provider', 'list', '--name', RP])
        )[0]!.uuid;
        // Someone reserves Berth's device by hand, the way Nova's documentation un-reserves one.
        await placement.openstack([
          'resource',
          'provider',
          'inventory',
          'set',
          '--amend',
          '--resource',
          `${RC}:reserved=1`,
          uuid,
        ]);

        const dry = await run(['placement', 'sync', '--dry-run']);
        expect(dry.code, dry.stderr).toBe(0);
        expect(dry.stdout).toMatch(/^WOULD\s+PROVIDER\s+HOST\s+WHAT/m);
        expect(dry.stdout).toMatch(
          new RegExp(`update\\s+${RP.replace(/\./g, '\\.')}\\s+${HOST}\\s+${RC}: reserved 1 → 0`),
        );
        const still = await placement.openstack<Array<{ reserved: number }>>([
          'resource',
          'provider',
          'inventory',
          'list',
          uuid,
        ]);
        expect(still[0]!.reserved).toBe(1);

        const done = await run(['placement', 'sync', '-o', 'json']);
        expect(done.code, done.stderr).toBe(0);
        expect(parseJson<Array<{ action: string; provider: string }>>(done)).toEqual([
          expect.objectContaining({ action: 'update', provider: RP }),
        ]);
        const fixed = await placement.openstack<Array<{ reserved: number }>>([
          'resource',
          'provider',
          'inventory',
          'list',
          uuid,
        ]);
        expect(fixed[0]!.reserved).toBe(0);
        const again = await run(['placement', 'sync', '--dry-run']);
        expect(again.stdout).toMatch(/Placement is in step: nothing to change/);
      },
      SLOW,
    );

    it(
      'health and placement status show the lag while Placement is away, and the scheduler stays SERVING',
      async () => {
        const ok = await run(['health']);
        expect(ok.code, ok.stderr).toBe(0);
        expect(ok.stdout).toMatch(/SERVING\nplacement: in step \(report, revision \d+/);

        proxy.cut();
        const d = (
          await c.client.devices.getDevice({
            device: { ref: { $case: 'hostAddress', value: { host: HOST, address: NVME } } },
          })
        ).device!;
        await c.client.devices.setDeviceStatus({
          device: { ref: { $case: 'uuid', value: d.uuid } },
          status: 2,
        });
        await eventually(
          () => c.client.placement.getPlacementStatus({}),
          (r) => !r.status!.reachable && r.status!.pendingProviders > 0,
          30_000,
        );
        const down = await run(['health']);
        expect(down.code, down.stderr).toBe(0);
        expect(down.stdout).toMatch(
          /SERVING\nplacement: NOT REACHABLE since \S+: .*does not answer.*; 1 provider\(s\) behind, lag [\d.]+ s/,
        );
        const status = parseJson<{ reachable: boolean; pending_providers: number }>(
          await run(['placement', 'status', '-o', 'json']),
        );
        expect(status).toMatchObject({ reachable: false, pending_providers: 1 });
        const shown = parseJson<{ placement_note: string }>(
          await run(['device', 'show', `${HOST}/${NVME}`, '-o', 'json']),
        );
        expect(shown.placement_note).toMatch(/a change waits to be written \(.*does not answer/);
        proxy.restore();
        await eventually(
          () => c.client.placement.getPlacementStatus({}),
          (r) => r.status!.reachable && r.status!.pendingProviders === 0,
          30_000,
        );
        const inv = await placement.openstack<Array<{ reserved: number }>>([
          'resource',
          'provider',
          'inventory',
          'list',
          d.placementProviderUuid,
        ]);
        expect(inv[0]!.reserved).toBe(1);
      },
      SLOW,
    );
  },
);
