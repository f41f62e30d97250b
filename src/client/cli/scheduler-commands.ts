/** `berth scheduler serve`. */
import { readFile } from 'node:fs/promises';
import type { Command } from 'commander';
import { ConfigError } from '../../errors.js';
import {
  type AuthOptions,
  loadAuthOptions,
  readCertRolesFile,
} from '../../server/grpc/auth/configuration.js';
import { type CyborgFlags, cyborgOptionsFromFlags } from '../../server/scheduler/cyborg/config.js';
import type { RetentionPolicy } from '../../server/scheduler/domain/retention.js';
import { type PlacementFlags, placementOptionsFromFlags } from '../../server/scheduler/placement/config.js';
import { Scheduler } from '../../server/scheduler/scheduler.js';
import { parseStrictYaml } from '../../strict-yaml.js';
import { dbLocation, withDbPath, withListenHint } from './listen-hint.js';
import { parseDuration } from './token-commands.js';

interface ServeFlags extends PlacementFlags, CyborgFlags {
  db: string;
  listen: string;
  metricsListen?: string;
  staticTokens?: string;
  jwtSecretFile?: string;
  jwtPublicKeyFile?: string;
  jwksFile?: string;
  jwtIssuer?: string;
  jwtAudience?: string;
  tlsCert?: string;
  tlsKey?: string;
  tlsCa?: string;
  certRoles?: string;
  agentTokenFile?: string;
  agentSigningKey?: string;
  insecureSharedAgentToken?: boolean;
  hostPrincipals?: string;
  insecureNoAuth?: boolean;
  retention: string;
  retentionRows: string;
  requestIdWindow: string;
}

/** `--retention`, `--retention-rows`, `--request-id-window` → the policy, each checked against its range. */
export function retentionFromFlags(
  o: Pick<ServeFlags, 'retention' | 'retentionRows' | 'requestIdWindow'> & { certificateRetention?: string },
): RetentionPolicy {
  const within = (flag: string, value: string, seconds: number, min: number, max: number, unit: string) => {
    if (seconds < min || seconds > max) {
      throw new ConfigError(`${flag}: ${JSON.stringify(value)} is outside [${unit}]`);
    }
    return seconds * 1000;
  };
  const rows = Number(o.retentionRows);
  if (!/^\d+$/.test(o.retentionRows.trim()) || rows < 1_000 || rows > 1_000_000_000) {
    throw new ConfigError(
      `--retention-rows: expected a whole number in [1000, 1000000000], got ${JSON.stringify(o.retentionRows)}`,
    );
  }
  const historyMs = within(
    '--retention',
    o.retention,
    parseDuration('--retention', o.retention),
    3_600,
    3_650 * 86_400,
    '1h, 3650d',
  );
  const certificates = o.certificateRetention ?? '3650d';
  const certificateMs = within(
    '--certificate-retention',
    certificates,
    parseDuration('--certificate-retention', certificates),
    30 * 86_400,
    36_500 * 86_400,
    '30d, 36500d',
  );
  if (certificateMs < historyMs) {
    throw new ConfigError(
      `--certificate-retention: ${JSON.stringify(certificates)} is shorter than --retention ${JSON.stringify(o.retention)}; certificates outlive the events`,
    );
  }
  return {
    certificateMs,
    historyMs,
    maxRows: rows,
    requestIdMs: within(
      '--request-id-window',
      o.requestIdWindow,
      parseDuration('--request-id-window', o.requestIdWindow),
      60,
      30 * 86_400,
      '1m, 30d',
    ),
  };
}

/** `--host-principals FILE`: YAML lines `subject: host`. */
async function readHostPrincipals(file: string): Promise<Record<string, string>> {
  const doc = parseStrictYaml(await readFile(file, 'utf8'));
  if (doc === null || doc === undefined) return {};
  if (typeof doc !== 'object' || Array.isArray(doc)) {
    throw new ConfigError(`--host-principals ${file}: expected lines of "subject: host"`);
  }
  const out: Record<string, string> = Object.create(null);
  for (const [subject, host] of Object.entries(doc as Record<string, unknown>)) {
    if (typeof host !== 'string' || host === '') {
      throw new ConfigError(
        `--host-principals ${file}: ${subject}: expected a host name, got ${JSON.stringify(host)}`,
      );
    }
    out[subject] = host;
  }
  return out;
}

/**
 * TLS from the flags, else from BERTH_TLS_CERT, BERTH_TLS_KEY and BERTH_TLS_CA
 * (the variables every berth command reads, so one systemd drop-in gives the
 * scheduler its certificate and `berth health` the same files to probe it with).
 */
export function tlsFromFlags(o: Pick<ServeFlags, 'tlsCert' | 'tlsKey' | 'tlsCa'>): ServeFlags {
  const pick = (flag: string | undefined, env: string) => flag ?? (process.env[env] || undefined);
  return {
    ...(o as ServeFlags),
    tlsCert: pick(o.tlsCert, 'BERTH_TLS_CERT'),
    tlsKey: pick(o.tlsKey, 'BERTH_TLS_KEY'),
    tlsCa: pick(o.tlsCa, 'BERTH_TLS_CA'),
  };
}

/** Authentication from flags; with none given and no --insecure-no-auth, the scheduler refuses to start. */
export async function authFromFlags(o: ServeFlags): Promise<AuthOptions> {
  const tokens = o.staticTokens || o.jwtSecretFile || o.jwtPublicKeyFile || o.jwksFile;
  const any = tokens || o.certRoles;
  if (o.insecureNoAuth) {
    if (any)
      throw new ConfigError(
        '--insecure-no-auth cannot be combined with token, JWT or certificate-role options',
      );
    return { mode: 'none' };
  }
  if (!any) {
    throw new ConfigError(
      o.tlsCa
        ? 'mutual TLS (--tls-ca) identifies callers by their certificates, but no certificate has a role: give --cert-roles FILE (lines "common-name: role"), or a token option (--static-tokens, a JWT key)'
        : 'no authentication configured: give --static-tokens FILE, a JWT key (--jwt-secret-file, --jwt-public-key-file, ' +
            '--jwks-file) or, with mutual TLS (--tls-ca), --cert-roles FILE; or switch it off explicitly with --insecure-no-auth',
    );
  }
  if (o.certRoles && !o.tlsCa) {
    throw new ConfigError(
      '--cert-roles: certificates are only presented under mutual TLS: give --tls-cert, --tls-key and --tls-ca (or BERTH_TLS_*)',
    );
  }
  const certRoles = o.certRoles ? await readCertRolesFile(o.certRoles) : undefined;
  return loadAuthOptions({
    mode: 'token',
    staticTokensFile: o.staticTokens,
    jwtSecretFile: o.jwtSecretFile,
    jwtPublicKeyFile: o.jwtPublicKeyFile,
    jwksFile: o.jwksFile,
    jwtIssuer: o.jwtIssuer,
    jwtAudience: o.jwtAudience,
    ...(certRoles ? { certRoles } : {}),
  });
}

export function registerSchedulerCommands(program: Command): void {
  const scheduler = program.command('scheduler').description('the central scheduler');
  scheduler
    .command('serve')
    .description('run the scheduler (SQLite store, one file); see docs/security.md for authentication')
    .requiredOption(
      '--db <file|url>',
      'SQLite database file (created if missing), or postgres://user@host/db (schema created if missing)',
    )
    .option('--listen <addr>', 'listen address host:port', '127.0.0.1:7070')
    .option('--metrics-listen <addr>', 'serve Prometheus /metrics on host:port')
    .option('--static-tokens <file>', 'static bearer tokens (YAML: token: role)')
    .option('--jwt-secret-file <file>', 'HS256 secret for JWT bearer tokens')
    .option('--jwt-public-key-file <file>', 'RSA/EC/Ed25519 public key (PEM) for JWT bearer tokens')
    .option('--jwks-file <file>', 'JWKS (JSON) for JWT bearer tokens')
    .option('--jwt-issuer <iss>', 'required JWT issuer')
    .option('--jwt-audience <aud>', 'required JWT audience')
    .option('--tls-cert <file>', 'serve TLS with this certificate (PEM; default: $BERTH_TLS_CERT)')
    .option('--tls-key <file>', 'private key of --tls-cert (default: $BERTH_TLS_KEY)')
    .option(
      '--tls-ca <file>',
      'CA bundle: require client certificates from it, mutual TLS (default: $BERTH_TLS_CA)',
    )
    .option(
      '--cert-roles <file>',
      'YAML lines "common-name: role": callers identified by their client certificate alone (mutual TLS; * = any)',
    )
    .option(
      '--agent-signing-key <file>',
      "Ed25519 private key (PEM): signs each agent's own short-lived credential (the agents hold the public key)",
    )
    .option(
      '--agent-token-file <file>',
      'one bearer token for every agent (needs --insecure-shared-agent-token)',
    )
    .option('--insecure-shared-agent-token', 'allow --agent-token-file: any host can then call every agent')
    .option(
      '--host-principals <file>',
      'YAML `subject: host`: principals whose subject is not their host name',
    )
    .option('--insecure-no-auth', 'switch authentication off (anyone who reaches the port is admin)')
    .option(
      '--retention <duration>',
      'keep device events and finished cleanups this long (1h to 3650d)',
      '7d',
    )
    .option('--retention-rows <n>', 'and at most this many of each (and of request ids)', '200000')
    .option('--request-id-window <duration>', 'a request id is honoured this long (1m to 30d)', '24h')
    .option(
      '--certificate-retention <duration>',
      "keep erasure certificates this long (30d to 36500d, at least --retention); a media's newest is kept always",
      '3650d',
    )
    // OpenStack Placement (docs/operator-guide.md "Running with Nova and Placement").
    .option(
      '--placement-url <url>',
      'report to OpenStack Placement at this endpoint (needs --placement-auth)',
    )
    .option(
      '--placement-auth <type>',
      'Placement credentials: noauth (labs), token, app-credential (Keystone)',
    )
    .option('--placement-token-file <file>', 'with --placement-auth token: a file holding the Keystone token')
    .option('--placement-auth-url <url>', "with --placement-auth app-credential: Keystone's endpoint")
    .option('--placement-app-credential-id <id>', 'with --placement-auth app-credential: the credential id')
    .option(
      '--placement-app-credential-secret-file <file>',
      "with --placement-auth app-credential: a file holding the credential's secret",
    )
    .option(
      '--placement-mode <mode>',
      "report (Berth's devices as providers) or clean-one-time-use (scrub and return Nova's one-time-use devices)",
    )
    .option(
      '--placement-create-roots',
      'no Nova: create a root provider per host (else wait for the compute node)',
    )
    .option('--placement-config <file>', 'Placement settings in a YAML file (the flags override it)')
    // Cyborg's v2 API for Nova (docs/cyborg.md); needs Placement in report mode.
    .option('--cyborg-listen <addr>', "serve the part of Cyborg's v2 REST API that Nova calls on host:port")
    .option(
      '--cyborg-auth <type>',
      "Cyborg API callers: keystone (default), berth (the scheduler's own tokens) or noauth (labs: X-Auth-Token is user[:project])",
    )
    .option(
      '--cyborg-keystone-url <url>',
      "with --cyborg-auth keystone: Keystone's endpoint, where tokens are validated",
    )
    .option(
      '--cyborg-keystone-token-file <file>',
      "with --cyborg-auth keystone: a file holding the scheduler's own Keystone token",
    )
    .option(
      '--nova-url <url>',
      "Nova's compute endpoint: where accelerator-request-bound events go (none: no events are sent, a lab)",
    )
    .option('--nova-auth <type>', "Nova's credentials: token (default) or noauth")
    .option(
      '--nova-token-file <file>',
      'with --nova-auth token: a file holding the Keystone token sent to Nova',
    )
    .option(
      '--cyborg-plaintext',
      'serve the Cyborg API in plain HTTP even with --tls-cert (behind a TLS-terminating proxy; default: HTTPS with the same certificate)',
    )
    .option(
      '--cyborg-trust-proxy-headers',
      "links follow the proxy's X-Forwarded-Proto and X-Forwarded-Host (only behind a proxy that sets them)",
    )
    .option('--cyborg-config <file>', 'Cyborg API settings in a YAML file (the flags override it)')
    .action(async (flags: ServeFlags) => {
      const o = tlsFromFlags(flags);
      const retention = retentionFromFlags(o);
      // Only the --placement-* flags: any other (--db, --listen, the defaults) would turn Placement on.
      const placement = await placementOptionsFromFlags({
        placementConfig: o.placementConfig,
        placementUrl: o.placementUrl,
        placementAuth: o.placementAuth,
        placementTokenFile: o.placementTokenFile,
        placementAuthUrl: o.placementAuthUrl,
        placementAppCredentialId: o.placementAppCredentialId,
        placementAppCredentialSecretFile: o.placementAppCredentialSecretFile,
        placementMode: o.placementMode,
        placementCreateRoots: o.placementCreateRoots,
      });
      const cyborg = await cyborgOptionsFromFlags({
        cyborgConfig: o.cyborgConfig,
        cyborgListen: o.cyborgListen,
        cyborgAuth: o.cyborgAuth,
        cyborgKeystoneUrl: o.cyborgKeystoneUrl,
        cyborgKeystoneTokenFile: o.cyborgKeystoneTokenFile,
        novaUrl: o.novaUrl,
        novaAuth: o.novaAuth,
        novaTokenFile: o.novaTokenFile,
        cyborgPlaintext: o.cyborgPlaintext,
        cyborgTrustProxyHeaders: o.cyborgTrustProxyHeaders,
      });
      const auth = await authFromFlags(o);
      const tls =
        o.tlsCert || o.tlsKey || o.tlsCa ? { cert: o.tlsCert, key: o.tlsKey, ca: o.tlsCa } : undefined;
      const agentToken = o.agentTokenFile ? (await readFile(o.agentTokenFile, 'utf8')).trim() : undefined;
      const agentSigningKey = o.agentSigningKey ? await readFile(o.agentSigningKey, 'utf8') : undefined;
      const hostPrincipals = o.hostPrincipals ? await readHostPrincipals(o.hostPrincipals) : undefined;
      const db = dbLocation(o.db);
      const s = await Scheduler.start({
        db,
        listen: o.listen,
        auth,
        ...(tls ? { tls } : {}),
        ...(agentToken ? { agentToken, insecureSharedAgentToken: o.insecureSharedAgentToken === true } : {}),
        ...(agentSigningKey ? { agentSigningKey } : {}),
        ...(hostPrincipals ? { hostPrincipals } : {}),
        ...(o.metricsListen ? { metricsListen: o.metricsListen } : {}),
        ...(placement ? { placement } : {}),
        ...(cyborg ? { cyborg } : {}),
        retention,
      }).catch((err: unknown) => {
        const flags: Record<string, string> = { [o.listen]: '--listen' };
        if (o.metricsListen) flags[o.metricsListen] = '--metrics-listen';
        throw withDbPath(withListenHint(err, flags, 'another scheduler'), '--db', o.db, db);
      });
      const stop = () => void s.stop().then(() => process.exit(0));
      process.once('SIGTERM', stop);
      process.once('SIGINT', stop);
      console.log(
        JSON.stringify({
          event: 'listening',
          endpoint: s.address,
          metrics: s.metricsAddress || undefined,
          cyborg: s.cyborg?.url,
          scheduler_id: s.id,
        }),
      );
    });
}
