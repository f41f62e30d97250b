/**
 * Authentication and authorization for every Berth gRPC server, in ONE server
 * interceptor driven by ONE table (METHOD_ROLES: fully-qualified method → the
 * roles allowed to call it).
 *
 * A caller proves who it is with a bearer token in the `authorization`
 * metadata — a JWT signed by a configured key (HS256 secret, RSA/EC/Ed25519
 * public key, or a JWKS file), or a static token listed in a file — or, with
 * mutual TLS, with a client certificate whose subject CN is mapped to a role.
 * No valid credential → UNAUTHENTICATED; a valid one without an allowed role →
 * PERMISSION_DENIED. A method missing from the table is refused for everyone
 * (fail closed), and a test walks every method the servers register so a new
 * RPC without an entry fails CI.
 *
 * Health and reflection are open: load balancers and orchestrators probe
 * health without credentials, and reflection exposes only the public .proto
 * schema (which is in the repository anyway); neither touches device state.
 *
 * Auth is off only when configured `{ mode: 'none' }`, and then the server
 * logs a warning at start.
 */
import { createHash, createPublicKey, type KeyObject, randomBytes, sign } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import {
  Metadata,
  ServerInterceptingCall,
  type ServerInterceptingCallInterface,
  type ServerInterceptor,
  type ServerMethodDefinition,
  status,
} from '@grpc/grpc-js';
import type { JWTPayload } from 'jose';
import type { Logger } from 'pino';
import { stringify as stringifyYaml } from 'yaml';
import type { ReasonFor } from '../../error-reasons.js';
import { BerthError, ConfigError, isBerthError } from '../../errors.js';
import { parseStrictYaml } from '../../strict-yaml.js';
import { toServiceError } from './status.js';

/**
 * - admin: operators. Everything, including the destructive or
 *   tenant-safety-relevant actions (clean, release, enable/disable, profile writes).
 * - service: the orchestration layer (Nova-like): reads, ARQs, instances, migrations.
 * - reader: dashboards and monitoring: read-only.
 * - agent: host agents; only Register on the scheduler. A stolen agent token
 *   cannot create ARQs, read other hosts' bindings or clean devices.
 * - scheduler: the scheduler calling agents (inventory, cleanup, migration prep).
 */
export const ROLES = ['admin', 'service', 'reader', 'agent', 'scheduler'] as const;
export type Role = (typeof ROLES)[number];

const A: Role = 'admin';
const SV: Role = 'service';
const R: Role = 'reader';
const AG: Role = 'agent';
const SC: Role = 'scheduler';

const S = 'berth.scheduler.v1';
const AGENT = 'berth.agent.v1.AgentService';

/** THE table. Keys are `package.Service/Method`; every served method must have an entry. */
export const METHOD_ROLES: Readonly<Record<string, readonly Role[]>> = {
  [`${S}.RegistrationService/Register`]: [A, AG],

  [`${S}.HostService/ListHosts`]: [A, SV, R],
  [`${S}.HostService/GetHost`]: [A, SV, R],
  [`${S}.HostService/DeleteHost`]: [A],

  [`${S}.DeviceService/ListDevices`]: [A, SV, R],
  [`${S}.DeviceService/GetDevice`]: [A, SV, R],
  [`${S}.DeviceService/WatchDevices`]: [A, SV, R],
  [`${S}.DeviceService/WatchCleanup`]: [A, SV, R],
  [`${S}.DeviceService/CleanDevice`]: [A],
  [`${S}.DeviceService/ReleaseDevice`]: [A],
  [`${S}.DeviceService/SetDeviceStatus`]: [A],
  [`${S}.DeviceService/ForgetMedia`]: [A],

  [`${S}.ProfileService/CreateProfile`]: [A],
  [`${S}.ProfileService/DeleteProfile`]: [A],
  [`${S}.ProfileService/GetProfile`]: [A, SV, R],
  [`${S}.ProfileService/ListProfiles`]: [A, SV, R],

  [`${S}.AcceleratorRequestService/CreateAcceleratorRequests`]: [A, SV],
  [`${S}.AcceleratorRequestService/BindAcceleratorRequests`]: [A, SV],
  [`${S}.AcceleratorRequestService/DeleteAcceleratorRequests`]: [A, SV],
  [`${S}.AcceleratorRequestService/GetAcceleratorRequest`]: [A, SV, R],
  [`${S}.AcceleratorRequestService/ListAcceleratorRequests`]: [A, SV, R],

  [`${S}.InstanceService/GetInstanceXml`]: [A, SV, R],
  [`${S}.InstanceService/SetInstanceDevices`]: [A, SV],
  [`${S}.InstanceService/GetDeviceMetadata`]: [A, SV, R],

  [`${S}.MigrationService/PlanLiveMigration`]: [A, SV],
  [`${S}.MigrationService/CommitMigration`]: [A, SV],
  [`${S}.MigrationService/AbortMigration`]: [A, SV],

  [`${S}.PlacementService/GetPlacementStatus`]: [A, SV, R],
  [`${S}.PlacementService/SyncPlacement`]: [A],

  // Service callers see only their own instances' certificates (app/certificates.ts).
  [`${S}.CertificateService/ListErasureCertificates`]: [A, SV, R],
  [`${S}.CertificateService/ListAgentKeys`]: [A, SV, R],
  [`${S}.CertificateService/RotateAgentKey`]: [A],

  [`${AGENT}/GetAgentInfo`]: [A, SC, R],
  [`${AGENT}/ListDevices`]: [A, SC, R],
  [`${AGENT}/WatchInventory`]: [A, SC, R],
  [`${AGENT}/Rediscover`]: [A, SC],
  [`${AGENT}/CleanupDevice`]: [A, SC],
  [`${AGENT}/PrepareMigration`]: [A, SC],
  [`${AGENT}/RecordBinding`]: [A, SC],
  [`${AGENT}/ReleaseDevice`]: [A, SC],
};

/** Services anyone may call (see the module comment for why). */
export const OPEN_SERVICES: readonly string[] = [
  'grpc.health.v1.Health',
  'grpc.reflection.v1.ServerReflection',
  'grpc.reflection.v1alpha.ServerReflection',
];

/** `/pkg.Service/Method` (a grpc-js path) → `pkg.Service/Method`. */
export function methodKey(path: string): string {
  return path.startsWith('/') ? path.slice(1) : path;
}

export function isOpenMethod(path: string): boolean {
  const key = methodKey(path);
  return OPEN_SERVICES.some((s) => key.startsWith(`${s}/`));
}

/** Roles allowed on a method, or undefined when the table has no entry (then nobody may call it). */
export function allowedRoles(path: string): readonly Role[] | undefined {
  return METHOD_ROLES[methodKey(path)];
}

// ---------------------------------------------------------------------------
// Configuration

export interface JwtOptions {
  /** HS256 shared secret (at least 32 bytes). */
  hs256Secret?: string | Uint8Array;
  /** PEM public key (SPKI) of the issuer: RSA, EC or Ed25519. */
  publicKey?: string;
  /** A JWKS document (the `keys` of the issuer's jwks.json), for key rotation. */
  jwks?: { keys: Record<string, unknown>[] };
  /** Required `iss` claim, if set. */
  issuer?: string;
  /** Required `aud` claim, if set. */
  audience?: string;
  /** Clock skew accepted on exp/nbf, seconds; default 30. */
  clockToleranceSeconds?: number;
}

export interface StaticToken {
  token: string;
  roles: Role[];
  subject?: string;
}

export type AuthOptions =
  | { mode: 'none' }
  | {
      mode: 'token';
      jwt?: JwtOptions;
      staticTokens?: StaticToken[];
      /**
       * Mutual TLS identities: client certificate subject CN → role. `*` maps
       * any client certificate the server's CA verified. Only consulted when a
       * call carries no bearer token.
       */
      certRoles?: Record<string, Role>;
      /**
       * An agent's per-host scheduler credential (invariant 10): JWTs the
       * scheduler signs with its private key for this host only. Verified
       * against the scheduler's public key, with issuer berth-scheduler and
       * `aud` = `audience` (this agent's host); they carry the scheduler role.
       */
      schedulerKey?: { publicKey: string; audience: string };
    };

/** The same, as files (scheduler options, agent config): read by loadAuthOptions. */
export interface AuthFileOptions {
  mode?: 'token' | 'none';
  /** `token: role` lines (YAML): see parseStaticTokens. */
  staticTokensFile?: string;
  /** File holding the HS256 secret (whitespace trimmed). */
  jwtSecretFile?: string;
  /** PEM public key file (RSA, RSA-PSS, EC or Ed25519). */
  jwtPublicKeyFile?: string;
  /** JWKS JSON file. */
  jwksFile?: string;
  jwtIssuer?: string;
  jwtAudience?: string;
  certRoles?: Record<string, string>;
  /** The scheduler's public key (PEM): per-host scheduler credentials for this agent. */
  schedulerPublicKeyFile?: string;
}

export function isRole(v: unknown): v is Role {
  return typeof v === 'string' && (ROLES as readonly string[]).includes(v);
}

const MIN_STATIC_TOKEN = 16;

/**
 * A certificate roles file (`--cert-roles`): YAML lines `CN: role`, the
 * client certificate's subject common name (or `*`, any certificate the CA
 * verified) to one role. For deployments that identify callers by
 * certificate alone (docs/security.md).
 */
export async function readCertRolesFile(path: string, flag = '--cert-roles'): Promise<Record<string, Role>> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new ConfigError(`${flag} ${path}: cannot read it: ${(err as Error).message}`);
  }
  let doc: unknown;
  try {
    doc = parseStrictYaml(text);
  } catch (err) {
    throw new ConfigError(`${flag} ${path}: not valid YAML: ${(err as Error).message}`);
  }
  if (doc === null || doc === undefined) doc = {};
  if (typeof doc !== 'object' || Array.isArray(doc)) {
    throw new ConfigError(`${flag} ${path}: expected lines of "common-name: role"`);
  }
  const out: Record<string, Role> = Object.create(null);
  for (const [cn, role] of Object.entries(doc as Record<string, unknown>)) {
    if (!isRole(role)) {
      throw new ConfigError(
        `${flag} ${path}: ${cn}: unknown role ${JSON.stringify(role)} (roles: ${ROLES.join(', ')})`,
      );
    }
    out[cn] = role;
  }
  if (Object.keys(out).length === 0) {
    throw new ConfigError(`${flag} ${path}: no certificate is given a role (lines "common-name: role")`);
  }
  return out;
}

/**
 * Static tokens file: YAML mapping token → role, a list of roles, or
 * `{roles|role, subject}`. The plain form is just lines of `token: role`.
 */
export function parseStaticTokens(text: string, source = 'static tokens'): StaticToken[] {
  let doc: unknown;
  try {
    doc = parseStrictYaml(text);
  } catch (err) {
    throw new ConfigError(`${source}: not valid YAML: ${(err as Error).message}`);
  }
  if (doc === null || doc === undefined) return [];
  if (typeof doc !== 'object' || Array.isArray(doc)) {
    throw new ConfigError(`${source}: expected lines of "token: role"`);
  }
  const out: StaticToken[] = [];
  for (const [token, v] of Object.entries(doc as Record<string, unknown>)) {
    const where = `${source}: token ${token.slice(0, 4)}…`;
    if (token.length < MIN_STATIC_TOKEN || /\s/.test(token)) {
      throw new ConfigError(`${where}: a token must be at least ${MIN_STATIC_TOKEN} characters, no spaces`);
    }
    let roles: unknown;
    let subject: string | undefined;
    if (typeof v === 'string' || Array.isArray(v)) roles = v;
    else if (v && typeof v === 'object') {
      const o = v as Record<string, unknown>;
      if (o.roles !== undefined && o.role !== undefined) {
        throw new ConfigError(`${where}: give "role" or "roles", not both`);
      }
      roles = o.roles ?? o.role;
      if (o.subject !== undefined) {
        if (typeof o.subject !== 'string') throw new ConfigError(`${where}: subject must be a string`);
        subject = o.subject;
      }
    }
    const list = typeof roles === 'string' ? [roles] : roles;
    if (!Array.isArray(list) || list.length === 0 || !list.every(isRole)) {
      throw new ConfigError(`${where}: expected a role (${ROLES.join(', ')}), got ${JSON.stringify(v)}`);
    }
    out.push({ token, roles: list, ...(subject ? { subject } : {}) });
  }
  return out;
}

async function readText(path: string, what: string): Promise<string> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    throw new ConfigError(`${what}: cannot read ${path}: ${(err as Error).message}`);
  }
}

/**
 * Reads the files an AuthFileOptions names into AuthOptions. `host`: the
 * agent's own host, the audience its scheduler credentials must name.
 */
export async function loadAuthOptions(o: AuthFileOptions, host?: string): Promise<AuthOptions> {
  if (o.mode === 'none') return { mode: 'none' };
  const jwt: JwtOptions = {};
  if (o.jwtSecretFile) jwt.hs256Secret = (await readText(o.jwtSecretFile, 'jwt_secret_file')).trim();
  if (o.jwtPublicKeyFile) jwt.publicKey = await readText(o.jwtPublicKeyFile, 'jwt_public_key_file');
  if (o.jwksFile) {
    try {
      jwt.jwks = JSON.parse(await readText(o.jwksFile, 'jwks_file'));
    } catch (err) {
      if (err instanceof ConfigError) throw err;
      throw new ConfigError(`jwks_file: ${o.jwksFile} is not JSON: ${(err as Error).message}`);
    }
  }
  if (o.jwtIssuer) jwt.issuer = o.jwtIssuer;
  if (o.jwtAudience) jwt.audience = o.jwtAudience;
  const certRoles: Record<string, Role> = {};
  for (const [cn, role] of Object.entries(o.certRoles ?? {})) {
    if (!isRole(role)) throw new ConfigError(`cert_roles.${cn}: unknown role ${JSON.stringify(role)}`);
    certRoles[cn] = role;
  }
  const staticTokens = o.staticTokensFile
    ? parseStaticTokens(await readText(o.staticTokensFile, 'static_tokens_file'), o.staticTokensFile)
    : undefined;
  let schedulerKey: { publicKey: string; audience: string } | undefined;
  if (o.schedulerPublicKeyFile) {
    if (!host) throw new ConfigError('scheduler_public_key_file: only an agent (with a host name) takes it');
    schedulerKey = {
      publicKey: await readText(o.schedulerPublicKeyFile, 'scheduler_public_key_file'),
      audience: host,
    };
  }
  return {
    mode: 'token',
    ...(Object.keys(jwt).length > 0 ? { jwt } : {}),
    ...(staticTokens ? { staticTokens } : {}),
    ...(Object.keys(certRoles).length > 0 ? { certRoles } : {}),
    ...(schedulerKey ? { schedulerKey } : {}),
  };
}

// ---------------------------------------------------------------------------
// Verification

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

const unauthenticated = (m: string, reason: ReasonFor<'UNAUTHENTICATED'> = 'CREDENTIALS_INVALID') =>
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

type Jose = typeof import('jose');
let jose: Promise<Jose> | null = null;
/**
 * jose loads with the first token to verify or sign, not at start: an agent
 * without JWT callers never holds it (the agent's memory, docs/decisions.md 54).
 */
const loadJose = (): Promise<Jose> => (jose ??= import('jose'));

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

// ---------------------------------------------------------------------------
// The interceptor

/** Metadata handlers see after authentication (client-supplied values are removed first). */
export const SUBJECT_HEADER = 'berth-auth-subject';
export const ROLES_HEADER = 'berth-auth-roles';

/**
 * The one server interceptor. Open methods pass; for every other method the
 * metadata is held until the credential is checked, then either the call
 * proceeds (with `authorization` removed so it never reaches a handler's logs,
 * and the principal in berth-auth-* metadata) or it ends with
 * UNAUTHENTICATED / PERMISSION_DENIED before any handler runs.
 */
export function authInterceptor(auth: Authenticator, logger?: Logger): ServerInterceptor {
  return (method: ServerMethodDefinition<unknown, unknown>, call: ServerInterceptingCallInterface) => {
    const path = method.path;
    return new ServerInterceptingCall(call, {
      start(next) {
        next({
          onReceiveMetadata(metadata, mdNext) {
            metadata.remove(SUBJECT_HEADER);
            metadata.remove(ROLES_HEADER);
            if (isOpenMethod(path)) {
              mdNext(metadata);
              return;
            }
            auth.authorize(path, metadata, call.getAuthContext()).then(
              (p) => {
                metadata.remove('authorization');
                metadata.set(SUBJECT_HEADER, p.subject);
                metadata.set(ROLES_HEADER, p.roles.join(','));
                mdNext(metadata);
              },
              (err: unknown) => {
                const e = isAuthRefusal(err) ? err : unauthenticated('invalid credentials');
                logger?.info(
                  { method: methodKey(path), peer: call.getPeer(), code: e.code, why: e.message },
                  'call refused',
                );
                const st = toServiceError(e);
                call.sendStatus({
                  code: st.code ?? status.UNAUTHENTICATED,
                  details: e.message,
                  metadata: st.metadata ?? new Metadata(),
                });
              },
            );
          },
        });
      },
    });
  };
}

/** Logs the state of auth at server start: a warning when it is off. */
export function logAuthMode(auth: Authenticator, logger: Logger, server: string): void {
  if (!auth.enabled) {
    logger.warn(
      { server },
      'AUTHENTICATION IS OFF (auth mode "none"): anyone who can reach this port can clean, release and bind devices',
    );
  } else {
    logger.info({ server }, 'authentication on: bearer tokens / client certificates required');
  }
}

// ---------------------------------------------------------------------------
// Issuing credentials (berth up, tests, operators)

/** A fresh random static token: 256 bits, URL-safe, prefixed so it is recognisable in a leak scan. */
export function generateStaticToken(): string {
  return `berth_${randomBytes(32).toString('base64url')}`;
}

/** Writes a static tokens file (mode 0600) in the format parseStaticTokens reads. */
export async function writeStaticTokenFile(path: string, tokens: StaticToken[]): Promise<void> {
  const doc: Record<string, unknown> = {};
  for (const t of tokens) {
    doc[t.token] = t.subject
      ? { roles: t.roles, subject: t.subject }
      : t.roles.length === 1
        ? t.roles[0]
        : t.roles;
  }
  await writeFile(path, `# Berth static tokens: token: role\n${stringifyYaml(doc)}`, { mode: 0o600 });
}

/** The issuer of per-host scheduler credentials. */
export const SCHEDULER_ISSUER = 'berth-scheduler';

/**
 * Mints the scheduler's credential for one host's agent (invariant 10): an
 * EdDSA JWT with `aud` = that host, valid `ttlSeconds`. Signed synchronously
 * with node:crypto (jose signs only asynchronously, and a gRPC call's metadata
 * is built synchronously); the agents verify it with jose.
 */
export function mintSchedulerCredential(privateKey: KeyObject, host: string, ttlSeconds = 300): string {
  if (privateKey.asymmetricKeyType !== 'ed25519') {
    throw new ConfigError('agent signing key: an Ed25519 private key is required');
  }
  const now = Math.floor(Date.now() / 1000);
  const b64 = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const head = `${b64({ alg: 'EdDSA', typ: 'JWT' })}.${b64({
    iss: SCHEDULER_ISSUER,
    sub: 'scheduler',
    aud: host,
    roles: ['scheduler'],
    iat: now,
    exp: now + ttlSeconds,
  })}`;
  return `${head}.${sign(null, Buffer.from(head), privateKey).toString('base64url')}`;
}

/** Signs an HS256 JWT (for sites that use a shared secret, and for tests). */
export async function signHs256Token(
  secret: string | Uint8Array,
  claims: { sub: string; roles: Role[]; expiresInSeconds?: number; issuer?: string; audience?: string },
): Promise<string> {
  const key = typeof secret === 'string' ? new TextEncoder().encode(secret) : secret;
  const { SignJWT } = await loadJose();
  let jwt = new SignJWT({ roles: claims.roles })
    .setProtectedHeader({ alg: 'HS256' })
    .setSubject(claims.sub)
    .setIssuedAt()
    .setExpirationTime(Math.floor(Date.now() / 1000) + (claims.expiresInSeconds ?? 3600));
  if (claims.issuer) jwt = jwt.setIssuer(claims.issuer);
  if (claims.audience) jwt = jwt.setAudience(claims.audience);
  return jwt.sign(key);
}
