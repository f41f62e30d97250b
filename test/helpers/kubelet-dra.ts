/**
 * The kubelet's side of DRA, for tests (issue 39 part 2): a stand-in built
 * from the kubelet's own protos (proto/k8s.io, vendored unmodified) that
 * finds the plugin's registration socket in its plugins_registry directory,
 * asks GetInfo and reports the registration as the kubelet does, then dials
 * the endpoint GetInfo names (dra/v1, dra/v1beta1, dra-health/v1).
 *
 * And an API server stand-in: an HTTPS server on 127.0.0.1:0 (its own CA,
 * a bearer token it requires) that serves exactly the ResourceClaim objects
 * a test puts in it, at the path the Kubernetes client library asks (`GET
 * /apis/resource.k8s.io/v1/namespaces/NS/resourceclaims/NAME`), and a
 * Kubernetes `Status` 404 for any other (401 without the token).
 */
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import type { Server } from 'node:https';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { credentials, Metadata, type ServiceError } from '@grpc/grpc-js';
import {
  type Claim,
  DRAPluginClient,
  type NodePrepareResourcesResponse,
  type NodeUnprepareResourcesResponse,
} from '../../src/gen/k8s.io/kubelet/pkg/apis/dra/v1/api.js';
import { DRAPluginClient as DRAPluginClientV1beta1 } from '../../src/gen/k8s.io/kubelet/pkg/apis/dra/v1beta1/api.js';
import {
  DRAResourceHealthClient,
  type NodeWatchResourcesResponse,
} from '../../src/gen/k8s.io/kubelet/pkg/apis/dra-health/v1/api.js';
import {
  type InfoRequest,
  type PluginInfo,
  RegistrationClient,
  type RegistrationStatus,
  type RegistrationStatusResponse,
} from '../../src/gen/k8s.io/kubelet/pkg/apis/pluginregistration/v1/api.js';
import { tempDir } from './agent.js';
import { makeCa } from './certs.js';

type Unary<Req, Res> = (req: Req, md: Metadata, cb: (err: ServiceError | null, res?: Res) => void) => unknown;

const call = <Req, Res>(fn: Unary<Req, Res>, req: Req) =>
  new Promise<Res>((resolve, reject) =>
    fn(req, new Metadata(), (err, res) => (err || !res ? reject(err) : resolve(res))),
  );

export class DraKubelet {
  private constructor(
    readonly dir: string,
    private readonly cleanup: () => Promise<void>,
  ) {}

  static async start(): Promise<DraKubelet> {
    const d = await tempDir('berth-kubelet-dra-');
    const k = new DraKubelet(d.path, d.cleanup);
    for (const sub of [k.registryDir, k.pluginDir, k.cdiDir]) await mkdir(sub, { recursive: true });
    return k;
  }

  get registryDir(): string {
    return join(this.dir, 'plugins_registry');
  }

  get pluginDir(): string {
    return join(this.dir, 'plugins', 'berth.dev');
  }

  get cdiDir(): string {
    return join(this.dir, 'cdi');
  }

  get checkpointFile(): string {
    return join(this.dir, 'berth-dra-checkpoint.json');
  }

  /** What the kubelet's plugin watcher does with a socket in plugins_registry: GetInfo, then the status. */
  async register(socket: string): Promise<PluginInfo> {
    const client = new RegistrationClient(`unix://${socket}`, credentials.createInsecure());
    try {
      const info = await call<InfoRequest, PluginInfo>(client.getInfo.bind(client), {});
      await call<RegistrationStatus, RegistrationStatusResponse>(
        client.notifyRegistrationStatus.bind(client),
        { pluginRegistered: true, error: '' },
      );
      return info;
    } finally {
      client.close();
    }
  }

  /** A client of the plugin at `endpoint` (GetInfo's), speaking dra/v1 or dra/v1beta1. */
  plugin(endpoint: string, version: 'v1' | 'v1beta1' = 'v1') {
    const Client = version === 'v1' ? DRAPluginClient : DRAPluginClientV1beta1;
    const client = new Client(`unix://${endpoint}`, credentials.createInsecure());
    return {
      prepare: (claims: Claim[]) =>
        call<{ claims: Claim[] }, NodePrepareResourcesResponse>(client.nodePrepareResources.bind(client), {
          claims,
        }),
      unprepare: (claims: Claim[]) =>
        call<{ claims: Claim[] }, NodeUnprepareResourcesResponse>(
          client.nodeUnprepareResources.bind(client),
          {
            claims,
          },
        ),
      close: () => client.close(),
    };
  }

  /** Every list NodeWatchResources streams from `endpoint`. */
  health(endpoint: string) {
    const client = new DRAResourceHealthClient(`unix://${endpoint}`, credentials.createInsecure());
    const lists: NodeWatchResourcesResponse[] = [];
    const stream = client.nodeWatchResources({});
    stream.on('data', (m: NodeWatchResourcesResponse) => lists.push(m));
    stream.on('error', () => {});
    return {
      lists,
      close: () => {
        stream.cancel();
        client.close();
      },
    };
  }

  async stop(): Promise<void> {
    await this.cleanup();
  }
}

/** A result of a claim's allocation, as `status.allocation.devices.results` holds it. */
export interface AllocationResult {
  request: string;
  driver: string;
  pool: string;
  device: string;
}

/** A ResourceClaim (resource.k8s.io/v1) allocated with `results`. */
export function resourceClaim(
  namespace: string,
  name: string,
  uid: string,
  results: AllocationResult[],
): Record<string, unknown> {
  return {
    apiVersion: 'resource.k8s.io/v1',
    kind: 'ResourceClaim',
    metadata: { namespace, name, uid, resourceVersion: '1', creationTimestamp: '2026-11-28T07:00:00Z' },
    spec: {
      devices: {
        requests: [...new Set(results.map((r) => r.request))].map((request) => ({
          name: request,
          exactly: { deviceClassName: 'berth-nvme', allocationMode: 'ExactCount', count: 1 },
        })),
      },
    },
    status: { allocation: { devices: { results } } },
  };
}

export class ApiServerStandIn {
  /** `namespace/name` → the object served. */
  readonly claims = new Map<string, Record<string, unknown>>();
  /** Every request answered, in order (401s included). */
  readonly asked: string[] = [];

  private constructor(
    private readonly server: Server,
    readonly url: string,
    /** The CA the server's certificate chains to, and the token it wants: the agent's ca_file and token_file. */
    readonly caFile: string,
    readonly tokenFile: string,
    private readonly cleanup: () => Promise<void>,
  ) {}

  static async start(): Promise<ApiServerStandIn> {
    const d = await tempDir('berth-apiserver-');
    const ca = await makeCa(d.path, 'k8s-ca');
    const leaf = await ca.leaf('kube-apiserver');
    const token = `tok-${Math.random().toString(36).slice(2)}`;
    const tokenFile = join(d.path, 'token');
    await writeFile(tokenFile, `${token}\n`);
    let self: ApiServerStandIn | null = null;
    const status = (code: number, reason: string, message: string) =>
      JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', reason, code, message });
    const server = createServer(
      { cert: await readFile(leaf.cert), key: await readFile(leaf.key) },
      (req, res) => {
        self!.asked.push(`${req.method} ${req.url}`);
        res.setHeader('content-type', 'application/json');
        if (req.headers.authorization !== `Bearer ${token}`) {
          res.statusCode = 401;
          res.end(status(401, 'Unauthorized', 'Unauthorized'));
          return;
        }
        const m = /^\/apis\/resource\.k8s\.io\/v1\/namespaces\/([^/]+)\/resourceclaims\/([^/?]+)$/.exec(
          req.url ?? '',
        );
        const claim = req.method === 'GET' && m ? self!.claims.get(`${m[1]}/${m[2]}`) : undefined;
        if (!claim) {
          res.statusCode = 404;
          res.end(status(404, 'NotFound', `resourceclaims.resource.k8s.io "${m?.[2] ?? '?'}" not found`));
          return;
        }
        res.end(JSON.stringify(claim));
      },
    );
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    self = new ApiServerStandIn(server, `https://127.0.0.1:${port}`, ca.ca, tokenFile, d.cleanup);
    return self;
  }

  put(claim: Record<string, unknown>): void {
    const meta = claim.metadata as { namespace: string; name: string };
    this.claims.set(`${meta.namespace}/${meta.name}`, claim);
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    await this.cleanup();
  }
}
