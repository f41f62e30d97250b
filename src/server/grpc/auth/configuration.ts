/**
 * Auth configuration: what a server is configured to accept (AuthOptions), and
 * how the files an operator names are read into it (loadAuthOptions, the
 * static tokens and certificate roles files).
 */
import { readFile } from 'node:fs/promises';
import { ConfigError } from '../../../errors.js';
import { parseStrictYaml } from '../../../strict-yaml.js';
import { isRole, ROLES, type Role } from './policy.js';

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

/** The shortest static token accepted. */
export const MIN_STATIC_TOKEN = 16;

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
