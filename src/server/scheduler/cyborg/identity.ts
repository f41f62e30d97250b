/**
 * Who calls the Cyborg API, and what they may do: the gRPC auth's ideas
 * (src/server/grpc/auth/authenticator.ts) in Keystone's terms — credentials checked once
 * per request, one table of the rules (ACTIONS), fail closed for anything not
 * in it, 401 without a valid credential and 403 with one that may not.
 *
 * - `keystone`: X-Auth-Token (and Nova's X-Service-Token) are validated at
 *   Keystone (`GET /v3/auth/tokens` with X-Subject-Token), with the
 *   scheduler's own token (`credentials`); a result is kept 60 s. The
 *   token's project is the caller's project; role `admin` is an admin; a
 *   service token counts when its roles include `service` (Cyborg's
 *   `[keystone_authtoken] service_token_roles`).
 * - `berth`: Berth's own bearer tokens (static tokens, JWTs), checked by the
 *   scheduler's Authenticator as gRPC calls are: role `admin` is an admin,
 *   a token's subject is its project, and a service token counts when it
 *   has role `service`. For clouds whose Nova is given a Berth token.
 * - `noauth` (labs and tests, like Placement's noauth2): X-Auth-Token is
 *   `user` or `user:project`, user `admin` is an admin, the project defaults
 *   to the user; any X-Service-Token counts as Nova's.
 */
import { createHash } from 'node:crypto';
import { isAuthRefusal, type Principal } from '../../grpc/auth/authenticator.js';
import type { TokenSource } from '../placement/keystone.js';
import { CyborgHttpError } from './shapes.js';

export interface CyborgCaller {
  user: string;
  project: string;
  admin: boolean;
  /** The request carries a valid service token (Nova acting for the user). */
  service: boolean;
  /** May only read (a Keystone token whose only role is `reader`; Berth's `reader` role). */
  readOnly: boolean;
}

/**
 * THE table: what each action needs. `service` = a service token (Cyborg's
 * _require_service_token), or an admin's own token; ownership of ARQs (a project sees and deletes
 * only its own; a bound ARQ only with a service token) is checked where the
 * ARQ is read (./server.ts).
 */
export const ACTIONS = {
  'versions:get': 'anyone',
  'device_profile:get': 'reader',
  'device_profile:create': 'admin',
  'device_profile:delete': 'admin',
  'arq:create': 'caller',
  'arq:get': 'reader',
  'arq:bind': 'service',
  'arq:unbind': 'service',
  'arq:delete': 'caller',
  'arq:delete_by_instance': 'service',
  // Berth's addition: a project's erasure certificates (its own instances'; an admin's: any).
  'certificate:get': 'reader',
} as const;
export type Action = keyof typeof ACTIONS;

export function authorize(action: Action, caller: CyborgCaller | null): void {
  const need = ACTIONS[action];
  if (need === 'anyone') return;
  if (!caller) throw new CyborgHttpError(401, 'Authentication required: send X-Auth-Token');
  if (need !== 'reader' && caller.readOnly && !caller.admin) {
    throw new CyborgHttpError(
      403,
      `Policy doesn't allow cyborg:${action} to be performed: ${caller.user} may only read.`,
    );
  }
  if (need === 'admin' && !caller.admin) {
    throw new CyborgHttpError(403, `Policy doesn't allow cyborg:${action} to be performed.`);
  }
  // An admin (the operator's `openstack accelerator arq bind|unbind`, which sends no service token) may too.
  if (need === 'service' && !caller.service && !caller.admin) {
    throw new CyborgHttpError(
      403,
      'This operation requires a service token. Use the Compute API to manage instance accelerators.',
    );
  }
}

export interface IdentitySource {
  readonly describe: string;
  /** The caller, or null when no X-Auth-Token was sent; 401 for a token that is not valid. */
  caller(headers: { authToken?: string; serviceToken?: string }): Promise<CyborgCaller | null>;
}

export class NoAuthIdentity implements IdentitySource {
  readonly describe = 'noauth (X-Auth-Token is user[:project]; labs only)';
  async caller(h: { authToken?: string; serviceToken?: string }): Promise<CyborgCaller | null> {
    if (!h.authToken) return null;
    const [user = '', project] = h.authToken.split(':', 2);
    if (
      !/^[A-Za-z0-9_.@-]{1,255}$/.test(user) ||
      (project !== undefined && !/^[A-Za-z0-9_-]{1,64}$/.test(project))
    ) {
      throw new CyborgHttpError(401, 'noauth: X-Auth-Token must be user or user:project');
    }
    return {
      user,
      project: project ?? user,
      admin: user === 'admin',
      service: Boolean(h.serviceToken),
      readOnly: false,
    };
  }
}

/** What the `berth` mode needs of the scheduler's Authenticator. */
export interface TokenChecker {
  authenticateToken(token: string): Promise<Principal>;
}

export class BerthTokenIdentity implements IdentitySource {
  readonly describe = "Berth's tokens (static tokens, JWTs), as for gRPC";
  constructor(private readonly auth: TokenChecker) {}

  async caller(h: { authToken?: string; serviceToken?: string }): Promise<CyborgCaller | null> {
    if (!h.authToken) return null;
    const user = await this.check(h.authToken);
    // As over gRPC: an agent's or the scheduler's credential is no caller of these APIs.
    if (!user.roles.some((r) => r === 'admin' || r === 'service' || r === 'reader')) {
      throw new CyborgHttpError(
        403,
        `${user.subject} has role ${user.roles.join(', ')}: not a caller of the Cyborg API`,
      );
    }
    const service = h.serviceToken ? (await this.check(h.serviceToken)).roles.includes('service') : false;
    return {
      user: user.subject,
      project: user.subject,
      admin: user.roles.includes('admin'),
      service,
      readOnly: !user.roles.some((r) => r === 'admin' || r === 'service'),
    };
  }

  private async check(token: string): Promise<Principal> {
    try {
      return await this.auth.authenticateToken(token);
    } catch (err) {
      if (isAuthRefusal(err)) throw new CyborgHttpError(401, err.message);
      throw err;
    }
  }
}

interface TokenFacts {
  user: string;
  project: string;
  roles: string[];
}

const CACHE_MS = 60_000;

export class KeystoneIdentity implements IdentitySource {
  readonly describe: string;
  private readonly cache = new Map<string, { facts: TokenFacts; until: number }>();

  constructor(
    private readonly o: {
      /** Keystone's endpoint (…/v3 or its root). */
      authUrl: string;
      /** The scheduler's own token (it must be allowed to validate tokens: role service or admin). */
      credentials: TokenSource;
      timeoutMs: number;
      fetch?: typeof fetch;
    },
  ) {
    this.describe = `keystone (${o.authUrl}, tokens validated with ${o.credentials.describe})`;
  }

  async caller(h: { authToken?: string; serviceToken?: string }): Promise<CyborgCaller | null> {
    if (!h.authToken) return null;
    const user = await this.validate(h.authToken);
    const service = h.serviceToken ? (await this.validate(h.serviceToken)).roles.includes('service') : false;
    const admin = user.roles.includes('admin');
    // Keystone's default roles: reader < member < admin; a token with reader alone only reads.
    const readOnly = !admin && user.roles.length > 0 && user.roles.every((r) => r === 'reader');
    return { user: user.user, project: user.project, admin, service, readOnly };
  }

  private async validate(token: string, retried = false): Promise<TokenFacts> {
    const key = createHash('sha256').update(token).digest('hex');
    const hit = this.cache.get(key);
    if (hit && hit.until > Date.now()) return hit.facts;
    const base = this.o.authUrl.replace(/\/+$/, '').replace(/\/v3$/, '');
    let res: Response;
    try {
      res = await (this.o.fetch ?? fetch)(`${base}/v3/auth/tokens`, {
        headers: { 'X-Auth-Token': await this.o.credentials.token(), 'X-Subject-Token': token },
        signal: AbortSignal.timeout(this.o.timeoutMs),
      });
    } catch (err) {
      throw new CyborgHttpError(
        503,
        `Keystone at ${base} cannot validate the token: ${(err as Error).message}`,
      );
    }
    if (res.status === 401 && !retried) {
      // Our own token expired: renew it once.
      this.o.credentials.invalidate();
      return this.validate(token, true);
    }
    if (res.status === 404)
      throw new CyborgHttpError(401, 'The request you have made requires authentication.');
    // Our own credential is refused (an operator's token that expired) or may not validate
    // tokens: the caller is not at fault, and no caller can be served until the operator acts.
    if (res.status === 401 || res.status === 403) {
      throw new CyborgHttpError(
        503,
        `Keystone at ${base} answered ${res.status} to the scheduler's own credentials (${this.o.credentials.describe}): ${
          res.status === 401
            ? 'they are not valid (an expired token? an application credential is renewed, a token is not)'
            : 'they may not validate tokens (Keystone asks for role service or admin)'
        }`,
      );
    }
    if (!res.ok) throw new CyborgHttpError(503, `Keystone answered ${res.status} validating the token`);
    const body = (await res.json()) as {
      token?: {
        user?: { id?: string };
        project?: { id?: string };
        roles?: Array<{ name?: string }>;
        expires_at?: string;
      };
    };
    const t = body.token;
    if (!t?.user?.id) throw new CyborgHttpError(503, 'Keystone answered without a token document');
    const facts: TokenFacts = {
      user: t.user.id,
      project: t.project?.id ?? '',
      roles: (t.roles ?? []).flatMap((r) => (r.name ? [r.name] : [])),
    };
    const expires = t.expires_at ? Date.parse(t.expires_at) : Number.NaN;
    this.cache.set(key, {
      facts,
      until: Math.min(Date.now() + CACHE_MS, Number.isFinite(expires) ? expires : Number.POSITIVE_INFINITY),
    });
    if (this.cache.size > 10_000) this.cache.clear();
    return facts;
  }
}
