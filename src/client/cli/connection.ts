/**
 * How a client command reaches the scheduler: the connection flags (--endpoint,
 * --token, TLS, -o), the client they describe, the wrapper every command action
 * runs in, and why a connection failed, in a line the caller can act on.
 */
import type { Command } from 'commander';
import { type ClientTls, http1Answer, speaksTls, tlsProblem } from '../../transport/channel.js';
import {
  type ClientFlagValues,
  loadClientTls,
  type ResolvedClient,
  resolveClient,
} from '../client-config.js';
import { BerthClientError, identifyServer, SchedulerClient } from '../sdk.js';
import { UsageError } from '../usage-error.js';
import { EXIT_CODE, oneLine, reportError } from './command-errors.js';
import { type OutputFormat, parseFormat } from './output.js';

export const OUTPUT_HELP =
  'output format: table, wide (more columns), json or yaml (JSON/YAML: snake_case proto field names, every field present, enums as lower-case names such as "available")';

export interface ClientFlags extends ClientFlagValues {
  output: string;
}

/** Adds the connection flags (--endpoint, --token, TLS) and -o to a client command. */
export function clientOptions(cmd: Command, withOutput = true): Command {
  connectionOptions(cmd);
  if (withOutput) cmd.option('-o, --output <format>', OUTPUT_HELP, 'table');
  return cmd;
}

/** --endpoint, --token and the TLS flags, as every command that calls the scheduler takes them. */
export function connectionOptions(cmd: Command): Command {
  return cmd
    .option(
      '--endpoint <addr>',
      'scheduler host:port, https://host:port (TLS), or ip:port,ip:port for replicas (default: $BERTH_ENDPOINT, the client config, 127.0.0.1:7070)',
    )
    .option('--token <token>', 'bearer token (default: $BERTH_TOKEN, the client config)')
    .option(
      '--tls-ca <file>',
      'TLS: CA verifying the scheduler (default: $BERTH_TLS_CA, tls.ca in the client config)',
    )
    .option(
      '--tls-cert <file>',
      'TLS: client certificate, for mutual TLS (default: $BERTH_TLS_CERT, tls.cert in the client config)',
    )
    .option(
      '--tls-key <file>',
      'TLS: key of --tls-cert (default: $BERTH_TLS_KEY, tls.key in the client config)',
    )
    .option(
      '--tls-server-name <name>',
      "TLS: the name the scheduler's certificate carries, when it is not the endpoint's host (default: $BERTH_TLS_SERVER_NAME)",
    );
}

/** The flags of connectionOptions, as resolveClient takes them. */
export const connectionFlags = (o: ClientFlagValues): ClientFlagValues => ({
  endpoint: o.endpoint,
  token: o.token,
  tlsCa: o.tlsCa,
  tlsCert: o.tlsCert,
  tlsKey: o.tlsKey,
  tlsServerName: o.tlsServerName,
});
/** Where the endpoint came from, for messages. */
function endpointWhere(client: ResolvedClient): string {
  return client.endpointSource === 'flag'
    ? '--endpoint'
    : client.endpointSource === 'env'
      ? '$BERTH_ENDPOINT'
      : client.endpointSource === 'file'
        ? `the endpoint in ${client.configPath}`
        : 'the default endpoint (no --endpoint, $BERTH_ENDPOINT or client configuration)';
}

/**
 * Why a connection failed, in one line, when it is something the caller can
 * fix: a host name that does not resolve, or TLS on one side only (a
 * plaintext client and a TLS server, or the reverse), a server certificate
 * from a CA the client does not trust, one for another name, a client
 * certificate the server requires. Undefined when there is nothing to add.
 */
export async function explainConnection(
  err: { codeName: string; message: string },
  client: Pick<ResolvedClient, 'endpoint' | 'endpointSource' | 'configPath' | 'tls'>,
  tls?: ClientTls,
): Promise<string | undefined> {
  if (err.codeName !== 'UNAVAILABLE') return undefined;
  const where = endpointWhere(client as ResolvedClient);
  const ep = client.endpoint;
  const cfg = client.configPath;
  const resolution = /Name resolution failed for target (?:dns:)?(\S+)/.exec(err.message);
  if (resolution) {
    const target = resolution[1]!.replace(/:\d+$/, '').replace(/^\/+/, '');
    return `no such host ${JSON.stringify(target)} (${where}): check the name, or give the scheduler's address`;
  }
  let m = err.message;
  if (client.tls && tls && /Failed to connect|Connection dropped|ECONNRESET|EPIPE/.test(m)) {
    // grpc-js says no more; a handshake of our own with the same files says what the server refused.
    m = (await tlsProblem(client.endpoint, tls)) ?? m;
  }
  if (client.tls) {
    const why = client.tls.from.join(', ');
    if (/wrong version number|packet length too long|unknown protocol|http_request/i.test(m)) {
      return `${ep} does not speak TLS, and this client does (${why}): use http://${ep.split(',')[0]} or drop the TLS settings, or enable TLS on the server`;
    }
    if (/certificate required|alert number 116/i.test(m)) {
      return `${ep} requires a client certificate (mutual TLS): give --tls-cert and --tls-key ($BERTH_TLS_CERT and $BERTH_TLS_KEY, or tls.cert and tls.key in ${cfg})`;
    }
    if (/unable to verify|self[- ]signed|unable to get local issuer|certificate signature failure/i.test(m)) {
      return `${ep}'s certificate is not signed by a CA this client trusts (${
        client.tls.ca ? `CA ${client.tls.ca}` : "the system's roots"
      }): give the CA that signed it with --tls-ca ($BERTH_TLS_CA, or tls.ca in ${cfg})`;
    }
    const altname = /Host: (\S+?)\.? is not in the cert's altnames: ([^\n]*?)(?:\. Resolution note|$)/i.exec(
      m,
    );
    if (altname || /does not match certificate's altnames/i.test(m)) {
      const names = altname ? ` (it is for ${altname[2]!.trim()}, not ${altname[1]})` : '';
      return `${ep}'s certificate is not for the name dialled${names}: give a name it carries with --tls-server-name ($BERTH_TLS_SERVER_NAME, or tls.server_name in ${cfg})`;
    }
    if (/bad certificate|unknown ca|certificate unknown|alert|certificate refused/i.test(m)) {
      const cert = client.tls.cert ? ` ${client.tls.cert}` : '';
      return `${ep} refused this client's certificate${cert} (${oneLine(m).replace(/^No connection established\. Last error: /, '')}): is it signed by the CA the server trusts?`;
    }
    if (/certificate has expired|not yet valid/i.test(m)) {
      return `${ep}: ${oneLine(m).replace(/^No connection established\. Last error: (Error: )?/, '')}`;
    }
    return undefined;
  }
  if (/Protocol error/.test(m)) {
    // An HTTP/1.1 server: Berth's Cyborg API, a Placement, anything but the scheduler's gRPC port.
    const http = await http1Answer(ep);
    if (http) {
      const what = /OpenStack Cyborg API/.test(http.body)
        ? "Berth's Cyborg API (for Nova)"
        : /placement/i.test(http.body)
          ? 'an OpenStack Placement'
          : `an HTTP/1.1 server (it answered ${http.status})`;
      return `${ep} (${where}) is ${what}, not the scheduler's gRPC endpoint: give the scheduler's --listen address (berth scheduler serve prints it as "endpoint")`;
    }
  }
  if (!/ECONNREFUSED|EHOSTUNREACH|ENETUNREACH|ETIMEDOUT/.test(m) && (await speaksTls(ep)) === true) {
    return `${ep} speaks TLS, and this client connected in plaintext: give the CA with --tls-ca ($BERTH_TLS_CA, or tls.ca in ${cfg}), or https://${ep.split(',')[0]} for a certificate from a public CA`;
  }
  return undefined;
}

/**
 * What to do about an error whose cause is on the caller's side: an endpoint
 * that is an agent (or not Berth), a token that the environment overrides.
 */
export async function hintFor(
  err: BerthClientError,
  client: ResolvedClient,
  tls?: ClientTls,
): Promise<string | undefined> {
  const where = endpointWhere(client);
  if (err.reason === 'CLEANUP_IN_PROGRESS') {
    const device = err.metadata.device_uuid;
    return `follow it with: berth device watch-cleanup ${device ?? 'DEVICE'}`;
  }
  if (err.codeName === 'UNIMPLEMENTED') {
    const kind = await identifyServer(client.endpoint, tls ? { tls } : {}).catch(() => 'unknown' as const);
    if (kind === 'agent') {
      return `${client.endpoint} (${where}) is a Berth agent, not a scheduler: give the scheduler's endpoint`;
    }
    return `${client.endpoint} (${where}) does not serve the Berth scheduler API: is it a Berth scheduler?`;
  }
  if (err.codeName === 'UNAUTHENTICATED' && client.tokenSource === 'env') {
    return `the token comes from $BERTH_TOKEN, which overrides the one in ${client.configPath}: unset BERTH_TOKEN to use that one`;
  }
  if (err.codeName === 'UNAUTHENTICATED' && client.tokenSource === 'default') {
    return `no token: give --token, set $BERTH_TOKEN, or run berth up (it writes one into ${client.configPath})`;
  }
  if (err.codeName === 'UNAVAILABLE') {
    return `nothing answers at ${client.endpoint} (${where}): is berth up (or the scheduler) running${
      client.endpointSource === 'flag' ? ', and is that its address' : ''
    }?`;
  }
  return undefined;
}

/**
 * Reports an error of a client command: a connection failure the caller can
 * fix in one line of its own, else the error line with the command's hint or
 * the general one. Returns the exit code.
 */
export async function reportClientError(
  err: unknown,
  resolved: ResolvedClient | undefined,
  tls?: ClientTls,
): Promise<number> {
  if (err instanceof BerthClientError && resolved) {
    const explained = await explainConnection(err, resolved, tls);
    if (explained) {
      console.error(`berth: ${err.codeName}: ${explained}`);
      return EXIT_CODE.unavailable;
    }
  }
  const own = (err as { hint?: string } | undefined)?.hint;
  const hint =
    own ?? (err instanceof BerthClientError && resolved ? await hintFor(err, resolved, tls) : undefined);
  return reportError(err, hint);
}

/** The scheduler client a command's flags, environment and client configuration describe. */
export async function connect(
  flags: ClientFlagValues,
  extra: { retries?: number; timeoutMs?: number } = {},
): Promise<{ client: SchedulerClient; resolved: ResolvedClient; tls: ClientTls | undefined }> {
  const resolved = await resolveClient(connectionFlags(flags));
  const tls = await loadClientTls(resolved.tls);
  const client = new SchedulerClient({
    endpoint: resolved.endpoint,
    token: resolved.token,
    ...(tls ? { tls } : {}),
    retries: extra.retries ?? 2,
    ...(extra.timeoutMs ? { timeoutMs: extra.timeoutMs } : {}),
  });
  return { client, resolved, tls };
}

/**
 * Wraps a command action: connects to the scheduler, runs `fn`, closes the
 * channels, and turns any error into the one-line report and exit code (main.ts
 * prints domain errors, not the SDK's, so client commands report their own).
 */
export function withClient<A extends unknown[]>(
  fn: (client: SchedulerClient, format: OutputFormat, ...args: A) => Promise<void>,
): (...args: A) => Promise<void> {
  return async (...args: A) => {
    // commander passes (...positionals, options, command)
    const options = args[args.length - 2] as ClientFlags;
    let client: SchedulerClient | undefined;
    let resolved: ResolvedClient | undefined;
    let tls: ClientTls | undefined;
    try {
      const format = parseFormatOrUsage(options.output ?? 'table');
      ({ client, resolved, tls } = await connect(options));
      await fn(client, format, ...args);
    } catch (err) {
      process.exitCode = await reportClientError(err, resolved, tls);
    } finally {
      client?.close();
    }
  };
}

function parseFormatOrUsage(v: string): OutputFormat {
  try {
    return parseFormat(v);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}
