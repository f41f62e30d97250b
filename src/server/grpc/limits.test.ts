/**
 * The transport limits, checked against a running scheduler: an oversize
 * message is RESOURCE_EXHAUSTED before it is parsed, repeated fields past
 * their caps are INVALID_ARGUMENT naming the field, an undecodable request is
 * INVALID_ARGUMENT (not INTERNAL), and the keepalive settings agree between
 * servers and clients.
 */
import { Client, credentials } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metadataWith, rawCall } from '../../../test/helpers/raw-call.js';
import {
  BindAcceleratorRequestsRequest,
  CreateAcceleratorRequestsRequest,
  DeleteAcceleratorRequestsRequest,
} from '../../gen/berth/scheduler/v1/accelerator_request.js';
import { GetProfileRequest } from '../../gen/berth/scheduler/v1/profile.js';
import { RegisterRequest } from '../../gen/berth/scheduler/v1/registration.js';
import { HOST_INFLOW_LIMITS } from '../scheduler/domain/inventory-bounds.js';
import { CLIENT_OPTIONS } from '../scheduler/runtime/agent-link.js';
import { Scheduler } from '../scheduler/scheduler.js';
import { generateStaticToken } from './auth/tokens.js';
import { SERVER_OPTIONS } from './server.js';

const ARQ = '/berth.scheduler.v1.AcceleratorRequestService';

describe('transport limits', () => {
  let scheduler: Scheduler;
  let client: Client;
  const admin = generateStaticToken();
  const md = () => metadataWith(`Bearer ${admin}`);

  beforeAll(async () => {
    scheduler = await Scheduler.start({
      listen: '127.0.0.1:0',
      auth: { mode: 'token', staticTokens: [{ token: admin, roles: ['admin'] }] },
    });
    client = new Client(scheduler.address, credentials.createInsecure(), {
      'grpc.max_send_message_length': 64 * 1024 * 1024,
    });
  });
  afterAll(async () => {
    client?.close();
    await scheduler?.stop();
  });

  it('refuses a message over 4 MiB with RESOURCE_EXHAUSTED', async () => {
    const big = Buffer.from(
      CreateAcceleratorRequestsRequest.encode(
        CreateAcceleratorRequestsRequest.fromPartial({ profileName: 'x'.repeat(5 * 1024 * 1024) }),
      ).finish(),
    );
    const st = await rawCall(
      client,
      { path: `${ARQ}/CreateAcceleratorRequests`, responseStream: false },
      big,
      md(),
    );
    expect(st.codeName).toBe('RESOURCE_EXHAUSTED');
    // Just under the limit is parsed (and refused for what it says, not its size).
    const under = Buffer.from(
      GetProfileRequest.encode(GetProfileRequest.fromPartial({ name: 'x'.repeat(3 * 1024 * 1024) })).finish(),
    );
    const st2 = await rawCall(
      client,
      { path: '/berth.scheduler.v1.ProfileService/GetProfile', responseStream: false },
      under,
      md(),
    );
    // The NOT_FOUND quotes the name; its status is cut to a size HTTP/2 trailers
    // carry (uncapped, the 3 MiB echo made the call hang until its deadline).
    expect(st2.codeName, st2.message).toBe('NOT_FOUND');
    expect(st2.message.length).toBeLessThan(2048);
  });

  it('refuses repeated fields past their caps with INVALID_ARGUMENT naming the field', async () => {
    const cases: [string, Buffer, string][] = [
      [
        `${ARQ}/DeleteAcceleratorRequests`,
        Buffer.from(
          DeleteAcceleratorRequestsRequest.encode(
            DeleteAcceleratorRequestsRequest.fromPartial({
              uuids: Array.from({ length: 257 }, () => crypto.randomUUID()),
            }),
          ).finish(),
        ),
        'uuids',
      ],
      [
        `${ARQ}/CreateAcceleratorRequests`,
        Buffer.from(
          CreateAcceleratorRequestsRequest.encode(
            CreateAcceleratorRequestsRequest.fromPartial({ profileName: 'p', tags: Array(65).fill('') }),
          ).finish(),
        ),
        'tags',
      ],
      [
        `${ARQ}/BindAcceleratorRequests`,
        Buffer.from(
          BindAcceleratorRequestsRequest.encode(
            BindAcceleratorRequestsRequest.fromPartial({ bindings: Array(65).fill({}) }),
          ).finish(),
        ),
        'bindings',
      ],
      [
        '/berth.scheduler.v1.RegistrationService/Register',
        Buffer.from(
          RegisterRequest.encode(
            RegisterRequest.fromPartial({
              host: 'h1',
              endpoint: '127.0.0.1:1',
              bootId: 'b',
              epoch: 'e',
              agentVersion: '1',
              features: Array.from({ length: 65 }, (_, i) => `f${i}`),
            }),
          ).finish(),
        ),
        'features',
      ],
    ];
    for (const [path, body, field] of cases) {
      const st = await rawCall(client, { path, responseStream: false }, body, md());
      expect(st.codeName, `${path}: ${st.message}`).toBe('INVALID_ARGUMENT');
      expect(st.fieldViolations.map((v) => v.field)).toContain(field);
    }
  });

  it('answers an undecodable request with INVALID_ARGUMENT on field "request"', async () => {
    const st = await rawCall(
      client,
      { path: `${ARQ}/DeleteAcceleratorRequests`, responseStream: false },
      Buffer.from([0x0a, 0xff, 0x01, 0x00]),
      md(),
    );
    expect(st.codeName).toBe('INVALID_ARGUMENT');
    expect(st.fieldViolations[0]?.field).toBe('request');
  });

  it('sets keepalive so the server accepts the clients’ ping rate, and bounds streams', () => {
    const minPing = SERVER_OPTIONS['grpc.http2.min_ping_interval_without_data_ms'] as number;
    expect(minPing).toBeLessThan(CLIENT_OPTIONS['grpc.keepalive_time_ms']);
    expect(SERVER_OPTIONS['grpc.keepalive_time_ms']).toBeGreaterThan(0);
    expect(SERVER_OPTIONS['grpc.max_receive_message_length']).toBe(4 * 1024 * 1024);
    expect(SERVER_OPTIONS['grpc.max_concurrent_streams']).toBeLessThanOrEqual(1024);
    // The scheduler decodes no inventory message larger than one host may send
    // (domain/inventory-bounds.ts): below what a server may send, on purpose.
    expect(CLIENT_OPTIONS['grpc.max_receive_message_length']).toBe(HOST_INFLOW_LIMITS.messageBytes);
    expect(HOST_INFLOW_LIMITS.messageBytes).toBeLessThan(
      SERVER_OPTIONS['grpc.max_send_message_length'] as number,
    );
  });
});
