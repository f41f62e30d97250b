/**
 * AgentService.CleanupDevice over gRPC on a simulated NVMe host: progress in
 * order, the locked-in action, re-attaching by job id and by device, refusals,
 * and outcomes replayed from the durable journal after a restart.
 */
import { join } from 'node:path';
import { credentials, type ServiceError } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  AgentServiceClient,
  type CleanupDeviceResponse,
  CleanupPhase,
} from '../../src/gen/berth/agent/v1/agent.js';
import { ReadBack } from '../../src/gen/berth/agent/v1/cleanup_proof.js';
import { Agent } from '../../src/server/agent/agent.js';
import { parseAgentConfig } from '../../src/server/agent/config.js';
import { buildSimHost, demoHostDefinition, type SimHost } from '../../src/sim/host.js';
import { decodeServiceError } from '../../src/transport/status.js';
import { tempDir } from '../helpers/agent.js';
import { collect } from '../helpers/grpc.js';
import { type Gate, nvmeGate } from '../helpers/nvme-gate.js';

const NVME0 = '0000:3d:00.0'; // sanitize-crypto
const NVME2 = '0000:3f:00.0'; // write-zeroes
const VF = '0000:3b:02.0';

describe('agent CleanupDevice', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let sim: SimHost;
  let agent: Agent;
  let client: AgentServiceClient;

  let gate: Gate;

  const start = async () => {
    const config = { ...sim.agentConfig, listen: '127.0.0.1:0' } as Record<string, unknown>;
    // nvme-cli behind a gate: a test can hold a write-zeroes (and so a job) running.
    config.nvme = { ...(config.nvme as Record<string, unknown>), nvme_cli: gate.nvmeCli };
    agent = await Agent.start({
      config: parseAgentConfig(config, {}, dir.path),
      bootIdFile: sim.bootIdFile,
    });
    client = new AgentServiceClient(agent.address, credentials.createInsecure());
  };

  beforeAll(async () => {
    dir = await tempDir('berth-agent-cleanup-');
    sim = await buildSimHost(join(dir.path, 'host'), demoHostDefinition('cleanup-host'));
    gate = await nvmeGate(join(dir.path, 'gate'), sim.nvmeCli, 'write-zeroes');
    await start();
  });
  afterAll(async () => {
    client?.close();
    await agent?.stop();
    await dir?.cleanup();
  });

  const run = (address: string, jobId: string) =>
    collect<CleanupDeviceResponse>(
      client.cleanupDevice({ address, jobId, previousCertificate: undefined }),
      () => false,
      60_000,
    );

  /** A cleanup stream: `attached` once its first message arrived, `done` with all of them. */
  const follow = (address: string, jobId: string) => {
    let attach!: () => void;
    const attached = new Promise<void>((r) => {
      attach = r;
    });
    const done = collect<CleanupDeviceResponse>(
      client.cleanupDevice({ address, jobId, previousCertificate: undefined }),
      (msgs) => {
        if (msgs.length === 1) attach();
        return false;
      },
      60_000,
    );
    return { attached: Promise.race([attached, done.then(() => undefined)]), done };
  };

  it('runs the locked-in action and streams progress in order to a terminal success', async () => {
    const msgs = await run(NVME0, 'job-a');
    const events = msgs.map((m) => m.event!);
    expect(events.every((e) => e.action === 'sanitize-crypto')).toBe(true);
    expect(events.map((e) => e.sequence)).toEqual(events.map((_, i) => i + 1));
    expect(events[0]!.phase).toBe(CleanupPhase.CLEANUP_PHASE_QUEUED);
    expect(events.at(-1)!.phase).toBe(CleanupPhase.CLEANUP_PHASE_SUCCEEDED);
    expect(events.some((e) => e.phase === CleanupPhase.CLEANUP_PHASE_SANITIZING)).toBe(true);
    // The success carries what the agent accepted as proof; no other event does.
    expect(events.at(-1)!.proof).toMatchObject({ method: 'sanitize', readBack: ReadBack.READ_BACK_NONE });
    expect(events.slice(0, -1).every((e) => e.proof === undefined)).toBe(true);
  });

  it('re-attaches a second caller (same job id, or another id for the same device) to the running job', async () => {
    // Hold job-b inside its first write-zeroes until both other callers are attached.
    gate.close();
    const first = follow(NVME2, 'job-b');
    await gate.reached();
    const sameId = follow(NVME2, 'job-b');
    const otherId = follow(NVME2, 'job-c');
    await Promise.all([sameId.attached, otherId.attached]);
    gate.open();
    const [a, b, c] = await Promise.all([first.done, sameId.done, otherId.done]);
    for (const msgs of [a, b, c]) {
      expect(msgs.at(-1)!.event!.jobId).toBe('job-b');
      expect(msgs.at(-1)!.event!.phase).toBe(CleanupPhase.CLEANUP_PHASE_SUCCEEDED);
      // Every byte of the 16 MiB namespace written and read back.
      expect(msgs.at(-1)!.event!.proof).toMatchObject({
        method: 'read-back',
        readBack: ReadBack.READ_BACK_FULL,
        bytesWritten: 16 * 1024 * 1024,
        bytesRead: 16 * 1024 * 1024,
        bytesTotal: 16 * 1024 * 1024,
      });
    }
    // Replays of a finished job come from the record, not a new run.
    const replay = await run(NVME2, 'job-b');
    expect(replay.map((m) => m.event!.sequence)).toEqual(a.map((m) => m.event!.sequence));
  });

  it('refuses a device that cannot be cleaned, an unknown device and a malformed address', async () => {
    const errOf = async (address: string, jobId: string) => {
      try {
        await run(address, jobId);
      } catch (err) {
        return decodeServiceError(err as ServiceError);
      }
      throw new Error('expected an error');
    };
    const vf = await errOf(VF, 'job-d');
    expect(vf.codeName).toBe('FAILED_PRECONDITION');
    expect(vf.reason).toBe('CLEANING_NOT_SUPPORTED');
    expect((await errOf('0000:99:00.0', 'job-e')).codeName).toBe('NOT_FOUND');
    const bad = await errOf('../../etc', 'job-f');
    expect(bad.codeName).toBe('INVALID_ARGUMENT');
    expect(bad.fieldViolations[0]!.field).toBe('address');
  });

  it('fails closed when the sanitize fails, with the reason', async () => {
    await sim.setFault('nvme0', 'sanitize', { mode: 'sanitize-fails' });
    const msgs = await run(NVME0, 'job-g');
    const last = msgs.at(-1)!.event!;
    expect(last.phase).toBe(CleanupPhase.CLEANUP_PHASE_FAILED);
    expect(last.message).toMatch(/sanitize/i);
    await sim.setFault('nvme0', 'sanitize', null);
  });

  it('reports a job cut by a restart as interrupted, from the journal, to whoever re-attaches', async () => {
    // The sanitize path starts by reading the sanitize log: hanging it holds the job running.
    await sim.setFault('nvme0', 'sanitize-log', { mode: 'hang' });
    const stream = client.cleanupDevice({ address: NVME0, jobId: 'job-h', previousCertificate: undefined });
    const partial = collect<CleanupDeviceResponse>(stream, (m) => m.length >= 1, 30_000);
    await partial;
    client.close();
    await agent.stop();
    await sim.setFault('nvme0', 'sanitize-log', null);
    await start();
    const replay = await run(NVME0, 'job-h');
    expect(replay.at(-1)!.event!.phase).toBe(CleanupPhase.CLEANUP_PHASE_INTERRUPTED);
    expect(replay.some((m) => m.event!.phase === CleanupPhase.CLEANUP_PHASE_SUCCEEDED)).toBe(false);
  });
});
