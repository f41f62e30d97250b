/**
 * The part of Cyborg's v2 REST API that Nova calls (docs/cyborg.md), on its
 * own listen address: HTTPS with the scheduler's certificate when it serves
 * TLS, else (or with `plaintext`, behind a TLS-terminating proxy) plain HTTP.
 * A thin adapter, as the gRPC services are:
 * each route decodes (./shapes.ts), checks the caller (./identity.ts), calls
 * the same use cases as the gRPC services (profiles, ARQ create / get /
 * delete, device lookups) or one workflow (PATCH's bind and unbind:
 * app/cyborg-binds.ts), and encodes. Cyborg's bind is asynchronous: PATCH answers
 * 202 once the ARQs are claimed, the bind runs on, and Nova is told how it ended
 * (./nova-events.ts).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { Logger } from 'pino';
import { BerthError, isBerthError } from '../../../errors.js';
import type { Uuid } from '../../../identifiers.js';
import { listenError, parseListenAddress } from '../../listen-address.js';
import type { Certificates } from '../app/certificates.js';
import { type CyborgBinds, visibleArq } from '../app/cyborg-binds.js';
import { type Arq, visibleTo } from '../domain/arq.js';
import { validateProfile } from '../domain/profile.js';
import type { PlacementPort } from '../placement/port.js';
import type { UseCases } from '../usecases/use-cases.js';
import { type Action, authorize, type CyborgCaller, type IdentitySource } from './identity.js';
import type { NovaEvents } from './nova-events.js';
import {
  arqView,
  badRequest,
  CyborgHttpError,
  errorBody,
  httpStatusOf,
  isUuidLike,
  MAX_VERSION,
  MIN_VERSION,
  parsePatchList,
  profileError,
  profileInputFromCyborg,
  profileView,
  requestedVersion,
  requireUuid,
  SERVICE_TYPE,
  VERSION_HEADER,
  versionString,
} from './shapes.js';

export interface CyborgApiDeps {
  useCases: UseCases;
  /** The bind and unbind workflow (PATCH). */
  binds: CyborgBinds;
  /** Erasure certificates, read by a project for its instances (the gRPC CertificateService's rules). */
  certificates: Certificates;
  /** Placement (report mode): a device → its provider, for the ARQs' views. */
  placement: PlacementPort;
  identity: IdentitySource;
  /** Nova's outbox, started and stopped with this API; null: no Nova (a lab), none is owed or sent. */
  events: NovaEvents | null;
  /** HTTPS with this certificate and key (the scheduler's --tls-cert, --tls-key); absent: plain HTTP. */
  tls?: { cert: Buffer; key: Buffer };
  /** Links follow X-Forwarded-Proto and X-Forwarded-Host (behind a proxy that sets them). */
  trustProxyHeaders?: boolean;
  logger: Logger;
}

const MAX_BODY = 1 << 20;

interface Req {
  method: string;
  /** Path segments after the version (`['accelerator_requests', uuid]`). */
  parts: string[];
  query: URLSearchParams;
  version: { major: number; minor: number };
  caller: CyborgCaller | null;
  baseUrl: string;
  body: () => Promise<unknown>;
}

type Answer = { status: number; body?: unknown };

export class CyborgApi {
  private server: Server | null = null;
  /** Nova's outbox; null without a Nova. */
  readonly events: NovaEvents | null;
  address = '';

  constructor(private readonly deps: CyborgApiDeps) {
    this.events = deps.events;
  }

  /** The v2 endpoint as this server speaks it (`https://` with TLS), for logs and banners. */
  get url(): string {
    return `${this.deps.tls ? 'https' : 'http'}://${this.address}/v2`;
  }

  async listen(listen: string): Promise<string> {
    const handler = (req: IncomingMessage, res: ServerResponse) => void this.handle(req, res);
    // No client certificate is asked for: callers are known by their tokens, as at Cyborg.
    const server = this.deps.tls
      ? createHttpsServer({ cert: this.deps.tls.cert, key: this.deps.tls.key }, handler)
      : createServer(handler);
    const { host, port } = parseListenAddress(listen);
    await new Promise<void>((resolve, reject) => {
      server.once('error', (err) => reject(listenError(listen, err)));
      server.listen(port, host, () => resolve());
    });
    this.server = server;
    const addr = server.address();
    this.address = `${host}:${typeof addr === 'object' && addr ? addr.port : 0}`;
    this.events?.start();
    const nova = this.events?.url ?? null;
    this.deps.logger.info(
      {
        cyborg: this.url,
        auth: this.deps.identity.describe,
        nova,
        ...(this.deps.trustProxyHeaders ? { proxyHeaders: 'X-Forwarded-Proto, X-Forwarded-Host' } : {}),
      },
      nova
        ? "serving Cyborg's v2 API for Nova"
        : "serving Cyborg's v2 API with no Nova (no --nova-url): binds run, no accelerator-request-bound event is sent",
    );
    return this.address;
  }

  /** Stops serving; binds already accepted finish (their events stay owed if Nova is not told yet). */
  async stop(): Promise<void> {
    const closed = new Promise<void>((resolve) =>
      this.server ? this.server.close(() => resolve()) : resolve(),
    );
    // Clients keep connections alive (Nova's keystoneauth session does): close them, or close() waits.
    this.server?.closeAllConnections();
    await closed;
    await this.deps.binds.settled();
    await this.events?.stop();
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const headers: Record<string, string> = { 'Content-Type': 'application/json' };
    let answer: Answer;
    try {
      const url = new URL(req.url ?? '/', 'http://x');
      const parts = url.pathname.split('/').filter((p) => p !== '');
      // Served under /accelerator (as a proxy in front of Cyborg often maps it), the links say so too.
      const prefix = parts[0] === 'accelerator' ? '/accelerator' : '';
      if (prefix) parts.shift();
      const method = req.method ?? 'GET';
      const baseUrl = `${this.origin(req)}${prefix}`;
      if (parts.length === 0) {
        answer = method === 'GET' ? { status: 200, body: rootDocument(baseUrl) } : notAllowed();
      } else {
        if (parts[0] === 'v2') parts.shift();
        // Every v2 answer says the range and the version served (Cyborg's v2 _route).
        headers.Vary = VERSION_HEADER;
        headers['OpenStack-API-Minimum-Version'] = versionString(MIN_VERSION);
        headers['OpenStack-API-Maximum-Version'] = versionString(MAX_VERSION);
        const version = requestedVersion(headerOf(req, VERSION_HEADER));
        headers[VERSION_HEADER] = `${SERVICE_TYPE} ${versionString(version)}`;
        const caller = await this.deps.identity.caller({
          authToken: headerOf(req, 'X-Auth-Token'),
          serviceToken: headerOf(req, 'X-Service-Token'),
        });
        answer = await this.route({
          method,
          parts,
          query: url.searchParams,
          version,
          caller,
          baseUrl,
          body: () => readJson(req),
        });
      }
    } catch (err) {
      answer = this.failure(err);
    }
    if (answer.status === 204 || answer.body === undefined) {
      delete headers['Content-Type'];
      res.writeHead(answer.status, headers).end();
      return;
    }
    const text = typeof answer.body === 'string' ? answer.body : JSON.stringify(answer.body);
    res.writeHead(answer.status, headers).end(text);
  }

  /**
   * scheme://host of the links: this server's own, or, trusting a proxy, the
   * one its caller reached (X-Forwarded-Proto, X-Forwarded-Host; the first of
   * a list, the proxy nearest the caller). A malformed one is 400 naming it.
   */
  private origin(req: IncomingMessage): string {
    let proto = this.deps.tls ? 'https' : 'http';
    let host = req.headers.host ?? this.address;
    if (this.deps.trustProxyHeaders) {
      const fp = firstOf(headerOf(req, 'X-Forwarded-Proto'));
      if (fp !== undefined) {
        if (!/^https?$/i.test(fp)) {
          throw badRequest('X-Forwarded-Proto', `${JSON.stringify(fp.slice(0, 40))}: expected http or https`);
        }
        proto = fp.toLowerCase();
      }
      const fh = firstOf(headerOf(req, 'X-Forwarded-Host'));
      if (fh !== undefined) {
        if (!/^(?:[A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\])(?::\d{1,5})?$/.test(fh)) {
          throw badRequest('X-Forwarded-Host', `${JSON.stringify(fh.slice(0, 80))}: expected host[:port]`);
        }
        host = fh;
      }
    }
    return `${proto}://${host}`;
  }

  private failure(err: unknown): Answer & { body: string } {
    if (err instanceof CyborgHttpError)
      return { status: err.status, body: errorBody(err.status, err.message) };
    if (isBerthError(err)) {
      const status = httpStatusOf(err);
      if (status === 500) this.deps.logger.error({ err }, 'Cyborg API: internal error');
      return { status, body: errorBody(status, err.message) };
    }
    this.deps.logger.error({ err }, 'Cyborg API: internal error');
    return { status: 500, body: errorBody(500, 'internal error; the scheduler log says more') };
  }

  private async route(r: Req): Promise<Answer> {
    const [collection, id, ...rest] = r.parts;
    if (rest.length > 0) throw new CyborgHttpError(404, `no such resource: /${r.parts.join('/')}`);
    const can = (a: Action) => authorize(a, r.caller);
    if (collection === undefined) {
      if (r.method !== 'GET') return notAllowed();
      return { status: 200, body: v2Document(r.baseUrl) };
    }
    if (collection === 'device_profiles') {
      if (r.method === 'GET' && id === undefined) {
        can('device_profile:get');
        const names = r.query.get('name')?.split(',');
        const all = await this.deps.useCases.listProfiles();
        const list = names ? all.filter((p) => names.includes(p.name)) : all;
        return { status: 200, body: { device_profiles: list.map((p) => profileView(p, r.baseUrl)) } };
      }
      if (r.method === 'GET') {
        can('device_profile:get');
        if (!isUuidLike(id!) && r.version.minor < 2) {
          throw new CyborgHttpError(
            406,
            'Request not acceptable. The minimal required API version should be 2.2',
          );
        }
        const p = await this.deps.useCases.getProfile(isUuidLike(id!) ? requireUuid('uuid', id) : id!);
        return { status: 200, body: { device_profile: profileView(p, r.baseUrl) } };
      }
      if (r.method === 'POST' && id === undefined) {
        can('device_profile:create');
        const input = profileInputFromCyborg(await r.body());
        let spec: ReturnType<typeof validateProfile>;
        try {
          spec = validateProfile(input);
        } catch (err) {
          throw isBerthError(err) ? profileError(err) : err;
        }
        return { status: 201, body: profileView(await this.deps.useCases.createProfile(spec), r.baseUrl) };
      }
      if (r.method === 'DELETE' && id !== undefined) {
        can('device_profile:delete');
        const names = isUuidLike(id)
          ? [(await this.deps.useCases.getProfile(requireUuid('uuid', id))).name]
          : id.split(',');
        for (const name of names) {
          if (!(await this.deps.useCases.deleteProfile(name))) {
            throw new CyborgHttpError(404, `Device Profile not found with name=${name}`);
          }
        }
        return { status: 204 };
      }
      return notAllowed();
    }
    if (collection === 'accelerator_requests') {
      if (r.method === 'POST' && id === undefined) {
        can('arq:create');
        return this.createArqs(r);
      }
      if (r.method === 'GET' && id === undefined) {
        can('arq:get');
        return this.listArqs(r);
      }
      if (r.method === 'GET') {
        can('arq:get');
        const arq = await visibleArq(this.deps.useCases, r.caller!, requireUuid('uuid', id));
        return { status: 200, body: await this.view(arq, r.baseUrl) };
      }
      // The collection (Nova) or one ARQ's own URL (openstacksdk, `openstack accelerator arq bind`).
      if (r.method === 'PATCH') return this.patch(r, id === undefined ? undefined : requireUuid('uuid', id));
      if (r.method === 'DELETE') return this.deleteArqs(r, id);
      return notAllowed();
    }
    if (collection === 'erasure_certificates' && id === undefined) {
      if (r.method !== 'GET') return notAllowed();
      return this.listCertificates(r);
    }
    throw new CyborgHttpError(404, `no such resource: /v2/${collection}`);
  }

  /**
   * Berth's addition: `GET /v2/erasure_certificates?instance=` — a project reads the
   * certificates of its instances (those Nova bound for it) with the credential it
   * calls this API with (a Keystone token); an admin reads any. Same rules as the
   * gRPC CertificateService: the caller is the project, with the service role.
   */
  private async listCertificates(r: Req): Promise<Answer> {
    authorize('certificate:get', r.caller);
    const instance = r.query.get('instance');
    if (!instance) throw badRequest('instance', 'required: the instance whose certificates to read');
    const caller = r.caller!;
    const list = await this.deps.certificates.list(
      { instanceUuid: requireUuid('instance', instance) },
      { subject: caller.project, roles: caller.admin ? ['admin'] : ['service'] },
    );
    return {
      status: 200,
      body: {
        erasure_certificates: list.map((c) => ({
          jws: c.jws,
          job_id: c.jobId,
          instance_uuid: c.instanceUuid,
          arq_uuid: c.arqUuid,
          device_uuid: c.deviceUuid,
          host: c.host,
          kid: c.kid,
          media_key: c.mediaKey,
          seq: c.seq,
          issued_at: c.issuedAt,
        })),
      },
    };
  }

  // --- ARQs -----------------------------------------------------------------

  private async createArqs(r: Req): Promise<Answer> {
    const body = await r.body();
    const name = (body as { device_profile_name?: unknown } | null)?.device_profile_name;
    if (typeof name !== 'string' || name === '')
      throw badRequest('device_profile_name', 'Device profile name needed.');
    try {
      await this.deps.useCases.getProfile(name);
    } catch (err) {
      if (isBerthError(err) && err.code === 'NOT_FOUND') {
        throw new CyborgHttpError(404, `Device Profile not found with name=${name}`);
      }
      throw err;
    }
    const arqs = await this.deps.useCases.createArqs({ profileName: name, project: r.caller!.project });
    return { status: 201, body: { arqs: await Promise.all(arqs.map((a) => this.view(a, r.baseUrl))) } };
  }

  private async listArqs(r: Req): Promise<Answer> {
    const instance = r.query.get('instance');
    const bindState = r.query.get('bind_state');
    if (bindState !== null && bindState !== 'resolved') {
      throw badRequest('bind_state', `${JSON.stringify(bindState)}: expected resolved`);
    }
    let arqs = (
      await this.deps.useCases.listArqs(instance ? requireUuid('instance', instance) : undefined)
    ).filter((a) => visibleTo(r.caller!, a));
    if (bindState) {
      const resolved = (a: Arq) => a.state === 'bound' || a.state === 'bind_failed' || a.state === 'deleting';
      // Cyborg: 423 while any of the instance's ARQs is unresolved.
      if (instance && !arqs.every(resolved)) return { status: 423 };
      arqs = arqs.filter(resolved);
    }
    return { status: 200, body: { arqs: await Promise.all(arqs.map((a) => this.view(a, r.baseUrl))) } };
  }

  /**
   * Cyborg's bind or unbind (app/cyborg-binds.ts): checked, the ARQs claimed, 202; the bind
   * runs on and Nova is told how it ended. `only`: sent to that ARQ's own URL, whose body is
   * keyed by it alone.
   */
  private async patch(r: Req, only?: Uuid): Promise<Answer> {
    const patches = parsePatchList(await r.body(), r.version, only);
    const caller = r.caller;
    if (patches[0]!.op === 'remove') {
      // Unbind: the ARQs go back to Initial (Cyborg's Unbound, shown as Berth keeps it), their
      // devices through release — scrubbed with proof before they are offered again.
      authorize('arq:unbind', caller);
      await this.deps.binds.unbind(
        caller!,
        patches.map((p) => p.arqUuid),
      );
      return { status: 202 };
    }
    authorize('arq:bind', caller);
    const binds = patches.flatMap((p) => (p.op === 'add' ? [p] : []));
    if (binds.some((p) => p.projectId !== null) && !caller!.admin) {
      throw new CyborgHttpError(403, "Policy doesn't allow cyborg:arq:update to be performed.");
    }
    await this.deps.binds.bind(caller!, binds);
    return { status: 202 };
  }

  private async deleteArqs(r: Req, id: string | undefined): Promise<Answer> {
    const caller = r.caller;
    const arqsParam = r.query.get('arqs');
    const instanceParam = r.query.get('instance');
    if (id !== undefined) {
      if (arqsParam !== null || instanceParam !== null)
        throw badRequest('arqs', 'give the uuid in the path or a query, not both');
      return this.deleteByUuids(r, [id]);
    }
    if ((arqsParam && instanceParam) || (!arqsParam && !instanceParam)) {
      throw badRequest('arqs', 'Provide either an ARQ uuid list or an instance UUID');
    }
    if (arqsParam) return this.deleteByUuids(r, arqsParam.split(','));
    authorize('arq:delete_by_instance', caller);
    const instance = requireUuid('instance', instanceParam);
    const mine = (await this.deps.useCases.listArqs(instance)).filter((a) => visibleTo(caller!, a));
    // Idempotent: deleting what is gone is a no-op. The devices go through release (scrub with proof).
    if (mine.length > 0) await this.deps.useCases.deleteArqs({ uuids: mine.map((a) => a.uuid) });
    return { status: 204 };
  }

  private async deleteByUuids(r: Req, raw: string[]): Promise<Answer> {
    authorize('arq:delete', r.caller);
    if (raw.length > 256) throw badRequest('arqs', `${raw.length} ARQs is more than 256`);
    const uuids = raw.map((u, i) => requireUuid(`arqs[${i}]`, u));
    for (const u of uuids) {
      const arq = await visibleArq(this.deps.useCases, r.caller!, u);
      // A bound ARQ (or one binding) is Nova's to delete; a failed bind is the owner's too.
      if (arq.instanceUuid && arq.state !== 'bind_failed' && !r.caller!.service && !r.caller!.admin) {
        throw new CyborgHttpError(
          403,
          `ARQ ${arq.uuid} is bound to instance ${arq.instanceUuid}. Use the Compute API to manage instance accelerators.`,
        );
      }
    }
    await this.deps.useCases.deleteArqs({ uuids });
    return { status: 204 };
  }

  private async view(a: Arq, baseUrl: string) {
    let deviceRpUuid: string | null = null;
    let physicalNetwork: string | null = null;
    if (a.state === 'bound' && a.deviceUuid) {
      try {
        const d = await this.deps.useCases.getDevice({ uuid: a.deviceUuid });
        deviceRpUuid = this.deps.placement.deviceProvider(d)?.providerUuid ?? null;
        physicalNetwork = d.attributes.physical_network ?? null;
      } catch (err) {
        if (!(err instanceof BerthError && err.code === 'NOT_FOUND')) throw err;
      }
    }
    return arqView(a, { baseUrl, deviceRpUuid, physicalNetwork });
  }
}

const notAllowed = (): never => {
  throw new CyborgHttpError(405, 'Method not allowed');
};

function headerOf(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name.toLowerCase()];
  return Array.isArray(v) ? v.join(',') : v;
}

/** The first of a comma-separated header's values, trimmed; undefined when absent or empty. */
function firstOf(v: string | undefined): string | undefined {
  const first = v?.split(',')[0]?.trim();
  return first ? first : undefined;
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size > MAX_BODY) throw new CyborgHttpError(413, `the request body is larger than ${MAX_BODY} bytes`);
    chunks.push(c as Buffer);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  if (text.trim() === '') throw badRequest('body', 'a JSON body is required');
  try {
    return JSON.parse(text);
  } catch (err) {
    throw badRequest('body', `not JSON: ${(err as Error).message}`);
  }
}

const versionLinks = (baseUrl: string) => [{ href: `${baseUrl}/v2/`, rel: 'self' }];

function rootDocument(baseUrl: string) {
  const v2 = {
    id: 'v2.0',
    status: 'CURRENT',
    min_version: versionString(MIN_VERSION),
    max_version: versionString(MAX_VERSION),
    links: versionLinks(baseUrl),
  };
  return {
    name: 'OpenStack Cyborg API',
    description:
      "Berth serving the part of Cyborg's v2 API that Nova calls (PCI passthrough devices, scrubbed with proof between tenants).",
    versions: [v2],
    default_version: v2,
  };
}

function v2Document(baseUrl: string) {
  return {
    id: 'v2.0',
    status: 'CURRENT',
    min_version: versionString(MIN_VERSION),
    max_version: versionString(MAX_VERSION),
    links: versionLinks(baseUrl),
  };
}
