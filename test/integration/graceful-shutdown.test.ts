/**
 * Stopping the scheduler (SIGTERM, as systemd or an operator does) must end its
 * open watch streams promptly with a status that says "go elsewhere / come
 * back" (UNAVAILABLE, or CANCELLED when the server cuts them) — never hang
 * until the grace period runs out, and never end them with OK, which a client
 * reads as "the watch is complete" and so does not resume. The process then
 * exits 0. Real child processes: the signal handling of `berth scheduler serve`
 * is part of what is tested.
 */
import { join } from 'node:path';
import { credentials, Metadata, type ServiceError, status } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SchedulerClient } from '../../src/client/sdk.js';
import { DeviceState } from '../../src/gen/berth/scheduler/v1/device.js';
import { DeviceServiceClient } from '../../src/gen/berth/scheduler/v1/device_service.js';
import { buildSimHost, demoHostDefinition, type SimHost } from '../../src/sim/host.js';
import { tempDir } from '../helpers/agent.js';
import { createAndBind, createNvmeProfile, getDevice } from '../helpers/invariants.js';
import { agentProcess, type BerthProcess, schedulerProcess, stopAllProcesses } from '../helpers/processes.js';
import { eventually } from '../helpers/wait.js';

const HOST = 'shutdown-host';

interface StreamEnd {
  /** gRPC status code the stream ended with (0 = OK). */
  code: number;
  details: string;
  messages: number;
  /** When it ended (Date.now()). */
  at: number;
}

/** Follows a server stream to its end and reports how it ended; bounded by `timeoutMs`. */
function follow(
  stream: NodeJS.ReadableStream & {
    cancel(): void;
    on(event: 'status', l: (s: { code: number }) => void): unknown;
  },
  timeoutMs: number,
): { firstMessage: Promise<void>; ended: Promise<StreamEnd> } {
  let messages = 0;
  let gotFirst!: () => void;
  const firstMessage = new Promise<void>((r) => {
    gotFirst = r;
  });
  const ended = new Promise<StreamEnd>((resolve) => {
    const timer = setTimeout(() => {
      stream.cancel();
      resolve({ code: -1, details: `still open after ${timeoutMs} ms`, messages, at: Date.now() });
    }, timeoutMs);
    stream.on('data', () => {
      messages++;
      gotFirst();
    });
    stream.on('error', (err: ServiceError) => {
      clearTimeout(timer);
      resolve({ code: err.code, details: err.details, messages, at: Date.now() });
    });
    // A clean end carries status OK; record it as such.
    stream.on('status', (s: { code: number; details?: string }) => {
      if (s.code !== status.OK) return;
      clearTimeout(timer);
      resolve({ code: s.code, details: s.details ?? '', messages, at: Date.now() });
    });
  });
  return { firstMessage, ended };
}

describe('graceful scheduler shutdown (child process, SIGTERM)', () => {
  let dir: { path: string; cleanup: () => Promise<void> };
  let sim: SimHost;
  let scheduler: BerthProcess;
  let agent: BerthProcess;
  let client: SchedulerClient;
  let raw: DeviceServiceClient | null = null;

  beforeAll(async () => {
    dir = await tempDir('berth-shutdown-');
    sim = await buildSimHost(join(dir.path, HOST), demoHostDefinition(HOST));
    scheduler = await schedulerProcess(join(dir.path, 'scheduler.db'));
    await scheduler.start();
    client = new SchedulerClient({ endpoint: scheduler.endpoint, timeoutMs: 10_000 });
    agent = await agentProcess(sim, { scheduler: scheduler.endpoint });
    await agent.start();
    await eventually(
      async () => (await client.hosts.listHosts({})).hosts.find((h) => h.name === HOST),
      (h) => h?.connected === true,
      20_000,
    );
    await createNvmeProfile(client, 'nvme0');
  }, 90_000);

  afterAll(async () => {
    raw?.close();
    client?.close();
    await stopAllProcesses();
    await dir?.cleanup();
  });

  it('SIGTERM ends open WatchDevices and WatchCleanup streams with UNAVAILABLE/CANCELLED promptly, and exits 0', async () => {
    // A cleanup that cannot finish, so WatchCleanup has a live job to follow.
    await sim.setFault('nvme0', 'sanitize', { mode: 'hang' });
    const address = sim.definition.nvme[0]!.address;
    const bound = await createAndBind(client, 'pick-nvme0', 'vm-shutdown', HOST);
    await client.arqs.deleteAcceleratorRequests({ uuids: [bound.uuid], instanceUuid: '' });
    await eventually(
      () => getDevice(client, HOST, address),
      (d) => d.deviceState === DeviceState.DEVICE_STATE_CLEANING,
      15_000,
    );

    raw = new DeviceServiceClient(scheduler.endpoint, credentials.createInsecure());
    const devices = follow(
      raw.watchDevices(
        { filter: { host: HOST, type: 0, state: 0, resourceClass: '' }, fromRevision: 0 },
        new Metadata(),
      ),
      20_000,
    );
    const cleanup = follow(
      raw.watchCleanup(
        {
          device: { ref: { $case: 'hostAddress', value: { host: HOST, address } } },
          jobId: '',
          fromSequence: 0,
        },
        new Metadata(),
      ),
      20_000,
    );
    await Promise.all([devices.firstMessage, cleanup.firstMessage]);

    const sent = Date.now();
    const exit = await scheduler.stop();
    const [d, c] = await Promise.all([devices.ended, cleanup.ended]);
    const explain = `WatchDevices ${JSON.stringify(d)}, WatchCleanup ${JSON.stringify(c)}\n${scheduler.output()}`;

    expect([status.UNAVAILABLE, status.CANCELLED], explain).toContain(d.code);
    expect([status.UNAVAILABLE, status.CANCELLED], explain).toContain(c.code);
    // Promptly: well inside the scheduler's own 2 s grace, with slack for a loaded machine.
    expect(d.at - sent, explain).toBeLessThan(5_000);
    expect(c.at - sent, explain).toBeLessThan(5_000);
    expect(exit, explain).toEqual({ code: 0, signal: null });
  }, 90_000);
});
