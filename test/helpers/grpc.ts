/** Small promise wrappers over grpc-js clients for tests. */
import { type Client, credentials, Metadata, type ServiceError } from '@grpc/grpc-js';
import { type DecodedStatus, decodeServiceError } from '../../src/transport/status.js';

type UnaryMethod<Req, Res> = (
  req: Req,
  metadata: Metadata,
  options: { deadline: number },
  cb: (err: ServiceError | null, res: Res) => void,
) => unknown;

export function call<Req, Res>(
  client: Client,
  method: UnaryMethod<Req, Res>,
  req: Req,
  metadata = new Metadata(),
  timeoutMs = 10_000,
): Promise<Res> {
  return new Promise((resolve, reject) => {
    method.call(client, req, metadata, { deadline: Date.now() + timeoutMs }, (err, res) =>
      err ? reject(err) : resolve(res),
    );
  });
}

/** Runs a call expected to fail and returns the decoded status. */
export async function callError<Req, Res>(
  client: Client,
  method: UnaryMethod<Req, Res>,
  req: Req,
  metadata = new Metadata(),
): Promise<DecodedStatus> {
  try {
    await call(client, method, req, metadata);
  } catch (err) {
    return decodeServiceError(err as ServiceError);
  }
  throw new Error('expected the call to fail');
}

export function insecure() {
  return credentials.createInsecure();
}

/** Collects messages of a server stream until `until` says stop (then cancels) or the stream ends. */
export function collect<T>(
  stream: NodeJS.ReadableStream & { cancel(): void },
  until: (msgs: T[]) => boolean,
  timeoutMs = 15_000,
): Promise<T[]> {
  const msgs: T[] = [];
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      stream.cancel();
      reject(
        new Error(
          `stream: timed out after ${timeoutMs} ms with ${msgs.length} messages: ${JSON.stringify(msgs).slice(0, 2000)}`,
        ),
      );
    }, timeoutMs);
    stream.on('data', (m: T) => {
      msgs.push(m);
      if (until(msgs)) {
        clearTimeout(timer);
        stream.cancel();
        resolve(msgs);
      }
    });
    stream.on('error', (err: ServiceError) => {
      clearTimeout(timer);
      if (err.code === 1 /* CANCELLED */) resolve(msgs);
      else reject(err);
    });
    stream.on('end', () => {
      clearTimeout(timer);
      resolve(msgs);
    });
  });
}

// The scheduler's PostgreSQL store test still imports eventually from here.
export { eventually } from './wait.js';
