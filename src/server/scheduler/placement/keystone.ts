/**
 * The credentials Berth presents to Placement (`X-Auth-Token`):
 *
 * - `noauth`: Placement's `noauth2` strategy (labs, tests): the token is the
 *   user name, and `admin` is an admin.
 * - `token`: a Keystone token given by the operator, sent as it is (as
 *   keystoneauth's admin_token / `openstack --os-token`); it cannot be renewed,
 *   so a 401 says it expired.
 * - `app-credential`: a Keystone v3 application credential, exchanged for a
 *   token at `POST {auth_url}/v3/auth/tokens` (methods: application_credential;
 *   by id, or by name with its user); the token comes back in `X-Subject-Token`,
 *   its end in `token.expires_at`, and Placement's endpoint in the catalog
 *   (service type `placement`) when no URL is configured. A token is renewed
 *   before it expires and after a 401.
 */
import { ConfigError } from '../../../errors.js';

export interface TokenSource {
  /** What `berth placement status` and the log say about the credentials. */
  readonly describe: string;
  /** A token to send now. */
  token(): Promise<string>;
  /** Placement answered 401 with the last token: forget it. */
  invalidate(): void;
  /** Placement's endpoint from Keystone's catalog, when the source has one. */
  catalogEndpoint?(): Promise<string | null>;
}

export class NoAuth implements TokenSource {
  readonly describe: string;
  constructor(private readonly user = 'admin') {
    this.describe = `noauth (user ${user})`;
  }
  async token(): Promise<string> {
    return this.user;
  }
  invalidate(): void {}
}

export class StaticToken implements TokenSource {
  readonly describe = 'a Keystone token given by the operator';
  constructor(private readonly value: string) {
    if (!value) throw new ConfigError('placement auth token: the token is empty');
  }
  async token(): Promise<string> {
    return this.value;
  }
  invalidate(): void {}
}

/** Keystone refused the credential (401/403/400): a configuration error, not an outage. */
export class KeystoneRefused extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'KeystoneRefused';
  }
}

/** Keystone could not be reached or failed (network, 5xx): retried like a Placement outage. */
export class KeystoneUnavailable extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'KeystoneUnavailable';
  }
}

export interface AppCredentialOptions {
  /** Keystone's endpoint, with or without the trailing /v3. */
  authUrl: string;
  /** The application credential's id; or its name with the user that owns it. */
  id?: string;
  name?: string;
  userId?: string;
  userName?: string;
  userDomainId?: string;
  userDomainName?: string;
  secret: string;
  /** Catalog endpoint interface(s) to look for, in order (default internal, public). */
  interfaces?: string[];
  region?: string;
  /** Renew this long before the token expires (default 120 s). */
  renewBeforeMs?: number;
  timeoutMs?: number;
  fetch?: typeof fetch;
}

interface CatalogEntry {
  type?: string;
  endpoints?: Array<{ interface?: string; region?: string; region_id?: string; url?: string }>;
}

export class AppCredential implements TokenSource {
  readonly describe: string;
  private current: { token: string; renewAt: number; catalog: CatalogEntry[] } | null = null;
  private pending: Promise<{ token: string; renewAt: number; catalog: CatalogEntry[] }> | null = null;
  private readonly url: string;

  constructor(private readonly o: AppCredentialOptions) {
    if (!o.authUrl) throw new ConfigError('placement auth app-credential: auth_url (Keystone) is required');
    if (!o.secret) throw new ConfigError('placement auth app-credential: the secret is empty');
    if (!o.id && !o.name) {
      throw new ConfigError('placement auth app-credential: give the application credential id, or its name');
    }
    if (!o.id && !o.userId && !o.userName) {
      throw new ConfigError(
        'placement auth app-credential: a credential given by name needs its user (user_id, or user_name with user_domain_id/name)',
      );
    }
    if (!o.id && o.userName && !o.userDomainId && !o.userDomainName) {
      throw new ConfigError(
        'placement auth app-credential: user_name needs user_domain_id or user_domain_name',
      );
    }
    let base: URL;
    try {
      base = new URL(o.authUrl);
    } catch {
      throw new ConfigError(
        `placement auth app-credential: auth_url ${JSON.stringify(o.authUrl)} is not a URL`,
      );
    }
    const path = base.pathname.replace(/\/+$/, '');
    this.url = `${base.origin}${path.endsWith('/v3') ? path : `${path}/v3`}/auth/tokens`;
    this.describe = `Keystone application credential ${o.id ?? o.name} at ${this.url}`;
  }

  async token(): Promise<string> {
    return (await this.session()).token;
  }

  invalidate(): void {
    this.current = null;
  }

  async catalogEndpoint(): Promise<string | null> {
    const { catalog } = await this.session();
    const entry = catalog.find((c) => c.type === 'placement');
    for (const iface of this.o.interfaces ?? ['internal', 'public']) {
      const ep = entry?.endpoints?.find(
        (e) =>
          e.interface === iface &&
          (!this.o.region || e.region === this.o.region || e.region_id === this.o.region),
      );
      if (ep?.url) return ep.url;
    }
    return null;
  }

  private async session() {
    if (this.current && Date.now() < this.current.renewAt) return this.current;
    this.pending ??= this.issue().finally(() => {
      this.pending = null;
    });
    this.current = await this.pending;
    return this.current;
  }

  private body(): unknown {
    const o = this.o;
    const credential: Record<string, unknown> = { secret: o.secret };
    if (o.id) credential.id = o.id;
    else {
      credential.name = o.name;
      const domain = o.userDomainId ? { id: o.userDomainId } : { name: o.userDomainName };
      credential.user = o.userId ? { id: o.userId } : { name: o.userName, domain };
    }
    return {
      auth: { identity: { methods: ['application_credential'], application_credential: credential } },
    };
  }

  private async issue() {
    const f = this.o.fetch ?? fetch;
    let res: Response;
    try {
      res = await f(this.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json' },
        body: JSON.stringify(this.body()),
        signal: AbortSignal.timeout(this.o.timeoutMs ?? 10_000),
      });
    } catch (err) {
      throw new KeystoneUnavailable(`Keystone at ${this.url} does not answer: ${(err as Error).message}`, {
        cause: err,
      });
    }
    const text = await res.text();
    if (res.status >= 500) {
      throw new KeystoneUnavailable(`Keystone at ${this.url} answered ${res.status}: ${text.slice(0, 200)}`);
    }
    if (res.status !== 201 && res.status !== 200) {
      throw new KeystoneRefused(
        `Keystone at ${this.url} refused ${this.describe.replace(/ at .*$/, '')}: ${res.status} ${keystoneMessage(text)}`,
      );
    }
    const token = res.headers.get('x-subject-token');
    if (!token)
      throw new KeystoneRefused(`Keystone at ${this.url} answered ${res.status} without X-Subject-Token`);
    let doc: { token?: { expires_at?: string; catalog?: CatalogEntry[] } } = {};
    try {
      doc = JSON.parse(text);
    } catch {
      // A token without a body still works; it is renewed at the default lifetime.
    }
    const expires = Date.parse(doc.token?.expires_at ?? '');
    const lifetime = Number.isFinite(expires) ? expires - Date.now() : 3_600_000;
    const before = Math.min(this.o.renewBeforeMs ?? 120_000, lifetime / 2);
    return { token, renewAt: Date.now() + lifetime - before, catalog: doc.token?.catalog ?? [] };
  }
}

function keystoneMessage(text: string): string {
  try {
    const doc = JSON.parse(text) as { error?: { message?: string; title?: string } };
    return doc.error?.message ?? doc.error?.title ?? text.slice(0, 200);
  } catch {
    return text.slice(0, 200);
  }
}
