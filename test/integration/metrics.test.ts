/**
 * Prometheus /metrics on the scheduler and the agent: RPC latency by method
 * and code, devices by host/type/state, cleanups by action and outcome.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Agent } from '../../src/server/agent/agent.js';
import { parseAgentConfig } from '../../src/server/agent/config.js';
import { demoHostDefinition } from '../../src/sim/host.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import { eventually } from '../helpers/wait.js';

const HOST = 'metrics-host';

/** The value of the sample `name{labels…}` (label order does not matter), or undefined. */
function sample(text: string, name: string, labels: Record<string, string>): number | undefined {
  for (const line of text.split('\n')) {
    const m = /^(\w+)\{(.*)\} (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const got = Object.fromEntries([...m[2]!.matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => got[k] === v)) return Number(m[3]);
  }
  return undefined;
}

/** The sum of every series of `name` whose labels include `labels`. */
function total(text: string, name: string, labels: Record<string, string>): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    const m = /^(\w+)\{(.*)\} (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const got = Object.fromEntries([...m[2]!.matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => got[k] === v)) sum += Number(m[3]);
  }
  return sum;
}

async function scrape(address: string): Promise<string> {
  const res = await fetch(`http://${address}/metrics`);
  expect(res.status).toBe(200);
  return res.text();
}

describe('metrics', () => {
  let c: Cluster;
  let agent: Agent;

  beforeAll(async () => {
    c = await startCluster([demoHostDefinition(HOST)], { scheduler: { metricsListen: '127.0.0.1:0' } });
    await c.waitForDevices(HOST, 9);
    const sim = c.host(HOST).sim;
    agent = await Agent.start({
      config: parseAgentConfig(
        {
          ...sim.agentConfig,
          host: 'metrics-solo',
          listen: '127.0.0.1:0',
          metrics_listen: '127.0.0.1:0',
          state_dir: join(c.root, 'solo'),
        },
        {},
        c.root,
      ),
    });
  }, 60_000);
  afterAll(async () => {
    await agent?.stop();
    await c?.stop();
  });

  it('the scheduler exports devices by type, state and resource class (no host label), and RPC latency by method and code', async () => {
    await c.client.hosts.listHosts({});
    await c.client.devices
      .getDevice({ device: { ref: { $case: 'uuid', value: '00000000-0000-4000-8000-000000000000' } } })
      .catch(() => undefined);
    const text = await scrape(c.scheduler.metricsAddress);
    const devices = text.split('\n').filter((l) => l.startsWith('berth_devices{'));
    expect(devices.some((l) => l.includes('host='))).toBe(false);
    expect(devices.every((l) => l.includes('resource_class="CUSTOM_'))).toBe(true);
    expect(total(text, 'berth_devices', { type: 'nvme', state: 'available' })).toBe(4);
    expect(total(text, 'berth_devices', { type: 'pci', state: 'available' })).toBe(5);
    const rpc = (method: string, code: string) =>
      sample(text, 'berth_rpc_duration_seconds_count', { method: `berth.scheduler.v1.${method}`, code });
    expect(rpc('HostService/ListHosts', 'OK')).toBeGreaterThanOrEqual(1);
    expect(rpc('DeviceService/GetDevice', 'NOT_FOUND')).toBe(1);
    // The alarms are there at 0 while all is well (an alert on them needs the series).
    expect(sample(text, 'berth_store_damaged', { component: 'scheduler' })).toBe(0);
    expect(sample(text, 'berth_store_commits_lost', { component: 'scheduler' })).toBe(0);
  });

  it('counts a finished cleanup by action and outcome, with its duration', async () => {
    await c.client.profiles.createProfile({
      profile: {
        name: 'm-shred',
        uuid: '',
        description: '',
        groups: [
          {
            resourceClass: '',
            vendorId: '144d',
            productId: 'a824',
            requiredTraits: [],
            forbiddenTraits: ['HW_NVME_CES', 'HW_NVME_BES', 'HW_NVME_WZS'],
            liveMigratable: 0,
            count: 1,
          },
        ],
        createdAt: undefined,
      },
    });
    const [arq] = (
      await c.client.arqs.createAcceleratorRequests({ profileName: 'm-shred', requestId: '', tags: [] })
    ).acceleratorRequests;
    await c.client.arqs.bindAcceleratorRequests({
      bindings: [{ arqUuid: arq!.uuid, instanceUuid: 'vm-m', host: HOST, tag: '' }],
    });
    await c.client.arqs.deleteAcceleratorRequests({ uuids: [], instanceUuid: 'vm-m' });
    const text = await eventually(
      () => scrape(c.scheduler.metricsAddress),
      (t) => sample(t, 'berth_cleanups_total', { action: 'shred', outcome: 'succeeded' }) === 1,
      60_000,
    );
    expect(
      sample(text, 'berth_cleanup_duration_seconds_count', { action: 'shred', outcome: 'succeeded' }),
    ).toBe(1);
  }, 90_000);

  it('the agent exports its devices by type and health, and its RPCs', async () => {
    const text = await scrape(agent.metricsAddress);
    expect(total(text, 'berth_devices', { type: 'nvme', state: 'healthy', component: 'agent' })).toBe(4);
    expect(text).toContain('berth_rpc_duration_seconds');
  });
});
