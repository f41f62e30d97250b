/**
 * A stand-in for the Kubernetes API server's `resource.k8s.io/v1`
 * ResourceSlice endpoints, on 127.0.0.1:0 (node http), and the validator it
 * judges every object with. No kube-apiserver runs here
 * (../shared/notes/kubernetes.md): this is what the tests of Berth's
 * ResourceSlices talk to through @kubernetes/client-node.
 *
 * It answers as the API server does: 201 on create, 200 on get/replace/
 * delete, and on failure a `Status` object with the code and reason
 * (404 NotFound, 409 AlreadyExists, 409 Conflict on a stale resourceVersion,
 * 422 Invalid, 400 BadRequest for a field selector it does not support).
 *
 * Validation (`sliceProblems`) is Kubernetes' own OpenAPI schema
 * (test/fixtures/kubernetes/resourceslice-v1.swagger.json) with unknown
 * fields refused, as `fieldValidation=Strict` does, plus the rules of
 * k8s.io/api/resource/v1 that the schema states only in prose: names, limits,
 * exactly one value per attribute, immutable pool/driver/node.
 */
import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { Ajv, type ValidateFunction } from 'ajv';

const SPEC = new URL('../fixtures/kubernetes/resourceslice-v1.swagger.json', import.meta.url);

/** Kubernetes' swagger definitions of a ResourceSlice, as vendored. */
export function resourceSliceSpec(): { definitions: Record<string, Record<string, unknown>> } {
  return JSON.parse(readFileSync(SPEC, 'utf8'));
}

/** Every object schema refuses fields it does not name (the API server's strict field validation). */
function strict(definitions: Record<string, Record<string, unknown>>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [name, def] of Object.entries(definitions)) {
    out[name] =
      def.properties && def.additionalProperties === undefined
        ? { ...def, additionalProperties: false }
        : def;
  }
  return out;
}

let compiled: ValidateFunction | null = null;

/** A JSON-schema validator of `io.k8s.api.resource.v1.ResourceSlice` (ajv, strict fields). */
export function resourceSliceValidator(): ValidateFunction {
  if (compiled) return compiled;
  const ajv = new Ajv({ strict: false, allErrors: true });
  ajv.addFormat('int64', { type: 'number', validate: (n: number) => Number.isSafeInteger(n) });
  ajv.addFormat('int32', {
    type: 'number',
    validate: (n: number) => Number.isInteger(n) && Math.abs(n) < 2 ** 31,
  });
  ajv.addFormat('date-time', (s: string) => !Number.isNaN(Date.parse(s)));
  ajv.addFormat('byte', (s: string) => /^[A-Za-z0-9+/]*={0,2}$/.test(s));
  const schema = {
    definitions: strict(resourceSliceSpec().definitions),
    $ref: '#/definitions/io.k8s.api.resource.v1.ResourceSlice',
  };
  compiled = ajv.compile(schema);
  return compiled;
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** What the API server would refuse in `o` (schema first, then resource.k8s.io/v1's own rules); [] when valid. */
export function sliceProblems(o: unknown): string[] {
  const validate = resourceSliceValidator();
  if (!validate(o)) return (validate.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message}`);
  const s = o as {
    apiVersion?: string;
    kind?: string;
    metadata?: { name?: string };
    spec: {
      driver: string;
      nodeName?: string;
      allNodes?: boolean;
      nodeSelector?: unknown;
      perDeviceNodeSelection?: boolean;
      pool: { name: string; generation: number; resourceSliceCount: number };
      devices?: { name: string; attributes?: Record<string, Record<string, unknown>>; taints?: unknown[] }[];
    };
  };
  const out: string[] = [];
  if (s.apiVersion !== 'resource.k8s.io/v1') out.push(`apiVersion: ${s.apiVersion}`);
  if (s.kind !== 'ResourceSlice') out.push(`kind: ${s.kind}`);
  if (!s.metadata?.name || !DNS_SUBDOMAIN.test(s.metadata.name))
    out.push(`metadata.name: ${s.metadata?.name}`);
  if (!DNS_SUBDOMAIN.test(s.spec.driver) || s.spec.driver.length > 63)
    out.push(`spec.driver: ${s.spec.driver}`);
  const where = [s.spec.nodeName, s.spec.allNodes, s.spec.nodeSelector, s.spec.perDeviceNodeSelection];
  if (where.filter((w) => w !== undefined && w !== false).length !== 1)
    out.push('spec: exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection');
  if (s.spec.nodeName !== undefined && !DNS_SUBDOMAIN.test(s.spec.nodeName)) out.push('spec.nodeName');
  const pool = s.spec.pool;
  if (pool.name.length > 253 || !pool.name.split('/').every((p) => DNS_SUBDOMAIN.test(p)))
    out.push('spec.pool.name');
  if (pool.generation < 0) out.push('spec.pool.generation');
  if (pool.resourceSliceCount < 1) out.push('spec.pool.resourceSliceCount');
  const devices = s.spec.devices ?? [];
  const tainted = devices.some((d) => (d.taints ?? []).length > 0);
  if (devices.length > (tainted ? 64 : 128)) out.push(`spec.devices: ${devices.length} devices`);
  const names = new Set<string>();
  devices.forEach((d, i) => {
    if (!DNS_LABEL.test(d.name)) out.push(`spec.devices[${i}].name: ${d.name}`);
    if (names.has(d.name)) out.push(`spec.devices[${i}].name: duplicate ${d.name}`);
    names.add(d.name);
    const attrs = Object.entries(d.attributes ?? {});
    if (attrs.length > 32) out.push(`spec.devices[${i}].attributes: ${attrs.length}`);
    for (const [name, value] of attrs) {
      const slash = name.lastIndexOf('/');
      const domain = slash < 0 ? null : name.slice(0, slash);
      const id = name.slice(slash + 1);
      const at = `spec.devices[${i}].attributes[${name}]`;
      if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(id) || id.length > 32) out.push(`${at}: identifier`);
      if (domain !== null && (!DNS_SUBDOMAIN.test(domain) || domain.length > 63)) out.push(`${at}: domain`);
      if (Object.keys(value).length !== 1) out.push(`${at}: exactly one value`);
      for (const k of ['string', 'version'])
        if (typeof value[k] === 'string' && Buffer.byteLength(value[k] as string) > 64)
          out.push(`${at}: longer than 64 bytes`);
    }
  });
  return out;
}

/** A ResourceSlice as the stand-in keeps it. */
export type StoredSlice = {
  metadata: { name: string; resourceVersion?: string; uid?: string; creationTimestamp?: string };
  spec: {
    driver: string;
    nodeName?: string;
    pool: { name: string; generation: number; resourceSliceCount: number };
    devices?: { name: string; attributes?: Record<string, Record<string, unknown>> }[];
  };
} & Record<string, unknown>;
type Slice = StoredSlice;

const BASE = '/apis/resource.k8s.io/v1/resourceslices';

export class KubeApiServerStandIn {
  /** The stored slices by name (as the API server keeps them, resourceVersion and uid set). */
  readonly slices = new Map<string, Slice>();
  /** Every request answered: method, path, status. */
  readonly requests: { method: string; path: string; status: number }[] = [];
  /** While true, requests are read and never answered (a server that hangs). */
  hang = false;
  /** Called with each request before it is handled (a test plays another writer here). */
  onRequest: ((method: string, name: string | null) => void) | null = null;
  /** Called with each accepted create or replace before it is stored and answered. */
  beforeWrite: ((s: Slice) => Promise<void> | void) | null = null;
  private version = 1;
  private server: Server;
  private readonly sockets = new Set<Socket>();
  private port = 0;

  private constructor() {
    this.server = this.make();
  }

  static async start(): Promise<KubeApiServerStandIn> {
    const s = new KubeApiServerStandIn();
    await s.listen();
    return s;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** Every device name in stored slices of `pool`, in slice-name order. */
  devicesOf(pool: string): string[] {
    return [...this.slices.values()]
      .filter((s) => s.spec.pool.name === pool)
      .sort((a, b) => (a.metadata.name < b.metadata.name ? -1 : 1))
      .flatMap((s) => (s.spec.devices ?? []).map((d) => d.name));
  }

  /** Stops answering: the port is closed and open connections are cut (an API server down). */
  async down(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((ok) => this.server.close(() => ok()));
  }

  /** Answers again on the same port. */
  async up(): Promise<void> {
    this.server = this.make();
    await this.listen(this.port);
  }

  async stop(): Promise<void> {
    if (this.server.listening) await this.down();
  }

  private make(): Server {
    const server = createServer((req, res) => void this.handle(req, res));
    server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
    return server;
  }

  private listen(port = 0): Promise<void> {
    return new Promise((ok, fail) => {
      this.server.once('error', fail);
      this.server.listen(port, '127.0.0.1', () => {
        this.port = (this.server.address() as AddressInfo).port;
        ok();
      });
    });
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://x');
    const method = req.method ?? 'GET';
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    if (this.hang) return;
    const send = (status: number, body: unknown) => {
      this.requests.push({ method, path: url.pathname, status });
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    const fail = (code: number, reason: string, message: string, name?: string) =>
      send(code, {
        kind: 'Status',
        apiVersion: 'v1',
        metadata: {},
        status: 'Failure',
        message,
        reason,
        details: { ...(name ? { name } : {}), group: 'resource.k8s.io', kind: 'resourceslices' },
        code,
      });
    let body: Slice | null = null;
    if (chunks.length > 0) {
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Slice;
      } catch {
        return fail(400, 'BadRequest', 'the body is not JSON');
      }
    }
    const name = url.pathname.startsWith(`${BASE}/`)
      ? decodeURIComponent(url.pathname.slice(BASE.length + 1))
      : null;
    if (url.pathname !== BASE && name === null)
      return fail(404, 'NotFound', `the server could not find ${url.pathname}`);
    this.onRequest?.(method, name);
    const stored = name ? this.slices.get(name) : undefined;
    const notFound = () =>
      fail(404, 'NotFound', `resourceslices.resource.k8s.io "${name}" not found`, name ?? '');
    const invalid = (s: unknown, n: string) => {
      const problems = sliceProblems(s);
      if (problems.length === 0) return false;
      fail(422, 'Invalid', `ResourceSlice.resource.k8s.io "${n}" is invalid: ${problems.join('; ')}`, n);
      return true;
    };

    if (method === 'GET' && name === null) {
      const wanted: [string, string][] = [];
      for (const term of (url.searchParams.get('fieldSelector') ?? '').split(',').filter(Boolean)) {
        const [field, value] = term.split('=');
        if (field !== 'spec.nodeName' && field !== 'spec.driver')
          return fail(400, 'BadRequest', `field label not supported: ${field}`);
        wanted.push([field, value ?? '']);
      }
      const items = [...this.slices.values()].filter((s) =>
        wanted.every(([f, v]) => (f === 'spec.driver' ? s.spec.driver : s.spec.nodeName) === v),
      );
      return send(200, {
        apiVersion: 'resource.k8s.io/v1',
        kind: 'ResourceSliceList',
        metadata: { resourceVersion: String(this.version) },
        items,
      });
    }
    if (method === 'GET') return stored ? send(200, stored) : notFound();
    if (method === 'POST' && name === null && body) {
      const n = body.metadata?.name ?? '';
      if (invalid(body, n)) return;
      if (this.slices.has(n))
        return fail(409, 'AlreadyExists', `resourceslices.resource.k8s.io "${n}" already exists`, n);
      return send(
        201,
        await this.store({ ...body, metadata: { ...body.metadata, uid: `uid-${n}-${this.version}` } }),
      );
    }
    if (method === 'PUT' && name && body) {
      if (!stored) return notFound();
      if (body.metadata?.resourceVersion !== stored.metadata.resourceVersion) {
        return fail(
          409,
          'Conflict',
          `Operation cannot be fulfilled on resourceslices.resource.k8s.io "${name}": the object has been modified; please apply your changes to the latest version and try again`,
          name,
        );
      }
      if (invalid(body, name)) return;
      const moved = (['driver', 'nodeName'] as const).filter((f) => body.spec[f] !== stored.spec[f]);
      if (moved.length > 0 || body.spec.pool.name !== stored.spec.pool.name)
        return fail(
          422,
          'Invalid',
          `ResourceSlice.resource.k8s.io "${name}" is invalid: field is immutable`,
          name,
        );
      return send(
        200,
        await this.store({
          ...body,
          metadata: {
            ...body.metadata,
            uid: stored.metadata.uid,
            creationTimestamp: stored.metadata.creationTimestamp,
          },
        }),
      );
    }
    if (method === 'DELETE' && name) {
      if (!stored) return notFound();
      this.slices.delete(name);
      this.version++;
      return send(200, stored);
    }
    return fail(405, 'MethodNotAllowed', `${method} ${url.pathname} is not supported here`);
  }

  /** Another writer's change of a stored slice: a new resourceVersion (so a write at the old one is a 409). */
  touch(name: string): void {
    const s = this.slices.get(name);
    if (s) s.metadata.resourceVersion = String(++this.version);
  }

  /** Stores `s` as another writer would have (a create racing Berth's). */
  plant(s: Slice): void {
    this.slices.set(s.metadata.name, {
      ...s,
      metadata: { ...s.metadata, resourceVersion: String(++this.version) },
    });
  }

  private async store(s: Slice): Promise<Slice> {
    await this.beforeWrite?.(s);
    this.version++;
    const kept: Slice = {
      ...s,
      metadata: {
        ...s.metadata,
        resourceVersion: String(this.version),
        creationTimestamp: s.metadata.creationTimestamp ?? new Date().toISOString(),
      },
    };
    this.slices.set(kept.metadata.name, kept);
    return kept;
  }
}
