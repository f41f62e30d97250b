/**
 * Issuing credentials (berth up, tests, operators): static tokens and their
 * file, the scheduler's per-host credentials, HS256 JWTs; and jose, loaded on
 * first use by signing here and verifying in authenticator.ts.
 */
import { type KeyObject, randomBytes, sign } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { stringify as stringifyYaml } from 'yaml';
import { ConfigError } from '../../../errors.js';
import type { StaticToken } from './configuration.js';
import type { Role } from './policy.js';

export type Jose = typeof import('jose');
let jose: Promise<Jose> | null = null;
/**
 * jose loads with the first token to verify or sign, not at start: an agent
 * without JWT callers never holds it (the agent's memory, docs/decisions.md 54).
 */
export const loadJose = (): Promise<Jose> => (jose ??= import('jose'));

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
