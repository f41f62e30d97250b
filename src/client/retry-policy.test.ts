/**
 * The SDK retries what the API declares safe to repeat (`option
 * idempotency_level`, read from the shipped descriptor set), not what a method
 * name suggests: a read and an IDEMPOTENT write (BindAcceleratorRequests, which
 * the old name pattern never retried) are sent again after UNAVAILABLE; a
 * create without a declared level is not. The levels themselves are pinned
 * here, because buf breaking no longer checks them (buf.yaml).
 */
import {
  connectivityState,
  type Client as GrpcClient,
  Server,
  ServerCredentials,
  status,
  type UntypedServiceImplementation,
} from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentServiceService } from '../gen/berth/agent/v1/agent.js';
import {
  AcceleratorRequestServiceService,
  BindAcceleratorRequestsRequest,
  BindAcceleratorRequestsResponse,
  CreateAcceleratorRequestsRequest,
  CreateAcceleratorRequestsResponse,
} from '../gen/berth/scheduler/v1/accelerator_request.js';
import { CertificateServiceService } from '../gen/berth/scheduler/v1/certificate.js';
import {
  DeviceServiceService,
  GetDeviceRequest,
  GetDeviceResponse,
} from '../gen/berth/scheduler/v1/device_service.js';
import { HostServiceService } from '../gen/berth/scheduler/v1/host.js';
import { InstanceServiceService } from '../gen/berth/scheduler/v1/instance.js';
import { MigrationServiceService } from '../gen/berth/scheduler/v1/migration.js';
import { PlacementServiceService } from '../gen/berth/scheduler/v1/placement.js';
import { ProfileServiceService } from '../gen/berth/scheduler/v1/profile.js';
import { RegistrationServiceService } from '../gen/berth/scheduler/v1/registration.js';
import { idempotencyLevels } from './retry-policy.js';
import { BerthClientError, SchedulerClient } from './sdk.js';

const EXPECTED = {
  '/berth.agent.v1.AgentService/GetAgentInfo': 'NO_SIDE_EFFECTS',
  '/berth.agent.v1.AgentService/ListDevices': 'NO_SIDE_EFFECTS',
  '/berth.agent.v1.AgentService/WatchInventory': 'NO_SIDE_EFFECTS',
  '/berth.agent.v1.AgentService/Rediscover': 'IDEMPOTENT',
  '/berth.agent.v1.AgentService/CleanupDevice': 'IDEMPOTENT',
  '/berth.agent.v1.AgentService/PrepareMigration': 'IDEMPOTENT',
  '/berth.agent.v1.AgentService/RecordBinding': 'IDEMPOTENT',
  '/berth.agent.v1.AgentService/ReleaseDevice': 'IDEMPOTENT',
  '/berth.scheduler.v1.AcceleratorRequestService/CreateAcceleratorRequests': 'IDEMPOTENCY_UNKNOWN',
  '/berth.scheduler.v1.AcceleratorRequestService/BindAcceleratorRequests': 'IDEMPOTENT',
  '/berth.scheduler.v1.AcceleratorRequestService/GetAcceleratorRequest': 'NO_SIDE_EFFECTS',
  '/berth.scheduler.v1.AcceleratorRequestService/ListAcceleratorRequests': 'NO_SIDE_EFFECTS',
  '/berth.scheduler.v1.AcceleratorRequestService/DeleteAcceleratorRequests': 'IDEMPOTENT',
  '/berth.scheduler.v1.DeviceService/ListDevices': 'NO_SIDE_EFFECTS',
  '/berth.scheduler.v1.DeviceService/GetDevice': 'NO_SIDE_EFFECTS',
  '/berth.scheduler.v1.DeviceService/CleanDevice': 'IDEMPOTENCY_UNKNOWN',
  '/berth.scheduler.v1.DeviceService/ReleaseDevice': 'IDEMPOTENT',
  '/berth.scheduler.v1.DeviceService/SetDeviceStatus': 'IDEMPOTENT',
  '/berth.scheduler.v1.DeviceService/ForgetMedia': 'IDEMPOTENT',
  '/berth.scheduler.v1.DeviceService/WatchDevices': 'NO_SIDE_EFFECTS',
  '/berth.scheduler.v1.DeviceService/WatchCleanup': 'NO_SIDE_EFFECTS',
  '/berth.scheduler.v1.HostService/ListHosts': 'NO_SIDE_EFFECTS',
  '/berth.scheduler.v1.HostService/GetHost': 'NO_SIDE_EFFECTS',
  '/berth.scheduler.v1.HostService/DeleteHost': 'IDEMPOTENT',
  '/berth.scheduler.v1.InstanceService/GetInstanceXml': 'NO_SIDE_EFFECTS',
  '/berth.scheduler.v1.InstanceService/SetInstanceDevices': 'IDEMPOTENT',
  '/berth.scheduler.v1.InstanceService/GetDeviceMetadata': 'NO_SIDE_EFFECTS',
  '/berth.scheduler.v1.MigrationService/PlanLiveMigration': 'IDEMPOTENCY_UNKNOWN',
  '/berth.scheduler.v1.MigrationService/CommitMigration': 'IDEMPOTENT',
  '/berth.scheduler.v1.MigrationService/AbortMigration': 'IDEMPOTENT',
  '/berth.scheduler.v1.PlacementService/GetPlacementStatus': 'NO_SIDE_EFFECTS',
  '/berth.scheduler.v1.PlacementService/SyncPlacement': 'IDEMPOTENT',
  '/berth.scheduler.v1.CertificateService/ListErasureCertificates': 'NO_SIDE_EFFECTS',
  '/berth.scheduler.v1.CertificateService/ListAgentKeys': 'NO_SIDE_EFFECTS',
  '/berth.scheduler.v1.CertificateService/RotateAgentKey': 'IDEMPOTENT',
  '/berth.scheduler.v1.ProfileService/CreateProfile': 'IDEMPOTENT',
  '/berth.scheduler.v1.ProfileService/GetProfile': 'NO_SIDE_EFFECTS',
  '/berth.scheduler.v1.ProfileService/ListProfiles': 'NO_SIDE_EFFECTS',
  '/berth.scheduler.v1.ProfileService/DeleteProfile': 'IDEMPOTENT',
  '/berth.scheduler.v1.RegistrationService/Register': 'IDEMPOTENT',
};

describe('idempotency levels from the descriptors', () => {
  it('every RPC has the level its contract promises (a change here is an API change)', () => {
    expect(Object.fromEntries(idempotencyLevels())).toEqual(EXPECTED);
  });

  it('covers every method of the generated clients', () => {
    const paths = [
      AgentServiceService,
      AcceleratorRequestServiceService,
      CertificateServiceService,
      DeviceServiceService,
      HostServiceService,
      InstanceServiceService,
      MigrationServiceService,
      PlacementServiceService,
      ProfileServiceService,
      RegistrationServiceService,
    ].flatMap((s) => Object.values(s).map((m) => m.path));
    expect(paths.sort()).toEqual(Object.keys(EXPECTED).sort());
  });
});

describe('the SDK retries on UNAVAILABLE what the API declares safe to repeat', () => {
  let server: Server;
  let client: SchedulerClient;
  const calls: Record<string, number> = {};

  /** A handler that answers UNAVAILABLE to its first call, then `ok`. */
  const flaky =
    (name: string, ok: unknown) =>
    (_call: unknown, cb: (err: { code: number; details: string } | null, res?: unknown) => void) => {
      calls[name] = (calls[name] ?? 0) + 1;
      if (calls[name] === 1) cb({ code: status.UNAVAILABLE, details: 'the scheduler is restarting' });
      else cb(null, ok);
    };

  beforeAll(async () => {
    server = new Server();
    server.addService(DeviceServiceService, {
      getDevice: flaky('getDevice', GetDeviceResponse.fromPartial({})),
    } as unknown as UntypedServiceImplementation);
    server.addService(AcceleratorRequestServiceService, {
      bindAcceleratorRequests: flaky('bind', BindAcceleratorRequestsResponse.fromPartial({})),
      createAcceleratorRequests: flaky('create', CreateAcceleratorRequestsResponse.fromPartial({})),
    } as unknown as UntypedServiceImplementation);
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (e, p) =>
        e ? reject(e) : resolve(p),
      ),
    );
    client = new SchedulerClient({ endpoint: `127.0.0.1:${port}`, retries: 3 });
  });
  afterAll(async () => {
    client?.close();
    await new Promise<void>((r) => server?.tryShutdown(() => r()));
  });

  it('a read (NO_SIDE_EFFECTS) is sent again and succeeds', async () => {
    await expect(client.devices.getDevice(GetDeviceRequest.fromPartial({}))).resolves.toBeDefined();
    expect(calls.getDevice).toBe(2);
  });

  it('an IDEMPOTENT write (BindAcceleratorRequests) is sent again and succeeds', async () => {
    await expect(
      client.arqs.bindAcceleratorRequests(BindAcceleratorRequestsRequest.fromPartial({})),
    ).resolves.toBeDefined();
    expect(calls.bind).toBe(2);
  });

  it('a create without a declared level is not repeated: the caller sees UNAVAILABLE', async () => {
    const err = await client.arqs
      .createAcceleratorRequests(CreateAcceleratorRequestsRequest.fromPartial({}))
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BerthClientError);
    expect((err as BerthClientError).codeName).toBe('UNAVAILABLE');
    expect(calls.create).toBe(1);
  });
});

describe('a client closed while a call waits for its retry', () => {
  it('answers with the UNAVAILABLE it had, not an UNKNOWN from a shut-down channel', async () => {
    // Nothing listens on this port: every attempt is UNAVAILABLE.
    const probe = new Server();
    const port = await new Promise<number>((resolve, reject) =>
      probe.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (e, p) =>
        e ? reject(e) : resolve(p),
      ),
    );
    await new Promise<void>((r) => probe.tryShutdown(() => r()));
    const client = new SchedulerClient({ endpoint: `127.0.0.1:${port}`, retries: 4 });
    const call = client.devices.getDevice(GetDeviceRequest.fromPartial({})).catch((e: unknown) => e);
    // The first attempt fails once the channel sees the refused connection; close during the backoff.
    const channel = (client as unknown as { raw: { devices: GrpcClient } }).raw.devices.getChannel();
    while (channel.getConnectivityState(false) !== connectivityState.TRANSIENT_FAILURE) {
      await new Promise((r) => setImmediate(r));
    }
    client.close();
    const err = await call;
    expect(err).toBeInstanceOf(BerthClientError);
    expect((err as BerthClientError).codeName).toBe('UNAVAILABLE');
  });
});
