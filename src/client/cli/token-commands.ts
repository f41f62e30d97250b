/**
 * `berth token create|secret`: credentials for a standalone scheduler and its
 * agents (berth up makes its own). A static token goes into a static tokens
 * file (`--static-tokens` of `scheduler serve`, `auth.static_tokens_file` of an
 * agent); a JWT is signed with the HS256 secret both sides verify
 * (`--jwt-secret-file`, `auth.jwt_secret_file`). The token is the only thing
 * printed on stdout, so `TOKEN=$(berth token create …)` works.
 */
import { randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import type { Command } from 'commander';
import { ConfigError } from '../../errors.js';
import { parseStaticTokens } from '../../server/grpc/auth/configuration.js';
import { isRole, ROLES, type Role } from '../../server/grpc/auth/policy.js';
import { generateStaticToken, signHs256Token, writeStaticTokenFile } from '../../server/grpc/auth/tokens.js';

interface CreateFlags {
  role: string;
  subject?: string;
  staticTokens?: string;
  jwtSecretFile?: string;
  expiresIn: string;
  issuer?: string;
  audience?: string;
}

/** `3600`, `90m`, `12h`, `30d` → seconds. */
export function parseDuration(flag: string, value: string): number {
  const m = /^(\d+)([smhd]?)$/.exec(value.trim());
  const n = m
    ? Number(m[1]) * { '': 1, s: 1, m: 60, h: 3600, d: 86_400 }[m[2] as '' | 's' | 'm' | 'h' | 'd']
    : 0;
  if (!m || n <= 0) {
    throw new ConfigError(
      `${flag}: expected a duration such as 3600, 90m, 12h or 30d, got ${JSON.stringify(value)}`,
    );
  }
  return n;
}

async function readOptional(path: string): Promise<string | null> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw new ConfigError(`cannot read ${path}: ${(err as Error).message}`);
  }
}

export function registerTokenCommands(program: Command): void {
  const token = program
    .command('token')
    .description('credentials for a standalone scheduler and agents: static tokens and JWTs');

  token
    .command('create')
    .description(
      'print a new token for a role: a static token (added to --static-tokens FILE when given), or with --jwt-secret-file a signed HS256 JWT',
    )
    .requiredOption('--role <role>', `the role: ${ROLES.join(', ')}`)
    .option('--subject <name>', 'who holds it (logged with every refused call; a JWT needs one)')
    .option('--static-tokens <file>', 'add the token to this static tokens file (created with mode 0600)')
    .option('--jwt-secret-file <file>', 'sign a JWT with this HS256 secret instead of making a static token')
    .option('--expires-in <duration>', 'JWT lifetime: seconds, or 90m, 12h, 30d', '30d')
    .option('--issuer <iss>', 'JWT issuer (when the servers check --jwt-issuer)')
    .option('--audience <aud>', 'JWT audience (when the servers check --jwt-audience)')
    .action(async (o: CreateFlags) => {
      if (!isRole(o.role)) {
        throw new ConfigError(`--role: expected one of ${ROLES.join(', ')}, got ${JSON.stringify(o.role)}`);
      }
      const role: Role = o.role;
      if (role === 'host-client' && !o.subject) {
        throw new ConfigError(
          '--subject: a host-client token acts for one host; give the host name (decision 90)',
        );
      }
      if (o.jwtSecretFile) {
        if (o.staticTokens) throw new ConfigError('--static-tokens and --jwt-secret-file exclude each other');
        if (!o.subject) throw new ConfigError('--subject: a JWT needs a subject (its "sub" claim)');
        const secret = (await readOptional(o.jwtSecretFile))?.trim();
        if (!secret) throw new ConfigError(`--jwt-secret-file: ${o.jwtSecretFile} is missing or empty`);
        if (Buffer.byteLength(secret) < 32) {
          throw new ConfigError(`--jwt-secret-file: ${o.jwtSecretFile} holds fewer than 32 bytes`);
        }
        const jwt = await signHs256Token(secret, {
          sub: o.subject,
          roles: [role],
          expiresInSeconds: parseDuration('--expires-in', o.expiresIn),
          ...(o.issuer ? { issuer: o.issuer } : {}),
          ...(o.audience ? { audience: o.audience } : {}),
        });
        console.log(jwt);
        return;
      }
      const value = generateStaticToken();
      if (o.staticTokens) {
        const text = await readOptional(o.staticTokens);
        const tokens = text === null ? [] : parseStaticTokens(text, o.staticTokens);
        tokens.push({ token: value, roles: [role], ...(o.subject ? { subject: o.subject } : {}) });
        await writeStaticTokenFile(o.staticTokens, tokens);
        console.error(
          `berth: added the token (role ${role}${o.subject ? `, subject ${o.subject}` : ''}) to ${o.staticTokens}, which now holds ${tokens.length}`,
        );
      }
      console.log(value);
    });

  token
    .command('secret')
    .description('write a new random HS256 secret (48 bytes) for --jwt-secret-file / auth.jwt_secret_file')
    .argument('<file>', 'where to write it (mode 0600; an existing file is never overwritten)')
    .action(async (file: string) => {
      try {
        await writeFile(file, `${randomBytes(48).toString('base64url')}\n`, { mode: 0o600, flag: 'wx' });
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'EEXIST') {
          throw new ConfigError(
            `${file} exists: a secret is never overwritten (servers would refuse every token)`,
          );
        }
        throw err;
      }
      console.error(`berth: wrote a new HS256 secret to ${file}`);
    });
}
