/**
 * The agent's side of registration: it serves first, then calls Register on
 * the scheduler, and keeps re-registering every interval as a heartbeat. A
 * scheduler that is down or restarting is retried with jittered exponential
 * backoff; the agent keeps serving meanwhile. Given several schedulers (they
 * share one database), it stays with the one that answers and, when that one
 * stops answering, tries the next at the following attempt.
 */
import { type ChannelCredentials, credentials, Metadata, type ServiceError } from '@grpc/grpc-js';
import type { Logger } from 'pino';
import {
  mediaRecordRefusalToJSON,
  type RegisterRequest,
  type RegisterResponse,
  RegistrationServiceClient,
} from '../../gen/berth/scheduler/v1/registration.js';
import { Backoff, CHANNEL_OPTIONS } from '../../transport/channel.js';

export interface RegistrationOptions {
  /** One address, or several schedulers sharing one database (tried in turn). */
  schedulers: readonly string[];
  request: () => RegisterRequest;
  /** Told of every answer; returning true registers again at once (the scheduler asked for more). */
  onResponse?: (res: RegisterResponse, req: RegisterRequest) => boolean;
  intervalMs: number;
  logger: Logger;
  credentials?: ChannelCredentials;
  /** Bearer token (role `agent`) sent with every Register. */
  token?: string;
  /** Deadline of each Register call. */
  callTimeoutMs?: number;
}

export class RegistrationLoop {
  private readonly clients: RegistrationServiceClient[];
  /** The scheduler registered with (or tried next). */
  private current = 0;
  private timer: NodeJS.Timeout | null = null;
  private failures = 0;
  /** Between failed attempts: 500 ms doubling to 30 s, jittered, never beyond the heartbeat interval. */
  private readonly backoff = new Backoff(500, 30_000);
  private stopped = false;
  /** Resolves at the first successful registration. */
  readonly registered: Promise<void>;
  private markRegistered!: () => void;

  constructor(private readonly options: RegistrationOptions) {
    if (options.schedulers.length === 0) throw new Error('RegistrationLoop needs a scheduler address');
    this.clients = options.schedulers.map(
      (address) =>
        new RegistrationServiceClient(
          address,
          options.credentials ?? credentials.createInsecure(),
          // Keepalive and a reconnect backoff bounded at 5 s (gRPC's default grows
          // to 120 s, far beyond a heartbeat): the channel module's, as every client's.
          CHANNEL_OPTIONS,
        ),
    );
    this.registered = new Promise((resolve) => {
      this.markRegistered = resolve;
    });
  }

  start(): void {
    void this.tick();
  }

  /** Registers now (e.g. after the scheduler told us it lost track of us). */
  async registerNow(depth = 0): Promise<void> {
    const req = this.options.request();
    const md = new Metadata();
    if (this.options.token) md.set('authorization', `Bearer ${this.options.token}`);
    const client = this.clients[this.current]!;
    const res = await new Promise<RegisterResponse>((resolve, reject) => {
      client.register(
        req,
        md,
        { deadline: Date.now() + (this.options.callTimeoutMs ?? 5_000) },
        (err: ServiceError | null, r?: RegisterResponse) => (err || !r ? reject(err) : resolve(r)),
      );
    });
    if (res.refusedMediaRecords.length > 0) {
      // Judged another host's media (or forgotten): the scheduler's record of them stays as it was.
      this.options.logger.warn(
        {
          count: res.refusedMediaRecords.length,
          refused: res.refusedMediaRecords
            .slice(0, 20)
            .map((f) => ({ key: f.mediaKey, reason: mediaRecordRefusalToJSON(f.reason) })),
        },
        "the scheduler refused the journal's records of media another host holds",
      );
    }
    // Again at once while the agent has more to send (its certificates, in shares), a bounded number of times.
    if (this.options.onResponse?.(res, req) && depth < 64) await this.registerNow(depth + 1);
  }

  /** The address registered with (or tried next). */
  get scheduler(): string {
    return this.options.schedulers[this.current]!;
  }

  private async tick(): Promise<void> {
    if (this.stopped) return;
    let delay = this.options.intervalMs;
    const scheduler = this.scheduler;
    try {
      await this.registerNow();
      if (this.failures > 0) this.options.logger.info({ scheduler }, 'registered with the scheduler again');
      else this.options.logger.debug({ scheduler }, 'registered with the scheduler');
      this.failures = 0;
      this.backoff.reset();
      this.markRegistered();
    } catch (err) {
      this.failures++;
      delay = Math.min(this.options.intervalMs, this.backoff.next());
      // Another scheduler on the same database may answer: try it next.
      this.current = (this.current + 1) % this.clients.length;
      const log = this.failures === 1 || this.failures % 10 === 0 ? 'warn' : 'debug';
      this.options.logger[log](
        {
          scheduler,
          failures: this.failures,
          err: (err as Error).message,
          ...(this.clients.length > 1 ? { next: this.scheduler } : {}),
        },
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
    for (const c of this.clients) c.close();
  }
}
