/**
 * Responses encoded once (encoded.ts), through a running scheduler: every
 * WatchDevices watcher gets a change as the same bytes, and those bytes decode
 * to exactly the message encoded per watcher before (and to what GetDevice says).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SchedulerClient } from '../../client/sdk.js';
import { ListDevicesResponse } from '../../gen/berth/agent/v1/agent.js';
import { Device as AgentDevice, MediaIdentityKind } from '../../gen/berth/agent/v1/device.js';
import { Device, DeviceStatus } from '../../gen/berth/scheduler/v1/device.js';
import {
  type WatchDevicesResponse,
  WatchDevicesResponse as WatchDevicesResponseCodec,
} from '../../gen/berth/scheduler/v1/device_service.js';
import { hostName, pciFacts } from '../scheduler/domain/fixtures.support.js';
import { Scheduler } from '../scheduler/scheduler.js';
import { openSqliteStore } from '../scheduler/stores.js';
import { generateStaticToken } from './auth/tokens.js';
import { Encoded, encodeItemByItem, encodeOnce, passEncodedResponses } from './encoded.js';

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

  it('messages encoded one after another share a writer but never bytes, even after an encode that failed midway', () => {
    const fresh = (m: WatchDevicesResponse) => Buffer.from(WatchDevicesResponseCodec.encode(m).finish());
    const large: WatchDevicesResponse = {
      revision: 9,
      initial: true,
      device: Device.fromPartial({ uuid: 'd'.repeat(36), host: 'h'.repeat(200), traits: ['T1', 'T2'] }),
      removed: false,
      synced: false,
    };
    const small: WatchDevicesResponse = {
      revision: 1,
      initial: false,
      device: undefined,
      removed: true,
      synced: true,
    };
    const first = encodeOnce(WatchDevicesResponseCodec, large);
    // A device with no fields fails inside its own nested message, after the revision was written.
    expect(() =>
      encodeOnce(WatchDevicesResponseCodec, { ...small, device: {} as WatchDevicesResponse['device'] }),
    ).toThrow(/invalid/);
    const second = encodeOnce(WatchDevicesResponseCodec, small);
    expect(second.bytes.equals(fresh(small))).toBe(true);
    expect(WatchDevicesResponseCodec.decode(second.bytes)).toEqual(small);
    // The first message's bytes are its own copy: the writer's later use did not touch them.
    expect(first.bytes.equals(fresh(large))).toBe(true);
  });

  it('a list encoded item by item is byte for byte the message encoded whole, nested fields and trailing fields included', () => {
    const devices = ['0000:01:00.0', '0000:01:00.1', '0000:02:00.0'].map((address, i) =>
      AgentDevice.fromPartial({
        address,
        vendorId: '8086',
        iommuGroup: i === 1 ? undefined : i,
        iommuGroupPeers: i === 2 ? ['0000:02:00.1'] : [],
        traits: ['OWNER_BERTH'],
        attributes: { device_spec: 'pci.device_spec[0]', slot: `s${i}` },
        media: { key: `pci-slot:h:${address}`, kind: MediaIdentityKind.MEDIA_IDENTITY_KIND_PCI_SLOT },
        mediaRecord: i === 0 ? { key: `pci-slot:h:${address}`, lastAddress: address } : undefined,
      }),
    );
    // The items go through the conversion one by one, in order.
    const seen: string[] = [];
    const convert = (d: AgentDevice) => {
      seen.push(d.address);
      return d;
    };
    for (const [list, revision, epoch] of [
      [devices, 12, 'epoch-1'],
      [[], 0, ''],
      [devices.slice(0, 1), 0, 'e'],
    ] as const) {
      seen.length = 0;
      const whole = ListDevicesResponse.encode({ devices: [...list], revision, epoch }).finish();
      const streamed = encodeItemByItem(ListDevicesResponse, 1, list, AgentDevice, convert, {
        devices: [],
        revision,
        epoch,
      });
      expect(streamed.bytes.equals(Buffer.from(whole))).toBe(true);
      expect(seen).toEqual(list.map((d) => d.address));
      expect(ListDevicesResponse.decode(streamed.bytes)).toEqual({ devices: list, revision, epoch });
    }
  });
});
