/**
 * watch fan-out: 1,000 WatchDevices subscribers on a scheduler; the time from
 * a device state change (SetDeviceStatus over gRPC, enabled ⇄ maintaining) to
 * its delivery on every subscriber. Baseline: an empty message broadcast to
 * 1,000 server streams of a plain grpc-js server (Berth's server options),
 * with the same client channel layout, timed from the broadcast to the last
 * delivery.
 * Subscribers are spread over several client channels (each its own HTTP/2
 * connection, through a local subchannel pool), well under
 * grpc.max_concurrent_streams on any one connection.
 * Goal: p99 ratio (berth / baseline) ≤ 3.
 */
import {
  type ChannelOptions,
  type ClientReadableStream,
  credentials,
  Metadata,
  makeGenericClientConstructor,
  Server,
  ServerCredentials,
  type ServerWritableStream,
  type ServiceDefinition,
} from '@grpc/grpc-js';
import { DeviceStatus } from '../src/gen/berth/scheduler/v1/device.js';
import {
  DeviceServiceClient,
  type WatchDevicesResponse,
} from '../src/gen/berth/scheduler/v1/device_service.js';
import { SERVER_OPTIONS } from '../src/server/grpc/server.js';
import { dbFile, hostName, loadStore, startScheduler } from './bind-harness.js';
import { emit, nowMs, parseArgs, percentile, round, sleep, sorted, tempDir } from './lib.js';

/** Channel options that give each client its own connection. */
const OWN_CONNECTION: ChannelOptions = { 'grpc.use_local_subchannel_pool': 1 };

/**
 * Counts subscribers that have reached a target, and wakes the waiter when all
 * have: event-driven (no polling loop competing with the servers for the CPU).
 */
class Arrivals {
  private readonly at: Float64Array;
  private target = Number.POSITIVE_INFINITY;
  private reached = 0;
  private wake: (() => void) | null = null;

  constructor(private readonly n: number) {
    this.at = new Float64Array(n);
  }

  /** Subscriber `i` has received `value` (a revision or a message count). */
  note(i: number, value: number): void {
    const before = this.at[i]!;
    if (value <= before) return;
    this.at[i] = value;
    if (before < this.target && value >= this.target && ++this.reached === this.n) this.wake?.();
  }

  /** Resolves true when every subscriber has reached `target`, false after `timeoutMs`. */
  wait(target: number, timeoutMs: number): Promise<boolean> {
    this.target = target;
    this.reached = 0;
    for (const v of this.at) if (v >= target) this.reached++;
    if (this.reached === this.n) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.wake = null;
        resolve(false);
      }, timeoutMs);
      this.wake = () => {
        clearTimeout(timer);
        this.wake = null;
        resolve(true);
      };
    });
  }
}

/** One side of the comparison: streams open and synced; `change()` returns its latency in ms. */
interface Side {
  change(k: number): Promise<{ ms: number; ok: boolean }>;
  close(): Promise<void>;
}

async function berthSide(subscribers: number, channels: number): Promise<Side> {
  const dir = await tempDir('/dev/shm', 'berth-bench-watch-');
  const { store } = await loadStore(dbFile(dir.path), 4);
  const { scheduler, client, token } = await startScheduler(store);
  const auth = new Metadata();
  auth.set('authorization', `Bearer ${token}`);
  const clients = Array.from(
    { length: channels },
    () => new DeviceServiceClient(scheduler.address, credentials.createInsecure(), OWN_CONNECTION),
  );
  const streams: ClientReadableStream<WatchDevicesResponse>[] = [];
  const close = async () => {
    for (const s of streams) s.cancel();
    for (const c of clients) c.close();
    client.close();
    await scheduler.stop();
    await dir.cleanup();
  };
  try {
    const host = hostName(0);
    const target = (await store.listDevices({ host })).devices[0]!;
    // Per subscriber: the highest revision received for the target device; `synced` as revision 1.
    const arrivals = new Arrivals(subscribers);
    for (let i = 0; i < subscribers; i++) {
      const s = clients[i % channels]!.watchDevices(
        { filter: { host, type: 0, state: 0, resourceClass: '' }, fromRevision: 0 },
        auth,
      );
      s.on('data', (m: WatchDevicesResponse) => {
        if (m.synced) arrivals.note(i, 1);
        else if (!m.initial && m.device?.uuid === target.uuid) arrivals.note(i, m.revision);
      });
      s.on('error', () => {});
      streams.push(s);
    }
    if (!(await arrivals.wait(1, 60_000))) throw new Error('not every watcher synced');
    return {
      async change(k) {
        const t0 = nowMs();
        await client.devices.setDeviceStatus({
          device: { ref: { $case: 'uuid', value: target.uuid } },
          status: k % 2 === 0 ? DeviceStatus.DEVICE_STATUS_MAINTAINING : DeviceStatus.DEVICE_STATUS_ENABLED,
        });
        const rev = (await store.currentRevision()) || 0;
        const ok = await arrivals.wait(rev, 30_000);
        return { ms: nowMs() - t0, ok };
      },
      close,
    };
  } catch (e) {
    await close();
    throw e;
  }
}

const BROADCAST: ServiceDefinition = {
  watch: {
    path: '/bench.Broadcast/Watch',
    requestStream: false,
    responseStream: true,
    requestSerialize: (x: Buffer) => x,
    requestDeserialize: (x: Buffer) => x,
    responseSerialize: (x: Buffer) => x,
    responseDeserialize: (x: Buffer) => x,
  },
};

async function baselineSide(subscribers: number, channels: number): Promise<Side> {
  const server = new Server(SERVER_OPTIONS);
  const calls = new Set<ServerWritableStream<Buffer, Buffer>>();
  server.addService(BROADCAST, {
    watch: (call: ServerWritableStream<Buffer, Buffer>) => {
      calls.add(call);
      call.on('cancelled', () => calls.delete(call));
      call.write(Buffer.alloc(0));
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (e, p) =>
      e ? reject(e) : resolve(p),
    ),
  );
  const Ctor = makeGenericClientConstructor(BROADCAST, 'Broadcast');
  const clients = Array.from(
    { length: channels },
    () => new Ctor(`127.0.0.1:${port}`, credentials.createInsecure(), OWN_CONNECTION),
  ) as unknown as Array<{ watch(req: Buffer): ClientReadableStream<Buffer>; close(): void }>;
  const streams: ClientReadableStream<Buffer>[] = [];
  const close = async () => {
    for (const s of streams) s.cancel();
    for (const c of clients) c.close();
    server.forceShutdown();
  };
  // Per subscriber: messages received (the first is the one sent on open).
  const arrivals = new Arrivals(subscribers);
  const counts = new Int32Array(subscribers);
  for (let i = 0; i < subscribers; i++) {
    const s = clients[i % channels]!.watch(Buffer.alloc(0));
    s.on('data', () => arrivals.note(i, ++counts[i]!));
    s.on('error', () => {});
    streams.push(s);
  }
  if (!(await arrivals.wait(1, 60_000))) {
    await close();
    throw new Error('baseline streams did not open');
  }
  let sent = 1;
  return {
    async change() {
      const t0 = nowMs();
      sent++;
      for (const c of calls) c.write(Buffer.alloc(0));
      const ok = await arrivals.wait(sent, 30_000);
      return { ms: nowMs() - t0, ok };
    },
    close,
  };
}

async function main() {
  const { quick } = parseArgs();
  const subscribers = quick ? 100 : 1000;
  const channels = quick ? 2 : 10;
  // Enough changes that p99 is not simply the single worst one.
  const changes = quick ? 10 : 400;
  const warmup = quick ? 2 : 20;
  const base = await baselineSide(subscribers, channels);
  let berth: Side;
  try {
    berth = await berthSide(subscribers, channels);
  } catch (e) {
    await base.close();
    throw e;
  }
  const b: number[] = [];
  const e: number[] = [];
  // Process CPU per change (servers and clients share this process): steadier than latency under load.
  const cpu = { berth: 0, base: 0 };
  let missed = 0;
  try {
    // Both sides open at once; their changes alternate (the order swapping each
    // pair) so drifting machine load hits both alike.
    for (let k = 0; k < warmup + changes; k++) {
      const order = k % 2 === 0 ? ([berth, base] as const) : ([base, berth] as const);
      for (const side of order) {
        const c0 = process.cpuUsage();
        const r = await side.change(k);
        const c = process.cpuUsage(c0);
        if (!r.ok) missed++;
        if (k >= warmup) {
          (side === berth ? b : e).push(r.ms);
          cpu[side === berth ? 'berth' : 'base'] += (c.user + c.system) / 1000;
        }
        await sleep(5);
      }
    }
  } finally {
    await berth.close();
    await base.close();
  }
  const bs = sorted(b);
  const es = sorted(e);
  const value = percentile(bs, 99);
  const baseline = percentile(es, 99);
  const ratio = value / baseline;
  emit({
    name: 'watch',
    value,
    baseline,
    ratio,
    goal: 'p99 change-to-all-subscribers / p99 empty broadcast to as many grpc-js streams <= 3',
    pass: ratio <= 3 && missed === 0,
    unit: 'ms',
    p50_ms: round(percentile(bs, 50)),
    baseline_p50_ms: round(percentile(es, 50)),
    p90_ms: round(percentile(bs, 90)),
    baseline_p90_ms: round(percentile(es, 90)),
    cpu_ms_per_change: round(cpu.berth / changes),
    baseline_cpu_ms_per_change: round(cpu.base / changes),
    subscribers,
    channels,
    changes,
    missed,
    note: 'berth time includes the SetDeviceStatus RPC and its store write (db on /dev/shm: fan-out measured, not fsync); the two sides alternate, completion is event-driven',
    quick,
  });
}

await main();
