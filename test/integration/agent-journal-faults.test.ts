import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { SchedulerClient } from '../../src/client/sdk.js';
import { DeviceState } from '../../src/gen/berth/scheduler/v1/device.js';
import { Agent } from '../../src/server/agent/agent.js';
import { parseAgentConfig } from '../../src/server/agent/config.js';
import { Scheduler } from '../../src/server/scheduler/scheduler.js';
import { buildSimHost, demoHostDefinition } from '../../src/sim/host.js';
import { tempDir } from '../helpers/agent.js';
import { createAndBind, createNvmeProfile, listChecked, settledDevice } from '../helpers/invariants.js';
import { available, root } from '../helpers/prerequisites.js';
import { mountTinyTmpfs } from '../helpers/tmpfs.js';
import { eventually } from '../helpers/wait.js';

const HOST = 'journal-full-host';

describe("an agent whose journal's disk is full", () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterAll(async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
  });

  it.skipIf(!available(root(), "the agent journal's full-disk test on a tiny tmpfs"))(
    'a cleanup it cannot journal: the device goes to error and the reason says the disk is full',
    async (t) => {
      const dir = await tempDir('berth-journal-full-');
      cleanups.push(dir.cleanup);
      const fs = mountTinyTmpfs(dir.path, 'state', '1m');
      if (fs.path === null) {
        t.skip(fs.why);
        return;
      }
      cleanups.push(fs.unmount);
      const stateDir = fs.path;
      const scheduler = await Scheduler.start({
        db: join(dir.path, 'scheduler.db'),
        listen: '127.0.0.1:0',
        heartbeatSeconds: 1,
        auth: { mode: 'none' },
      });
      cleanups.push(() => scheduler.stop());
      const client = new SchedulerClient({ endpoint: scheduler.address, timeoutMs: 15_000 });
      cleanups.push(async () => client.close());
      const sim = await buildSimHost(join(dir.path, HOST), demoHostDefinition(HOST));
      const config = parseAgentConfig(
        {
          ...sim.agentConfig,
          state_dir: stateDir,
          scheduler: scheduler.address,
          register_interval: 0.5,
          discovery_interval: 3600,
        },
        {},
        dir.path,
      );
      const agent = await Agent.start({ config, bootIdFile: sim.bootIdFile });
      cleanups.push(() => agent.stop());
      await agent.registered;
      await eventually(
        () => client.hosts.getHost({ name: HOST }),
        (r) => r.host?.connected === true,
        15_000,
      );
      const bound = await createAndBind(client, await createNvmeProfile(client, 'nvme0'), 'vm-1', HOST);
      const device = (await listChecked(client, HOST)).find((d) => d.instanceUuid === 'vm-1')!;
      // Fill what is left of the disk under the journal.
      const filler = join(stateDir, 'filler');
      const chunk = Buffer.alloc(4096, 1);
      try {
        for (let i = 0; i < 1024; i++) writeFileSync(filler, chunk, { flag: 'a' });
      } catch (e) {
        expect((e as NodeJS.ErrnoException).code).toBe('ENOSPC');
      }
      await client.arqs.deleteAcceleratorRequests({ uuids: [bound.uuid], instanceUuid: '' });
      const d = await settledDevice(client, HOST, device.address);
      expect(d.deviceState, d.errorReason).toBe(DeviceState.DEVICE_STATE_ERROR);
      expect(d.errorReason).toMatch(
        new RegExp(`the agent on ${HOST}'s disk is full \\(.*agent-journal\\.db\\)`),
      );
      expect(d.errorReason).not.toMatch(/internal error \(id/);
      expect(d.allocatable).toBe(false);
    },
    60_000,
  );
});
