/**
 * The agent's side of registration: it serves first, then calls Register on
 * the scheduler, and keeps re-registering every interval as a heartbeat. A
 * scheduler that is down or restarting is retried with jittered exponential
 * backoff; the agent keeps serving meanwhile.
 */
import { type ChannelCredentials, credentials, Metadata, type ServiceError } from '@grpc/grpc-js';
import type { Logger } from 'pino';
import {
  type RegisterRequest,
  RegistrationServiceClient,
} from '../../gen/berth/scheduler/v1/registration.js';

export interface RegistrationOptions {
  scheduler: string;
  request: () => RegisterRequest;
  intervalMs: number;
  logger: Logger;
  credentials?: ChannelCredentials;
  /** Bearer token (role `agent`) sent with every Register. */
  token?: string;
  /** Deadline of each Register call. */
  callTimeoutMs?: number;
}

export class RegistrationLoop {
  private readonly client: RegistrationServiceClient;
  private timer: NodeJS.Timeout | null = null;
  private failures = 0;
  private stopped = false;
  /** Resolves at the first successful registration. */
  readonly registered: Promise<void>;
  private markRegistered!: () => void;

  constructor(private readonly options: RegistrationOptions) {
    this.client = new RegistrationServiceClient(
      options.scheduler,
      options.credentials ?? credentials.createInsecure(),
      {
        'grpc.keepalive_time_ms': 20_000,
        'grpc.keepalive_timeout_ms': 10_000,
        // gRPC's default reconnect backoff grows to 120 s: after a long outage
        // the agent would wait that long between attempts, far beyond a
        // heartbeat. Same bounds as the scheduler's AgentLink (CLIENT_OPTIONS).
        'grpc.initial_reconnect_backoff_ms': 200,
        'grpc.max_reconnect_backoff_ms': 5_000,
      },
    );
    this.registered = new Promise((resolve) => {
      this.markRegistered = resolve;
    });
  }

  start(): void {
    void this.tick();
  }

  /** Registers now (e.g. after the scheduler told us it lost track of us). */
  async registerNow(): Promise<void> {
    const req = this.options.request();
    const md = new Metadata();
    if (this.options.token) md.set('authorization', `Bearer ${this.options.token}`);
    await new Promise<void>((resolve, reject) => {
      this.client.register(
        req,
        md,
        { deadline: Date.now() + (this.options.callTimeoutMs ?? 5_000) },
        (err: ServiceError | null) => (err ? reject(err) : resolve()),
      );
    });
  }

  private async tick(): Promise<void> {
    if (this.stopped) return;
    let delay = this.options.intervalMs;
    try {
      await this.registerNow();
      if (this.failures > 0)
        this.options.logger.info(
          { scheduler: this.options.scheduler },
          'registered with the scheduler again',
        );
      else this.options.logger.debug({ scheduler: this.options.scheduler }, 'registered with the scheduler');
      this.failures = 0;
      this.markRegistered();
    } catch (err) {
      this.failures++;
      const base = Math.min(30_000, 250 * 2 ** Math.min(this.failures, 7));
      delay = Math.min(this.options.intervalMs, base / 2 + Math.random() * (base / 2));
      const log = this.failures === 1 || this.failures % 10 === 0 ? 'warn' : 'debug';
      this.options.logger[log](
        { scheduler: this.options.scheduler, failures: this.failures, err: (err as Error).message },
        'cannot register with the scheduler; retrying',
      );
    }
    if (this.stopped) return;
    this.timer = setTimeout(() => void this.tick(), delay);
    this.timer.unref();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.client.close();
  }
}
