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

/** Waits until `pred()` holds, polling, at most `timeoutMs`. */
async function until(pred: () => boolean, timeoutMs: number): Promise<boolean> {
  const end = nowMs() + timeoutMs;
  while (!pred()) {
    if (nowMs() > end) return false;
    await new Promise<void>((r) => setImmediate(r));
  }
  return true;
}

async function berthSide(subscribers: number, channels: number, changes: number) {
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
  try {
    const host = hostName(0);
    const target = (await store.listDevices({ host })).devices[0]!;
    // Per subscriber, the highest revision it has received for the target device.
    const seen = new Float64Array(subscribers);
    let synced = 0;
    for (let i = 0; i < subscribers; i++) {
      const s = clients[i % channels]!.watchDevices(
        { filter: { host, type: 0, state: 0, resourceClass: '' }, fromRevision: 0 },
        auth,
      );
      s.on('data', (m: WatchDevicesResponse) => {
        if (m.synced) synced++;
        else if (!m.initial && m.device?.uuid === target.uuid) seen[i] = m.revision;
      });
      s.on('error', () => {});
      streams.push(s);
    }
    if (!(await until(() => synced === subscribers, 60_000)))
      throw new Error(`only ${synced} watchers synced`);
    const latencies: number[] = [];
    let missed = 0;
    for (let k = 0; k < changes; k++) {
      const t0 = nowMs();
      const res = await client.devices.setDeviceStatus({
        device: { ref: { $case: 'uuid', value: target.uuid } },
        status: k % 2 === 0 ? DeviceStatus.DEVICE_STATUS_MAINTAINING : DeviceStatus.DEVICE_STATUS_ENABLED,
      });
      const rev = (await store.currentRevision()) || 0;
      void res;
      const ok = await until(() => seen.every((r) => r >= rev), 30_000);
      if (!ok) missed++;
      latencies.push(nowMs() - t0);
      await sleep(20);
    }
    return { latencies, missed };
  } finally {
    for (const s of streams) s.cancel();
    for (const c of clients) c.close();
    client.close();
    await scheduler.stop();
    await dir.cleanup();
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

async function baselineSide(subscribers: number, channels: number, changes: number) {
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
  const counts = new Int32Array(subscribers);
  try {
    for (let i = 0; i < subscribers; i++) {
      const s = clients[i % channels]!.watch(Buffer.alloc(0));
      s.on('data', () => {
        counts[i]!++;
      });
      s.on('error', () => {});
      streams.push(s);
    }
    if (!(await until(() => counts.every((c) => c >= 1), 60_000)))
      throw new Error('baseline streams did not open');
    const latencies: number[] = [];
    let missed = 0;
    for (let k = 0; k < changes; k++) {
      const want = k + 2;
      const t0 = nowMs();
      for (const c of calls) c.write(Buffer.alloc(0));
      if (!(await until(() => counts.every((c) => c >= want), 30_000))) missed++;
      latencies.push(nowMs() - t0);
      await sleep(20);
    }
    return { latencies, missed };
  } finally {
    for (const s of streams) s.cancel();
    for (const c of clients) c.close();
    server.forceShutdown();
  }
}

async function main() {
  const { quick } = parseArgs();
  const subscribers = quick ? 100 : 1000;
  const channels = quick ? 2 : 10;
  const changes = quick ? 10 : 60;
  const base = await baselineSide(subscribers, channels, changes);
  const berth = await berthSide(subscribers, channels, changes);
  const b = sorted(berth.latencies);
  const e = sorted(base.latencies);
  const value = percentile(b, 99);
  const baseline = percentile(e, 99);
  const ratio = value / baseline;
  emit({
    name: 'watch',
    value,
    baseline,
    ratio,
    goal: 'p99 change-to-all-subscribers / p99 empty broadcast to as many grpc-js streams <= 3',
    pass: ratio <= 3 && berth.missed === 0,
    unit: 'ms',
    p50_ms: round(percentile(b, 50)),
    baseline_p50_ms: round(percentile(e, 50)),
    subscribers,
    channels,
    changes,
    missed: berth.missed + base.missed,
    note: 'berth time includes the SetDeviceStatus RPC and its store write (db on /dev/shm: fan-out measured, not fsync)',
    quick,
  });
}

await main();
