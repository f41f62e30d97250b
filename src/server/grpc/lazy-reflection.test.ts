/**
 * Reflection loads on its first call (lazy-reflection.ts) and must answer that
 * call: both versions clients try (v1, and v1alpha that older grpcurl and buf
 * curl fall back to), several first calls at once, several requests on one
 * stream in order, and a request that does not decode refused as
 * INVALID_ARGUMENT naming `request`, on a real GrpcServer on 127.0.0.1:0.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { type Client, credentials, loadPackageDefinition, type ServiceError } from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { decodeServiceError } from '../../transport/status.js';
import { GrpcServer } from './server.js';

const REFLECTION_PROTO = (version: string) =>
  join(
    process.cwd(),
    `node_modules/@grpc/reflection/build/proto/grpc/reflection/${version}/reflection.proto`,
  );

interface Response {
  listServicesResponse?: { service: { name: string }[] };
  fileDescriptorResponse?: { fileDescriptorProto: Buffer[] };
  errorResponse?: { errorCode: number; errorMessage: string };
}
interface Stream {
  write(m: unknown): void;
  end(): void;
  on(e: 'data', f: (m: Response) => void): void;
  on(e: 'error', f: (err: Error) => void): void;
  on(e: 'end', f: () => void): void;
}
type ReflectionClient = Client & { ServerReflectionInfo(): Stream };

function reflectionClient(endpoint: string, version: 'v1' | 'v1alpha'): ReflectionClient {
  const pkg = loadPackageDefinition(
    loadSync(REFLECTION_PROTO(version), { keepCase: false, longs: String, enums: String, defaults: true }),
  ) as unknown as {
    grpc: {
      reflection: Record<string, { ServerReflection: new (a: string, c: unknown) => ReflectionClient }>;
    };
  };
  return new pkg.grpc.reflection[version]!.ServerReflection(endpoint, credentials.createInsecure());
}

/** Sends every request on one stream, half-closes, and collects the responses. */
function exchange(client: ReflectionClient, requests: Record<string, unknown>[]): Promise<Response[]> {
  return new Promise((resolve, reject) => {
    const out: Response[] = [];
    const stream = client.ServerReflectionInfo();
    stream.on('data', (m) => out.push(m));
    stream.on('error', reject);
    stream.on('end', () => resolve(out));
    for (const r of requests) stream.write(r);
    stream.end();
  });
}

const SERVER_MODULE = fileURLToPath(new URL('./server.ts', import.meta.url));

const names = (r: Response | undefined) => (r?.listServicesResponse?.service ?? []).map((s) => s.name).sort();

describe('server reflection, loaded on first use', () => {
  let server: GrpcServer;
  let endpoint: string;
  const clients: Client[] = [];

  beforeEach(async () => {
    // A server serving only health and reflection: the services it lists are its own.
    server = new GrpcServer({ services: [] });
    endpoint = await server.listen('127.0.0.1:0');
  });
  afterEach(async () => {
    for (const c of clients.splice(0)) c.close();
    await server.stop(0);
  });

  const client = (version: 'v1' | 'v1alpha') => {
    const c = reflectionClient(endpoint, version);
    clients.push(c);
    return c;
  };

  it('answers the first calls of both versions at once, each request on a stream in order', async () => {
    const expected = [
      'grpc.health.v1.Health',
      'grpc.reflection.v1.ServerReflection',
      'grpc.reflection.v1alpha.ServerReflection',
    ];
    const requests = [
      { listServices: '*' },
      { fileContainingSymbol: 'grpc.health.v1.Health' },
      { fileContainingSymbol: 'no.such.Symbol' },
    ];
    const [v1, v1alpha, again] = await Promise.all([
      exchange(client('v1'), requests),
      exchange(client('v1alpha'), requests),
      exchange(client('v1'), [{ listServices: '*' }]),
    ]);
    for (const responses of [v1, v1alpha]) {
      expect(responses).toHaveLength(3);
      expect(names(responses[0])).toEqual(expected);
      expect(responses[1]!.fileDescriptorResponse?.fileDescriptorProto.length).toBeGreaterThan(0);
      expect(responses[2]!.errorResponse?.errorCode).toBe(5);
    }
    expect(names(again[0])).toEqual(expected);
  });

  it('refuses a request that does not decode as INVALID_ARGUMENT naming the request', async () => {
    const raw = client('v1');
    const err = await new Promise<ServiceError>((resolve, reject) => {
      const stream = raw.makeBidiStreamRequest(
        '/grpc.reflection.v1.ServerReflection/ServerReflectionInfo',
        (b: Buffer) => b,
        (b: Buffer) => b,
      );
      stream.on('data', () => reject(new Error('a response to bytes that do not decode')));
      stream.on('error', resolve);
      stream.on('end', () => reject(new Error('the call ended without an error')));
      // A varint tag that runs past the end of the message.
      stream.write(Buffer.from([0xff, 0xff, 0xff]));
      stream.end();
    });
    const decoded = decodeServiceError(err);
    expect(decoded.codeName).toBe('INVALID_ARGUMENT');
    expect(decoded.fieldViolations?.[0]?.field).toBe('request');
  });

  it('survives first calls cancelled while it loads, and answers the next', async () => {
    const c = client('v1');
    for (let i = 0; i < 5; i++) {
      const stream = c.ServerReflectionInfo() as Stream & { cancel(): void };
      stream.on('error', () => {});
      stream.write({ listServices: '*' });
      stream.cancel();
    }
    const [answer] = await exchange(client('v1'), [{ listServices: '*' }]);
    expect(names(answer)).toContain('grpc.health.v1.Health');
  });

  it('is not loaded until a client asks: a fresh process serving has not required @grpc/reflection', async () => {
    // In a process of its own: in this one the tests above have loaded it.
    const script = `
      import { createRequire } from 'node:module';
      import { GrpcServer } from ${JSON.stringify(SERVER_MODULE)};
      const server = new GrpcServer({ services: [] });
      await server.listen('127.0.0.1:0');
      const loaded = Object.keys(createRequire(import.meta.url).cache).filter((f) => f.includes('@grpc/reflection'));
      console.log(JSON.stringify(loaded));
      await server.stop(0);
    `;
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ['--import', 'tsx', '--input-type=module', '-e', script],
      { timeout: 60_000 },
    );
    expect(JSON.parse(stdout.trim())).toEqual([]);
  });
});
