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

export interface ResolvedClient {
  endpoint: string;
  token?: string;
  stateDir?: string;
}

export async function resolveClient(flags: { endpoint?: string; token?: string }): Promise<ResolvedClient> {
  const file = await readClientConfig();
  return {
    endpoint: flags.endpoint ?? process.env.BERTH_ENDPOINT ?? file.endpoint ?? DEFAULT_ENDPOINT,
    token: flags.token ?? process.env.BERTH_TOKEN ?? file.token,
    stateDir: file.state_dir,
  };
}
