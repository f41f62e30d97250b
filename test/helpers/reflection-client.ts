/**
 * A client that knows nothing of Berth but what server reflection tells it,
 * as grpcurl works: it lists services, fetches the file that defines a
 * symbol (and the files it imports), and decodes an error's
 * google.protobuf.Any details with the descriptors it fetched — so a test
 * proves a generic client can read an ErrorInfo's reason by name, without our
 * generated code.
 */
import { join } from 'node:path';
import { credentials, loadPackageDefinition, type ServiceError } from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import protobuf from 'protobufjs';
import descriptor from 'protobufjs/ext/descriptor/index.js';

const REFLECTION_PROTO = join(
  process.cwd(),
  'node_modules/@grpc/reflection/build/proto/grpc/reflection/v1/reflection.proto',
);

interface ReflectionResponse {
  listServicesResponse?: { service: { name: string }[] };
  fileDescriptorResponse?: { fileDescriptorProto: Buffer[] };
  errorResponse?: { errorCode: number; errorMessage: string };
}

type Stream = {
  write(m: unknown): void;
  end(): void;
  on(e: 'data', f: (m: ReflectionResponse) => void): void;
  on(e: 'error', f: (err: Error) => void): void;
};

interface DescriptorApi {
  FileDescriptorProto: { decode(b: Uint8Array): { name: string; dependency?: string[] } };
  FileDescriptorSet: { fromObject(o: unknown): unknown };
}

export class ReflectionClient {
  private readonly client: { ServerReflectionInfo(): Stream; close(): void };

  constructor(endpoint: string) {
    const pkg = loadPackageDefinition(
      loadSync(REFLECTION_PROTO, { keepCase: false, longs: String, enums: String, defaults: true }),
    ) as unknown as {
      grpc: {
        reflection: {
          v1: { ServerReflection: new (a: string, c: unknown) => ReflectionClient['client'] };
        };
      };
    };
    this.client = new pkg.grpc.reflection.v1.ServerReflection(endpoint, credentials.createInsecure());
  }

  private ask(request: Record<string, unknown>): Promise<ReflectionResponse> {
    return new Promise((resolve, reject) => {
      const stream = this.client.ServerReflectionInfo();
      stream.on('data', (m) => {
        resolve(m);
        stream.end();
      });
      stream.on('error', reject);
      stream.write(request);
    });
  }

  async listServices(): Promise<string[]> {
    const res = await this.ask({ listServices: '*' });
    return (res.listServicesResponse?.service ?? []).map((s) => s.name).sort();
  }

  /** The descriptors of the file defining `symbol` and of everything it imports, as a protobufjs Root. */
  async rootFor(symbol: string): Promise<protobuf.Root> {
    const api = descriptor as unknown as DescriptorApi;
    const files = new Map<string, { name: string; dependency?: string[] }>();
    const fetch = async (req: Record<string, unknown>) => {
      const res = await this.ask(req);
      if (res.errorResponse) throw new Error(`reflection: ${res.errorResponse.errorMessage}`);
      for (const raw of res.fileDescriptorResponse?.fileDescriptorProto ?? []) {
        const f = api.FileDescriptorProto.decode(raw);
        files.set(f.name, f);
      }
    };
    await fetch({ fileContainingSymbol: symbol });
    for (let missing = missingDeps(files); missing.length > 0; missing = missingDeps(files)) {
      for (const name of missing) await fetch({ fileByFilename: name });
    }
    const set = api.FileDescriptorSet.fromObject({ file: [...files.values()] });
    return (protobuf.Root as unknown as { fromDescriptor(s: unknown): protobuf.Root }).fromDescriptor(set);
  }

  /**
   * The details of a failed call decoded by name through reflection:
   * `[{type: 'google.rpc.ErrorInfo', value: {reason, domain, metadata}}, …]`.
   */
  async errorDetails(err: ServiceError): Promise<{ type: string; value: Record<string, unknown> }[]> {
    const raw = err.metadata?.get('grpc-status-details-bin')[0];
    if (!(raw instanceof Buffer)) return [];
    const statusRoot = await this.rootFor('google.rpc.Status');
    const status = statusRoot.lookupType('google.rpc.Status').decode(raw) as unknown as {
      details: { type_url?: string; typeUrl?: string; value: Uint8Array }[];
    };
    const out: { type: string; value: Record<string, unknown> }[] = [];
    for (const d of status.details) {
      const type = (d.type_url ?? d.typeUrl ?? '').replace(/^.*\//, '');
      const root = await this.rootFor(type);
      const t = root.lookupType(type);
      out.push({ type, value: t.toObject(t.decode(d.value), { defaults: true }) });
    }
    return out;
  }

  close(): void {
    this.client.close();
  }
}

function missingDeps(files: Map<string, { dependency?: string[] }>): string[] {
  const missing = new Set<string>();
  for (const f of files.values()) for (const d of f.dependency ?? []) if (!files.has(d)) missing.add(d);
  return [...missing];
}
