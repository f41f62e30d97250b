/**
 * A grpc-js server with what every Berth server carries: grpc.health.v1,
 * server reflection (so grpcurl / buf curl work without .proto files; loaded
 * on its first call, lazy-reflection.ts), and deliberately chosen limits. Listens on host:port (port 0 = any free port).
 */

import {
  type ChannelOptions,
  ServerCredentials as Creds,
  Server,
  type ServerCredentials,
  type ServerInterceptor,
  type ServiceDefinition,
  type UntypedServiceImplementation,
} from '@grpc/grpc-js';
import { HealthImplementation } from 'grpc-health-check';
import { listenError, parseListenAddress } from '../listen-address.js';
import { passEncodedResponses } from './encoded.js';
import { addLazyReflection } from './lazy-reflection.js';
import { guardDeserializers, malformedRequestInterceptor } from './limits.js';

/**
 * Limits both servers share, chosen deliberately (see docs/security.md):
 * - receive 4 MiB: the largest legitimate request (a Register with a few
 *   hundred devices' names, a Bind of 64 ARQs) is a few KiB; anything bigger is
 *   refused with RESOURCE_EXHAUSTED before it is parsed.
 * - send 128 MiB: full inventories / device lists of large hosts go out in one
 *   message; clients raise their receive limit to match.
 * - 1024 concurrent streams per connection: one connection carries an agent's
 *   or an orchestrator's calls and watches; more than that from one peer is
 *   abuse, not load.
 * - keepalive: the server pings idle connections every 30 s and drops a peer
 *   that does not answer in 10 s (dead agents are noticed even on long
 *   streams). Clients ping every 20 s (CHANNEL_OPTIONS, src/transport/channel.ts); the minimum ping
 *   interval accepted from them is 10 s, below the clients' 20 s, so a
 *   policy-enforcing peer never answers our clients with too_many_pings.
 */
export const SERVER_OPTIONS: ChannelOptions = {
  'grpc.max_receive_message_length': 4 * 1024 * 1024,
  'grpc.max_send_message_length': 128 * 1024 * 1024,
  'grpc.max_concurrent_streams': 1024,
  'grpc.keepalive_time_ms': 30_000,
  'grpc.keepalive_timeout_ms': 10_000,
  'grpc.keepalive_permit_without_calls': 1,
  'grpc.http2.min_ping_interval_without_data_ms': 10_000,
};

export interface ServiceBinding {
  /** Fully-qualified service name, e.g. berth.agent.v1.AgentService. */
  name: string;
  definition: ServiceDefinition;
  implementation: UntypedServiceImplementation;
}

export interface GrpcServerOptions {
  services: ServiceBinding[];
  credentials?: ServerCredentials;
  /** Server interceptors, run on every call in order (auth: src/server/grpc/auth/interceptor.ts). */
  interceptors?: ServerInterceptor[];
}

export class GrpcServer {
  readonly server: Server;
  readonly health: HealthImplementation;
  private readonly options: GrpcServerOptions;
  private boundPort = 0;
  private boundHost = '';

  constructor(options: GrpcServerOptions) {
    this.options = options;
    // Auth first (nothing of an unauthenticated call is looked at), then the
    // malformed-request check (INVALID_ARGUMENT instead of grpc-js's INTERNAL).
    this.server = new Server({
      ...SERVER_OPTIONS,
      interceptors: [...(options.interceptors ?? []), malformedRequestInterceptor()],
    });
    this.health = new HealthImplementation({ '': 'NOT_SERVING' });
    this.health.addToServer(this.server);
    addLazyReflection(
      this.server,
      options.services.map((s) => s.name),
    );
    for (const s of options.services) {
      this.server.addService(passEncodedResponses(guardDeserializers(s.definition)), s.implementation);
      this.health.setStatus(s.name, 'NOT_SERVING');
    }
  }

  /**
   * Binds `host:port` and starts serving; resolves with the bound address.
   * A port in use or an address that is not this machine's is a
   * FAILED_PRECONDITION naming the address (reason ADDRESS_IN_USE /
   * ADDRESS_NOT_AVAILABLE), not grpc-js's "No address added out of total 1".
   */
  async listen(address: string): Promise<string> {
    const creds = this.options.credentials ?? Creds.createInsecure();
    parseListenAddress(address);
    const port = await new Promise<number>((resolve, reject) => {
      this.server.bindAsync(address, creds, (err, p) =>
        err ? reject(listenError(address, err)) : resolve(p),
      );
    });
    this.boundPort = port;
    this.boundHost = address.slice(0, address.lastIndexOf(':')) || '127.0.0.1';
    this.setServing(true);
    return this.address;
  }

  /** Every method path this server serves (`/pkg.Service/Method`), health and reflection included. */
  methodPaths(): string[] {
    const handlers = (this.server as unknown as { handlers: Map<string, unknown> }).handlers;
    return [...handlers.keys()].sort();
  }

  get address(): string {
    return `${this.boundHost}:${this.boundPort}`;
  }

  get port(): number {
    return this.boundPort;
  }

  setServing(serving: boolean): void {
    const st = serving ? 'SERVING' : 'NOT_SERVING';
    this.health.setStatus('', st);
    for (const s of this.options.services) this.health.setStatus(s.name, st);
  }

  /**
   * Graceful stop: health goes NOT_SERVING, new calls are refused, running
   * calls get `graceMs` to finish, then everything still open is cancelled
   * (clients see UNAVAILABLE/CANCELLED and reconnect elsewhere).
   */
  async stop(graceMs = 5_000): Promise<void> {
    this.setServing(false);
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.server.forceShutdown();
        resolve();
      }, graceMs);
      this.server.tryShutdown(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}
