/**
 * The bind workload shared by bench/bind.ts and bench/scale.ts: a scheduler on
 * a durable SQLite file (WAL + synchronous FULL, on a real disk) preloaded
 * with `hosts` × 8 devices, driven over gRPC on loopback by concurrent clients
 * doing CreateAcceleratorRequests + BindAcceleratorRequests +
 * DeleteAcceleratorRequests, or by binds alone (ARQs created before and
 * deleted after, untimed); and the baseline, an empty unary RPC on the same
 * scheduler server (same interceptors, auth included), through the same client
 * code, at the same concurrency.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import {
  type CallOptions,
  type Client,
  credentials,
  type Metadata,
  makeGenericClientConstructor,
  type ServiceDefinition,
  type ServiceError,
} from '@grpc/grpc-js';
import Database from 'better-sqlite3';
import { pino } from 'pino';
import { promisify, SchedulerClient } from '../src/client/sdk.js';
import { parseHostName, parsePciAddress } from '../src/identifiers.js';
import { generateStaticToken } from '../src/server/grpc/auth/tokens.js';
import type { ServiceBinding } from '../src/server/grpc/server.js';
import type { DeviceFacts } from '../src/server/scheduler/domain/device-state.js';
import { Scheduler, type SchedulerOptions } from '../src/server/scheduler/scheduler.js';
import { openSqliteStore, type SqliteStore } from '../src/server/scheduler/stores.js';
import type { UseCases } from '../src/server/scheduler/usecases/use-cases.js';
import { nowMs, percentile, runWorkers, sorted } from './lib.js';

export const DEVICES_PER_HOST = 8;
export const RESOURCE_CLASS = 'CUSTOM_PCI_8086_154C';
export const PROFILE = 'bench-vf';

const hex2 = (n: number) => n.toString(16).padStart(2, '0');

/**
 * The i-th VF of a host (of `host`): plain PCI functions that need no cleanup,
 * so delete returns them to available. Each carries the slot identity and the
 * journal record a real agent reports, so binds pay for following media.
 */
export function benchDevice(i: number, host = 'bench'): DeviceFacts {
  const address = parsePciAddress('address', `0000:3b:${hex2(2 + Math.floor(i / 8))}.${i % 8}`);
  return {
    address,
    vendorId: '8086',
    productId: '154c',
    classCode: '020000',
    kernelDriver: 'iavf',
    driver: 'pci',
    type: 'PCI',
    functionKind: 'VF',
    physfn: '0000:3b:00.0',
    iommuGroup: 100 + i,
    iommuGroupPeers: [],
    numaNode: i % 2,
    resourceClass: RESOURCE_CLASS,
    traits: ['OWNER_BERTH'],
    managed: true,
    liveMigratable: false,
    oneTimeUse: false,
    supportsCleaning: false,
    cleanupAction: null,
    health: 'healthy',
    healthReason: '',
    unallocatableReason: '',
    attributes: {},
    media: {
      key: `pci-slot:${host}:${address}:8086:154c:8086:0000`,
      kind: 'PCI_SLOT',
      subsystemNqn: '',
      serial: '',
      model: '',
      namespaces: [],
      deviceSerialNumber: '',
    },
    agentMedia: {
      key: `pci-slot:${host}:${address}:8086:154c:8086:0000`,
      condition: 'not_cleanable',
      burned: false,
      since: 0,
      lastAddress: address,
      reason: '',
      arqUuid: '',
      instanceUuid: '',
    },
  };
}

export const hostName = (h: number) => parseHostName('host', `compute-${h.toString().padStart(5, '0')}`);

/**
 * Loads `hosts` hosts of DEVICES_PER_HOST devices straight into the store.
 * The load runs with synchronous=OFF to take seconds instead of minutes (it is
 * not what is measured) and switches back to FULL before anything is timed;
 * the caller can check with `synchronousMode`.
 */
export async function loadStore(
  dbPath: string,
  hosts: number,
): Promise<{ store: SqliteStore; loadMs: number }> {
  const t0 = nowMs();
  const store = await openSqliteStore(dbPath);
  const db = rawDb(store);
  db.pragma('synchronous = OFF');
  await loadFleet(store, hosts);
  db.pragma('synchronous = FULL');
  db.pragma('wal_checkpoint(TRUNCATE)');
  return { store, loadMs: nowMs() - t0 };
}

/**
 * Registers `hosts` hosts of `devicesPerHost` devices each (DEVICES_PER_HOST
 * by default), and the bench profile, through the store's own use cases (any
 * backend). `concurrency` hosts are registered at once: SQLite commits a turn's
 * units together, PostgreSQL spreads them over its pool.
 */
export async function loadFleet(
  store: UseCases,
  hosts: number,
  opts: { devicesPerHost?: number; concurrency?: number } = {},
): Promise<void> {
  const perHost = opts.devicesPerHost ?? DEVICES_PER_HOST;
  let next = 0;
  const worker = async () => {
    for (let h = next++; h < hosts; h = next++) {
      const name = hostName(h);
      const devices = Array.from({ length: perHost }, (_, i) => benchDevice(i, name));
      await store.registerHost({
        name,
        endpoint: `127.0.0.1:${20000 + (h % 40000)}`,
        bootId: 'bench-boot',
        agentEpoch: 'bench-epoch',
        agentVersion: 'bench',
        features: ['cleanup.v1'],
        drivers: ['pci'],
      });
      await store.upsertInventory(name, { kind: 'snapshot', revision: 1, devices });
    }
  };
  await Promise.all(Array.from({ length: opts.concurrency ?? 1 }, worker));
  await store.createProfile({
    name: PROFILE,
    description: 'one VF',
    groups: [
      {
        resourceClass: RESOURCE_CLASS,
        vendorId: '',
        productId: '',
        requiredTraits: [],
        forbiddenTraits: [],
        liveMigratable: 'unset',
        count: 1,
      },
    ],
  });
}

/** The store's connection: only for pragmas during the untimed load. */
function rawDb(store: SqliteStore): Database.Database {
  return store.db.connection;
}

export function synchronousMode(store: SqliteStore): number {
  return rawDb(store).pragma('synchronous', { simple: true }) as number;
}

export function journalMode(store: SqliteStore): string {
  return rawDb(store).pragma('journal_mode', { simple: true }) as string;
}

export interface LoopStats {
  cycles: number;
  errors: number;
  firstError: string;
  seconds: number;
  /** Completed binds per second. */
  throughput: number;
  bindMs: number[];
  cycleMs: number[];
  p50: number;
  p99: number;
  cycleP50: number;
  cycleP99: number;
  /** Seen by clients: a device handed to an ARQ while another live ARQ held it. */
  doubleAllocationsSeen: number;
}

/**
 * `concurrency` workers each loop create → bind (on a host chosen round-robin,
 * so binds spread over all hosts) → delete, for `seconds` (and at most
 * `maxCycles` cycles in total). Latency is the BindAcceleratorRequests call.
 */
export async function bindLoop(
  client: SchedulerClient,
  hosts: number,
  opts: { concurrency: number; seconds: number; maxCycles: number; warmupCycles: number },
): Promise<LoopStats> {
  const holders = new Map<string, string>();
  let doubles = 0;
  let errors = 0;
  let firstError = '';
  let hostCursor = Math.floor(Math.random() * hosts);
  const cycle = async (record: boolean, bindMs: number[], cycleMs: number[]) => {
    const t0 = nowMs();
    try {
      const created = await client.arqs.createAcceleratorRequests({
        profileName: PROFILE,
        requestId: '',
        tags: [],
      });
      const arq = created.acceleratorRequests[0]!;
      const host = hostName(hostCursor++ % hosts);
      const instance = randomUUID();
      const tb = nowMs();
      const bound = await client.arqs.bindAcceleratorRequests({
        bindings: [{ arqUuid: arq.uuid, instanceUuid: instance, host, tag: '' }],
      });
      const te = nowMs();
      const device = bound.acceleratorRequests[0]!.deviceUuid;
      // A device another live ARQ still holds (between its bind reply and its
      // delete request) must never be handed out again.
      if (holders.has(device)) doubles++;
      holders.set(device, arq.uuid);
      await Promise.resolve();
      holders.delete(device);
      await client.arqs.deleteAcceleratorRequests({ uuids: [arq.uuid], instanceUuid: '' });
      if (record) {
        bindMs.push(te - tb);
        cycleMs.push(nowMs() - t0);
      }
    } catch (e) {
      errors++;
      if (!firstError) firstError = (e as Error).message;
    }
  };
  const scratch: number[] = [];
  await runWorkers(opts.concurrency, { deadline: nowMs() + 30_000, maxIterations: opts.warmupCycles }, () =>
    cycle(false, scratch, scratch),
  );
  const bindMs: number[] = [];
  const cycleMs: number[] = [];
  const t0 = nowMs();
  await runWorkers(
    opts.concurrency,
    { deadline: t0 + opts.seconds * 1000, maxIterations: opts.maxCycles },
    () => cycle(true, bindMs, cycleMs),
  );
  return loopStats({ bindMs, cycleMs, seconds: (nowMs() - t0) / 1000, errors, firstError, doubles });
}

/** A loop's figures from its samples (also for loops run side by side and merged: bench/replicas.ts). */
export function loopStats(r: {
  bindMs: number[];
  cycleMs: number[];
  seconds: number;
  errors: number;
  firstError: string;
  doubles: number;
}): LoopStats {
  const s = sorted(r.bindMs);
  const c = sorted(r.cycleMs);
  return {
    cycles: r.bindMs.length,
    errors: r.errors,
    firstError: r.firstError,
    seconds: r.seconds,
    throughput: r.bindMs.length / r.seconds,
    bindMs: r.bindMs,
    cycleMs: r.cycleMs,
    p50: percentile(s, 50),
    p99: percentile(s, 99),
    cycleP50: percentile(c, 50),
    cycleP99: percentile(c, 99),
    doubleAllocationsSeen: r.doubles,
  };
}

/**
 * The end-of-run double-allocation check: `concurrency` binds race for the
 * few devices of a handful of hosts (more binds than devices), nothing is
 * deleted, then the database itself is asked how many ARQs hold each device.
 */
export async function raceAndCount(
  client: SchedulerClient,
  dbPath: string,
  opts: { concurrency: number; hosts: number },
): Promise<{
  attempted: number;
  bound: number;
  refused: number;
  otherErrors: number;
  devicesWithTwoArqs: number;
  allocatedWithoutArq: number;
}> {
  const targets = Math.min(opts.hosts, 4);
  const attempts = Array.from({ length: opts.concurrency }, (_, i) => i);
  let bound = 0;
  let refused = 0;
  let otherErrors = 0;
  await Promise.all(
    attempts.map(async (i) => {
      const created = await client.arqs.createAcceleratorRequests({
        profileName: PROFILE,
        requestId: '',
        tags: [],
      });
      try {
        await client.arqs.bindAcceleratorRequests({
          bindings: [
            {
              arqUuid: created.acceleratorRequests[0]!.uuid,
              instanceUuid: randomUUID(),
              host: hostName(i % targets),
              tag: '',
            },
          ],
        });
        bound++;
      } catch (e) {
        if ((e as { reason?: string }).reason === 'NO_ALLOCATABLE_DEVICE') refused++;
        else otherErrors++;
      }
    }),
  );
  const db = new Database(dbPath, { readonly: true });
  try {
    const twice = db
      .prepare(
        `SELECT COUNT(*) AS n FROM (SELECT device_uuid FROM arqs WHERE device_uuid IS NOT NULL
         GROUP BY device_uuid HAVING COUNT(*) > 1)`,
      )
      .get() as { n: number };
    const orphan = db
      .prepare(
        `SELECT COUNT(*) AS n FROM devices d WHERE d.device_state = 'allocated'
         AND NOT EXISTS (SELECT 1 FROM arqs a WHERE a.device_uuid = d.uuid)`,
      )
      .get() as { n: number };
    return {
      attempted: attempts.length,
      bound,
      refused,
      otherErrors,
      devicesWithTwoArqs: twice.n,
      allocatedWithoutArq: orphan.n,
    };
  } finally {
    db.close();
  }
}

export async function startScheduler(
  store: SqliteStore,
  extra: Partial<SchedulerOptions> = {},
): Promise<{ scheduler: Scheduler; client: SchedulerClient; token: string }> {
  // Authenticated as in production: a static service token checked on every call.
  const token = generateStaticToken();
  const scheduler = await Scheduler.start({
    store,
    listen: '127.0.0.1:0',
    logger: pino({ level: 'silent' }),
    auth: { mode: 'token', staticTokens: [{ token, roles: ['admin'] }] },
    ...extra,
  });
  const client = new SchedulerClient({ endpoint: scheduler.address, timeoutMs: 30_000, retries: 1, token });
  return { scheduler, client, token };
}

// ---- baseline: an empty unary RPC on the scheduler's own server ------------

/**
 * The baseline method. It is registered on the scheduler's own grpc.Server
 * through the `extraServices` seam, so a call to it passes the very interceptors
 * a BindAcceleratorRequests call passes (metrics, auth with the same static
 * token and the role table, the malformed-request guard, the deserializer
 * guard). The auth table refuses any path it does not list, and the only paths
 * it lists that the scheduler does not serve are the agent's: the empty method
 * therefore takes the path of the agent's GetAgentInfo (admin may call it) —
 * with empty request and response bytes, no handler work and no store access.
 */
export const EMPTY_PATH = '/berth.agent.v1.AgentService/GetAgentInfo';

const identity = (x: Buffer) => x;
const EMPTY: ServiceDefinition = {
  getAgentInfo: {
    path: EMPTY_PATH,
    requestStream: false,
    responseStream: false,
    requestSerialize: identity,
    requestDeserialize: identity,
    responseSerialize: identity,
    responseDeserialize: identity,
  },
};

/** Pass as `extraServices` to startScheduler: the empty method on the same server. */
export const emptyOnScheduler = (): ServiceBinding[] => [
  {
    name: 'berth.agent.v1.AgentService',
    definition: EMPTY,
    implementation: {
      getAgentInfo: (_call: unknown, cb: (err: ServiceError | null, res: Buffer) => void) =>
        cb(null, Buffer.alloc(0)),
    },
  },
];

type EmptyStub = Client & {
  getAgentInfo(
    req: Buffer,
    md: Metadata,
    opts: Partial<CallOptions>,
    cb: (err: ServiceError | null, res: Buffer) => void,
  ): unknown;
};

/**
 * A client of the empty method built like the SDK's clients (a generated-style
 * grpc-js client on the same endpoint and credentials, so grpc-js shares the
 * connection; the SDK's own promise wrapper: token metadata, deadline, retry
 * policy lookup).
 */
export function emptyClient(endpoint: string, token: string): { call(): Promise<void>; close(): void } {
  const Ctor = makeGenericClientConstructor(EMPTY, 'Empty');
  const stub = new Ctor(endpoint, credentials.createInsecure()) as unknown as EmptyStub;
  const p = promisify(stub, { endpoint, token, timeoutMs: 30_000, retries: 1 });
  return {
    call: async () => {
      await p.getAgentInfo(Buffer.alloc(0));
    },
    close: () => stub.close(),
  };
}

/** Latencies (ms) of calls and the seconds they were measured over; segments add up. */
export interface Samples {
  ms: number[];
  seconds: number;
}

export const emptySamples = (): Samples => ({ ms: [], seconds: 0 });

export function summarize(s: Samples): { calls: number; throughput: number; p50: number; p99: number } {
  const x = sorted(s.ms);
  return {
    calls: x.length,
    throughput: x.length / s.seconds,
    p50: percentile(x, 50),
    p99: percentile(x, 99),
  };
}

/** `concurrency` workers calling `call` for `seconds`; latencies and time are added to `into`. */
export async function emptySegment(
  call: () => Promise<void>,
  into: Samples,
  opts: { concurrency: number; seconds: number; maxCalls: number },
): Promise<void> {
  const t0 = nowMs();
  await runWorkers(
    opts.concurrency,
    { deadline: t0 + opts.seconds * 1000, maxIterations: opts.maxCalls },
    async () => {
      const t = nowMs();
      await call();
      into.ms.push(nowMs() - t);
    },
  );
  into.seconds += (nowMs() - t0) / 1000;
}

// ---- the bind phase alone ----------------------------------------------------

/** Runs `task(i)` for i in 0..n-1 with at most `concurrency` in flight. */
async function forEachConcurrent(
  n: number,
  concurrency: number,
  task: (i: number) => Promise<void>,
): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, n) }, async () => {
      while (next < n) await task(next++);
    }),
  );
}

export interface BindPhaseStats {
  /** Bind calls timed (all rounds). */
  samples: Samples;
  errors: number;
  firstError: string;
  /** A device returned by two binds within one round (nothing is deleted during a round). */
  doubleAllocationsSeen: number;
  rounds: number;
  /** Untimed set-up and tear-down, for the record. */
  createSeconds: number;
  deleteSeconds: number;
}

/**
 * One round of the bind phase: `size` ARQs are created first (untimed), then
 * bound by `concurrency` workers — each BindAcceleratorRequests call is timed,
 * hosts round-robin — until all are bound or `maxSeconds` of binding have
 * passed, then all of them are deleted (untimed, 100 per call). Only the binds
 * are measured: one RPC, one durable transaction each.
 */
export async function bindRound(
  client: SchedulerClient,
  hosts: number,
  into: BindPhaseStats,
  opts: { concurrency: number; size: number; maxSeconds: number },
): Promise<void> {
  const uuids: string[] = new Array(opts.size);
  const tc = nowMs();
  await forEachConcurrent(opts.size, opts.concurrency, async (i) => {
    const created = await client.arqs.createAcceleratorRequests({
      profileName: PROFILE,
      requestId: '',
      tags: [],
    });
    uuids[i] = created.acceleratorRequests[0]!.uuid;
  });
  into.createSeconds += (nowMs() - tc) / 1000;
  const holders = new Set<string>();
  let hostCursor = Math.floor(Math.random() * hosts);
  let next = 0;
  const t0 = nowMs();
  const deadline = t0 + opts.maxSeconds * 1000;
  await Promise.all(
    Array.from({ length: opts.concurrency }, async () => {
      while (next < uuids.length && nowMs() < deadline) {
        const arqUuid = uuids[next++]!;
        const host = hostName(hostCursor++ % hosts);
        const t = nowMs();
        try {
          const bound = await client.arqs.bindAcceleratorRequests({
            bindings: [{ arqUuid, instanceUuid: randomUUID(), host, tag: '' }],
          });
          into.samples.ms.push(nowMs() - t);
          const device = bound.acceleratorRequests[0]!.deviceUuid;
          if (holders.has(device)) into.doubleAllocationsSeen++;
          holders.add(device);
        } catch (e) {
          into.errors++;
          if (!into.firstError) into.firstError = (e as Error).message;
        }
      }
    }),
  );
  into.samples.seconds += (nowMs() - t0) / 1000;
  into.rounds++;
  const td = nowMs();
  const batches = Math.ceil(uuids.length / 100);
  await forEachConcurrent(batches, opts.concurrency, async (b) => {
    await client.arqs.deleteAcceleratorRequests({
      uuids: uuids.slice(b * 100, b * 100 + 100),
      instanceUuid: '',
    });
  });
  into.deleteSeconds += (nowMs() - td) / 1000;
}

export const dbFile = (dir: string) => join(dir, 'scheduler.db');
