/**
 * Server reflection (so grpcurl / buf curl work without .proto files), loaded
 * on its first call. @grpc/reflection parses its .proto files with
 * proto-loader when it is added to a server, and the descriptors it serves
 * are decoded from the descriptor set with protobufjs: about 6 MiB of an
 * agent's resident memory for a service most agents never answer
 * (docs/decisions.md 54).
 *
 * So both reflection services (v1 and v1alpha, the paths clients try) are
 * registered at once with byte-passing codecs; the first call loads
 * @grpc/reflection and the descriptors, then every call (the first included)
 * is answered by the library's own implementation through a stream that
 * decodes requests and encodes responses with the library's codecs.
 */
import { readFileSync } from 'node:fs';
import { Duplex } from 'node:stream';
import {
  type Server,
  type ServerDuplexStream,
  type ServerMethodDefinition,
  type ServiceDefinition,
  status,
} from '@grpc/grpc-js';
import { DESCRIPTOR_SET } from '../../descriptor-set.js';
import { invalidArgument } from '../../errors.js';
import { OPEN_SERVICES } from './auth/policy.js';
import { toServiceError } from './status.js';

const REFLECTION_SERVICES = [
  'grpc.reflection.v1.ServerReflection',
  'grpc.reflection.v1alpha.ServerReflection',
] as const;
const METHOD = 'ServerReflectionInfo';

interface FileDescriptorLike {
  name: string;
  package: string;
  dependency?: string[];
}
interface DescriptorCodec {
  FileDescriptorSet: { decode(b: Uint8Array): { file: FileDescriptorLike[] } };
  FileDescriptorProto: { encode(m: FileDescriptorLike): { finish(): Uint8Array } };
}

/** The packages of the error details Berth sends (google.rpc.ErrorInfo, BadRequest, …). */
const DETAIL_PACKAGES = ['google.rpc'];

const packageOf = (service: string) => service.slice(0, service.lastIndexOf('.'));

/**
 * What reflection serves, from the descriptors buf compiled file by file
 * (proto-loader's merge each package into one synthetic file without imports,
 * which grpcurl and buf curl cannot link): the files of the services this
 * server serves — its own, health and reflection —, the error detail types
 * its errors carry (so a client resolves google.rpc.ErrorInfo by name), and
 * every file they import. Only the served services are listed: the scheduler
 * imports agent.proto for CleanupEvent but does not list AgentService.
 */
function reflectionDescriptors(
  codec: DescriptorCodec,
  services: readonly string[],
): { files: Buffer[]; services: string[] } {
  const set = codec.FileDescriptorSet.decode(readFileSync(DESCRIPTOR_SET));
  const byName = new Map(set.file.map((f) => [f.name, f]));
  // Health and reflection: every server serves them (open to all, see auth.ts).
  const listed = [...services, ...OPEN_SERVICES];
  const roots = new Set([...listed.map(packageOf), ...DETAIL_PACKAGES]);
  const keep = new Set<string>();
  const add = (f: FileDescriptorLike | undefined) => {
    if (!f || keep.has(f.name)) return;
    keep.add(f.name);
    for (const d of f.dependency ?? []) add(byName.get(d));
  };
  for (const f of set.file) if (roots.has(f.package)) add(f);
  const files = set.file
    .filter((f) => keep.has(f.name))
    .map((f) => Buffer.from(codec.FileDescriptorProto.encode(f).finish()));
  return { files, services: listed };
}

type Method = ServerMethodDefinition<unknown, unknown>;
type Handler = (stream: Duplex) => void;
/** A reflection service of the library: its method definition (its codecs) and handler. */
interface Entry {
  method: Method;
  handler: Handler;
}
type Loaded = Map<string, Entry>;

/** @grpc/reflection's services for `services`, captured instead of added to a server. */
async function loadReflection(services: readonly string[]): Promise<Loaded> {
  const [{ ReflectionService }, descriptor] = await Promise.all([
    import('@grpc/reflection'),
    import('protobufjs/ext/descriptor/index.js'),
  ]);
  const served = reflectionDescriptors(descriptor.default as unknown as DescriptorCodec, services);
  const loaded: Loaded = new Map();
  const recorder = {
    addService(definition: ServiceDefinition, implementation: Record<string, Handler>) {
      const method = definition[METHOD] as Method;
      loaded.set(method.path.slice(1, method.path.lastIndexOf('/')), {
        method,
        handler: implementation[METHOD]!,
      });
    },
  };
  new ReflectionService(
    { files: { fileDescriptorProtos: served.files } } as unknown as ConstructorParameters<
      typeof ReflectionService
    >[0],
    { services: served.services },
  ).addToServer(recorder as unknown as Server);
  for (const name of REFLECTION_SERVICES) {
    if (!loaded.has(name)) throw new Error(`@grpc/reflection did not provide ${name}`);
  }
  return loaded;
}

/** Answers one call with the library's handler: requests decoded, responses encoded, in order. */
function relay(call: ServerDuplexStream<Buffer, Buffer>, service: string, { method, handler }: Entry): void {
  const stream = new Duplex({
    objectMode: true,
    read() {},
    write(message, _encoding, done) {
      call.write(method.responseSerialize(message), done);
    },
    final(done) {
      call.end();
      done();
    },
  });
  // A write fails only when the call is gone (cancelled): nothing is left to answer.
  stream.on('error', () => {});
  call.on('cancelled', () => stream.destroy());
  let refused = false;
  call.on('data', (bytes: Buffer) => {
    if (refused) return;
    let request: unknown;
    try {
      request = method.requestDeserialize(bytes);
    } catch (err) {
      // The call ends with this status; what the client sends after it is not read.
      refused = true;
      call.emit(
        'error',
        toServiceError(
          invalidArgument(
            'request',
            `the request does not decode as the message of /${service}/${METHOD}: ${(err as Error).message}`,
          ),
        ),
      );
      return;
    }
    stream.push(request);
  });
  call.on('end', () => {
    if (!refused) stream.push(null);
  });
  handler(stream);
}

/** Registers both reflection services on `server`; `services` are the ones it lists. */
export function addLazyReflection(server: Server, services: readonly string[]): void {
  let loading: Promise<Loaded> | null = null;
  const bytes = (b: Buffer) => b;
  for (const service of REFLECTION_SERVICES) {
    const definition: ServiceDefinition = {
      [METHOD]: {
        path: `/${service}/${METHOD}`,
        requestStream: true,
        responseStream: true,
        requestSerialize: bytes,
        requestDeserialize: bytes,
        responseSerialize: bytes,
        responseDeserialize: bytes,
      },
    };
    server.addService(definition, {
      [METHOD]: (call: ServerDuplexStream<Buffer, Buffer>) => {
        loading ??= loadReflection(services);
        loading.then(
          (loaded) => relay(call, service, loaded.get(service)!),
          (err: unknown) => {
            loading = null;
            call.emit('error', {
              code: status.INTERNAL,
              details: `server reflection could not be loaded: ${(err as Error).message}`,
            });
          },
        );
      },
    });
  }
}
