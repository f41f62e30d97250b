/**
 * Responses encoded once (encoded.ts), through a running scheduler: every
 * WatchDevices watcher gets a change as the same bytes, and those bytes decode
 * to exactly the message encoded per watcher before (and to what GetDevice says).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SchedulerClient } from '../../client/sdk.js';
import { DeviceStatus } from '../../gen/berth/scheduler/v1/device.js';
import {
  type WatchDevicesResponse,
  WatchDevicesResponse as WatchDevicesResponseCodec,
} from '../../gen/berth/scheduler/v1/device_service.js';
import { hostName, pciFacts } from '../scheduler/domain/fixtures.support.js';
import { Scheduler } from '../scheduler/scheduler.js';
import { openSqliteStore } from '../scheduler/stores.js';
import { generateStaticToken } from './auth/tokens.js';
import { Encoded, encodeOnce, passEncodedResponses } from './encoded.js';

const HOST = hostName('fanout-host');

describe('responses encoded once', () => {
  let scheduler: Scheduler;
  let client: SchedulerClient;

  beforeAll(async () => {
    const store = await openSqliteStore(':memory:');
    await store.registerHost({
      name: HOST,
      endpoint: '127.0.0.1:1',
      bootId: 'boot',
      agentEpoch: 'epoch',
      agentVersion: 'test',
      features: [],
      drivers: ['pci'],
    });
    await store.upsertInventory(HOST, {
      kind: 'snapshot',
      revision: 1,
      devices: [0, 1, 2].map((index) => pciFacts({ index, attributes: { slot: `s${index}` } })),
    });
    const token = generateStaticToken();
    scheduler = await Scheduler.start({
      store,
      listen: '127.0.0.1:0',
      auth: { mode: 'token', staticTokens: [{ token, roles: ['admin'] }] },
    });
    client = new SchedulerClient({ endpoint: scheduler.address, token });
  });
  afterAll(async () => {
    client?.close();
    await scheduler?.stop();
  });

  it('every watcher receives a change whole: the device GetDevice returns, its revision, not initial', async () => {
    const watchers = [0, 1, 2, 3].map(() =>
      client.watchDevices({ filter: { host: HOST, type: 0, state: 0, resourceClass: '' }, fromRevision: 0 }),
    );
    let target = '';
    for (const w of watchers) {
      for (;;) {
        const m = (await w.next()).value as WatchDevicesResponse;
        if (m.synced) break;
        target ||= m.device!.uuid;
      }
    }
    await client.devices.setDeviceStatus({
      device: { ref: { $case: 'uuid', value: target } },
      status: DeviceStatus.DEVICE_STATUS_MAINTAINING,
    });
    const { device } = await client.devices.getDevice({ device: { ref: { $case: 'uuid', value: target } } });
    const got = await Promise.all(watchers.map(async (w) => (await w.next()).value as WatchDevicesResponse));
    for (const w of watchers) await w.return(undefined);
    for (const m of got) {
      expect(m).toEqual({
        revision: got[0]!.revision,
        initial: false,
        device,
        removed: false,
        synced: false,
      });
    }
    expect(got[0]!.revision).toBeGreaterThan(0);
    expect(device!.attributes).toMatchObject({ slot: expect.stringMatching(/^s[0-2]$/) });
  });

  it('a wrapped serializer sends Encoded bytes as they are and encodes anything else as before', () => {
    const message: WatchDevicesResponse = {
      revision: 7,
      initial: false,
      device: undefined,
      removed: true,
      synced: false,
    };
    const definition = passEncodedResponses({
      watch: {
        path: '/x.Y/Watch',
        requestStream: false,
        responseStream: true,
        requestSerialize: (v: Buffer) => v,
        requestDeserialize: (v: Buffer) => v,
        responseSerialize: (v: WatchDevicesResponse) =>
          Buffer.from(WatchDevicesResponseCodec.encode(v).finish()),
        responseDeserialize: (v: Buffer) => WatchDevicesResponseCodec.decode(v),
      },
    });
    const once = encodeOnce(WatchDevicesResponseCodec, message);
    expect(once).toBeInstanceOf(Encoded);
    const serialize = definition.watch!.responseSerialize as (v: unknown) => Buffer;
    expect(serialize(once)).toBe(once.bytes);
    expect(serialize(message).equals(once.bytes)).toBe(true);
    expect(WatchDevicesResponseCodec.decode(once.bytes)).toEqual(message);
  });
});
