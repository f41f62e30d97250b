/**
 * Nothing the CLI waits for is waited for in silence: with one host's agent
 * down, `berth device watch-cleanup` on a device left pending there, and
 * `berth demo`, which needs two hosts, each say what they wait for (within
 * about two seconds; the test waits for the line, not for a time).
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SchedulerClient } from '../../src/client/sdk.js';
import { startUp, type Up } from '../../src/client/up/berth-up.js';
import { ArqState } from '../../src/gen/berth/scheduler/v1/accelerator_request.js';
import { DeviceState } from '../../src/gen/berth/scheduler/v1/device.js';
import { createLogger } from '../../src/logging.js';
import { tempDir } from '../helpers/agent.js';
import { cliEnv, type Running, start, stop } from '../helpers/berth-cli.js';
import { eventually } from '../helpers/wait.js';

const H2 = 'sim-host-2';

describe('what a waiting command says', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let up: Up;
  let sdk: SchedulerClient;
  let env: NodeJS.ProcessEnv;
  const running: Running[] = [];
  let pending: string;

  beforeAll(async () => {
    dir = await tempDir('berth-waiting-');
    up = await startUp({
      listen: '127.0.0.1:0',
      stateDir: join(dir.path, 'state'),
      logger: createLogger({ level: 'silent' }),
    });
    sdk = new SchedulerClient({ endpoint: up.endpoint, token: up.adminToken });
    env = cliEnv(join(dir.path, 'client-config.yaml'), {
      BERTH_TOKEN: up.adminToken,
      BERTH_ENDPOINT: up.endpoint,
    });
    // An NVMe drive bound on sim-host-2, whose agent then stops: deleting the
    // instance leaves the drive pending_cleaning until the agent is back.
    await sdk.profiles.createProfile({
      profile: {
        name: 'wait-nvme',
        uuid: '',
        description: '',
        createdAt: undefined,
        groups: [
          {
            resourceClass: '',
            vendorId: '144d',
            productId: 'a824',
            requiredTraits: [],
            forbiddenTraits: [],
            liveMigratable: 0,
            count: 1,
          },
        ],
      },
    });
    const created = await sdk.arqs.createAcceleratorRequests({
      profileName: 'wait-nvme',
      requestId: 'wait-1',
      tags: [],
    });
    const bound = await sdk.arqs.bindAcceleratorRequests({
      bindings: [
        { arqUuid: created.acceleratorRequests[0]!.uuid, instanceUuid: 'vm-wait', host: H2, tag: '' },
      ],
    });
    expect(bound.acceleratorRequests[0]!.state).toBe(ArqState.ARQ_STATE_BOUND);
    pending = `${H2}/${bound.acceleratorRequests[0]!.deviceAddress}`;
    await up.agents.find((a) => a.config.host === H2)!.stop();
    await eventually(
      () => sdk.hosts.getHost({ name: H2 }),
      (r) => r.host?.connected === false,
      60_000,
    );
    await sdk.arqs.deleteAcceleratorRequests({ uuids: [], instanceUuid: 'vm-wait' });
    await eventually(
      () =>
        sdk.devices.getDevice({
          device: { ref: { $case: 'uuid', value: bound.acceleratorRequests[0]!.deviceUuid } },
        }),
      (r) => r.device?.deviceState === DeviceState.DEVICE_STATE_PENDING_CLEANING,
      30_000,
    );
  }, 120_000);
  afterAll(async () => {
    for (const r of running) await stop(r);
    sdk?.close();
    await up?.stop();
    await dir?.cleanup();
  }, 60_000);

  it('device watch-cleanup says the agent it waits for is not connected', async () => {
    const watch = start(['device', 'watch-cleanup', pending], env);
    running.push(watch);
    await eventually(
      () => watch.stderr(),
      (e) => /waiting for the agent of sim-host-2: it is not connected/.test(e),
      30_000,
    );
    expect(watch.stderr()).toContain(`${pending} stays pending_cleaning and reserved until it is back`);
    // Said once, not every time it looks again.
    expect(watch.stderr().match(/waiting for the agent/g)).toHaveLength(1);
    await stop(watch);
  }, 60_000);

  it('berth demo says it waits for a second host, and which hosts it sees', async () => {
    const demo = start(['demo'], env);
    running.push(demo);
    await demo.waitFor(/Waiting for a second host with devices/, 30_000);
    expect(demo.stdout()).toMatch(/sim-host-1 connected, 9 devices; sim-host-2 not connected\./);
    await stop(demo);
  }, 60_000);
});
