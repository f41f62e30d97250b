/**
 * Every ServiceDefinition the generated code exports, with each method's
 * request message type (buf STANDARD lint: `<Method>Request` in the same
 * file). The auth table test, the auth matrix and the RPC fuzzer walk these, so
 * a new RPC is covered without editing them.
 */
import type { MethodDefinition, ServiceDefinition } from '@grpc/grpc-js';
import * as agentPb from '../../src/gen/berth/agent/v1/agent.js';
import * as arqPb from '../../src/gen/berth/scheduler/v1/accelerator_request.js';
import * as certificatePb from '../../src/gen/berth/scheduler/v1/certificate.js';
import * as devicePb from '../../src/gen/berth/scheduler/v1/device_service.js';
import * as hostPb from '../../src/gen/berth/scheduler/v1/host.js';
import * as instancePb from '../../src/gen/berth/scheduler/v1/instance.js';
import * as migrationPb from '../../src/gen/berth/scheduler/v1/migration.js';
import * as placementPb from '../../src/gen/berth/scheduler/v1/placement.js';
import * as profilePb from '../../src/gen/berth/scheduler/v1/profile.js';
import * as registrationPb from '../../src/gen/berth/scheduler/v1/registration.js';

/** The ts-proto functions every message type exports. */
export interface MessageFns {
  fromPartial(o: unknown): unknown;
  fromJSON(o: unknown): unknown;
  encode(m: unknown): { finish(): Uint8Array };
}

export interface GeneratedMethod {
  service: string;
  name: string;
  path: string;
  responseStream: boolean;
  definition: MethodDefinition<unknown, unknown>;
  request: MessageFns;
}

const MODULES: Record<string, unknown>[] = [
  agentPb,
  arqPb,
  certificatePb,
  devicePb,
  hostPb,
  instancePb,
  migrationPb,
  placementPb,
  profilePb,
  registrationPb,
];

export function generatedServiceDefinitions(): { name: string; definition: ServiceDefinition }[] {
  const out: { name: string; definition: ServiceDefinition }[] = [];
  for (const m of MODULES) {
    for (const [name, v] of Object.entries(m)) {
      if (!name.endsWith('Service') || typeof v !== 'object' || v === null) continue;
      const methods = Object.values(v as Record<string, unknown>);
      if (methods.length > 0 && methods.every((x) => typeof (x as { path?: unknown }).path === 'string')) {
        out.push({ name, definition: v as ServiceDefinition });
      }
    }
  }
  return out;
}

export function generatedMethods(): GeneratedMethod[] {
  const out: GeneratedMethod[] = [];
  for (const mod of MODULES) {
    for (const { name, definition } of generatedServiceDefinitions()) {
      if (mod[name] !== definition) continue;
      for (const def of Object.values(definition) as MethodDefinition<unknown, unknown>[]) {
        const [service, method] = def.path.slice(1).split('/') as [string, string];
        const request = mod[`${method}Request`] as MessageFns | undefined;
        if (!request) throw new Error(`${def.path}: no ${method}Request exported next to the service`);
        out.push({
          service,
          name: method,
          path: def.path,
          responseStream: def.responseStream,
          definition: def,
          request,
        });
      }
    }
  }
  return out;
}
