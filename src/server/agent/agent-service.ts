/**
 * berth.agent.v1.AgentService: thin handlers over the agent's inventory,
 * plugin host and cleanup runner.
 */
import type { Logger } from 'pino';
import { BerthError, invalidArgument } from '../../errors.js';
import {
  type AgentServiceServer,
  AgentServiceService,
  type CleanupDeviceRequest,
  type CleanupDeviceResponse,
  type GetAgentInfoResponse,
  ListDevicesResponse,
  type PrepareMigrationRequest,
  type PrepareMigrationResponse,
  type RecordBindingRequest,
  type RecordBindingResponse,
  type RediscoverResponse,
  type ReleaseDeviceRequest,
  type ReleaseDeviceResponse,
  type WatchInventoryRequest,
  type WatchInventoryResponse,
} from '../../gen/berth/agent/v1/agent.js';
import { Device } from '../../gen/berth/agent/v1/device.js';
import type { MediaRecord } from '../../plugins/types.js';
import { cleanupEventToProto } from '../cleanup-event-proto.js';
import { deviceToProto } from '../device-proto.js';
import { encodeItemByItem } from '../grpc/encoded.js';
import { serverStream, unary } from '../grpc/handlers.js';
import type { ServiceBinding } from '../grpc/server.js';
import { mediaRecordToProto } from '../media-proto.js';
import { classifySqliteFailure } from '../storage-faults.js';
import type { CleanupJournal } from './cleanup-journal.js';
import type { CleanupRunner } from './cleanup-runner.js';
import type { AgentConfig } from './config.js';
import type { Inventory, InventoryDiff, InventoryEvent } from './inventory.js';
import { checkMigrationDevice } from './prepare-migration.js';

/**
 * What the service needs of the agent. The Agent class (agent.ts) satisfies
 * it; it is named here rather than imported from agent.ts, which imports this
 * module, so that the two do not import each other (.dependency-cruiser.cjs,
 * no-circular).
 */
export interface ServedAgent {
  readonly config: AgentConfig;
  readonly journal: Pick<CleanupJournal, 'path'>;
  readonly inventory: Inventory;
  readonly cleanups: CleanupRunner;
  readonly stopped: Promise<void>;
  readonly isStopping: boolean;
  info(): GetAgentInfoResponse;
  rediscover(): Promise<InventoryDiff>;
  releaseDevice(address: string, mediaKey: string): MediaRecord;
}

function eventToProto(epoch: string, e: InventoryEvent): WatchInventoryResponse {
  switch (e.kind) {
    case 'added':
      return { epoch, revision: e.revision, event: { $case: 'added', value: deviceToProto(e.device) } };
    case 'changed':
      return { epoch, revision: e.revision, event: { $case: 'changed', value: deviceToProto(e.device) } };
    case 'removed':
      return { epoch, revision: e.revision, event: { $case: 'removed', value: { address: e.address } } };
  }
}

/**
 * A failure of the agent itself (its journal's disk full or damaged, a bug) in
 * words the scheduler can put into the device's error reason, not
 * `internal error (id …)`: the scheduler is the only caller of these RPCs.
 */
function agentFailure(agent: ServedAgent, err: unknown): unknown {
  if (err instanceof BerthError) return err;
  const owner = `the agent on ${agent.config.host}'s`;
  const fault = classifySqliteFailure(err, agent.journal.path, owner);
  if (fault) return fault.error;
  return new BerthError('INTERNAL', `the agent on ${agent.config.host} failed: ${(err as Error).message}`, {
    reason: 'AGENT_FAILURE',
    cause: err,
  });
}

export function agentServiceBinding(agent: ServedAgent, logger: Logger): ServiceBinding {
  const inv = agent.inventory;
  const impl: AgentServiceServer = {
    getAgentInfo: unary('GetAgentInfo', logger, async (): Promise<GetAgentInfoResponse> => agent.info()),

    listDevices: unary(
      'ListDevices',
      logger,
      // Each device converted and encoded as it is written (encoded.ts).
      async () =>
        encodeItemByItem(ListDevicesResponse, 1, inv.list(), Device, deviceToProto, {
          devices: [],
          revision: inv.revision,
          epoch: inv.epoch,
        }),
    ),

    watchInventory: serverStream('WatchInventory', logger, async function* (req: WatchInventoryRequest, ctx) {
      // Subscribe before reading so nothing falls between the snapshot and the deltas.
      const queue: InventoryEvent[] = [];
      let wake: (() => void) | null = null;
      const unsubscribe = inv.subscribe((e) => {
        queue.push(e);
        wake?.();
      });
      try {
        const resumable =
          req.epoch === inv.epoch && req.fromRevision > 0 ? inv.eventsSince(req.fromRevision) : null;
        let sent: number;
        if (resumable) {
          for (const e of resumable) yield eventToProto(inv.epoch, e);
          sent = resumable.length > 0 ? resumable[resumable.length - 1]!.revision : req.fromRevision;
          if (resumable.length === 0) {
            // Nothing was missed: say so at once with an event-less message. The
            // scheduler counts the link as up (and re-attaches the cleanups it
            // lost) only on a first message; without this, a resume after a
            // network cut stays silent until the inventory next changes.
            yield { epoch: inv.epoch, revision: sent, event: undefined };
          }
        } else {
          sent = inv.revision;
          yield {
            epoch: inv.epoch,
            revision: sent,
            event: { $case: 'snapshot', value: { devices: inv.list().map(deviceToProto) } },
          };
        }
        while (!ctx.signal.aborted) {
          while (queue.length > 0) {
            const e = queue.shift()!;
            if (e.revision > sent) {
              sent = e.revision;
              yield eventToProto(inv.epoch, e);
            }
          }
          await new Promise<void>((resolve) => {
            wake = resolve;
            ctx.signal.addEventListener('abort', () => resolve(), { once: true });
            agent.stopped.then(() => resolve());
          });
          wake = null;
          if (agent.isStopping) return;
        }
      } finally {
        unsubscribe();
      }
    }),

    rediscover: unary('Rediscover', logger, async (): Promise<RediscoverResponse> => {
      const diff = await agent.rediscover();
      return {
        revision: diff.revision,
        added: diff.added.map(deviceToProto),
        changed: diff.changed.map(deviceToProto),
        removed: diff.removed,
      };
    }),

    recordBinding: unary(
      'RecordBinding',
      logger,
      async (req: RecordBindingRequest): Promise<RecordBindingResponse> => {
        try {
          const held = agent.cleanups.recordBinding(
            req.address,
            req.arqUuid,
            req.instanceUuid,
            req.projectId,
          );
          return { since: new Date(held.since) };
        } catch (err) {
          throw agentFailure(agent, err);
        }
      },
    ),

    releaseDevice: unary(
      'ReleaseDevice',
      logger,
      async (req: ReleaseDeviceRequest): Promise<ReleaseDeviceResponse> => {
        try {
          return { mediaRecord: mediaRecordToProto(agent.releaseDevice(req.address, req.mediaKey)) };
        } catch (err) {
          throw agentFailure(agent, err);
        }
      },
    ),

    cleanupDevice: serverStream('CleanupDevice', logger, async function* (req: CleanupDeviceRequest, ctx) {
      let job: ReturnType<typeof agent.cleanups.startOrAttach>;
      try {
        const p = req.previousCertificate;
        job = agent.cleanups.startOrAttach(
          req.address,
          req.jobId,
          p ? { mediaKey: p.mediaKey, hash: p.hash, seq: Number(p.seq), host: p.host } : null,
        );
      } catch (err) {
        throw agentFailure(agent, err);
      }
      for await (const e of job.follow(0, ctx.signal)) {
        yield { event: cleanupEventToProto(e) } satisfies CleanupDeviceResponse;
      }
    }),

    prepareMigration: serverStream(
      'PrepareMigration',
      logger,
      async function* (req: PrepareMigrationRequest) {
        if (req.devices.length === 0) throw invalidArgument('devices', 'at least one device is required');
        if (req.devices.length > 256)
          throw invalidArgument('devices', `${req.devices.length} devices; at most 256`);
        for (const [i, d] of req.devices.entries()) {
          const res = await checkMigrationDevice(agent, d, `devices[${i}]`);
          yield res satisfies PrepareMigrationResponse;
        }
      },
    ),
  };
  return { name: 'berth.agent.v1.AgentService', definition: AgentServiceService, implementation: impl };
}
