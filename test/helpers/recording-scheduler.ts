/**
 * A scheduler that only records what agents register (a real gRPC server on
 * 127.0.0.1:0 serving berth.scheduler.v1.RegistrationService): for tests of
 * what an agent sends, independent of what a scheduler does with it.
 */

import { pino } from 'pino';
import {
  type RegisterRequest,
  type RegistrationServiceServer,
  RegistrationServiceService,
} from '../../src/gen/berth/scheduler/v1/registration.js';
import { unary } from '../../src/server/grpc/handlers.js';
import { GrpcServer } from '../../src/server/grpc/server.js';

export interface RecordingScheduler {
  address: string;
  registrations: RegisterRequest[];
  /** Resolves with the first registration from now on that `accept` accepts. */
  next(accept?: (r: RegisterRequest) => boolean, timeoutMs?: number): Promise<RegisterRequest>;
  stop(): Promise<void>;
}

export async function startRecordingScheduler(): Promise<RecordingScheduler> {
  const registrations: RegisterRequest[] = [];
  const waiters = new Set<(r: RegisterRequest) => void>();
  const logger = pino({ level: 'silent' });
  const impl: RegistrationServiceServer = {
    register: unary('Register', logger, async (req: RegisterRequest) => {
      registrations.push(req);
      for (const w of [...waiters]) w(req);
      return {
        schedulerId: 'recording',
        heartbeatIntervalSeconds: 1,
        storedCertificates: [],
        sendCertificates: false,
        refusedMediaRecords: [],
      };
    }),
  };
  const server = new GrpcServer({
    services: [
      {
        name: 'berth.scheduler.v1.RegistrationService',
        definition: RegistrationServiceService,
        implementation: impl,
      },
    ],
  });
  const address = await server.listen('127.0.0.1:0');
  return {
    address,
    registrations,
    next(accept = () => true, timeoutMs = 15_000) {
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          waiters.delete(w);
          reject(new Error(`no matching registration within ${timeoutMs} ms (${registrations.length} seen)`));
        }, timeoutMs);
        const w = (r: RegisterRequest) => {
          if (!accept(r)) return;
          clearTimeout(timer);
          waiters.delete(w);
          resolve(r);
        };
        waiters.add(w);
      });
    },
    stop: () => server.stop(1_000),
  };
}
