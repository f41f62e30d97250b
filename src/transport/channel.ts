/**
 * The one way Berth opens a gRPC client channel, for every client it runs:
 * the SDK and the CLI (scheduler and agent clients), the agent's
 * registration loop (agent → scheduler) and the scheduler's agent links
 * (scheduler → agent). It lives in src/transport, which both the client
 * side (src/client) and the servers may import, so neither imports the
 * other (.dependency-cruiser.cjs). What it fixes, once:
 *
 * - keepalive: a ping every 20 s on an idle connection, dropped after 10 s
 *   without an answer, also without calls (a watch waiting for changes is
 *   idle). The servers (src/server/grpc/server.ts) accept pings down to every
 *   10 s, below these 20 s, so no server answers our clients with
 *   too_many_pings.
 * - reconnect backoff: grpc-js's default grows to 120 s; after an outage a
 *   client would wait that long between attempts. Here 200 ms growing to 5 s.
 * - receive limit: 128 MiB, the servers' send limit (a large host's
 *   inventory or a long device list comes in one message).
 * - TLS: the server verified against `ca` (else the system roots), a client
 *   certificate presented when given (mutual TLS), and an optional server
 *   name to verify instead of the dialled host (a loopback probe of a
 *   server whose certificate names its public name).
 * - several endpoints (`10.0.0.1:7070,10.0.0.2:7070`, the replicas of one
 *   scheduler): one channel over all of them, using the first that answers
 *   and moving to the next when it stops (grpc-js pick_first).
 * - the Backoff for what a client retries itself (calls, watches).
 *
 * Node warns (DEP0123) when a TLS connection's server name is an IP address,
 * and grpc-js always sets the server name to the dialled host. The
 * certificate is still checked against that address (an `IP:` subject
 * alternative name); the warning would only add a non-JSON line to the
 * logs and to the CLI's output, so dropIpServernameWarning() removes that one
 * warning, and nothing else (docs/security.md).
 */
import { isIP } from 'node:net';
import { checkServerIdentity, connect } from 'node:tls';
import { type ChannelCredentials, type ChannelOptions, credentials } from '@grpc/grpc-js';

/** The channel options of every Berth client (see the module comment). */
export const CHANNEL_OPTIONS = {
  'grpc.keepalive_time_ms': 20_000,
  'grpc.keepalive_timeout_ms': 10_000,
  'grpc.keepalive_permit_without_calls': 1,
  'grpc.max_receive_message_length': 128 * 1024 * 1024,
  'grpc.initial_reconnect_backoff_ms': 200,
  'grpc.max_reconnect_backoff_ms': 5_000,
} as const satisfies ChannelOptions;

/** A client's TLS material (PEM contents). Absent: plaintext. */
export interface ClientTls {
  /** CA bundle verifying the server; absent: the system's roots. */
  ca?: Buffer;
  /** Client certificate (chain) and its key, for a server that asks for one (mutual TLS). */
  cert?: Buffer;
  key?: Buffer;
  /** The name the server's certificate must carry, when it is not the dialled host. */
  serverName?: string;
}

let ipServernameWarningDropped = false;

/** Drops Node's DEP0123 warning (an IP address as TLS server name), and only it. Idempotent. */
export function dropIpServernameWarning(): void {
  if (ipServernameWarningDropped) return;
  ipServernameWarningDropped = true;
  const emit = process.emitWarning;
  process.emitWarning = function emitWarning(this: NodeJS.Process, warning: unknown, ...rest: unknown[]) {
    const [typeOrOptions, code] = rest;
    const c =
      typeof typeOrOptions === 'object' && typeOrOptions !== null
        ? (typeOrOptions as { code?: string }).code
        : code;
    if (c === 'DEP0123') return;
    return (emit as (...a: unknown[]) => void).call(this, warning, ...rest);
  } as typeof process.emitWarning;
}

/** Channel credentials: plaintext without `tls`; TLS (mutual with cert+key) with it. */
export function channelCredentials(
  tls: ClientTls | undefined,
  verify?: Parameters<typeof credentials.createSsl>[3],
): ChannelCredentials {
  if (!tls) return credentials.createInsecure();
  dropIpServernameWarning();
  return credentials.createSsl(tls.ca ?? null, tls.key ?? null, tls.cert ?? null, verify);
}

/** CHANNEL_OPTIONS, plus the server name to verify when `tls` names one. */
export function channelOptions(tls?: ClientTls, extra: ChannelOptions = {}): ChannelOptions {
  return {
    ...CHANNEL_OPTIONS,
    ...(tls?.serverName ? { 'grpc.ssl_target_name_override': tls.serverName } : {}),
    ...extra,
  };
}

/**
 * The grpc-js target for an endpoint: `host:port` as it is, or several
 * `host:port` joined by commas (IP addresses only: grpc-js resolves a list
 * only of literal addresses; a DNS name with one address per replica does
 * the same for names) as one `ipv4:`/`ipv6:` target.
 */
export function dialTarget(endpoint: string): string {
  const parts = endpoint
    .split(',')
    .map((p) => p.trim())
    .filter((p) => p !== '');
  if (parts.length <= 1) return parts[0] ?? endpoint;
  const hostOf = (p: string) =>
    p.startsWith('[') ? p.slice(1, p.indexOf(']')) : p.slice(0, p.lastIndexOf(':'));
  const families = new Set(parts.map((p) => isIP(hostOf(p))));
  if (families.has(0) || families.size !== 1) {
    throw new Error(
      `endpoint ${JSON.stringify(endpoint)}: a list of endpoints must be IP addresses of one family (host:port,host:port); for names, give one name with an address per replica`,
    );
  }
  return `${families.has(6) ? 'ipv6' : 'ipv4'}:${parts.join(',')}`;
}

/** Exponential backoff with full jitter, capped; reset after a success. */
export class Backoff {
  private attempt = 0;

  constructor(
    private readonly baseMs = 200,
    private readonly capMs = 15_000,
  ) {}

  next(): number {
    const ceiling = Math.min(this.capMs, this.baseMs * 2 ** Math.min(this.attempt, 16));
    this.attempt++;
    return Math.round(ceiling / 2 + Math.random() * (ceiling / 2));
  }

  reset(): void {
    this.attempt = 0;
  }
}

/** Resolves after `ms`, or at once when `signal` aborts. */
export const sleep = (ms: number, signal?: AbortSignal): Promise<void> =>
  new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      resolve();
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });

/**
 * Whether the server at `endpoint` (one `host:port`) speaks TLS, asked with a
 * TLS handshake that verifies nothing and sends nothing after it: true when
 * the server answers the handshake, false when it answers with something
 * that is not TLS (a plaintext HTTP/2 server), undefined when nothing
 * answers. For explaining a failed connection, never for trusting one.
 */
export async function speaksTls(endpoint: string, timeoutMs = 3_000): Promise<boolean | undefined> {
  const first = endpoint.split(',')[0]!.trim();
  const i = first.lastIndexOf(':');
  const host = first.slice(0, i).replace(/^\[|\]$/g, '');
  const port = Number(first.slice(i + 1));
  return new Promise((resolve) => {
    const socket = connect({
      host,
      port,
      rejectUnauthorized: false,
      ALPNProtocols: ['h2'],
      ...(isIP(host) ? {} : { servername: host }),
    });
    const done = (v: boolean | undefined) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(v);
    };
    const timer = setTimeout(() => done(undefined), timeoutMs);
    socket.once('secureConnect', () => done(true));
    socket.once('error', (err: NodeJS.ErrnoException) => {
      // A TLS alert is a TLS server refusing us (e.g. a client certificate it requires).
      if (/alert/i.test(err.message)) return done(true);
      done(
        ['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN'].includes(err.code ?? '')
          ? undefined
          : false,
      );
    });
  });
}

/**
 * The answer of a plain HTTP/1.1 server at `endpoint` (one `host:port`) to
 * `GET /` — its status and the start of its body — or undefined when what
 * answers is not HTTP/1.1 (a gRPC server) or nothing answers. For explaining
 * a failed connection (grpc-js says only "Protocol error"), never for trusting one.
 */
export async function http1Answer(
  endpoint: string,
  timeoutMs = 3_000,
): Promise<{ status: number; body: string } | undefined> {
  const first = endpoint.split(',')[0]!.trim();
  try {
    const res = await fetch(`http://${first}/`, { signal: AbortSignal.timeout(timeoutMs) });
    return { status: res.status, body: (await res.text()).slice(0, 2048) };
  } catch {
    return undefined;
  }
}

/**
 * What goes wrong in a TLS handshake with `tls` at `endpoint`, as Node words
 * it, or undefined when the server accepts it: the handshake, then the
 * server's first HTTP/2 frame (a server refusing the client certificate says
 * so only after the handshake, with an alert). For explaining a failed
 * connection grpc-js reported without a cause.
 */
export async function tlsProblem(
  endpoint: string,
  tls: ClientTls,
  timeoutMs = 3_000,
): Promise<string | undefined> {
  const first = endpoint.split(',')[0]!.trim();
  const i = first.lastIndexOf(':');
  const host = first.slice(0, i).replace(/^\[|\]$/g, '');
  const port = Number(first.slice(i + 1));
  const name = tls.serverName ?? host;
  return new Promise((resolve) => {
    const socket = connect({
      host,
      port,
      ALPNProtocols: ['h2'],
      ...(tls.ca ? { ca: tls.ca } : {}),
      ...(tls.cert ? { cert: tls.cert } : {}),
      ...(tls.key ? { key: tls.key } : {}),
      ...(isIP(name) ? {} : { servername: name }),
      checkServerIdentity: (_h, cert) => checkServerIdentity(name, cert),
    });
    const done = (v: string | undefined) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(v);
    };
    const timer = setTimeout(() => done(undefined), timeoutMs);
    // The server's first frame (its SETTINGS) means it took the client certificate; a
    // TLS 1.3 server that refuses it closes (or resets) the connection after the handshake.
    const refused = 'the server closed the connection after the TLS handshake: certificate refused';
    let secured = false;
    socket.once('secureConnect', () => {
      secured = true;
    });
    socket.once('error', (err: NodeJS.ErrnoException) =>
      done(secured && (err.code === 'ECONNRESET' || err.code === 'EPIPE') ? refused : err.message),
    );
    socket.once('data', () => done(undefined));
    socket.once('end', () => done(refused));
  });
}
