/**
 * TLS and mutual TLS for Berth's gRPC servers and the clients they run
 * (scheduler → agent, agent → scheduler). One shape, `{cert, key, ca}` paths,
 * serves both directions:
 * - as a server: cert+key are its identity; `ca`, when given, is the CA client
 *   certificates must chain to, and a client certificate is then REQUIRED
 *   (mutual TLS; a peer without one, or with one from another CA, fails the
 *   handshake before any RPC runs);
 * - as a client: `ca` verifies the server; cert+key are presented as the client
 *   certificate when the server asks for one.
 * A process usually uses one certificate for both (extendedKeyUsage serverAuth
 * + clientAuth).
 */
import { readFile } from 'node:fs/promises';
import { checkServerIdentity, type PeerCertificate } from 'node:tls';
import { type ChannelCredentials, ServerCredentials } from '@grpc/grpc-js';
import { ConfigError } from '../../errors.js';
import { channelCredentials as clientChannelCredentials } from '../../transport/channel.js';

export interface TlsFiles {
  /** PEM certificate (chain) of this process. */
  cert?: string;
  /** PEM private key of `cert`. */
  key?: string;
  /** PEM CA bundle: verifies peers (servers verify client certificates with it). */
  ca?: string;
  /**
   * Server side only: require a client certificate signed by `ca`. Default
   * true whenever `ca` is given (that is what mutual TLS means here).
   */
  requireClientCert?: boolean;
}

export interface TlsPems {
  cert?: Buffer;
  key?: Buffer;
  ca?: Buffer;
  requireClientCert?: boolean;
}

async function pem(path: string | undefined, what: string): Promise<Buffer | undefined> {
  if (!path) return undefined;
  let b: Buffer;
  try {
    b = await readFile(path);
  } catch (err) {
    throw new ConfigError(`tls.${what}: cannot read ${path}: ${(err as Error).message}`);
  }
  if (!b.toString('utf8').includes('-----BEGIN ')) {
    throw new ConfigError(`tls.${what}: ${path} is not a PEM file`);
  }
  return b;
}

/** Reads the PEM files, checking that cert and key come together. */
export async function loadTls(files: TlsFiles): Promise<TlsPems> {
  if (Boolean(files.cert) !== Boolean(files.key)) {
    throw new ConfigError('tls: cert and key must be given together');
  }
  const out: TlsPems = {};
  const cert = await pem(files.cert, 'cert');
  const key = await pem(files.key, 'key');
  const ca = await pem(files.ca, 'ca');
  if (cert) out.cert = cert;
  if (key) out.key = key;
  if (ca) out.ca = ca;
  if (files.requireClientCert !== undefined) out.requireClientCert = files.requireClientCert;
  return out;
}

/** Server credentials: TLS with cert+key; mutual TLS when a CA is given. */
export function serverCredentials(tls: TlsPems): ServerCredentials {
  if (!tls.cert || !tls.key) throw new ConfigError('tls: a server needs cert and key');
  const requireClient = tls.requireClientCert ?? Boolean(tls.ca);
  if (requireClient && !tls.ca) throw new ConfigError('tls: requiring client certificates needs a ca');
  return ServerCredentials.createSsl(
    tls.ca ?? null,
    [{ cert_chain: tls.cert, private_key: tls.key }],
    requireClient,
  );
}

/** Client credentials: verify the server with `ca` (or the system roots), present cert+key if given. */
export function channelCredentials(tls: TlsPems | undefined): ChannelCredentials {
  return clientChannelCredentials(tls);
}

/** The names a certificate is for: its CN and its DNS subject alternative names. */
export function certificateNames(cert: PeerCertificate): string[] {
  const names = new Set<string>();
  const cn = cert.subject?.CN;
  for (const n of Array.isArray(cn) ? cn : cn ? [cn] : []) names.add(n);
  for (const entry of (cert.subjectaltname ?? '').split(',')) {
    const m = /^\s*DNS:(.+)$/.exec(entry);
    if (m) names.add(m[1]!.trim());
  }
  return [...names];
}

/**
 * Client credentials for dialling `host`'s agent (invariant 10): besides the
 * usual checks (the CA, the endpoint's name), the agent's certificate must be
 * for that host (its CN or a DNS name), so a host that registers another
 * agent's endpoint as its own gets no link, even with mutual TLS alone.
 */
export function agentChannelCredentials(tls: TlsPems | undefined, host: string): ChannelCredentials {
  return clientChannelCredentials(tls, {
    checkServerIdentity(hostname, cert) {
      const usual = checkServerIdentity(hostname, cert);
      if (usual) return usual;
      const names = certificateNames(cert);
      return names.includes(host)
        ? undefined
        : new Error(`the agent's certificate is for ${names.join(', ') || 'no name'}, not for host ${host}`);
    },
  });
}
