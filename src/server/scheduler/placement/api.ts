/**
 * The Placement REST API as Berth uses it, at one pinned microversion
 * (1.26: nested providers (1.14), `required` traits on GET
 * /resource_providers (1.18), POST returning the provider (1.20), error
 * codes (1.23), and `reserved` allowed to equal `total` (1.26), which is how
 * Berth holds a device back). `negotiate()` checks at start that the server
 * serves it (GET / lists min_version and max_version).
 *
 * Failures are sorted in three: PlacementUnreachable (network, timeout, 5xx,
 * or credentials Keystone will not renew: an outage, retried), a conflict
 * (409 placement.concurrent_update: re-read the generation and retry), and
 * PlacementRefused (any other 4xx, with Placement's error code and detail).
 */
import { ConfigError } from '../../../errors.js';
import type { ResourceClass, Trait } from '../../../identifiers.js';
import { KeystoneRefused, KeystoneUnavailable, type TokenSource } from './keystone.js';

export const PINNED_MICROVERSION = '1.26';

export interface Provider {
  uuid: string;
  name: string;
  generation: number;
  parent_provider_uuid: string | null;
  root_provider_uuid: string;
}

export interface InventoryRecord {
  total: number;
  reserved: number;
  min_unit: number;
  max_unit: number;
  step_size: number;
  allocation_ratio: number;
}

export type Inventories = Record<string, InventoryRecord>;

/** Placement did not answer usably: an outage (retried with backoff). */
export class PlacementUnreachable extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'PlacementUnreachable';
  }
}

/** Placement answered 4xx. */
export class PlacementRefused extends Error {
  constructor(
    readonly status: number,
    /** Placement's error code (placement.concurrent_update, …), '' when it gave none. */
    readonly code: string,
    readonly detail: string,
    readonly what: string,
  ) {
    super(`${what}: Placement answered ${status}${code ? ` ${code}` : ''}: ${detail}`);
    this.name = 'PlacementRefused';
  }

  get isGenerationConflict(): boolean {
    return this.status === 409 && this.code === 'placement.concurrent_update';
  }
}

export interface PlacementHttpOptions {
  /** Placement's endpoint; or null to take it from the token source's catalog. */
  url: string | null;
  auth: TokenSource;
  timeoutMs?: number;
  fetch?: typeof fetch;
}

function errorOf(text: string): { code: string; detail: string } {
  try {
    const doc = JSON.parse(text) as { errors?: Array<{ code?: string; detail?: string; title?: string }> };
    const e = doc.errors?.[0];
    if (e) {
      const detail = (e.detail ?? e.title ?? '')
        .replace(/^[^\n]*\n\n\s*/, '')
        .replace(/\s+/g, ' ')
        .trim();
      return { code: e.code ?? '', detail };
    }
  } catch {
    // Not JSON: the text is the detail.
  }
  return { code: '', detail: text.replace(/\s+/g, ' ').trim().slice(0, 300) };
}

export class PlacementApi {
  private base: string | null;

  constructor(private readonly o: PlacementHttpOptions) {
    this.base = o.url ? o.url.replace(/\/+$/, '') : null;
  }

  /** The endpoint in use ('' until known from the catalog). */
  get url(): string {
    return this.base ?? '';
  }

  private async endpoint(): Promise<string> {
    if (this.base) return this.base;
    let url: string | null = null;
    try {
      url = (await this.o.auth.catalogEndpoint?.()) ?? null;
    } catch (err) {
      throw this.authFailure(err);
    }
    if (!url) {
      throw new ConfigError(
        `Keystone's catalog has no "placement" endpoint (${this.o.auth.describe}); give the URL (--placement-url)`,
      );
    }
    this.base = url.replace(/\/+$/, '');
    return this.base;
  }

  private authFailure(err: unknown): Error {
    if (err instanceof KeystoneUnavailable) return new PlacementUnreachable(err.message, { cause: err });
    if (err instanceof KeystoneRefused) {
      return new PlacementUnreachable(`Berth's Placement credentials are refused: ${err.message}`, {
        cause: err,
      });
    }
    return err as Error;
  }

  /** One call; `ok` lists the statuses that are answers (others throw). */
  async call<T = unknown>(
    method: string,
    path: string,
    what: string,
    options: { body?: unknown; ok?: number[]; microversion?: string } = {},
  ): Promise<{ status: number; body: T }> {
    const ok = options.ok ?? [200];
    const base = await this.endpoint();
    for (let attempt = 0; ; attempt++) {
      let token: string;
      try {
        token = await this.o.auth.token();
      } catch (err) {
        throw this.authFailure(err);
      }
      let res: Response;
      try {
        res = await (this.o.fetch ?? fetch)(`${base}${path}`, {
          method,
          headers: {
            'x-auth-token': token,
            'openstack-api-version': `placement ${options.microversion ?? PINNED_MICROVERSION}`,
            accept: 'application/json',
            ...(options.body === undefined ? {} : { 'content-type': 'application/json' }),
          },
          ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
          signal: AbortSignal.timeout(this.o.timeoutMs ?? 10_000),
        });
      } catch (err) {
        const cause = (err as { cause?: { code?: string; message?: string } }).cause;
        const why = cause?.code ?? cause?.message ?? (err as Error).message;
        throw new PlacementUnreachable(`${what}: Placement at ${base} does not answer (${why})`, {
          cause: err,
        });
      }
      const text = await res.text();
      if (ok.includes(res.status)) {
        return { status: res.status, body: (text ? JSON.parse(text) : {}) as T };
      }
      if (res.status === 401 && attempt === 0) {
        // The token expired or was revoked: a fresh one, once.
        this.o.auth.invalidate();
        continue;
      }
      const { code, detail } = errorOf(text);
      if (res.status >= 500 || res.status === 401 || res.status === 403) {
        const hint =
          res.status === 401 || res.status === 403 ? ` (credentials: ${this.o.auth.describe})` : '';
        throw new PlacementUnreachable(
          `${what}: Placement at ${base} answered ${res.status}${code ? ` ${code}` : ''}: ${detail}${hint}`,
        );
      }
      throw new PlacementRefused(res.status, code, detail, what);
    }
  }

  /** GET /: the microversions the server serves. */
  async versions(): Promise<{ min: string; max: string }> {
    const r = await this.call<{ versions?: Array<{ min_version?: string; max_version?: string }> }>(
      'GET',
      '/',
      'GET / (versions)',
    );
    const v = r.body.versions?.[0];
    return { min: v?.min_version ?? '1.0', max: v?.max_version ?? '1.0' };
  }

  async providers(query: Record<string, string>): Promise<Provider[]> {
    const qs = new URLSearchParams(query).toString();
    const r = await this.call<{ resource_providers: Provider[] }>(
      'GET',
      `/resource_providers${qs ? `?${qs}` : ''}`,
      `GET /resource_providers?${qs}`,
    );
    return r.body.resource_providers;
  }

  async providerByName(name: string): Promise<Provider | null> {
    return (await this.providers({ name }))[0] ?? null;
  }

  async provider(uuid: string): Promise<Provider | null> {
    const r = await this.call<Provider>('GET', `/resource_providers/${uuid}`, `GET provider ${uuid}`, {
      ok: [200, 404],
    });
    return r.status === 404 ? null : r.body;
  }

  async createProvider(p: { name: string; uuid: string; parent?: string }): Promise<Provider> {
    const r = await this.call<Provider>('POST', '/resource_providers', `create provider ${p.name}`, {
      body: { name: p.name, uuid: p.uuid, ...(p.parent ? { parent_provider_uuid: p.parent } : {}) },
    });
    return r.body;
  }

  /** true when deleted, false when it was already gone. */
  async deleteProvider(uuid: string, name: string): Promise<boolean> {
    const r = await this.call('DELETE', `/resource_providers/${uuid}`, `delete provider ${name}`, {
      ok: [204, 404],
    });
    return r.status === 204;
  }

  async traits(uuid: string): Promise<{ generation: number; traits: string[] }> {
    const r = await this.call<{ traits: string[]; resource_provider_generation: number }>(
      'GET',
      `/resource_providers/${uuid}/traits`,
      `GET traits of ${uuid}`,
    );
    return { generation: r.body.resource_provider_generation, traits: r.body.traits };
  }

  /** Returns the new generation. */
  async putTraits(
    uuid: string,
    generation: number,
    traits: readonly string[],
    name: string,
  ): Promise<number> {
    const r = await this.call<{ resource_provider_generation: number }>(
      'PUT',
      `/resource_providers/${uuid}/traits`,
      `set traits of ${name}`,
      { body: { resource_provider_generation: generation, traits } },
    );
    return r.body.resource_provider_generation;
  }

  async inventories(uuid: string): Promise<{ generation: number; inventories: Inventories }> {
    const r = await this.call<{ inventories: Inventories; resource_provider_generation: number }>(
      'GET',
      `/resource_providers/${uuid}/inventories`,
      `GET inventories of ${uuid}`,
    );
    return { generation: r.body.resource_provider_generation, inventories: r.body.inventories };
  }

  /** Returns the new generation. */
  async putInventories(
    uuid: string,
    generation: number,
    inventories: Inventories,
    name: string,
  ): Promise<number> {
    const r = await this.call<{ resource_provider_generation: number }>(
      'PUT',
      `/resource_providers/${uuid}/inventories`,
      `set inventory of ${name}`,
      { body: { resource_provider_generation: generation, inventories } },
    );
    return r.body.resource_provider_generation;
  }

  /** Consumers holding allocations against the provider, and its generation. */
  async allocations(
    uuid: string,
  ): Promise<{ generation: number; consumers: Record<string, Record<string, number>> }> {
    const r = await this.call<{
      allocations: Record<string, { resources: Record<string, number> }>;
      resource_provider_generation: number;
    }>('GET', `/resource_providers/${uuid}/allocations`, `GET allocations of ${uuid}`);
    const consumers: Record<string, Record<string, number>> = {};
    for (const [c, a] of Object.entries(r.body.allocations)) consumers[c] = a.resources;
    return { generation: r.body.resource_provider_generation, consumers };
  }

  /** Traits known to Placement (all, or by `name` filter such as `in:A,B`). */
  async listTraits(filter?: string): Promise<string[]> {
    const r = await this.call<{ traits: string[] }>(
      'GET',
      `/traits${filter ? `?name=${encodeURIComponent(filter)}` : ''}`,
      'GET /traits',
    );
    return r.body.traits;
  }

  /** PUT /traits/{name}: creates a custom trait (201) or finds it (204). */
  async ensureTrait(name: Trait): Promise<void> {
    await this.call('PUT', `/traits/${name}`, `create trait ${name}`, { ok: [201, 204] });
  }

  /** PUT /resource_classes/{name} (idempotent since 1.7). */
  async ensureResourceClass(name: ResourceClass): Promise<void> {
    await this.call('PUT', `/resource_classes/${name}`, `create resource class ${name}`, { ok: [201, 204] });
  }
}

/** `1.26` ≤ `1.39`? */
export function microversionAtLeast(have: string, want: string): boolean {
  const [a = 0, b = 0] = have.split('.').map(Number);
  const [c = 0, d = 0] = want.split('.').map(Number);
  return a > c || (a === c && b >= d);
}
