/**
 * A gRPC proxy in front of a real agent that can rewrite what the agent says:
 * for tests of what the scheduler believes from an agent it cannot trust to be
 * current or honest (an agent older than the scheduler, or one that lies by
 * omission). Every AgentService call is forwarded; the messages of its server
 * streams (CleanupDevice, WatchInventory, …) pass through `rewrite`.
 */

import { join } from 'node:path';
import {
  credentials,
  type handleServerStreamingCall,
  type handleUnaryCall,
  type Metadata,
  Server,
  ServerCredentials,
  type ServiceError,
  type UntypedServiceImplementation,
} from '@grpc/grpc-js';
import type { SchedulerClient } from '../../src/client/sdk.js';
import { AgentServiceClient, AgentServiceService } from '../../src/gen/berth/agent/v1/agent.js';
import { Agent } from '../../src/server/agent/agent.js';
import { parseAgentConfig } from '../../src/server/agent/config.js';
import type { Scheduler } from '../../src/server/scheduler/scheduler.js';
import { buildSimHost, demoHostDefinition } from '../../src/sim/host.js';
import { freePort } from './processes.js';
import { eventually } from './wait.js';

export interface AgentProxy {
  /** host:port the scheduler should dial (the agent's `advertise`). */
  address: string;
  stop(): Promise<void>;
}

type Method = keyof typeof AgentServiceService;

export async function startAgentProxy(
  target: string,
  rewrite: (method: keyof typeof AgentServiceService, message: unknown) => unknown = (_m, r) => r,
  /** Sees every call as the caller sent it: its metadata (e.g. to capture a credential) and request. */
  onCall: (method: string, metadata: Metadata, request: unknown) => void = () => {},
): Promise<AgentProxy> {
  const upstream = new AgentServiceClient(target, credentials.createInsecure());
  const forward = upstream as unknown as Record<Method, (...args: unknown[]) => unknown>;
  const impl: UntypedServiceImplementation = {};
  for (const [name, def] of Object.entries(AgentServiceService) as [Method, { responseStream: boolean }][]) {
    const call = forward[name].bind(upstream);
    if (!def.responseStream) {
      const unary: handleUnaryCall<unknown, unknown> = (c, done) => {
        onCall(name, c.metadata, c.request);
        call(c.request, c.metadata, (err: ServiceError | null, res: unknown) => done(err, res));
      };
      impl[name] = unary;
      continue;
    }
    const stream: handleServerStreamingCall<unknown, unknown> = (c) => {
      onCall(name, c.metadata, c.request);
      const up = call(c.request, c.metadata) as NodeJS.EventEmitter & { cancel(): void };
      up.on('data', (m: unknown) => c.write(rewrite(name, m)));
      up.on('end', () => c.end());
      up.on('error', (err: ServiceError) => c.emit('error', err));
      c.on('cancelled', () => up.cancel());
    };
    impl[name] = stream;
  }
  const server = new Server();
  server.addService(AgentServiceService, impl);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (err, p) =>
      err ? reject(err) : resolve(p),
    ),
  );
  return {
    address: `127.0.0.1:${port}`,
    async stop() {
      upstream.close();
      await new Promise<void>((resolve) => server.tryShutdown(() => resolve()));
      server.forceShutdown();
    },
  };
}

/**
 * A real agent on a simulated demo host, registered with `scheduler` but
 * reached by it only through a proxy that passes its streams through
 * `rewrite`; resolves once the scheduler follows the host.
 */
export async function startAgentBehindProxy(options: {
  scheduler: Scheduler;
  client: SchedulerClient;
  /** Where the simulated host and the agent's state go. */
  dir: string;
  host: string;
  rewrite: Parameters<typeof startAgentProxy>[1];
}): Promise<{ agent: Agent; proxy: AgentProxy }> {
  const sim = await buildSimHost(join(options.dir, options.host), demoHostDefinition(options.host));
  const port = await freePort();
  const proxy = await startAgentProxy(`127.0.0.1:${port}`, options.rewrite);
  const config = parseAgentConfig(
    {
      ...sim.agentConfig,
      listen: `127.0.0.1:${port}`,
      advertise: proxy.address,
      scheduler: options.scheduler.address,
      register_interval: 0.5,
      discovery_interval: 3600,
    },
    {},
    options.dir,
  );
  const agent = await Agent.start({ config, bootIdFile: sim.bootIdFile });
  await agent.registered;
  await eventually(
    () => options.client.hosts.getHost({ name: options.host }),
    (r) => r.host?.connected === true,
    15_000,
  );
  return { agent, proxy };
}
