/**
 * The Cyborg API's settings (`berth scheduler serve --cyborg-listen …`,
 * docs/cyborg.md): where it listens, how callers are identified, and where
 * Nova's events go. Credentials take Placement's forms (noauth, a Keystone
 * token, an application credential).
 */
import { readFile } from 'node:fs/promises';
import { ConfigError } from '../../../errors.js';
import type { PlacementAuth } from '../placement/config.js';

export interface CyborgOptions {
  /** host:port of the HTTP server. */
  listen: string;
  /** Callers: tokens validated at Keystone with `credentials`, Berth's own tokens, or noauth (labs). */
  auth:
    | { type: 'noauth' }
    | { type: 'berth' }
    | { type: 'keystone'; authUrl: string; credentials: PlacementAuth };
  nova: {
    /** Nova's compute endpoint (…/v2.1). */
    url: string;
    auth: PlacementAuth;
  };
  timeoutSeconds: number;
  retryMaxSeconds: number;
}

/** The flags of `berth scheduler serve` that turn the Cyborg API on. */
export interface CyborgFlags {
  cyborgListen?: string;
  cyborgAuth?: string;
  cyborgKeystoneUrl?: string;
  cyborgKeystoneTokenFile?: string;
  novaUrl?: string;
  novaAuth?: string;
  novaTokenFile?: string;
}

const httpUrl = (flag: string, v: string): string => {
  let u: URL | null = null;
  try {
    u = new URL(v);
  } catch {
    // below
  }
  if (!u || (u.protocol !== 'http:' && u.protocol !== 'https:')) {
    throw new ConfigError(`${flag}: expected an http(s) URL, got ${JSON.stringify(v)}`);
  }
  return v;
};

async function tokenFile(flag: string, path: string | undefined, needed: string): Promise<string> {
  if (!path) throw new ConfigError(`${needed} needs ${flag}`);
  try {
    const t = (await readFile(path, 'utf8')).trim();
    if (!t) throw new ConfigError(`${flag} ${path}: the file is empty`);
    return t;
  } catch (err) {
    if (err instanceof ConfigError) throw err;
    throw new ConfigError(`${flag} ${path}: cannot read it: ${(err as Error).message}`);
  }
}

/** null when --cyborg-listen is absent (the API is opt-in); every mistake a ConfigError naming the flag. */
export async function cyborgOptionsFromFlags(f: CyborgFlags): Promise<CyborgOptions | null> {
  if (!f.cyborgListen) {
    const stray = Object.entries(f).find(([, v]) => v !== undefined);
    if (stray)
      throw new ConfigError(
        `--${stray[0].replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)} needs --cyborg-listen`,
      );
    return null;
  }
  const authType = f.cyborgAuth ?? 'keystone';
  let auth: CyborgOptions['auth'];
  if (authType === 'noauth') auth = { type: 'noauth' };
  else if (authType === 'berth') auth = { type: 'berth' };
  else if (authType === 'keystone') {
    if (!f.cyborgKeystoneUrl) throw new ConfigError('--cyborg-auth keystone needs --cyborg-keystone-url');
    auth = {
      type: 'keystone',
      authUrl: httpUrl('--cyborg-keystone-url', f.cyborgKeystoneUrl),
      credentials: {
        type: 'token',
        token: await tokenFile(
          '--cyborg-keystone-token-file',
          f.cyborgKeystoneTokenFile,
          '--cyborg-auth keystone',
        ),
      },
    };
  } else
    throw new ConfigError(
      `--cyborg-auth: expected keystone, berth or noauth, got ${JSON.stringify(authType)}`,
    );
  if (!f.novaUrl)
    throw new ConfigError('--cyborg-listen needs --nova-url (where accelerator-request-bound events go)');
  const novaAuthType = f.novaAuth ?? 'token';
  let novaAuth: PlacementAuth;
  if (novaAuthType === 'noauth') novaAuth = { type: 'noauth', user: 'admin' };
  else if (novaAuthType === 'token') {
    novaAuth = {
      type: 'token',
      token: await tokenFile('--nova-token-file', f.novaTokenFile, '--nova-auth token'),
    };
  } else throw new ConfigError(`--nova-auth: expected noauth or token, got ${JSON.stringify(novaAuthType)}`);
  return {
    listen: f.cyborgListen,
    auth,
    nova: { url: httpUrl('--nova-url', f.novaUrl), auth: novaAuth },
    timeoutSeconds: 10,
    retryMaxSeconds: 30,
  };
}
