/**
 * The CLI's client configuration (like a kubeconfig): where the scheduler is,
 * the token to use, and how to reach it over TLS. `berth up` writes it for its
 * own scheduler, `berth config set` for any other; every client command reads
 * it. Each setting comes from, in order: its flag (--endpoint, --token,
 * --tls-ca, --tls-cert, --tls-key, --tls-server-name), its environment
 * variable (BERTH_ENDPOINT, BERTH_TOKEN, BERTH_TLS_CA, BERTH_TLS_CERT,
 * BERTH_TLS_KEY, BERTH_TLS_SERVER_NAME), the file ($BERTH_CONFIG, default
 * ~/.config/berth/config.yaml), then the default (127.0.0.1:7070, no token,
 * plaintext).
 *
 * TLS is on when the endpoint says `https://` or any TLS setting is given;
 * `http://` says plaintext whatever the environment and the file say (a TLS
 * flag beside it is a usage error). Paths in the file are relative to it.
 */
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { parse as parseYaml, stringify as toYaml } from 'yaml';
import type { ClientTls } from '../transport/channel.js';
import { UsageError } from './usage-error.js';

export interface ClientTlsFile {
  /** CA bundle (PEM) verifying the scheduler; absent: the system's roots. */
  ca?: string;
  /** Client certificate (PEM) and its key, for a scheduler that requires mutual TLS. */
  cert?: string;
  key?: string;
  /** The name the scheduler's certificate must carry, when it is not the endpoint's host. */
  server_name?: string;
}

export interface ClientConfigFile {
  endpoint?: string;
  token?: string;
  tls?: ClientTlsFile;
  /** Where `berth up` keeps its state (the demo finds the simulated hosts there). */
  state_dir?: string;
}

export const DEFAULT_ENDPOINT = '127.0.0.1:7070';

const KEYS = ['endpoint', 'token', 'tls', 'state_dir'] as const;
const TLS_KEYS = ['ca', 'cert', 'key', 'server_name'] as const;

export function clientConfigPath(): string {
  return (
    process.env.BERTH_CONFIG ??
    join(process.env.XDG_CONFIG_HOME ?? join(homedir(), '.config'), 'berth', 'config.yaml')
  );
}

/** Where the path came from, for messages: `$BERTH_CONFIG` or the default place. */
function configWhere(path: string): string {
  return process.env.BERTH_CONFIG === path ? `${path} ($BERTH_CONFIG)` : path;
}

/**
 * Reads and checks the client configuration: a missing file is an empty one;
 * a file that is not YAML, or holds an unknown key or a value of the wrong
 * type, is a usage error naming the file and the key (the CLI exits 2).
 */
export async function readClientConfig(path = clientConfigPath()): Promise<ClientConfigFile> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return {};
    throw new UsageError(
      `cannot read the client configuration ${configWhere(path)}: ${(err as Error).message}`,
    );
  }
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    throw new UsageError(
      `the client configuration ${configWhere(path)} is not YAML: ${(err as Error).message.split('\n')[0]!.replace(/[\s:]+$/, '')}`,
    );
  }
  if (doc === null || doc === undefined) return {};
  const bad = (key: string, what: string) =>
    new UsageError(`the client configuration ${configWhere(path)}: ${key}: ${what}`);
  if (typeof doc !== 'object' || Array.isArray(doc)) {
    throw bad('(top level)', `expected a mapping of ${KEYS.join(', ')}, got ${JSON.stringify(doc)}`);
  }
  const d = doc as Record<string, unknown>;
  for (const [k, v] of Object.entries(d)) {
    if (!(KEYS as readonly string[]).includes(k)) throw bad(k, `unknown key (known: ${KEYS.join(', ')})`);
    if (v === null || v === undefined) continue;
    if (k === 'tls') {
      if (typeof v !== 'object' || Array.isArray(v)) {
        throw bad('tls', `expected a mapping of ${TLS_KEYS.join(', ')}, got ${JSON.stringify(v)}`);
      }
      for (const [tk, tv] of Object.entries(v as Record<string, unknown>)) {
        if (!(TLS_KEYS as readonly string[]).includes(tk)) {
          throw bad(`tls.${tk}`, `unknown key (known: ${TLS_KEYS.join(', ')})`);
        }
        if (tv !== null && tv !== undefined && typeof tv !== 'string') {
          throw bad(`tls.${tk}`, `expected a string, got ${JSON.stringify(tv)}`);
        }
      }
    } else if (typeof v !== 'string') {
      throw bad(k, `expected a string, got ${JSON.stringify(v)}`);
    }
  }
  const out: ClientConfigFile = {};
  if (typeof d.endpoint === 'string') out.endpoint = d.endpoint;
  if (typeof d.token === 'string') out.token = d.token;
  if (typeof d.state_dir === 'string') out.state_dir = d.state_dir;
  if (d.tls && typeof d.tls === 'object') {
    const t = d.tls as Record<string, string | null | undefined>;
    const tls: ClientTlsFile = {};
    // Paths in the file are relative to it.
    for (const k of ['ca', 'cert', 'key'] as const) {
      const p = t[k];
      if (p) tls[k] = isAbsolute(p) ? p : resolve(dirname(path), p);
    }
    if (t.server_name) tls.server_name = t.server_name;
    if (Object.keys(tls).length > 0) out.tls = tls;
  }
  return out;
}

/**
 * Writes the client configuration (mode 0600: it holds a token), replacing
 * the file at once (a reader never sees half of it). Fails with a usage error
 * naming the file and saying how to choose another.
 */
export async function writeClientConfig(
  config: ClientConfigFile,
  path = clientConfigPath(),
  writer = 'berth up',
): Promise<string> {
  const body = `# Written by ${writer}.\n${toYaml(config)}`;
  const tmp = `${path}.${process.pid}.tmp`;
  try {
    await mkdir(dirname(path), { recursive: true });
    await writeFile(tmp, body, { mode: 0o600 });
    await rename(tmp, path);
  } catch (err) {
    throw new UsageError(
      `cannot write the client configuration ${configWhere(path)}: ${(err as Error).message}; ` +
        'set BERTH_CONFIG to a file this user can write',
    );
  }
  return path;
}

/**
 * Whether the client configuration could be written, checked without
 * writing it (`berth up` asks before it starts anything): undefined when it
 * can, else why not.
 */
export async function clientConfigWritable(path = clientConfigPath()): Promise<string | undefined> {
  const probe = `${path}.${process.pid}.probe`;
  try {
    await mkdir(dirname(path), { recursive: true });
    await writeFile(probe, '', { mode: 0o600 });
    const { rm } = await import('node:fs/promises');
    await rm(probe, { force: true });
    return undefined;
  } catch (err) {
    return `cannot write the client configuration ${configWhere(path)}: ${(err as Error).message}; set BERTH_CONFIG to a file this user can write`;
  }
}

/** Where a setting came from: the flag, the environment variable, the config file, or the default. */
export type SettingSource = 'flag' | 'env' | 'file' | 'default';

/** The TLS settings a client resolved: file paths, the server name, and where they came from. */
export interface ResolvedTls {
  ca?: string;
  cert?: string;
  key?: string;
  serverName?: string;
  /** Why TLS is on, for messages: e.g. `--tls-ca`, `$BERTH_TLS_CA`, `tls in FILE`, `https:// in --endpoint`. */
  from: string[];
  /** Where each file came from, for messages. */
  sources?: { ca?: string; cert?: string; key?: string };
}

export interface ResolvedClient {
  /** `host:port`, or several joined by commas, without a scheme. */
  endpoint: string;
  endpointSource: SettingSource;
  /** What the endpoint was named by, for messages (`--endpoint`, `$BERTH_ENDPOINT`, …). */
  endpointName: string;
  token?: string;
  tokenSource: SettingSource;
  /** Undefined: plaintext. */
  tls?: ResolvedTls;
  stateDir?: string;
  /** The client configuration file consulted. */
  configPath: string;
}

export interface ParsedEndpoint {
  /** `host:port`, or several joined by commas. */
  address: string;
  scheme: 'https' | 'http' | undefined;
}

/**
 * An endpoint as a user may write it — `host:port`, `http://host:port` or
 * `https://host:port` as buf curl and grpcurl take it, or several `host:port`
 * joined by commas (the replicas of one scheduler) — as what gRPC dials and
 * whether the scheme asked for TLS.
 */
export function parseEndpoint(value: string, source: string): ParsedEndpoint {
  let v = value.trim();
  const m = /^(https|http|grpc|grpcs):\/\//i.exec(v);
  const scheme = m
    ? ['https', 'grpcs'].includes(m[1]!.toLowerCase())
      ? ('https' as const)
      : ('http' as const)
    : undefined;
  v = v.slice(m ? m[0].length : 0).replace(/\/+$/, '');
  const parts = v.split(',').map((p) => p.trim());
  for (const p of parts) {
    const i = p.lastIndexOf(':');
    const port = Number(p.slice(i + 1));
    if (i <= 0 || !/^\d{1,5}$/.test(p.slice(i + 1)) || port < 1 || port > 65535 || /[/\s]/.test(p)) {
      throw new UsageError(
        `${source}: expected host:port (or http://host:port, https://host:port, or host:port,host:port for replicas), e.g. 127.0.0.1:7070; got ${JSON.stringify(value)}`,
      );
    }
  }
  return { address: parts.join(','), scheme };
}

/** parseEndpoint's address only (kept for callers that do not care about TLS). */
export function normalizeEndpoint(value: string, source: string): string {
  return parseEndpoint(value, source).address;
}

export interface ClientFlagValues {
  endpoint?: string;
  token?: string;
  tlsCa?: string;
  tlsCert?: string;
  tlsKey?: string;
  tlsServerName?: string;
}

const TLS_SETTINGS = [
  ['ca', 'tlsCa', '--tls-ca', 'BERTH_TLS_CA', 'ca'],
  ['cert', 'tlsCert', '--tls-cert', 'BERTH_TLS_CERT', 'cert'],
  ['key', 'tlsKey', '--tls-key', 'BERTH_TLS_KEY', 'key'],
  ['serverName', 'tlsServerName', '--tls-server-name', 'BERTH_TLS_SERVER_NAME', 'server_name'],
] as const;

export async function resolveClient(flags: ClientFlagValues): Promise<ResolvedClient> {
  const configPath = clientConfigPath();
  const file = await readClientConfig(configPath);
  const [endpoint, endpointSource, endpointName]: [string, SettingSource, string] =
    flags.endpoint !== undefined
      ? [flags.endpoint, 'flag', '--endpoint']
      : process.env.BERTH_ENDPOINT
        ? [process.env.BERTH_ENDPOINT, 'env', '$BERTH_ENDPOINT']
        : file.endpoint
          ? [file.endpoint, 'file', `endpoint in ${configPath}`]
          : [DEFAULT_ENDPOINT, 'default', 'the default endpoint'];
  const [token, tokenSource]: [string | undefined, SettingSource] =
    flags.token !== undefined
      ? [flags.token, 'flag']
      : process.env.BERTH_TOKEN
        ? [process.env.BERTH_TOKEN, 'env']
        : file.token
          ? [file.token, 'file']
          : [undefined, 'default'];
  const parsed = parseEndpoint(endpoint, endpointName);

  const tls: ResolvedTls = { from: [], sources: {} };
  for (const [key, flag, flagName, env, fileKey] of TLS_SETTINGS) {
    const fromFlag = flags[flag];
    const fromEnv = process.env[env];
    const fromFile = file.tls?.[fileKey];
    const [value, source] =
      fromFlag !== undefined && fromFlag !== ''
        ? [fromFlag, flagName]
        : fromEnv
          ? [fromEnv, `$${env}`]
          : fromFile
            ? [fromFile, `tls.${fileKey} in ${configPath}`]
            : [undefined, undefined];
    if (value === undefined || source === undefined) continue;
    tls[key] = value;
    tls.from.push(source);
    if (key !== 'serverName') tls.sources![key] = source;
  }
  let useTls: boolean;
  if (parsed.scheme === 'http') {
    const flagged = tls.from.filter((f) => f.startsWith('--'));
    if (flagged.length > 0) {
      throw new UsageError(
        `${endpointName}: ${JSON.stringify(endpoint)} says plaintext (http://), but ${flagged.join(', ')} asks for TLS: give https:// or drop the TLS flags`,
      );
    }
    useTls = false;
  } else {
    if (parsed.scheme === 'https') tls.from.unshift(`https:// in ${endpointName}`);
    useTls = tls.from.length > 0;
  }
  if (useTls && Boolean(tls.cert) !== Boolean(tls.key)) {
    throw new UsageError(
      `TLS: a client certificate needs its key and a key its certificate (--tls-cert with --tls-key); got only ${
        tls.cert ? 'a certificate' : 'a key'
      } (from ${tls.from.filter((f) => /cert|key/i.test(f)).join(', ')})`,
    );
  }
  return {
    endpoint: parsed.address,
    endpointSource,
    endpointName,
    ...(token !== undefined ? { token } : {}),
    tokenSource,
    ...(useTls ? { tls } : {}),
    ...(file.state_dir ? { stateDir: file.state_dir } : {}),
    configPath,
  };
}

/** Reads the PEM files a resolved client names; a missing or non-PEM file is a usage error naming it. */
export async function loadClientTls(tls: ResolvedTls | undefined): Promise<ClientTls | undefined> {
  if (!tls) return undefined;
  const read = async (
    path: string | undefined,
    what: string,
    source: string | undefined,
  ): Promise<Buffer | undefined> => {
    if (!path) return undefined;
    const named = `TLS ${what} ${path}${source ? ` (${source})` : ''}`;
    let b: Buffer;
    try {
      b = await readFile(path);
    } catch (err) {
      throw new UsageError(`${named}: cannot read it: ${(err as Error).message}`);
    }
    if (!b.toString('utf8').includes('-----BEGIN ')) throw new UsageError(`${named}: not a PEM file`);
    return b;
  };
  const out: ClientTls = {};
  const ca = await read(tls.ca, 'CA', tls.sources?.ca);
  const cert = await read(tls.cert, 'certificate', tls.sources?.cert);
  const key = await read(tls.key, 'key', tls.sources?.key);
  if (ca) out.ca = ca;
  if (cert) out.cert = cert;
  if (key) out.key = key;
  if (tls.serverName) out.serverName = tls.serverName;
  return out;
}
