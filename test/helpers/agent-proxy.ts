/**
 * A gRPC proxy in front of a real agent that can rewrite what the agent says:
 * for tests of what the scheduler believes from an agent it cannot trust to be
 * current or honest (an agent older than the scheduler, or one that lies by
 * omission). Every AgentService call is forwarded; the messages of its server
 * streams (CleanupDevice, WatchInventory, …) pass through `rewrite`.
 */
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
import { AgentServiceClient, AgentServiceService } from '../../src/gen/berth/agent/v1/agent.js';

export interface AgentProxy {
  /** host:port the scheduler should dial (the agent's `advertise`). */
  address: string;
  stop(): Promise<void>;
}

type Method = keyof typeof AgentServiceService;

export async function startAgentProxy(
  target: string,
  rewrite: (method: keyof typeof AgentServiceService, message: unknown) => unknown = (_m, r) => r,
  /** Sees every call's metadata as the caller sent it (e.g. to capture a credential). */
  onCall: (method: string, metadata: Metadata) => void = () => {},
): Promise<AgentProxy> {
  const upstream = new AgentServiceClient(target, credentials.createInsecure());
  const forward = upstream as unknown as Record<Method, (...args: unknown[]) => unknown>;
  const impl: UntypedServiceImplementation = {};
  for (const [name, def] of Object.entries(AgentServiceService) as [Method, { responseStream: boolean }][]) {
    const call = forward[name].bind(upstream);
    if (!def.responseStream) {
      const unary: handleUnaryCall<unknown, unknown> = (c, done) => {
        onCall(name, c.metadata);
        call(c.request, c.metadata, (err: ServiceError | null, res: unknown) => done(err, res));
      };
      impl[name] = unary;
      continue;
    }
    const stream: handleServerStreamingCall<unknown, unknown> = (c) => {
      onCall(name, c.metadata);
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
