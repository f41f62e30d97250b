import { generateKeyPairSync } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { compactVerify, importJWK } from 'jose';
import { describe, expect, it } from 'vitest';
import {
  CertificateError,
  certificateHash,
  chainBreak,
  decodeCertificate,
  type ErasureClaims,
  jwkThumbprint,
  NIST_800_88,
  parsePublicJwk,
  publicJwkOf,
  signCertificate,
  verifyCertificate,
} from './certificate.js';
import { parseKeySet, publishedKeySet, verifyOffline } from './verify.js';

const claims = (over: Partial<ErasureClaims> = {}): ErasureClaims => ({
  v: 1,
  iss: 'berth-agent:h1',
  host: 'h1',
  kid: '',
  iat: 1_700_000_000,
  job_id: 'job-1',
  address: '0000:3d:00.0',
  media: {
    key: 'nvme:nqn.test',
    kind: 'NVME_SUBSYSTEM',
    subsystem_nqn: 'nqn.test',
    serial: 'S',
    model: 'M',
    namespaces: [],
    device_serial_number: '',
  },
  tenant: { arq_uuid: 'a', instance_uuid: 'i', project_id: '' },
  action: 'sanitize-crypto',
  proof: {
    method: 'sanitize',
    read_back: 'none',
    bytes_written: 0,
    bytes_read: 0,
    bytes_total: 1,
    findings: ['f'],
    census: null,
    sanitize: null,
  },
  nist_800_88: NIST_800_88['sanitize-crypto']!,
  started_at: '2026-01-01T00:00:00.000Z',
  ended_at: '2026-01-01T00:00:01.000Z',
  seq: 1,
  prev: null,
  ...over,
});

function key() {
  const k = generateKeyPairSync('ed25519').privateKey;
  const jwk = publicJwkOf(k);
  return { k, jwk, kid: jwkThumbprint(jwk) };
}

describe('erasure certificates', () => {
  it("the key id is RFC 7638's thumbprint (RFC 8037 A.3's vector)", () => {
    expect(
      jwkThumbprint({ kty: 'OKP', crv: 'Ed25519', x: '11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo' }),
    ).toBe('kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k');
  });

  it('a certificate verifies with jose (another JOSE implementation) and with Berth; its hash is the SHA-256 of its compact form', async () => {
    const { k, jwk, kid } = key();
    const jws = signCertificate(claims({ kid }), k, kid);
    const { payload, protectedHeader } = await compactVerify(jws, await importJWK({ ...jwk }, 'EdDSA'));
    expect(protectedHeader).toEqual({ alg: 'EdDSA', typ: 'berth-erasure-certificate+jwt', kid });
    expect(JSON.parse(new TextDecoder().decode(payload))).toEqual(claims({ kid }));
    expect(verifyCertificate(jws, [{ kid, jwk }]).claims.job_id).toBe('job-1');
    expect(certificateHash(jws)).toMatch(/^sha256:[0-9a-f]{64}$/);
  });

  it('refuses a forged, edited, foreign or malformed certificate, naming why', () => {
    const { k, jwk, kid } = key();
    const other = key();
    const jws = signCertificate(claims({ kid }), k, kid);
    const [h, p, s] = jws.split('.') as [string, string, string];
    const flipped = Buffer.from(s, 'base64url');
    flipped[0] = flipped[0]! ^ 1;
    const refuse =
      (j: string, keys = [{ kid, jwk }]) =>
      () =>
        verifyCertificate(j, keys);
    expect(refuse(`${h}.${p}.${flipped.toString('base64url')}`)).toThrow(/signature that does not verify/);
    const edited = Buffer.from(JSON.stringify(claims({ kid, host: 'h2' }))).toString('base64url');
    expect(refuse(`${h}.${edited}.${s}`)).toThrow(/signature that does not verify/);
    expect(refuse(signCertificate(claims({ kid: other.kid }), other.k, other.kid))).toThrow(
      /not a key of host h1/,
    );
    expect(refuse('a.b')).toThrow(CertificateError);
    expect(refuse(signCertificate(claims({ kid, seq: 2, prev: null }), k, kid))).toThrow(
      /seq 2 with prev null/,
    );
    expect(() => parsePublicJwk('{"kty":"OKP","crv":"Ed25519","x":"abc","d":"x"}')).toThrow(/private key/);
  });

  it('a chain: the next link names the last one by hash and seq; anything else is out of order', () => {
    const { k, kid, jwk } = key();
    const first = signCertificate(claims({ kid }), k, kid);
    const second = signCertificate(
      claims({ kid, job_id: 'job-2', seq: 2, prev: certificateHash(first) }),
      k,
      kid,
    );
    const skipped = signCertificate(
      claims({ kid, job_id: 'job-3', seq: 3, prev: certificateHash(second) }),
      k,
      kid,
    );
    const d = (j: string) => decodeCertificate(j);
    expect(chainBreak(d(second), d(first))).toBeNull();
    expect(chainBreak(d(skipped), d(first))).toMatch(/out of order/);
    expect(chainBreak(d(first), d(second))).toMatch(/a link claiming no history cannot follow it/);
    expect(
      verifyOffline(second, [{ kid, jwk, host: 'h1' }], { previous: first }).checks.join('\n'),
    ).toContain('chain: link 2');
    expect(() => verifyOffline(skipped, [{ kid, jwk, host: 'h1' }], { previous: first })).toThrow(
      /not the link after/,
    );
    expect(parseKeySet(JSON.stringify({ keys: [{ ...jwk, kid: 'whatever' }] }))[0]!.kid).toBe(kid);
  });

  it("offline, a certificate verifies only with its claimed host's key: another host's key is refused, naming the key, its host and the claimed one", () => {
    const a = key();
    const b = key();
    const published = publishedKeySet([
      { jwk: JSON.stringify(a.jwk), keyId: a.kid, host: 'hosta' },
      { jwk: JSON.stringify(b.jwk), keyId: b.kid, host: 'hostb' },
    ]);
    const keys = parseKeySet(published);
    expect(keys.map((k) => [k.kid, k.host])).toEqual([
      [a.kid, 'hosta'],
      [b.kid, 'hostb'],
    ]);
    const genuine = signCertificate(claims({ host: 'hosta', kid: a.kid }), a.k, a.kid);
    expect(verifyOffline(genuine, keys, { host: 'hosta' }).checks).toContain(
      `key: ${a.kid} is host hosta's key`,
    );
    // Host B's key, claiming host A: the signature is B's own and valid, the binding is not.
    const forged = signCertificate(claims({ host: 'hosta', kid: b.kid }), b.k, b.kid);
    for (const opts of [{}, { host: 'hosta' }]) {
      expect(() => verifyOffline(forged, keys, opts)).toThrow(
        `claims host hosta, but it is signed with key ${b.kid}, which is host hostb's key, not host hosta's`,
      );
    }
    // One key pinned for two hosts signs for either.
    const shared = parseKeySet(
      publishedKeySet([
        { jwk: JSON.stringify(b.jwk), keyId: b.kid, host: 'hostb' },
        { jwk: JSON.stringify(b.jwk), keyId: b.kid, host: 'hosta' },
      ]),
    );
    expect(verifyOffline(forged, shared).certificate.claims.host).toBe('hosta');
  });

  it('a key the key set names no host for is refused unless trusted for any host explicitly; a bad host member is named', () => {
    const a = key();
    const jws = signCertificate(claims({ host: 'hosta', kid: a.kid }), a.k, a.kid);
    const bare = parseKeySet(JSON.stringify({ ...a.jwk, kid: a.kid }));
    expect(bare[0]!.host).toBeNull();
    expect(() => verifyOffline(jws, bare)).toThrow(
      new RegExp(`signed with key ${a.kid}, which the key set names no host for.*berth host keys --save`),
    );
    expect(verifyOffline(jws, bare, { allowKeysWithoutHost: true }).checks.join('\n')).toContain(
      'trusted for host hosta as asked',
    );
    // The flag does not widen a key that names its host.
    const b = key();
    const keys = parseKeySet(publishedKeySet([{ jwk: JSON.stringify(b.jwk), keyId: b.kid, host: 'hostb' }]));
    const forged = signCertificate(claims({ host: 'hosta', kid: b.kid }), b.k, b.kid);
    expect(() => verifyOffline(forged, keys, { allowKeysWithoutHost: true })).toThrow(/host hostb's key/);
    for (const host of ['', 7, null]) {
      expect(() => parseKeySet(JSON.stringify({ keys: [{ ...a.jwk, host }] }))).toThrow(
        `key 0 of the key file has host ${JSON.stringify(host)}, not a host name`,
      );
    }
  });

  it('across hosts: a handover verifies and is shown; an unknown-history link is a gap and cannot follow a held link', () => {
    const b = key();
    const a = key();
    const onB = signCertificate(
      claims({ kid: b.kid, host: 'hostb', iss: 'berth-agent:hostb', history: 'unknown' }),
      b.k,
      b.kid,
    );
    const onA = signCertificate(
      claims({
        kid: a.kid,
        host: 'hosta',
        iss: 'berth-agent:hosta',
        job_id: 'job-2',
        seq: 2,
        prev: certificateHash(onB),
      }),
      a.k,
      a.kid,
    );
    const keys = [
      { kid: a.kid, jwk: a.jwk, host: 'hosta' },
      { kid: b.kid, jwk: b.jwk, host: 'hostb' },
    ];
    const v = verifyOffline(onA, keys, { previous: onB });
    expect(v.handover).toEqual({ from: 'hostb', to: 'hosta' });
    expect(v.gap).toBe(false);
    expect(v.checks).toContain('handover: hostb -> hosta');
    const first = verifyOffline(onB, keys);
    expect(first.gap).toBe(true);
    expect(first.checks).toContain('gap: unknown history before this link');
    expect(chainBreak(decodeCertificate(onA), decodeCertificate(onB))).toBeNull();
    // A host claiming unknown history where a link is held: refused, naming the held link.
    const forked = signCertificate(
      claims({ kid: a.kid, host: 'hosta', iss: 'berth-agent:hosta', job_id: 'job-3', history: 'unknown' }),
      a.k,
      a.kid,
    );
    expect(chainBreak(decodeCertificate(forked), decodeCertificate(onA))).toMatch(
      /unknown-history link .* holds link 2 .*signed by host hosta/,
    );
    // history is "unknown" only, and only with no prev.
    const bad = (over: Partial<ErasureClaims>) =>
      signCertificate(claims({ kid: a.kid, ...over }), a.k, a.kid);
    expect(() => decodeCertificate(bad({ history: 'complete' as 'unknown' }))).toThrow(
      /has history "complete"/,
    );
    expect(() => decodeCertificate(bad({ history: 'unknown', seq: 2, prev: certificateHash(onB) }))).toThrow(
      /has history "unknown" with prev sha256:/,
    );
  });

  it('docs/erasure-certificates.md prints the NIST SP 800-88 table as the code has it', () => {
    const doc = readFileSync(join(__dirname, '../../docs/erasure-certificates.md'), 'utf8');
    const rows = [...doc.matchAll(/^\| `([a-z0-9-]+)` \| (Clear|Purge) \|/gm)].map((m) => [m[1], m[2]]);
    expect(rows).toEqual(Object.entries(NIST_800_88).map(([action, m]) => [action, m.category]));
  });
});
