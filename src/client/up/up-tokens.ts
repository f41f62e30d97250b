/**
 * The credentials of a `berth up`, kept in its state directory so they survive
 * a restart: an exported `BERTH_TOKEN` (or a script holding the admin token)
 * keeps working across `berth up` runs. Deleting `tokens.yaml` (or the whole
 * state directory) makes new ones at the next start.
 *
 * - `tokens.yaml` (the static tokens file `--static-tokens` and an agent's
 *   `static_tokens_file` read): the admin token, and one agent token per host
 *   whose subject is that host's name — an agent's token registers only its
 *   own host (invariant 10).
 * - `scheduler-signing.pem` / `.pub`: the scheduler's Ed25519 key pair. The
 *   scheduler signs, per host, short-lived credentials whose audience is that
 *   host; each agent holds the public key and refuses any other audience.
 */
import { generateKeyPairSync } from 'node:crypto';
import { readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ConfigError } from '../../errors.js';
import { parseStaticTokens, type StaticToken } from '../../server/grpc/auth/configuration.js';
import { generateStaticToken, writeStaticTokenFile } from '../../server/grpc/auth/tokens.js';

export interface UpTokens {
  /** The operator's token (role admin), written into the client configuration. */
  admin: string;
  /** Per host: what its agent presents to the scheduler (role agent, subject = the host), and its file. */
  agents: Map<string, { token: string; file: string }>;
  /** Every static token the servers accept. */
  staticTokens: StaticToken[];
  /** `<state>/tokens.yaml`. */
  file: string;
  /** The scheduler's signing key (PEM, PKCS#8) and the public key's file, for the agents. */
  signingKey: string;
  publicKeyFile: string;
  /** Whether this start made the tokens file (false: read from an earlier run). */
  created: boolean;
  /**
   * Puts every file this call wrote back as it was (removing the ones it
   * made): a `berth up` that fails to start leaves no new token or key.
   */
  rollback(): Promise<void>;
}

const ADMIN_SUBJECT = 'berth-up-admin';
/** Subjects earlier versions wrote: one agent token for every host, one scheduler token. */
const RETIRED_SUBJECTS = new Set(['berth-up-agents', 'berth-up-scheduler']);

async function readOptional(path: string): Promise<string | null> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    return null;
  }
}

/** Reads the state directory's credentials, making (mode 0600) what is missing for `hosts`. */
export async function loadOrCreateUpTokens(stateDir: string, hosts: readonly string[]): Promise<UpTokens> {
  // Each file as it was before this call wrote it (null: it did not exist).
  const before = new Map<string, string | null>();
  const remember = async (path: string) => {
    if (!before.has(path)) before.set(path, await readOptional(path));
  };
  const write = async (path: string, body: string, mode: number) => {
    await remember(path);
    await writeFile(path, body, { mode });
  };
  const rollback = async () => {
    for (const [path, previous] of before) {
      if (previous === null) await rm(path, { force: true });
      else await writeFile(path, previous);
    }
  };
  try {
    return await loadOrCreate(stateDir, hosts, { remember, write }, rollback);
  } catch (err) {
    await rollback();
    throw err;
  }
}

async function loadOrCreate(
  stateDir: string,
  hosts: readonly string[],
  files: {
    remember: (path: string) => Promise<void>;
    write: (path: string, body: string, mode: number) => Promise<void>;
  },
  rollback: () => Promise<void>,
): Promise<UpTokens> {
  const { remember, write } = files;
  const file = join(stateDir, 'tokens.yaml');
  const text = await readOptional(file);
  const created = text === null;
  const read = text === null ? [] : parseStaticTokens(text, file);
  const tokens = read.filter((t) => !(t.subject && RETIRED_SUBJECTS.has(t.subject)));
  let changed = created || tokens.length !== read.length;
  const find = (subject: string, role: 'admin' | 'agent') =>
    tokens.find((t) => t.subject === subject && t.roles.length === 1 && t.roles[0] === role);
  if (!find(ADMIN_SUBJECT, 'admin')) {
    if (!created) {
      throw new ConfigError(
        `${file}: no admin token (subject ${ADMIN_SUBJECT}); delete the file to make new tokens`,
      );
    }
    tokens.push({ token: generateStaticToken(), roles: ['admin'], subject: ADMIN_SUBJECT });
  }
  const agents = new Map<string, { token: string; file: string }>();
  for (const host of hosts) {
    let t = find(host, 'agent');
    if (!t) {
      t = { token: generateStaticToken(), roles: ['agent'], subject: host };
      tokens.push(t);
      changed = true;
    }
    const tokenFile = join(stateDir, `agent-${host}.token`);
    await write(tokenFile, `${t.token}\n`, 0o600);
    agents.set(host, { token: t.token, file: tokenFile });
  }
  if (changed) {
    await remember(file);
    await writeStaticTokenFile(file, tokens);
  }

  const keyFile = join(stateDir, 'scheduler-signing.pem');
  const publicKeyFile = join(stateDir, 'scheduler-signing.pub');
  let signingKey = await readOptional(keyFile);
  if (signingKey === null || (await readOptional(publicKeyFile)) === null) {
    const pair = generateKeyPairSync('ed25519', {
      privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
      publicKeyEncoding: { type: 'spki', format: 'pem' },
    });
    signingKey = pair.privateKey;
    await write(keyFile, pair.privateKey, 0o600);
    await write(publicKeyFile, pair.publicKey, 0o644);
  }
  return {
    admin: find(ADMIN_SUBJECT, 'admin')!.token,
    agents,
    staticTokens: tokens,
    file,
    signingKey,
    publicKeyFile,
    created,
    rollback,
  };
}
