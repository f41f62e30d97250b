import { resolve } from 'node:path';
import { z } from 'zod';
import {
  hostPort,
  httpUrl,
  parseConfig,
  readSecretFile,
  readSettingsFile,
  seconds,
  section,
  text,
} from '../../../config-schema.js';
import { ConfigError } from '../../../errors.js';
import { show } from '../../../plugins/device-spec/messages.js';
import type { PlacementAuth } from '../placement/config.js';

export interface CyborgOptions {
  /** host:port of the HTTP server. */
  listen: string;
  /** Callers: tokens validated at Keystone with `credentials`, Berth's own tokens, or noauth (labs). */
  auth:
    | { type: 'noauth' }
    | { type: 'berth' }
    | { type: 'keystone'; authUrl: string; credentials: PlacementAuth };
  /** Where accelerator-request-bound events go; null: no Nova (a lab), no event is sent. */
  nova: {
    /** Nova's compute endpoint (…/v2.1). */
    url: string;
    auth: PlacementAuth;
    /**
     * How long a scheduler's claim on an event lasts (decision 77): another
     * scheduler on the database takes an event over this long after its
     * sender died. At least 4 × `timeoutSeconds`.
     */
    claimTtlSeconds: number;
  } | null;
  timeoutSeconds: number;
  retryMaxSeconds: number;
  /**
   * Plain HTTP even when the scheduler serves TLS (its --tls-cert and
   * --tls-key): for a TLS-terminating proxy in front (docs/cyborg.md "TLS").
   */
  plaintext?: boolean;
  /**
   * Links (version documents, profiles, ARQs) follow the proxy's
   * X-Forwarded-Proto and X-Forwarded-Host. Only behind a proxy that sets them:
   * otherwise any caller could choose the links others are sent.
   */
  trustProxyHeaders?: boolean;
}

/** The flags of `berth scheduler serve` for the Cyborg API (they override the file). */
export interface CyborgFlags {
  cyborgConfig?: string;
  cyborgListen?: string;
  cyborgAuth?: string;
  cyborgKeystoneUrl?: string;
  cyborgKeystoneTokenFile?: string;
  novaUrl?: string;
  novaAuth?: string;
  novaTokenFile?: string;
  cyborgPlaintext?: boolean;
  cyborgTrustProxyHeaders?: boolean;
}

const fileSchema = section({
  listen: hostPort().optional(),
  auth: section({
    type: z
      .enum(['keystone', 'berth', 'noauth'], {
        error: (iss) => `expected keystone, berth or noauth, got ${show(iss.input)}`,
      })
      .optional(),
    auth_url: httpUrl().optional(),
    token_file: text('a file name').optional(),
    application_credential_id: text().optional(),
    application_credential_secret_file: text('a file name').optional(),
  }).optional(),
  nova: section({
    url: httpUrl().optional(),
    auth: section({
      type: z
        .enum(['token', 'noauth'], {
          error: (iss) => `expected token or noauth, got ${show(iss.input)}`,
        })
        .optional(),
      token_file: text('a file name').optional(),
    }).optional(),
    claim_ttl: seconds(0.4, 3600).optional(),
  }).optional(),
  timeout: seconds(0.1, 600).optional(),
  retry_max: seconds(0.1, 3600).optional(),
  plaintext: z.boolean({ error: (iss) => `expected true or false, got ${show(iss.input)}` }).optional(),
  trust_proxy_headers: z
    .boolean({ error: (iss) => `expected true or false, got ${show(iss.input)}` })
    .optional(),
});

/** null when neither the file nor a flag asks for the API; else the settings, or a ConfigError. */
export async function cyborgOptionsFromFlags(f: CyborgFlags): Promise<CyborgOptions | null> {
  if (!Object.values(f).some((v) => v !== undefined)) return null;
  const { doc, base } = await readSettingsFile(f.cyborgConfig, '--cyborg-config', 'Cyborg API settings');
  const where = f.cyborgConfig ? `${f.cyborgConfig}: ` : '';
  const sub = (v: unknown): Record<string, unknown> =>
    typeof v === 'object' && v !== null && !Array.isArray(v) ? { ...(v as Record<string, unknown>) } : {};
  const put = (o: Record<string, unknown>, key: string, v: unknown) => {
    if (v !== undefined) o[key] = v;
  };
  const merged: Record<string, unknown> = { ...doc };
  put(merged, 'listen', f.cyborgListen);
  put(merged, 'plaintext', f.cyborgPlaintext);
  put(merged, 'trust_proxy_headers', f.cyborgTrustProxyHeaders);
  const auth = doc.auth === undefined || typeof doc.auth === 'object' ? sub(doc.auth) : doc.auth;
  if (typeof auth === 'object') {
    put(auth as Record<string, unknown>, 'type', f.cyborgAuth);
    put(auth as Record<string, unknown>, 'auth_url', f.cyborgKeystoneUrl);
    put(auth as Record<string, unknown>, 'token_file', f.cyborgKeystoneTokenFile);
    if (Object.keys(auth).length > 0) merged.auth = auth;
  }
  const nova = doc.nova === undefined || typeof doc.nova === 'object' ? sub(doc.nova) : doc.nova;
  if (typeof nova === 'object') {
    const n = nova as Record<string, unknown>;
    put(n, 'url', f.novaUrl);
    const na = n.auth === undefined || typeof n.auth === 'object' ? sub(n.auth) : n.auth;
    if (typeof na === 'object') {
      put(na as Record<string, unknown>, 'type', f.novaAuth);
      put(na as Record<string, unknown>, 'token_file', f.novaTokenFile);
      if (Object.keys(na).length > 0) n.auth = na;
    }
    if (Object.keys(n).length > 0) merged.nova = n;
  }
  let c: z.output<typeof fileSchema>;
  try {
    c = parseConfig(fileSchema, merged);
  } catch (err) {
    throw new ConfigError(`${where}cyborg: ${(err as Error).message}`);
  }
  if (!c.listen)
    throw new ConfigError(`${where}cyborg.listen: required to serve the Cyborg API (--cyborg-listen)`);
  const file = (p: string) => resolve(base, p);
  const novaAuthOf = async (na: {
    type?: 'token' | 'noauth';
    token_file?: string;
  }): Promise<PlacementAuth> => {
    if (na.type === 'noauth') return { type: 'noauth', user: 'admin' };
    if (!na.token_file) {
      throw new ConfigError(
        `${where}cyborg.nova.auth.token_file: required with auth type token (--nova-token-file)`,
      );
    }
    return { type: 'token', token: await readSecretFile(file(na.token_file), 'cyborg.nova.auth.token_file') };
  };
  const a: NonNullable<typeof c.auth> = c.auth ?? {};
  let resolvedAuth: CyborgOptions['auth'];
  if ((a.type ?? 'keystone') === 'keystone') {
    if (!a.auth_url) {
      throw new ConfigError(
        `${where}cyborg.auth.auth_url: required with auth type keystone (--cyborg-keystone-url)`,
      );
    }
    // The scheduler's own credential, to validate callers' tokens: a token, or an
    // application credential (renewed before it expires, as Placement's is).
    if (a.application_credential_id || a.application_credential_secret_file) {
      if (a.token_file) {
        throw new ConfigError(
          `${where}cyborg.auth: token_file and application_credential_id are exclusive: give one credential`,
        );
      }
      if (!a.application_credential_id || !a.application_credential_secret_file) {
        throw new ConfigError(
          `${where}cyborg.auth: application_credential_id and application_credential_secret_file go together`,
        );
      }
      resolvedAuth = {
        type: 'keystone',
        authUrl: a.auth_url,
        credentials: {
          type: 'app-credential',
          authUrl: a.auth_url,
          id: a.application_credential_id,
          secret: await readSecretFile(
            file(a.application_credential_secret_file),
            'cyborg.auth.application_credential_secret_file',
          ),
        },
      };
    } else {
      if (!a.token_file) {
        throw new ConfigError(
          `${where}cyborg.auth.token_file: required with auth type keystone (--cyborg-keystone-token-file), or application_credential_id with application_credential_secret_file`,
        );
      }
      resolvedAuth = {
        type: 'keystone',
        authUrl: a.auth_url,
        credentials: {
          type: 'token',
          token: await readSecretFile(file(a.token_file), 'cyborg.auth.token_file'),
        },
      };
    }
  } else resolvedAuth = { type: a.type === 'berth' ? 'berth' : 'noauth' };
  const timeoutSeconds = c.timeout ?? 10;
  const claimTtlSeconds = c.nova?.claim_ttl ?? Math.max(60, 4 * timeoutSeconds);
  if (claimTtlSeconds < 4 * timeoutSeconds) {
    throw new ConfigError(
      `${where}cyborg.nova.claim_ttl: ${claimTtlSeconds} s is shorter than 4 × timeout (${timeoutSeconds} s): a sender would lose its claim while Nova may still take the event`,
    );
  }
  let events: CyborgOptions['nova'] = null;
  if (c.nova?.url) events = { url: c.nova.url, auth: await novaAuthOf(c.nova.auth ?? {}), claimTtlSeconds };
  else if (c.nova?.auth || c.nova?.claim_ttl !== undefined) {
    throw new ConfigError(
      `${where}cyborg.nova.url: required with nova.auth or nova.claim_ttl (--nova-url): where accelerator-request-bound events go`,
    );
  }
  return {
    listen: c.listen,
    auth: resolvedAuth,
    nova: events,
    timeoutSeconds,
    retryMaxSeconds: c.retry_max ?? 30,
    plaintext: c.plaintext ?? false,
    trustProxyHeaders: c.trust_proxy_headers ?? false,
  };
}
