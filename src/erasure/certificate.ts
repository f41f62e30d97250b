/**
 * Erasure certificates (docs/erasure-certificates.md): what an agent signs
 * when its judge accepts a cleanup's proof, and how anyone checks one.
 *
 * A certificate is a JWS in compact serialization (RFC 7515) signed with the
 * agent's Ed25519 key (`alg` EdDSA, RFC 8037): `BASE64URL(header) "."
 * BASE64URL(payload) "." BASE64URL(signature)`, the signature over the first
 * two parts as ASCII. Its header names the key (`kid`, the RFC 7638 JWK
 * thumbprint of the public key); its payload (`ErasureClaims`) says what was
 * erased, for whom, how, and links to the previous certificate of the same
 * media by the SHA-256 of that certificate's compact form. Only node:crypto:
 * the agent, the scheduler and the CLI share this module, and any JOSE
 * library, `openssl pkeyutl -verify -rawin` or Python's `cryptography` can
 * check the same bytes.
 */
import { createHash, createPublicKey, type KeyObject, sign, verify } from 'node:crypto';

export const CERTIFICATE_TYPE = 'berth-erasure-certificate+jwt';
export const CERTIFICATE_VERSION = 1;

/** An agent's public key as a JWK (OKP, Ed25519), with its thumbprint. */
export interface PublicJwk {
  kty: 'OKP';
  crv: 'Ed25519';
  x: string;
}

/** NIST SP 800-88 Rev. 1 sanitization categories Berth can claim. */
export type NistCategory = 'Clear' | 'Purge';

export interface NistMapping {
  category: NistCategory;
  /** The technique in 800-88's words. */
  technique: string;
  /** Where in 800-88 Rev. 1 (and why it applies). */
  basis: string;
}

/**
 * THE table: an action (a cleanup method) → the 800-88 Rev. 1 category it
 * meets, as Berth proves it. docs/erasure-certificates.md prints it (a test
 * holds the two equal). An action not listed gets no category: the
 * certificate says `null` rather than guess.
 */
export const NIST_800_88: Readonly<Record<string, NistMapping>> = {
  'sanitize-crypto': {
    category: 'Purge',
    technique: 'Cryptographic Erase (NVMe Sanitize, Crypto Erase)',
    basis:
      'SP 800-88 Rev. 1 §2.6 and Table A-8 (flash memory, NVM Express): Cryptographic Erase is a Purge technique; the sanitize log proved this operation ran and completed',
  },
  'sanitize-block': {
    category: 'Purge',
    technique: 'Block Erase (NVMe Sanitize, Block Erase)',
    basis:
      'SP 800-88 Rev. 1 Table A-8 (flash memory): the Sanitize Block Erase command is a Purge technique; the sanitize log proved this operation ran and completed',
  },
  'write-zeroes': {
    category: 'Clear',
    technique: 'Overwrite with verification (NVMe Write Zeroes, every byte read back)',
    basis:
      'SP 800-88 Rev. 1 Table A-8 (flash memory, NVM Express): Clear is an overwrite of all addressable locations with a fixed value; it does not reach over-provisioned or retired blocks, so it is not Purge',
  },
  shred: {
    category: 'Clear',
    technique: 'Overwrite with verification (zeros written through the block device, every byte read back)',
    basis:
      'SP 800-88 Rev. 1 Table A-8 (flash memory, NVM Express): Clear is an overwrite of all addressable locations with a fixed value; it does not reach over-provisioned or retired blocks, so it is not Purge',
  },
  'vendor-format-ses1': {
    category: 'Purge',
    technique: 'NVM Express Format, Secure Erase Settings 1 (User Data Erase), read back',
    basis:
      'SP 800-88 Rev. 1 Table A-8 (flash memory, NVM Express): Format with SES = 1 is listed under Purge; Berth also read back every addressable byte as zero',
  },
};

export function nistMapping(action: string): NistMapping | null {
  return NIST_800_88[action] ?? null;
}

/** One namespace of the media, as its identity names it. */
export interface ClaimNamespace {
  nsid: number;
  nguid: string;
  eui64: string;
  uuid: string;
}

/** What a certificate states (its JWS payload). Snake case: it is read outside Berth. */
export interface ErasureClaims {
  /** Format version (1). */
  v: number;
  /** berth-agent:<host>. */
  iss: string;
  /** The host and the id of the agent key that signed. */
  host: string;
  kid: string;
  /** Issued at (seconds since the epoch), and the same as text. */
  iat: number;
  /** The cleanup job (unique per certificate). */
  job_id: string;
  /** The PCI address the device was cleaned at. */
  address: string;
  media: {
    key: string;
    kind: string;
    subsystem_nqn: string;
    serial: string;
    model: string;
    namespaces: ClaimNamespace[];
    device_serial_number: string;
  };
  /** Whose data it erased: the binding the agent recorded (null when the media was not held, e.g. its first cleanup). */
  tenant: { arq_uuid: string; instance_uuid: string; project_id: string } | null;
  /** The locked-in action that ran. */
  action: string;
  /** What proved it. */
  proof: {
    method: string;
    read_back: string;
    bytes_written: number;
    bytes_read: number;
    bytes_total: number;
    findings: string[];
    /** NVMe: the agent's census (the proof's), as JSON. */
    census: unknown;
    /** A sanitize's action and log, as observed (null when none ran). */
    sanitize: {
      sanact: number;
      command_sent: boolean;
      before: SanitizeLogClaim;
      after: SanitizeLogClaim | null;
      polls: number;
    } | null;
  };
  /** NIST SP 800-88 Rev. 1 category of the action (null for an action the table does not list). */
  nist_800_88: NistMapping | null;
  /** When the cleanup started and ended (ISO 8601, the agent's clock). */
  started_at: string;
  ended_at: string;
  /** Position in this media's chain (1 for its first certificate). */
  seq: number;
  /** sha256:<hex> of the previous certificate of this media (compact form), null for the first. */
  prev: string | null;
  /**
   * "unknown" on a link that continues no link (prev null, seq 1): nothing is
   * known of the media's history before it (a media never seen, a lost
   * database); a verifier shows a gap there (src/erasure/chain.ts). Absent on
   * a link that continues one. Certificates signed before decision 63 lack
   * it; their first link is read the same way.
   */
  history?: 'unknown';
  /**
   * NVMe: the controller's write counters (SMART / Health log) read right
   * after the proven scrub; absent where none were read (decision 64). A
   * media whose counters are higher now was written since this certificate.
   */
  write_counters?: WriteCountersClaim;
}

/** A controller's SMART / Health log counters; 128-bit counters as decimal strings. */
export interface WriteCountersClaim {
  /** The controller they were read through (nvmeX) and its cntlid: counters are per controller. */
  controller: string;
  cntlid: number;
  data_units_written: string;
  host_write_commands: string;
  power_cycles: string;
  power_on_hours: string;
  /** When they were read (ISO 8601, the agent's clock). */
  at: string;
}

export interface SanitizeLogClaim {
  status: number;
  global_data_erased: boolean;
  sprog: number;
  scdw10: number | null;
  at: string;
}

const b64u = (b: Buffer | string): string => Buffer.from(b).toString('base64url');

/** RFC 7638 thumbprint of an Ed25519 JWK (SHA-256, base64url). */
export function jwkThumbprint(jwk: PublicJwk): string {
  return b64u(createHash('sha256').update(`{"crv":"Ed25519","kty":"OKP","x":"${jwk.x}"}`).digest());
}

/** The public JWK of an Ed25519 key (private or public). */
export function publicJwkOf(key: KeyObject): PublicJwk {
  const pub = key.type === 'private' ? createPublicKey(key) : key;
  const jwk = pub.export({ format: 'jwk' }) as { kty?: string; crv?: string; x?: string };
  if (jwk.kty !== 'OKP' || jwk.crv !== 'Ed25519' || !jwk.x) throw new Error('not an Ed25519 key');
  return { kty: 'OKP', crv: 'Ed25519', x: jwk.x };
}

/** Parses a JWK given as JSON text: an Ed25519 public key, or an error naming what is wrong. */
export function parsePublicJwk(text: string): PublicJwk {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new Error('is not JSON');
  }
  const o = v as Record<string, unknown>;
  if (typeof o !== 'object' || o === null || o['kty'] !== 'OKP' || o['crv'] !== 'Ed25519') {
    throw new Error('is not an Ed25519 JWK (kty OKP, crv Ed25519)');
  }
  if ('d' in o) throw new Error('holds a private key (d); give the public key only');
  const x = o['x'];
  if (typeof x !== 'string' || !/^[A-Za-z0-9_-]{43}$/.test(x)) throw new Error('has no 32-byte x');
  return { kty: 'OKP', crv: 'Ed25519', x };
}

/** sha256:<hex> of a certificate's compact form: what the next certificate's `prev` names. */
export function certificateHash(jws: string): string {
  return `sha256:${createHash('sha256').update(jws, 'ascii').digest('hex')}`;
}

/** Signs claims with the agent's private key: the compact JWS. */
export function signCertificate(claims: ErasureClaims, privateKey: KeyObject, kid: string): string {
  const header = { alg: 'EdDSA', typ: CERTIFICATE_TYPE, kid };
  const input = `${b64u(JSON.stringify(header))}.${b64u(JSON.stringify(claims))}`;
  return `${input}.${b64u(sign(null, Buffer.from(input, 'ascii'), privateKey))}`;
}

export interface DecodedCertificate {
  header: { alg: string; typ?: string; kid: string };
  claims: ErasureClaims;
  hash: string;
}

/** A certificate that cannot be read or does not verify; `reason` says which, in words. */
export class CertificateError extends Error {}

const COMPACT = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;

/** Reads a certificate's header and claims, without checking its signature. */
export function decodeCertificate(jws: string): DecodedCertificate {
  const text = jws.trim();
  if (!COMPACT.test(text)) throw new CertificateError('is not a JWS in compact form (three base64url parts)');
  const [h, p] = text.split('.') as [string, string, string];
  let header: DecodedCertificate['header'];
  let claims: ErasureClaims;
  try {
    header = JSON.parse(Buffer.from(h, 'base64url').toString('utf8'));
    claims = JSON.parse(Buffer.from(p, 'base64url').toString('utf8'));
  } catch {
    throw new CertificateError('has a header or payload that is not JSON');
  }
  if (header?.alg !== 'EdDSA')
    throw new CertificateError(`is signed with ${JSON.stringify(header?.alg)}, not EdDSA`);
  if (typeof header.kid !== 'string' || !header.kid) throw new CertificateError('names no key (kid)');
  if (header.typ !== CERTIFICATE_TYPE)
    throw new CertificateError(`is of type ${JSON.stringify(header.typ)}, not ${CERTIFICATE_TYPE}`);
  if (typeof claims !== 'object' || claims === null || claims.v !== CERTIFICATE_VERSION) {
    throw new CertificateError(`is not a version ${CERTIFICATE_VERSION} erasure certificate`);
  }
  for (const f of ['host', 'kid', 'job_id', 'address', 'action', 'started_at', 'ended_at'] as const) {
    if (typeof claims[f] !== 'string' || !claims[f]) throw new CertificateError(`has no ${f}`);
  }
  if (typeof claims.media?.key !== 'string' || !claims.media.key)
    throw new CertificateError('names no media key');
  if (!Number.isInteger(claims.seq) || claims.seq < 1)
    throw new CertificateError(`has seq ${claims.seq}, not a positive integer`);
  if (claims.prev !== null && !/^sha256:[0-9a-f]{64}$/.test(String(claims.prev))) {
    throw new CertificateError(`has prev ${JSON.stringify(claims.prev)}, neither null nor sha256:<hex>`);
  }
  if ((claims.seq === 1) !== (claims.prev === null)) {
    throw new CertificateError(
      `has seq ${claims.seq} with prev ${claims.prev ?? 'null'} (only the first of a chain has none)`,
    );
  }
  if (claims.history !== undefined && (claims.history !== 'unknown' || claims.prev !== null)) {
    throw new CertificateError(
      `has history ${JSON.stringify(claims.history)} with prev ${claims.prev ?? 'null'} (only "unknown", on a link with no prev)`,
    );
  }
  if (claims.kid !== header.kid)
    throw new CertificateError(`names key ${header.kid} in its header and ${claims.kid} in its claims`);
  return { header, claims, hash: certificateHash(text) };
}

/** A key a host's certificates may be signed with. */
export interface KnownKey {
  kid: string;
  jwk: PublicJwk;
}

/**
 * Checks a certificate's signature against the host's keys (the pinned one
 * and those it replaced): the claims, or a CertificateError saying why not.
 */
export function verifyCertificate(jws: string, keys: readonly KnownKey[]): DecodedCertificate {
  const d = decodeCertificate(jws);
  const key = keys.find((k) => k.kid === d.header.kid);
  if (!key) {
    throw new CertificateError(
      `is signed with key ${d.header.kid}, which is not a key of host ${d.claims.host} (${keys.map((k) => k.kid).join(', ') || 'none known'})`,
    );
  }
  if (jwkThumbprint(key.jwk) !== key.kid)
    throw new CertificateError(`key ${key.kid} does not match its thumbprint`);
  const [h, p, s] = jws.trim().split('.') as [string, string, string];
  const ok = verify(
    null,
    Buffer.from(`${h}.${p}`, 'ascii'),
    createPublicKey({ key: { ...key.jwk }, format: 'jwk' }),
    Buffer.from(s, 'base64url'),
  );
  if (!ok) throw new CertificateError(`has a signature that does not verify with key ${key.kid}`);
  return d;
}

/**
 * Whether `next` continues a chain whose last certificate is `last` (null:
 * none known for the media): same media, the next seq, prev = last's hash.
 * The reason it does not, or null.
 */
export function chainBreak(next: DecodedCertificate, last: DecodedCertificate | null): string | null {
  const c = next.claims;
  if (!last) {
    return null;
  }
  if (last.claims.media.key !== c.media.key) {
    return `continues media ${last.claims.media.key}, not ${c.media.key}`;
  }
  if (c.prev === null) {
    return `is an unknown-history link (no previous link), but the chain of media ${c.media.key} holds link ${last.claims.seq} (${last.hash}, signed by host ${last.claims.host}): a link claiming no history cannot follow it; it must continue that link`;
  }
  if (c.seq !== last.claims.seq + 1 || c.prev !== last.hash) {
    return `is link ${c.seq} (after ${c.prev ?? 'nothing'}), but the last certificate of media ${c.media.key} is link ${last.claims.seq} (${last.hash}): out of order, or a link is missing`;
  }
  return null;
}
