/**
 * Offline verification of an erasure certificate (`berth cleanup verify`, the
 * SDK's `verifyErasureCertificate`): its signature against keys the verifier
 * trusts (a JWK, or a JWK Set such as `berth host keys --save` writes from the
 * scheduler's published list), that the signing key is the key of the host
 * the certificate claims (decision 66), its link to the previous certificate
 * of the same media when that is given, and what it says about the media.
 * Nothing here trusts Berth's database.
 */
import {
  CertificateError,
  certificateHash,
  type DecodedCertificate,
  decodeCertificate,
  jwkThumbprint,
  type KnownKey,
  parsePublicJwk,
  verifyCertificate,
} from './certificate.js';
import { type LinkView, linkView, linkViewLines } from './chain.js';

/**
 * The published key set as `berth host keys --save` writes it (and `berth
 * cleanup verify --from-scheduler` reads it): a JWK Set whose entries are
 * the keys' public JWKs with their `kid` and the `host` they sign for. A
 * reader that knows only JWKs ignores the extra member.
 */
export function publishedKeySet(keys: readonly { jwk: string; keyId: string; host: string }[]): string {
  const set = { keys: keys.map((k) => ({ ...JSON.parse(k.jwk), kid: k.keyId, host: k.host })) };
  return `${JSON.stringify(set, null, 2)}\n`;
}

/** A trusted key and the host it signs for: null when the key set does not say (a bare JWK, an old file). */
export interface HostKey extends KnownKey {
  host: string | null;
}

/**
 * Keys from a JWK or a JWK Set (JSON text); each key's id is its thumbprint,
 * whatever `kid` it says, and its host the entry's `host` member (null if it
 * has none).
 */
export function parseKeySet(text: string): HostKey[] {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new CertificateError('the key file is not JSON (a JWK, or a JWK Set {"keys": [...]})');
  }
  const list = Array.isArray((v as { keys?: unknown })?.keys) ? (v as { keys: unknown[] }).keys : [v];
  return list.map((k, i) => {
    try {
      const jwk = parsePublicJwk(JSON.stringify(k));
      const host = (k as { host?: unknown }).host;
      if (host !== undefined && (typeof host !== 'string' || host === '')) {
        throw new Error(`has host ${JSON.stringify(host)}, not a host name`);
      }
      return { kid: jwkThumbprint(jwk), jwk, host: host ?? null };
    } catch (err) {
      throw new CertificateError(`key ${i} of the key file ${(err as Error).message}`);
    }
  });
}

/**
 * That the key that signed `cert` belongs to the host it claims: one line
 * for the checks, or a CertificateError naming the key, its host(s) and the
 * claimed host. A key listed for several hosts (one key pinned twice) signs
 * for each of them.
 */
function keyBinding(cert: DecodedCertificate, keys: readonly HostKey[], allowWithoutHost: boolean): string {
  const kid = cert.header.kid;
  const claimed = cert.claims.host;
  const entries = keys.filter((k) => k.kid === kid);
  const hosts = [...new Set(entries.flatMap((k) => (k.host === null ? [] : [k.host])))];
  if (hosts.includes(claimed)) return `key: ${kid} is host ${claimed}'s key`;
  if (hosts.length > 0) {
    throw new CertificateError(
      `claims host ${claimed}, but it is signed with key ${kid}, which is host ${hosts.join(', ')}'s key, not host ${claimed}'s`,
    );
  }
  if (!allowWithoutHost) {
    throw new CertificateError(
      `is signed with key ${kid}, which the key set names no host for, so it cannot be checked that the key is host ${claimed}'s (the certificate's claim): save the key set again with \`berth host keys --save FILE\` (it records each key's host), or trust the key for any host explicitly (--allow-keys-without-host)`,
    );
  }
  return `key: ${kid} names no host in the key set; trusted for host ${claimed} as asked (--allow-keys-without-host)`;
}

export interface Verification {
  certificate: DecodedCertificate;
  /** What was checked, one line each. */
  checks: string[];
  /** The host handover from the previous certificate (given with `previous`), and whether nothing is known before this link (src/erasure/chain.ts). */
  handover: LinkView['handover'];
  gap: boolean;
}

export interface VerifyOptions {
  /** The previous certificate of the same media: this one must be its next link. */
  previous?: string;
  /** The media it must name. */
  mediaKey?: string;
  /** The host it must name. */
  host?: string;
  /**
   * Trust a key the key set names no host for (a bare JWK, a key set saved
   * before hosts were recorded) for whatever host the certificate claims.
   * Without it such a key is refused: its host cannot be checked.
   */
  allowKeysWithoutHost?: boolean;
}

/**
 * Verifies `jws` against `keys`: signed by one of them, and that key is the
 * key of the host the certificate claims; with `previous`, that it is the
 * next link of that certificate's chain; with `mediaKey`/`host`, that it
 * names this media and host. Throws a CertificateError saying what failed.
 */
export function verifyOffline(jws: string, keys: readonly HostKey[], opts: VerifyOptions = {}): Verification {
  const cert = verifyCertificate(jws, keys);
  const c = cert.claims;
  const checks = [`signature: EdDSA (Ed25519), key ${cert.header.kid}, valid`];
  checks.push(keyBinding(cert, keys, opts.allowKeysWithoutHost === true));
  if (opts.host !== undefined && c.host !== opts.host) {
    throw new CertificateError(`is host ${c.host}'s, not ${opts.host}'s`);
  }
  if (opts.mediaKey !== undefined && c.media.key !== opts.mediaKey) {
    throw new CertificateError(`is of media ${c.media.key}, not ${opts.mediaKey}`);
  }
  checks.push(`identity: host ${c.host}, media ${c.media.key} (${c.media.kind}), at ${c.address}`);
  if (opts.previous !== undefined) {
    const prev = decodeCertificate(opts.previous);
    if (prev.claims.media.key !== c.media.key) {
      throw new CertificateError(
        `continues media ${c.media.key}, but the previous certificate is of ${prev.claims.media.key}`,
      );
    }
    if (c.prev !== prev.hash || c.seq !== prev.claims.seq + 1) {
      throw new CertificateError(
        `is link ${c.seq} after ${c.prev ?? 'nothing'}, not the link after the previous certificate (link ${prev.claims.seq}, ${prev.hash})`,
      );
    }
    checks.push(`chain: link ${c.seq}, after ${prev.hash}`);
  } else {
    checks.push(
      `chain: link ${c.seq}${c.prev ? `, after ${c.prev} (not given: unchecked)` : ' (the first known of its media)'}`,
    );
  }
  const view = linkView(c, opts.previous !== undefined ? decodeCertificate(opts.previous).claims : null);
  checks.push(...linkViewLines(view));
  checks.push(`hash: ${certificateHash(jws.trim())}`);
  return { certificate: cert, checks, ...view };
}
