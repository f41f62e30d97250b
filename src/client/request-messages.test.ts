import { describe, expect, it } from 'vitest';
import { ListDevicesRequest } from '../gen/berth/scheduler/v1/device_service.js';
import { completeRequest, requestMessages } from './request-messages.js';
import { idempotencyLevels } from './retry-policy.js';

describe('request messages for plain objects', () => {
  it('knows the request message of every Berth RPC the descriptor set declares', () => {
    const known = requestMessages();
    const missing = [...idempotencyLevels().keys()].filter((path) => !known.has(path));
    expect(missing).toEqual([]);
  });

  it('completes a plain object with the defaults, so it encodes', () => {
    const path = '/berth.scheduler.v1.DeviceService/ListDevices';
    expect(() => ListDevicesRequest.encode({} as ListDevicesRequest)).toThrow(/invalid uint32: undefined/);
    const full = completeRequest<ListDevicesRequest>(path, {});
    expect(full).toEqual({ filter: undefined, pageSize: 0, pageToken: '' });
    expect(ListDevicesRequest.decode(ListDevicesRequest.encode(full).finish())).toEqual(full);
    // A message already complete comes back equal.
    const given = {
      filter: { host: 'h', type: 2, state: 1, resourceClass: 'X' },
      pageSize: 5,
      pageToken: 't',
    };
    expect(completeRequest(path, given)).toEqual(given);
  });

  it('passes bytes through: a client with its own serializer sent the message encoded', () => {
    const bytes = Buffer.alloc(0);
    expect(completeRequest('/berth.agent.v1.AgentService/GetAgentInfo', bytes)).toBe(bytes);
  });
});
