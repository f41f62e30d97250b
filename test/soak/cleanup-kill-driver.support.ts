/**
 * The seeded kill -9 soak behind `cleanup-kill.soak.ts` (long) and
 * `test/integration/cleanup-kill.test.ts` (50 cleanups, in the normal suite).
 *
 * A real `berth scheduler serve` and one `berth agent serve` run as child
 * processes (test/helpers/processes.ts) on a simulated host with four NVMe
 * controllers, one per locked-in action (sanitize-crypto, sanitize-block,
 * write-zeroes, shred). Each round binds a random subset of the available
 * controllers and deletes the ARQs, so cleanups run; at a random point — before
 * the delete (the agent is down at release), right after it (before the job
 * starts), or a random delay into the cleanup (between or inside phases) — it
 * SIGKILLs the agent, or sometimes the scheduler, restarts it and goes on.
 * Devices that end in `error` (an interrupted job) are cleaned again by an
 * operator CleanDevice, which may itself be killed.
 *
 * An independent watcher follows WatchDevices (resuming by revision across
 * scheduler restarts, so it sees every recorded transition) and checks, on
 * every observation:
 * - invariant 1: reserved == total exactly when the device is not allocatable;
 * - invariant 2: a device seen `allocated` becomes `available` only with a
 *   `last_cleanup` that succeeded, ran the action locked in at allocation, is a
 *   different job from the one before the allocation and finished after it.
 * At the end, with the agent up and the system quiet, no device is lost: every
 * device is available, in error with a reason, or allocated to a live bound ARQ;
 * none is left pending_cleaning/cleaning, and no device is bound twice.
 *
 * The media is checked from outside Berth: before every cleanup (each release,
 * each operator re-clean) the tenant writes recognisable bytes at the start,
 * middle and end of every namespace and into the unallocated capacity; at the
 * end, every device the scheduler offers as available is read back through
 * the simulator's media files, and none may hold any of it.
 *
 * The seed is printed (and taken from SOAK_SEED), so a failing run replays
 * the same choices; process timing still varies, so a replay is close, not exact.
 */
import { join } from 'node:path';
import { type ClientReadableStream, credentials, Metadata, type ServiceError, status } from '@grpc/grpc-js';
import { BerthClientError, SchedulerClient } from '../../src/client/sdk.js';
import { ArqState } from '../../src/gen/berth/scheduler/v1/accelerator_request.js';
import { CleanupOutcome, type Device, DeviceState } from '../../src/gen/berth/scheduler/v1/device.js';
import {
  DeviceServiceClient,
  type WatchDevicesResponse,
} from '../../src/gen/berth/scheduler/v1/device_service.js';
import { buildSimHost, demoHostDefinition, type SimHost } from '../../src/sim/host.js';
import { plantTenantData, readableTenantData, spreadTenantWrites } from '../../src/sim/nvme-cli/index.js';
import { tempDir } from '../helpers/agent.js';
import { createNvmeProfile, NVME_PICK, type NvmeName, stateName } from '../helpers/invariants.js';
import { agentProcess, type BerthProcess, schedulerProcess, stopAllProcesses } from '../helpers/processes.js';
import { sleep } from '../helpers/wait.js';

export interface SoakOptions {
  /** Device releases (each one a cleanup job) to run; the operator re-cleans come on top. */
  cleanups: number;
  seed: number;
  /** Hard limit on the whole run; the loop stops early (and the test fails) past it. */
  budgetMs: number;
  /** Progress lines (one per round) go here; default silent. */
  log?: (line: string) => void;
}

export interface SoakReport {
  seed: number;
  cleanups: number;
  rounds: number;
  agentKills: number;
  schedulerKills: number;
  /** Kills that happened before the ARQ delete (agent down at release). */
  killsBeforeRelease: number;
  /** Releases whose cleanup ended in error (interrupted or failed). */
  errors: number;
  /** Operator CleanDevice calls made to recover those errors. */
  operatorCleans: number;
  /** allocated → available transitions the watcher saw and verified. */
  verifiedReturns: number;
  /** Time spent waiting for restarted processes to listen again. */
  restartMs: number;
  /** Watcher observations (every device message). */
  observations: number;
  /** Attempts to re-open WatchDevices (every 200 ms while a killed scheduler restarts). */
  watchResumes: number;
  violations: string[];
  /** Problems found by the final accounting (lost devices, double binds). */
  lost: string[];
  /** Tenant bytes still readable on a device the scheduler offers as available (must be empty). */
  tenantData: string[];
  /** Devices whose media was read at the end. */
  mediaChecked: number;
  /** Tenant writes planted before cleanups. */
  planted: number;
  durationMs: number;
  finalStates: Record<string, string>;
}

const HOST = 'soak-host';
const CONTROLLERS = Object.keys(NVME_PICK) as NvmeName[];
const KIB = 1024;

/** mulberry32: a tiny seeded PRNG; good enough to choose kill points reproducibly. */
export function prng(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    int: (n: number) => Math.floor(next() * n),
    chance: (p: number) => next() < p,
  };
}

/** The seed: SOAK_SEED when set, else a fresh one (printed by the caller). */
export function soakSeed(): number {
  const env = process.env.SOAK_SEED;
  if (env !== undefined && env !== '') {
    const n = Number(env);
    if (!Number.isInteger(n) || n < 0)
      throw new Error(`SOAK_SEED must be a non-negative integer, got ${env}`);
    return n;
  }
  return Math.floor(Math.random() * 2 ** 31);
}

const TRANSIENT = new Set(['UNAVAILABLE', 'DEADLINE_EXCEEDED', 'CANCELLED']);

/** Tracks one device as the watcher sees it. */
interface Track {
  address: string;
  /** Set while the device owes a cleanup: what was true at the allocation. */
  owed: { action: string; jobBefore: string; at: number } | null;
}

/**
 * Follows WatchDevices for the host and checks invariants 1 and 2 on every
 * message. It opens a fresh client for every attempt (the scheduler restarts
 * on the same port; a new channel skips grpc-js's reconnect backoff) and
 * resumes after the last revision it applied.
 */
class Watcher {
  private readonly tracks = new Map<string, Track>();
  private revision = 0;
  private stopped = false;
  private current: ClientReadableStream<WatchDevicesResponse> | null = null;
  private loop: Promise<void> | null = null;
  observations = 0;
  verifiedReturns = 0;
  resumes = 0;
  readonly violations: string[] = [];

  constructor(
    private readonly endpoint: () => string,
    private readonly deadline: number,
    private readonly token?: string,
  ) {}

  start(): void {
    this.loop = this.run();
  }

  /** Resolves once the watcher has applied every event up to `revision`. */
  async caughtUp(revision: number, timeoutMs = 20_000): Promise<boolean> {
    const until = Date.now() + timeoutMs;
    while (this.revision < revision && Date.now() < until) await sleep(50);
    return this.revision >= revision;
  }

  get lastRevision(): number {
    return this.revision;
  }

  private async run(): Promise<void> {
    while (!this.stopped && Date.now() < this.deadline) {
      // The generated client, not the SDK's iterator: stop() must be able to
      // cancel a stream that is waiting for the next message.
      const client = new DeviceServiceClient(this.endpoint(), credentials.createInsecure());
      const md = new Metadata();
      if (this.token) md.set('authorization', `Bearer ${this.token}`);
      const stream = client.watchDevices(
        { filter: { host: HOST, type: 0, state: 0, resourceClass: '' }, fromRevision: this.revision },
        md,
      );
      this.current = stream;
      try {
        for await (const m of stream as AsyncIterable<WatchDevicesResponse>) {
          if (m.device) this.observe(m.device);
          // The initial state carries the snapshot revision on every message;
          // resuming from it is right only once the snapshot is complete.
          if (!m.initial || m.synced) this.revision = Math.max(this.revision, m.revision);
        }
      } catch (err) {
        const code = (err as ServiceError).code;
        if (!this.stopped && code !== status.UNAVAILABLE && code !== status.CANCELLED) {
          this.violations.push(`watcher: unexpected error ${(err as Error).message}`);
        }
      } finally {
        this.current = null;
        stream.cancel();
        client.close();
      }
      if (this.stopped) break;
      this.resumes++;
      await sleep(200);
    }
  }

  private observe(d: Device): void {
    this.observations++;
    const where = `${d.address} (${stateName(d.deviceState)}, updated ${d.updatedAt?.toISOString()})`;
    // Invariant 1, and allocatable ⇒ available, enabled, not burned.
    if (d.total !== 1 || (d.reserved === d.total) === d.allocatable) {
      this.violations.push(
        `invariant 1: ${where} reserved=${d.reserved}/${d.total} allocatable=${d.allocatable}`,
      );
    }
    if (d.allocatable && (d.deviceState !== DeviceState.DEVICE_STATE_AVAILABLE || d.burned)) {
      this.violations.push(`invariant 1: ${where} allocatable but burned=${d.burned}`);
    }
    if (!d.supportsCleaning) return;
    let t = this.tracks.get(d.uuid);
    if (!t) {
      t = { address: d.address, owed: null };
      this.tracks.set(d.uuid, t);
    }
    const at = d.updatedAt?.getTime() ?? 0;
    switch (d.deviceState) {
      case DeviceState.DEVICE_STATE_ALLOCATED:
        if (!t.owed) t.owed = { action: d.cleanupAction, jobBefore: d.lastCleanup?.jobId ?? '', at };
        break;
      case DeviceState.DEVICE_STATE_PENDING_CLEANING:
      case DeviceState.DEVICE_STATE_CLEANING:
        // Invariant 6: the action is locked while the device is being released.
        if (t.owed && d.cleanupAction !== t.owed.action) {
          this.violations.push(
            `invariant 6: ${where} action changed from ${t.owed.action} to ${d.cleanupAction} during release`,
          );
        }
        break;
      case DeviceState.DEVICE_STATE_ERROR:
        if (!d.errorReason) this.violations.push(`error without a reason: ${where}`);
        // Rediscovery may re-resolve the action of a device in error; the
        // operator's cleanup then runs the new one.
        if (t.owed) t.owed.action = d.cleanupAction;
        break;
      case DeviceState.DEVICE_STATE_AVAILABLE: {
        if (!t.owed) break;
        const lc = d.lastCleanup;
        const finished = lc?.finishedAt?.getTime() ?? 0;
        if (
          !lc ||
          lc.outcome !== CleanupOutcome.CLEANUP_OUTCOME_SUCCEEDED ||
          lc.action !== t.owed.action ||
          lc.jobId === '' ||
          lc.jobId === t.owed.jobBefore ||
          finished < t.owed.at
        ) {
          this.violations.push(
            `invariant 2: ${where} available after an allocation at ${new Date(t.owed.at).toISOString()} ` +
              `(action ${t.owed.action}, job before ${t.owed.jobBefore || '-'}) without a successful cleanup since: ` +
              `last_cleanup=${JSON.stringify(lc)}`,
          );
        } else {
          this.verifiedReturns++;
        }
        t.owed = null;
        break;
      }
      default:
        break;
    }
  }

  /** Devices that still owe a cleanup, for the final accounting. */
  owing(): string[] {
    return [...this.tracks.values()].filter((t) => t.owed).map((t) => t.address);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.current?.cancel();
    await this.loop;
  }
}

/**
 * Runs the soak; never throws for a broken invariant (the report lists what was
 * wrong, so the caller asserts with the seed in the message), but does throw
 * when the harness itself cannot go on (a process that will not start).
 */
export async function runCleanupKillSoak(options: SoakOptions): Promise<SoakReport> {
  const started = Date.now();
  const deadline = started + options.budgetMs;
  const rng = prng(options.seed);
  const log = options.log ?? (() => {});
  const dir = await tempDir('berth-soak-');
  const report: SoakReport = {
    seed: options.seed,
    cleanups: 0,
    rounds: 0,
    agentKills: 0,
    schedulerKills: 0,
    killsBeforeRelease: 0,
    errors: 0,
    operatorCleans: 0,
    verifiedReturns: 0,
    restartMs: 0,
    observations: 0,
    watchResumes: 0,
    violations: [],
    lost: [],
    tenantData: [],
    mediaChecked: 0,
    planted: 0,
    durationMs: 0,
    finalStates: {},
  };
  let scheduler: BerthProcess | null = null;
  let agent: BerthProcess | null = null;
  let client: SchedulerClient | null = null;
  let watcher: Watcher | null = null;
  try {
    const def = demoHostDefinition(HOST);
    for (const n of def.nvme) {
      // Small and quick, so 50 cleanups fit in a couple of minutes on two cores:
      // 512 KiB namespaces (4 write-zeroes chunks), a 400 ms sanitize.
      n.namespaces = [{ nsid: 1, sizeBytes: 512 * KIB }];
      n.sanitizeMs = 400;
    }
    const sim: SimHost = await buildSimHost(join(dir.path, HOST), def);
    const addressOf = new Map(def.nvme.map((n) => [n.controller as NvmeName, n.address]));
    const controllerAt = new Map(def.nvme.map((n) => [n.address, n.controller as NvmeName]));
    /** The tenant writes before a cleanup: start, middle, end of the namespace, and unallocated capacity. */
    const plant = async (ctrl: NvmeName) => {
      report.planted += (await plantTenantData(sim.nvmeStatePath, ctrl, spreadTenantWrites(1))).length;
    };
    const totalDevices = 4 + 1 + def.nvme.length;

    scheduler = await schedulerProcess(join(dir.path, 'scheduler.db'));
    await scheduler.start();
    const sched = scheduler;
    const newClient = () => new SchedulerClient({ endpoint: sched.endpoint, timeoutMs: 10_000 });
    client = newClient();
    agent = await agentProcess(sim, {
      scheduler: scheduler.endpoint,
      config: { nvme: { cleanup_timeout: 60 } },
    });
    await agent.start();
    const ag = agent;

    /** Retries a scheduler call across a scheduler restart (transient codes only). */
    const retry = async <T>(what: string, fn: (c: SchedulerClient) => Promise<T>): Promise<T> => {
      for (let i = 0; ; i++) {
        try {
          return await fn(client!);
        } catch (err) {
          if (!(err instanceof BerthClientError) || !TRANSIENT.has(err.codeName) || i >= 40) {
            throw new Error(`${what}: ${(err as Error).message}`);
          }
          if (i === 5) {
            client?.close();
            client = newClient();
          }
          await sleep(250);
        }
      }
    };
    const devices = () =>
      retry('ListDevices', async (c) => {
        const r = await c.devices.listDevices({
          filter: { host: HOST, type: 0, state: 0, resourceClass: '' },
          pageSize: 0,
          pageToken: '',
        });
        return r.devices;
      });
    /** Polls until every address is in one of `states` (or the time runs out); returns the devices. */
    const settle = async (addresses: string[], timeoutMs = 60_000): Promise<Device[]> => {
      const until = Math.min(Date.now() + timeoutMs, deadline);
      for (;;) {
        const all = await devices();
        const mine = all.filter((d) => addresses.includes(d.address));
        const done = mine.every(
          (d) =>
            d.deviceState === DeviceState.DEVICE_STATE_AVAILABLE ||
            d.deviceState === DeviceState.DEVICE_STATE_ERROR,
        );
        if (done || Date.now() > until) return mine;
        await sleep(100);
      }
    };
    const hostConnected = async (timeoutMs = 30_000) => {
      const until = Date.now() + timeoutMs;
      while (Date.now() < until) {
        const h = await retry('GetHost', (c) => c.hosts.getHost({ name: HOST })).catch(() => null);
        if (h?.host?.connected) return true;
        await sleep(100);
      }
      return false;
    };

    // The host and its inventory are there before anything starts.
    const until = Date.now() + 30_000;
    while ((await devices()).length < totalDevices && Date.now() < until) await sleep(100);
    if (!(await hostConnected())) throw new Error(`host never connected\n${sched.output()}\n${ag.output()}`);
    for (const ctrl of CONTROLLERS) await createNvmeProfile(client, ctrl);
    watcher = new Watcher(() => sched.endpoint, deadline);
    watcher.start();

    /** Kills a process, waits a random moment, restarts it (on the same port, state and db). */
    const killAndRestart = async (which: 'agent' | 'scheduler') => {
      const p = which === 'agent' ? ag : sched;
      await p.kill('SIGKILL');
      if (which === 'agent') report.agentKills++;
      else report.schedulerKills++;
      await sleep(rng.int(500));
      const t0 = Date.now();
      await p.restart();
      report.restartMs += Date.now() - t0;
      if (which === 'scheduler') {
        client?.close();
        client = newClient();
      }
    };
    /** Either kills `which` after `delayMs` or does nothing, in the background. */
    const killLater = (which: 'agent' | 'scheduler', delayMs: number) =>
      sleep(delayMs).then(() => killAndRestart(which));

    /** Operator re-cleans of devices in error, each maybe killed too; bounded attempts. */
    const recover = async (inError: Device[]) => {
      let pending = inError;
      for (let attempt = 0; attempt < 6 && pending.length > 0 && Date.now() < deadline; attempt++) {
        for (const d of pending) {
          await plant(controllerAt.get(d.address)!);
          const requestId = `soak-${options.seed}-${report.rounds}-${attempt}-${d.address}`;
          await retry('CleanDevice', (c) =>
            c.devices.cleanDevice({
              device: { ref: { $case: 'uuid', value: d.uuid } },
              requestId,
            }),
          );
          report.operatorCleans++;
        }
        // The operator's cleanups are not safe from crashes either.
        if (rng.chance(0.15)) await killLater('agent', rng.int(1_500));
        const after = await settle(pending.map((d) => d.address));
        pending = after.filter((d) => d.deviceState === DeviceState.DEVICE_STATE_ERROR);
      }
    };

    while (report.cleanups < options.cleanups && Date.now() < deadline) {
      report.rounds++;
      // A random subset of the available controllers (up to what is left to do).
      const now = await devices();
      const free = CONTROLLERS.filter(
        (c) =>
          now.find((d) => d.address === addressOf.get(c))?.deviceState === DeviceState.DEVICE_STATE_AVAILABLE,
      );
      const picked: NvmeName[] = [];
      // Mostly all of them: kills then hit several actions at once, and rounds stay few.
      const want = Math.min(Math.max(1, free.length - rng.int(2)), options.cleanups - report.cleanups);
      const pool = [...free];
      while (picked.length < want && pool.length > 0) picked.push(pool.splice(rng.int(pool.length), 1)[0]!);
      if (picked.length === 0) {
        // Everything is in error or still settling: recover and go on.
        await recover(now.filter((d) => d.deviceState === DeviceState.DEVICE_STATE_ERROR));
        await sleep(100);
        continue;
      }
      const arqs: string[] = [];
      for (const ctrl of picked) {
        const instance = `soak-vm-${report.rounds}-${ctrl}`;
        const arq = await retry('CreateAcceleratorRequests', (c) =>
          c.arqs.createAcceleratorRequests({
            profileName: `pick-${ctrl}`,
            requestId: `soak-${options.seed}-${instance}`,
            tags: [],
          }),
        );
        const uuid = arq.acceleratorRequests[0]!.uuid;
        await retry('BindAcceleratorRequests', (c) =>
          c.arqs.bindAcceleratorRequests({
            bindings: [{ arqUuid: uuid, instanceUuid: instance, host: HOST, tag: '' }],
          }),
        );
        arqs.push(uuid);
      }
      for (const ctrl of picked) await plant(ctrl);
      // Where the fault lands this round.
      const r = rng.next();
      let fault =
        r < 0.1 ? 'agent-before' : r < 0.6 ? 'agent-during' : r < 0.75 ? 'scheduler-during' : 'none';
      // Every run covers a scheduler kill at least once, whatever the seed.
      if (report.schedulerKills === 0 && report.cleanups >= options.cleanups / 2) fault = 'scheduler-during';
      if (fault === 'agent-before') {
        // The agent is down at release: the devices must wait, reserved (invariant 4).
        await ag.kill('SIGKILL');
        report.agentKills++;
        report.killsBeforeRelease++;
      }
      await retry('DeleteAcceleratorRequests', (c) =>
        c.arqs.deleteAcceleratorRequests({ uuids: arqs, instanceUuid: '' }),
      );
      report.cleanups += picked.length;
      let background: Promise<void> = Promise.resolve();
      if (fault === 'agent-before') {
        await sleep(rng.int(1_000));
        const t0 = Date.now();
        await ag.restart();
        report.restartMs += Date.now() - t0;
      } else if (fault === 'agent-during') {
        // 0 ms: before the job starts; up to 3 s: into or between its phases.
        background = killLater('agent', rng.chance(0.2) ? 0 : rng.int(3_000));
      } else if (fault === 'scheduler-during') {
        background = killLater('scheduler', rng.int(2_500));
      }
      await background;
      const addresses = picked.map((c) => addressOf.get(c)!);
      const after = await settle(addresses);
      const inError = after.filter((d) => d.deviceState === DeviceState.DEVICE_STATE_ERROR);
      report.errors += inError.length;
      log(
        `round ${report.rounds}: ${picked.join(',')} fault=${fault} -> ${after
          .map((d) => `${d.address.slice(5, 7)}:${stateName(d.deviceState).replace('DEVICE_STATE_', '')}`)
          .join(
            ' ',
          )} (cleanups ${report.cleanups}/${options.cleanups}, ${Math.round((Date.now() - started) / 1000)} s)`,
      );
      await recover(inError);
    }

    // Quiet: the agent is up, nothing is in flight; every device must be accounted for.
    if (!ag.running) await ag.restart();
    if (!(await hostConnected())) report.lost.push('the host did not reconnect at the end');
    const quiet = await settle(
      (await devices()).map((d) => d.address),
      30_000,
    );
    await recover(quiet.filter((d) => d.deviceState === DeviceState.DEVICE_STATE_ERROR));
    const final = await devices();
    const arqList = (
      await retry('ListAcceleratorRequests', (c) => c.arqs.listAcceleratorRequests({ instanceUuid: '' }))
    ).acceleratorRequests;
    const bound = arqList.filter((a) => a.state === ArqState.ARQ_STATE_BOUND);
    const boundDevices = bound.map((a) => a.deviceUuid);
    if (new Set(boundDevices).size !== boundDevices.length) {
      report.lost.push(`a device is bound to two ARQs: ${JSON.stringify(boundDevices)}`);
    }
    if (final.length !== totalDevices)
      report.lost.push(`expected ${totalDevices} devices, the scheduler has ${final.length}`);
    for (const d of final) {
      report.finalStates[d.address] = stateName(d.deviceState);
      const where = `${d.address} ${stateName(d.deviceState)}`;
      switch (d.deviceState) {
        case DeviceState.DEVICE_STATE_AVAILABLE:
          break;
        case DeviceState.DEVICE_STATE_ERROR:
          if (!d.errorReason) report.lost.push(`${where} without a reason`);
          break;
        case DeviceState.DEVICE_STATE_ALLOCATED: {
          const a = bound.find((x) => x.uuid === d.arqUuid);
          if (!a || a.deviceUuid !== d.uuid)
            report.lost.push(`${where} held by ARQ ${d.arqUuid}, which is not bound to it`);
          break;
        }
        default:
          report.lost.push(`${where}: stuck after the system went quiet (error: ${d.errorReason})`);
      }
    }
    // From outside Berth: no device offered as available holds tenant data.
    for (const d of final.filter((x) => x.allocatable)) {
      const ctrl = controllerAt.get(d.address);
      if (!ctrl) continue;
      report.mediaChecked++;
      for (const where of await readableTenantData(sim.nvmeStatePath, ctrl)) {
        report.tenantData.push(`${d.address} (${ctrl}, last cleanup ${d.lastCleanup?.jobId}): ${where}`);
      }
    }
    // The watcher must have seen everything the store recorded, and every
    // release returned through a verified cleanup.
    const { revision } = await retry('WatchDevices revision', async (c) => {
      for await (const m of c.watchDevices({
        filter: { host: HOST, type: 0, state: 0, resourceClass: '' },
        fromRevision: 0,
      })) {
        if (m.synced) return { revision: Number(m.revision) };
      }
      return { revision: 0 };
    });
    if (!(await watcher.caughtUp(revision))) {
      report.violations.push(`watcher stuck at revision ${watcher.lastRevision}, scheduler at ${revision}`);
    }
    for (const a of watcher.owing()) {
      if (report.finalStates[a] === 'DEVICE_STATE_AVAILABLE') {
        report.violations.push(`${a} is available but the watcher never saw its return`);
      }
    }
  } finally {
    await watcher?.stop();
    if (watcher) {
      report.violations.push(...watcher.violations);
      report.verifiedReturns = watcher.verifiedReturns;
      report.observations = watcher.observations;
      report.watchResumes = watcher.resumes;
    }
    if (report.violations.length > 0 || report.lost.length > 0) {
      report.violations.push(
        `--- process output ---\n${scheduler?.output() ?? ''}\n${agent?.output() ?? ''}`,
      );
    }
    client?.close();
    await stopAllProcesses();
    await dir.cleanup();
    report.durationMs = Date.now() - started;
  }
  return report;
}
