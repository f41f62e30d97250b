import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SchedulerClient } from '../../src/client/sdk.js';
import type { WatchInventoryResponse } from '../../src/gen/berth/agent/v1/agent.js';
import type { Agent } from '../../src/server/agent/agent.js';
import { Scheduler } from '../../src/server/scheduler/scheduler.js';
import { boundedPage } from '../../src/server/scheduler/services/device-service.js';
import { tempDir } from '../helpers/agent.js';
import { type AgentProxy, startAgentBehindProxy } from '../helpers/agent-proxy.js';

const HOST = 'greedy-host';

describe('inventory bounds at the scheduler', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let scheduler: Scheduler;
  let proxy: AgentProxy;
  let agent: Agent;
  let client: SchedulerClient;
  const refused: string[] = [];

  beforeAll(async () => {
    dir = await tempDir('berth-bounds-');
    scheduler = await Scheduler.start({ listen: '127.0.0.1:0', heartbeatSeconds: 1, auth: { mode: 'none' } });
    client = new SchedulerClient({ endpoint: scheduler.address });
    ({ agent, proxy } = await startAgentBehindProxy({
      scheduler,
      client,
      dir: dir.path,
      host: HOST,
      rewrite: (method, message) => {
        const m = message as WatchInventoryResponse;
        if (method !== 'watchInventory' || m.event?.$case !== 'snapshot') return m;
        const [a, b, ...rest] = m.event.value.devices;
        refused.splice(0, refused.length, a!.address, b!.address);
        const huge = { ...a!, attributes: { ...a!.attributes, model: 'M'.repeat(5 << 20) } };
        const traits = { ...b!, traits: Array.from({ length: 70 }, (_, i) => `CUSTOM_GREEDY_${i}`) };
        return { ...m, event: { $case: 'snapshot', value: { devices: [huge, traits, ...rest] } } };
      },
    }));
  }, 60_000);

  afterAll(async () => {
    client?.close();
    await agent?.stop();
    await proxy?.stop();
    await scheduler?.stop();
    await dir?.cleanup();
  });

  const all = () =>
    client.devices.listDevices({
      filter: { host: '', type: 0, state: 0, resourceClass: '' },
      pageSize: 0,
      pageToken: '',
    });

  it('does not store a device beyond a bound; the unfiltered listing keeps working', async () => {
    const { devices } = await all();
    expect(devices).toHaveLength(7);
    const addresses = devices.map((d) => d.address);
    for (const a of refused) expect(addresses).not.toContain(a);
    expect(devices.every((d) => Object.values(d.attributes).every((v) => v.length <= 1024))).toBe(true);
  });

  it('a page ends at its byte budget and the next page continues after it', async () => {
    const records = (await scheduler.useCases.listDevices({}, {})).devices;
    const one = (await all()).devices[0]!;
    const size = JSON.stringify(one).length;
    const first = boundedPage(records, '', Math.floor(size * 2.5));
    expect(first.devices.length).toBeGreaterThanOrEqual(1);
    expect(first.devices.length).toBeLessThan(records.length);
    expect(first.nextPageToken).not.toBe('');
    const rest = await scheduler.useCases.listDevices({}, { pageToken: first.nextPageToken });
    expect([...first.devices.map((d) => d.uuid), ...rest.devices.map((d) => d.uuid)]).toEqual(
      records.map((d) => d.uuid),
    );
  });
});
