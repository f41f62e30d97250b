/**
 * The CLI's client configuration (like a kubeconfig): where the scheduler is
 * and the token to use. `berth up` writes it; every client command reads it.
 * Precedence: --endpoint/--token flags, then BERTH_ENDPOINT/BERTH_TOKEN, then
 * the file ($BERTH_CONFIG, default ~/.config/berth/config.yaml), then
 * 127.0.0.1:7070 with no token.
 */
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { parse as parseYaml, stringify as toYaml } from 'yaml';
import { UsageError } from './usage-error.js';

export interface ClientConfigFile {
  endpoint?: string;
  token?: string;
  /** Where `berth up` keeps its state (the demo finds the simulated hosts there). */
  state_dir?: string;
}

export const DEFAULT_ENDPOINT = '127.0.0.1:7070';

export function clientConfigPath(): string {
  return (
    process.env.BERTH_CONFIG ??
    join(process.env.XDG_CONFIG_HOME ?? join(homedir(), '.config'), 'berth', 'config.yaml')
  );
}

export async function readClientConfig(path = clientConfigPath()): Promise<ClientConfigFile> {
  try {
    const doc = parseYaml(await readFile(path, 'utf8')) as unknown;
    return doc && typeof doc === 'object' ? (doc as ClientConfigFile) : {};
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return {};
    throw new Error(`cannot read the client configuration ${path}: ${(err as Error).message}`);
  }
}

export async function writeClientConfig(
  config: ClientConfigFile,
  path = clientConfigPath(),
): Promise<string> {
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, `# Written by berth up.\n${toYaml(config)}`, { mode: 0o600 });
  return path;
}

/** Where a setting came from: the flag, the environment variable, the config file, or the default. */
export type SettingSource = 'flag' | 'env' | 'file' | 'default';

export interface ResolvedClient {
  endpoint: string;
  endpointSource: SettingSource;
  token?: string;
  tokenSource: SettingSource;
  stateDir?: string;
  /** The client configuration file consulted. */
  configPath: string;
}

/**
 * An endpoint as a user may write it — `host:port`, or `http://host:port` as
 * buf curl and grpcurl take it — as the `host:port` gRPC dials. `https://`
 * is explained, not guessed at: the berth CLI speaks plaintext.
 */
export function normalizeEndpoint(value: string, source: string): string {
  let v = value.trim();
  if (/^https:\/\//i.test(v)) {
    throw new UsageError(
      `${source}: ${JSON.stringify(value)}: the berth CLI speaks plaintext gRPC; give host:port or http://host:port ` +
        '(for TLS use the SDK or buf curl)',
    );
  }
  v = v.replace(/^(http|grpc):\/\//i, '').replace(/\/+$/, '');
  const i = v.lastIndexOf(':');
  const port = Number(v.slice(i + 1));
  if (i <= 0 || !/^\d{1,5}$/.test(v.slice(i + 1)) || port < 1 || port > 65535 || /[/\s]/.test(v)) {
    throw new UsageError(
      `${source}: expected host:port (or http://host:port), e.g. 127.0.0.1:7070; got ${JSON.stringify(value)}`,
    );
  }
  return v;
}

export async function resolveClient(flags: { endpoint?: string; token?: string }): Promise<ResolvedClient> {
  const configPath = clientConfigPath();
  const file = await readClientConfig(configPath);
  const [endpoint, endpointSource, endpointName]: [string, SettingSource, string] =
    flags.endpoint !== undefined
      ? [flags.endpoint, 'flag', '--endpoint']
      : process.env.BERTH_ENDPOINT
        ? [process.env.BERTH_ENDPOINT, 'env', 'BERTH_ENDPOINT']
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
  return {
    endpoint: normalizeEndpoint(endpoint, endpointName),
    endpointSource,
    ...(token !== undefined ? { token } : {}),
    tokenSource,
    ...(file.state_dir ? { stateDir: file.state_dir } : {}),
    configPath,
  };
}
