/**
 * An agent's gRPC server that a test scripts: it serves WatchInventory with
 * the test's handler and refuses every other call (UNIMPLEMENTED), on
 * 127.0.0.1:0. For inventories our agent would not send by itself (floods,
 * bursts that undo themselves).
 */
import {
  type handleServerStreamingCall,
  type handleUnaryCall,
  Server,
  ServerCredentials,
} from '@grpc/grpc-js';
import {
  AgentServiceService,
  type WatchInventoryRequest,
  type WatchInventoryResponse,
} from '../../src/gen/berth/agent/v1/agent.js';
import { type Device, DeviceType, FunctionKind, Health } from '../../src/gen/berth/agent/v1/device.js';
import { RegistrationServiceClient } from '../../src/gen/berth/scheduler/v1/registration.js';
import type { HostName } from '../../src/identifiers.js';
import { call, insecure } from './grpc.js';

export type WatchInventoryHandler = handleServerStreamingCall<WatchInventoryRequest, WatchInventoryResponse>;

export async function serveScriptedAgent(
  watch: WatchInventoryHandler,
): Promise<{ address: string; stop(endStreams: () => void): Promise<void> }> {
  const refuse: handleUnaryCall<unknown, unknown> = (_c, done) => done({ code: 12, details: 'not here' });
  const server = new Server();
  server.addService(AgentServiceService, {
    watchInventory: watch,
    getAgentInfo: refuse,
    listDevices: refuse,
    rediscover: refuse,
    cleanupDevice: refuse,
    prepareMigration: refuse,
    recordBinding: refuse,
    releaseDevice: refuse,
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (err, p) =>
      err ? reject(err) : resolve(p),
    ),
  );
  return {
    address: `127.0.0.1:${port}`,
    stop: (endStreams) =>
      new Promise<void>((resolve) => {
        endStreams();
        server.tryShutdown(() => resolve());
        setTimeout(() => server.forceShutdown(), 2000).unref();
      }),
  };
}

/** Registers a scripted agent at `endpoint` for `host` (no drivers but pci, no media, no key), as an agent would. */
export async function registerScriptedAgent(
  scheduler: string,
  host: HostName,
  endpoint: string,
  epoch: string,
): Promise<void> {
  const reg = new RegistrationServiceClient(scheduler, insecure());
  try {
    await call(reg, reg.register, {
      host,
      endpoint,
      bootId: 'b',
      epoch,
      agentVersion: '0.0.0',
      features: [],
      drivers: ['pci'],
      heldDevices: [],
      mediaRecords: [],
      signingKey: '',
      certificates: [],
      retiredSigningKeys: [],
    });
  } finally {
    reg.close();
  }
}

/** An Intel VF (8086:154c) as an agent reports it, healthy, on vfio-pci; `extra` overrides fields. */
export function agentVf(address: string, extra: Partial<Device> = {}): Device {
  return {
    address,
    vendorId: '8086',
    productId: '154c',
    classCode: '020000',
    kernelDriver: 'vfio-pci',
    driver: 'pci',
    type: DeviceType.DEVICE_TYPE_PCI,
    functionKind: FunctionKind.FUNCTION_KIND_VF,
    physfn: '',
    iommuGroup: 0,
    iommuGroupPeers: [],
    numaNode: 0,
    resourceClass: 'CUSTOM_PCI_8086_154C',
    traits: [],
    managed: true,
    liveMigratable: false,
    oneTimeUse: false,
    supportsCleaning: false,
    cleanupAction: '',
    health: Health.HEALTH_HEALTHY,
    healthReason: '',
    unallocatableReason: '',
    attributes: {},
    media: undefined,
    mediaRecord: undefined,
    ...extra,
  };
}
