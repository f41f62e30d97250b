/**
 * Offline verification of an erasure certificate (`berth cleanup verify`):
 * its signature against keys the verifier trusts (a JWK, or a JWK Set such as
 * `berth host keys --save` writes from the scheduler's published list), its
 * link to the previous certificate of the same media when that is given, and
 * what it says about the media. Nothing here trusts Berth's database.
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

/** Keys from a JWK or a JWK Set (JSON text); each key's id is its thumbprint, whatever `kid` it says. */
export function parseKeySet(text: string): KnownKey[] {
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
      return { kid: jwkThumbprint(jwk), jwk };
    } catch (err) {
      throw new CertificateError(`key ${i} of the key file ${(err as Error).message}`);
    }
  });
}

export interface Verification {
  certificate: DecodedCertificate;
  /** What was checked, one line each. */
  checks: string[];
  /** The host handover from the previous certificate (given with `previous`), and whether nothing is known before this link (src/erasure/chain.ts). */
  handover: LinkView['handover'];
  gap: boolean;
}

/**
 * Verifies `jws` against `keys`; with `previous`, that it is the next link of
 * that certificate's chain; with `expect`, that it names this media and host.
 * Throws a CertificateError saying what failed.
 */
export function verifyOffline(
  jws: string,
  keys: readonly KnownKey[],
  opts: { previous?: string; mediaKey?: string; host?: string } = {},
): Verification {
  const cert = verifyCertificate(jws, keys);
  const c = cert.claims;
  const checks = [`signature: EdDSA (Ed25519), key ${cert.header.kid}, valid`];
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
