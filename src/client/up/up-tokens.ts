/**
 * The tokens of a `berth up`, kept in its state directory so they survive a
 * restart: an exported `BERTH_TOKEN` (or a script holding the admin token)
 * keeps working across `berth up` runs. Deleting `tokens.yaml` (or the whole
 * state directory) makes new ones at the next start.
 *
 * One static tokens file (the format `--static-tokens` and an agent's
 * `static_tokens_file` read) serves both sides: the scheduler and the agents
 * each accept it, and the roles decide what each token may call there.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ConfigError } from '../../errors.js';
import {
  generateStaticToken,
  parseStaticTokens,
  type Role,
  type StaticToken,
  writeStaticTokenFile,
} from '../../server/grpc/auth.js';

export interface UpTokens {
  /** The operator's token (role admin), written into the client configuration. */
  admin: string;
  /** What the agents present to the scheduler (role agent). */
  agent: string;
  /** What the scheduler presents to the agents (role scheduler). */
  scheduler: string;
  /** All three, as the servers' static tokens. */
  staticTokens: StaticToken[];
  /** `<state>/tokens.yaml`. */
  file: string;
  /** `<state>/agent.token`: the agent token alone (an agent config's scheduler_token_file). */
  agentTokenFile: string;
  /** Whether this start made them (false: read from an earlier run). */
  created: boolean;
}

const SUBJECTS: Record<'admin' | 'agent' | 'scheduler', string> = {
  admin: 'berth-up-admin',
  agent: 'berth-up-agents',
  scheduler: 'berth-up-scheduler',
};

/** Reads the state directory's tokens, or makes and writes them (mode 0600) on the first start. */
export async function loadOrCreateUpTokens(stateDir: string): Promise<UpTokens> {
  const file = join(stateDir, 'tokens.yaml');
  const agentTokenFile = join(stateDir, 'agent.token');
  let text: string | null = null;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  let created = false;
  let tokens: StaticToken[];
  if (text === null) {
    tokens = (Object.keys(SUBJECTS) as Role[]).map((role) => ({
      token: generateStaticToken(),
      roles: [role],
      subject: SUBJECTS[role as keyof typeof SUBJECTS],
    }));
    await writeStaticTokenFile(file, tokens);
    created = true;
  } else {
    tokens = parseStaticTokens(text, file);
  }
  const find = (role: keyof typeof SUBJECTS) => {
    const t = tokens.find((x) => x.subject === SUBJECTS[role] && x.roles.includes(role));
    if (!t) {
      throw new ConfigError(
        `${file}: no ${role} token (subject ${SUBJECTS[role]}); delete the file to make new tokens`,
      );
    }
    return t.token;
  };
  const out = {
    admin: find('admin'),
    agent: find('agent'),
    scheduler: find('scheduler'),
    staticTokens: tokens,
    file,
    agentTokenFile,
    created,
  };
  await writeFile(agentTokenFile, `${out.agent}\n`, { mode: 0o600 });
  return out;
}
