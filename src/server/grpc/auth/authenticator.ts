/**
 * The Authenticator: checks a call's credential (bearer token or client
 * certificate) against the configured keys and tokens, and the policy's table.
 */
import { createHash, createPublicKey, type KeyObject } from 'node:crypto';
import type { Metadata, ServerInterceptingCallInterface } from '@grpc/grpc-js';
import type { JWTPayload } from 'jose';
import type { ReasonFor } from '../../../error-reasons.js';
import { BerthError, ConfigError, isBerthError } from '../../../errors.js';
import { type AuthOptions, MIN_STATIC_TOKEN, type StaticToken } from './configuration.js';
import { allowedRoles, isRole, methodKey, ROLES, type Role } from './policy.js';
import { type Jose, loadJose, SCHEDULER_ISSUER } from './tokens.js';

/** The TLS facts of a connection (grpc-js does not export the type by name). */
export type AuthContext = ReturnType<ServerInterceptingCallInterface['getAuthContext']>;

export interface Principal {
  subject: string;
  roles: Role[];
  /** How it was established: 'jwt', 'static', 'mtls' or 'none' (auth off). */
  via: 'jwt' | 'static' | 'mtls' | 'none';
}

/**
 * A refused call is a BerthError: UNAUTHENTICATED with the reason
 * CREDENTIALS_MISSING (nothing sent) or CREDENTIALS_INVALID (unknown,
 * malformed, expired or badly signed), or PERMISSION_DENIED with
 * ROLE_NOT_ALLOWED (a valid caller without a role the method allows).
 */
export type AuthRefusal = BerthError<'UNAUTHENTICATED'> | BerthError<'PERMISSION_DENIED'>;

export const unauthenticated = (m: string, reason: ReasonFor<'UNAUTHENTICATED'> = 'CREDENTIALS_INVALID') =>
  new BerthError('UNAUTHENTICATED', m, { reason });

const roleRefused = (m: string) => new BerthError('PERMISSION_DENIED', m, { reason: 'ROLE_NOT_ALLOWED' });

export const isAuthRefusal = (e: unknown): e is AuthRefusal =>
  isBerthError(e) && (e.code === 'UNAUTHENTICATED' || e.code === 'PERMISSION_DENIED');

const sha256 = (s: string) => createHash('sha256').update(s).digest();
const JWT_SHAPE = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/;
const ASYMMETRIC_ALGS = [
  'RS256',
  'RS384',
  'RS512',
  'PS256',
  'PS384',
  'PS512',
  'ES256',
  'ES384',
  'ES512',
  'EdDSA',
];

type Verifier = (token: string) => Promise<JWTPayload>;

/** What jose's createLocalJWKSet accepts: {keys: [...]} of plain JSON objects. */
function isJwkSet(v: unknown): v is { keys: Record<string, unknown>[] } {
  const plain = (o: unknown) =>
    typeof o === 'object' && o !== null && [Object.prototype, null].includes(Object.getPrototypeOf(o));
  return (
    plain(v) && Array.isArray((v as { keys?: unknown }).keys) && (v as { keys: unknown[] }).keys.every(plain)
  );
}

/** Checks credentials against the configured keys and tokens, and the table. */
export class Authenticator {
  private readonly verifiers: { algs: string[]; verify: Verifier }[] = [];
  /** sha256(token) → entry; looked up by hash, compared in constant time. */
  private readonly statics = new Map<string, StaticToken & { hash: Buffer }>();
  private readonly certRoles: Record<string, Role>;
  readonly enabled: boolean;

  constructor(readonly options: AuthOptions) {
    this.enabled = options.mode === 'token';
    this.certRoles = options.mode === 'token' ? (options.certRoles ?? {}) : {};
    if (options.mode !== 'token') return;
    for (const t of options.staticTokens ?? []) {
      if (t.token.length < MIN_STATIC_TOKEN) {
        throw new ConfigError(
          `static token for ${t.subject ?? t.roles.join(',')}: shorter than 16 characters`,
        );
      }
      const hash = sha256(t.token);
      this.statics.set(hash.toString('hex'), { ...t, hash });
    }
    const jwt = options.jwt;
    if (jwt) {
      const common = {
        ...(jwt.issuer ? { issuer: jwt.issuer } : {}),
        ...(jwt.audience ? { audience: jwt.audience } : {}),
        clockTolerance: jwt.clockToleranceSeconds ?? 30,
        requiredClaims: ['exp', 'sub'],
      };
      if (jwt.hs256Secret !== undefined) {
        const key =
          typeof jwt.hs256Secret === 'string' ? new TextEncoder().encode(jwt.hs256Secret) : jwt.hs256Secret;
        if (key.length < 32) throw new ConfigError('jwt secret: at least 32 bytes are required for HS256');
        this.verifiers.push({
          algs: ['HS256'],
          verify: async (t) =>
            (await (await loadJose()).jwtVerify(t, key, { ...common, algorithms: ['HS256'] })).payload,
        });
      }
      if (jwt.publicKey) {
        let key: KeyObject;
        try {
          key = createPublicKey(jwt.publicKey);
        } catch (err) {
          throw new ConfigError(`jwt public key: not a PEM public key: ${(err as Error).message}`);
        }
        const algs = algorithmsFor(key);
        this.verifiers.push({
          algs,
          verify: async (t) =>
            (await (await loadJose()).jwtVerify(t, key, { ...common, algorithms: algs })).payload,
        });
      }
      if (jwt.jwks) {
        const jwks = jwt.jwks;
        if (!isJwkSet(jwks)) throw new ConfigError('jwks: expected {"keys": [...]} of JSON objects');
        let set: ReturnType<Jose['createLocalJWKSet']> | undefined;
        this.verifiers.push({
          algs: ASYMMETRIC_ALGS,
          verify: async (t) => {
            const { createLocalJWKSet, jwtVerify } = await loadJose();
            set ??= createLocalJWKSet(jwks as Parameters<Jose['createLocalJWKSet']>[0]);
            return (await jwtVerify(t, set, { ...common, algorithms: ASYMMETRIC_ALGS })).payload;
          },
        });
      }
    }
    if (options.schedulerKey) {
      let key: KeyObject;
      try {
        key = createPublicKey(options.schedulerKey.publicKey);
      } catch (err) {
        throw new ConfigError(`scheduler public key: not a PEM public key: ${(err as Error).message}`);
      }
      const algs = algorithmsFor(key);
      const audience = options.schedulerKey.audience;
      this.verifiers.push({
        algs,
        verify: async (t) => {
          const { payload } = await (await loadJose()).jwtVerify(t, key, {
            algorithms: algs,
            issuer: SCHEDULER_ISSUER,
            audience,
            clockTolerance: 30,
            requiredClaims: ['exp', 'sub', 'aud'],
          });
          // Whatever else it claims, a scheduler credential carries the scheduler role only.
          return { ...payload, roles: ['scheduler'] };
        },
      });
    }
    if (this.verifiers.length === 0 && this.statics.size === 0 && Object.keys(this.certRoles).length === 0) {
      throw new ConfigError(
        'auth: token mode needs at least one of a JWT key, a static tokens file or cert_roles ' +
          "(or mode 'none' to switch authentication off explicitly)",
      );
    }
  }

  /** Who is calling: from the bearer token, else from the client certificate. */
  async authenticate(metadata: Metadata, authContext?: AuthContext): Promise<Principal> {
    if (!this.enabled) return { subject: 'anonymous', roles: [...ROLES], via: 'none' };
    const values = metadata.get('authorization');
    if (values.length === 0) {
      const fromCert = this.fromCertificate(authContext);
      if (fromCert) return fromCert;
      throw unauthenticated(
        'missing credentials: send "authorization: Bearer <token>"',
        'CREDENTIALS_MISSING',
      );
    }
    if (values.length > 1) throw unauthenticated('more than one authorization header');
    const header = String(values[0]);
    const m = /^Bearer ([\x21-\x7e]{1,8192})$/i.exec(header);
    if (!m) throw unauthenticated('malformed authorization header: expected "Bearer <token>"');
    return this.authenticateToken(m[1]!);
  }

  /**
   * Who holds `token` (a static token or a JWT), as `authenticate` judges a
   * bearer token: also for the Cyborg REST API's X-Auth-Token and
   * X-Service-Token (src/server/scheduler/cyborg/identity.ts).
   */
  async authenticateToken(token: string): Promise<Principal> {
    if (!this.enabled) return { subject: 'anonymous', roles: [...ROLES], via: 'none' };
    if (!/^[\x21-\x7e]{1,8192}$/.test(token)) throw unauthenticated('malformed token');
    // Looked up by the token's SHA-256: timing reveals at most bits of a hash, never of the token.
    const st = this.statics.get(sha256(token).toString('hex'));
    if (st) {
      return {
        subject: st.subject ?? `static:${st.hash.toString('hex').slice(0, 8)}`,
        roles: st.roles,
        via: 'static',
      };
    }
    if (!JWT_SHAPE.test(token) || this.verifiers.length === 0) throw unauthenticated('invalid token');
    return this.verifyJwt(token);
  }

  private async verifyJwt(token: string): Promise<Principal> {
    let alg: string;
    try {
      const header = JSON.parse(Buffer.from(token.split('.')[0]!, 'base64url').toString('utf8'));
      alg = String(header.alg);
    } catch {
      throw unauthenticated('malformed token');
    }
    const candidates = this.verifiers.filter((v) => v.algs.includes(alg));
    if (candidates.length === 0)
      throw unauthenticated(`token algorithm ${JSON.stringify(alg)} is not accepted`);
    const { errors: joseErrors } = await loadJose();
    let last: unknown;
    for (const v of candidates) {
      try {
        const payload = await v.verify(token);
        const roles = rolesFromClaims(payload);
        return { subject: String(payload.sub), roles, via: 'jwt' };
      } catch (err) {
        // A claim error means a key verified the signature: that is the error to report.
        const claimError =
          err instanceof joseErrors.JWTClaimValidationFailed ||
          err instanceof joseErrors.JWTExpired ||
          isAuthRefusal(err);
        if (!last || claimError) last = err;
        if (claimError) break;
      }
    }
    if (last instanceof joseErrors.JWTExpired) throw unauthenticated('token expired');
    if (last instanceof joseErrors.JWTClaimValidationFailed) {
      throw unauthenticated(`token claim ${JSON.stringify(last.claim)} invalid: ${last.reason}`);
    }
    if (last instanceof joseErrors.JWSSignatureVerificationFailed)
      throw unauthenticated('token signature invalid');
    if (isAuthRefusal(last)) throw last;
    throw unauthenticated('invalid token');
  }

  private fromCertificate(ctx: AuthContext | undefined): Principal | null {
    const cert = ctx?.sslPeerCertificate;
    if (!cert?.subject) return null;
    const cnRaw = (cert.subject as unknown as Record<string, string | string[]>).CN;
    const cn = Array.isArray(cnRaw) ? cnRaw[0] : cnRaw;
    const role = (cn !== undefined ? this.certRoles[cn] : undefined) ?? this.certRoles['*'];
    if (!role) return null;
    return { subject: `cert:${cn ?? '?'}`, roles: [role], via: 'mtls' };
  }

  /** Authenticates, then checks the table. Throws an AuthRefusal; returns the principal. */
  async authorize(path: string, metadata: Metadata, authContext?: AuthContext): Promise<Principal> {
    const principal = await this.authenticate(metadata, authContext);
    if (!this.enabled) return principal;
    const allowed = allowedRoles(path);
    if (!allowed) {
      throw roleRefused(`${methodKey(path)} has no access rule; refused`);
    }
    if (!principal.roles.some((r) => allowed.includes(r))) {
      throw roleRefused(
        `${methodKey(path)} requires role ${allowed.join(' or ')}; ${principal.subject} has ${principal.roles.join(', ') || 'no role'}`,
      );
    }
    return principal;
  }
}

function algorithmsFor(key: KeyObject): string[] {
  switch (key.asymmetricKeyType) {
    case 'rsa':
      return ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512'];
    case 'rsa-pss':
      return ['PS256', 'PS384', 'PS512'];
    case 'ec':
      return ['ES256', 'ES384', 'ES512'];
    case 'ed25519':
      return ['EdDSA'];
    default:
      throw new ConfigError(`jwt public key: unsupported key type ${key.asymmetricKeyType}`);
  }
}

/**
 * The roles a JWT grants: exactly one of the claims `role` (a string) or
 * `roles` (a list of strings), each a known role. Anything ambiguous — both
 * claims, `roles` as a string, a role Berth does not know beside known ones —
 * is refused rather than read generously: a token that could mean two things
 * is not worth the most powerful of them.
 */
function rolesFromClaims(p: JWTPayload): Role[] {
  const refuse = (why: string) => roleRefused(`token refused: ${why} (claim "role" or "roles")`);
  if (p.role !== undefined && p.roles !== undefined) {
    throw refuse('it carries both "role" and "roles"');
  }
  let list: unknown[];
  if (p.roles !== undefined) {
    if (!Array.isArray(p.roles))
      throw refuse(`"roles" must be a list of roles, not ${JSON.stringify(p.roles)}`);
    list = p.roles;
  } else if (p.role !== undefined) {
    if (typeof p.role !== 'string') throw refuse(`"role" must be one role, not ${JSON.stringify(p.role)}`);
    list = [p.role];
  } else {
    list = [];
  }
  const unknown = list.filter((r) => !isRole(r));
  if (unknown.length > 0) {
    throw refuse(`unknown role ${JSON.stringify(unknown[0])}; known roles: ${ROLES.join(', ')}`);
  }
  if (list.length === 0) throw refuse('it carries no known role');
  return [...new Set(list as Role[])];
}
