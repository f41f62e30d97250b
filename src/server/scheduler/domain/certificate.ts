/**
 * Erasure certificates as the scheduler keeps them, and the rules it checks
 * one by (docs/erasure-certificates.md): the signature against a key the
 * host's agent was pinned to, the claims against the job, device, media and
 * proof it reports, and the link to the last certificate of the media this
 * scheduler holds. A cleanup's success without a valid certificate leaves the
 * device in error, never available.
 */
import {
  CertificateError,
  chainBreak,
  type DecodedCertificate,
  decodeCertificate,
  type KnownKey,
  type PublicJwk,
  verifyCertificate,
} from '../../../erasure/certificate.js';
import type { CleanupProof } from '../../../plugins/cleanup-evidence.js';
import type { CleanupJob } from './cleanup.js';
import type { DeviceRecord } from './device-state.js';
import { mediaKeyOf } from './media.js';

/** A key a host's agent signs with, as pinned. */
export interface AgentKeyRecord {
  host: string;
  kid: string;
  jwk: PublicJwk;
  pinnedAt: string;
  /** When an admin replaced it; null for the host's current key. */
  retiredAt: string | null;
}

/** A certificate this scheduler verified and stores. */
export interface CertificateRecord {
  hash: string;
  mediaKey: string;
  seq: number;
  host: string;
  kid: string;
  jobId: string;
  /** '' when re-supplied for a device this scheduler has no record of. */
  deviceUuid: string;
  instanceUuid: string;
  arqUuid: string;
  issuedAt: string;
  receivedAt: string;
  jws: string;
}

export const toKnownKeys = (keys: readonly AgentKeyRecord[]): KnownKey[] =>
  keys.map((k) => ({ kid: k.kid, jwk: k.jwk }));

export function certificateRecord(
  d: DecodedCertificate,
  jws: string,
  deviceUuid: string,
  receivedAt: string,
): CertificateRecord {
  const c = d.claims;
  return {
    hash: d.hash,
    mediaKey: c.media.key,
    seq: c.seq,
    host: c.host,
    kid: c.kid,
    jobId: c.job_id,
    deviceUuid,
    instanceUuid: c.tenant?.instance_uuid ?? '',
    arqUuid: c.tenant?.arq_uuid ?? '',
    issuedAt: new Date(c.iat * 1000).toISOString(),
    receivedAt,
    jws: jws.trim(),
  };
}

/**
 * A key valid for a certificate issued at `iat` (seconds): current, or
 * retired after it was issued.
 */
function keysAt(keys: readonly AgentKeyRecord[], iatSeconds: number): AgentKeyRecord[] {
  return keys.filter((k) => !k.retiredAt || Date.parse(k.retiredAt) >= iatSeconds * 1000);
}

/**
 * Checks the certificate a cleanup's success carries. Returns it decoded, or
 * the reason it is refused (the device's error reason).
 */
export function checkCleanupCertificate(
  jws: string | undefined,
  ctx: {
    job: CleanupJob;
    device: DeviceRecord;
    action: string;
    proof: CleanupProof | null | undefined;
    keys: readonly AgentKeyRecord[];
    last: CertificateRecord | null;
    /** The agent's own job id, when this job adopted a cleanup it was already running. */
    agentJobId?: string | undefined;
  },
): { ok: true; cert: DecodedCertificate } | { ok: false; reason: string } {
  const { job, device } = ctx;
  const refuse = (why: string) => ({
    ok: false as const,
    reason: `cleanup job ${job.jobId} reported success, but its erasure certificate ${why}; the device is held back until a cleanup is certified (docs/erasure-certificates.md)`,
  });
  if (!jws)
    return refuse('is missing (is the agent older than the scheduler, or was it stripped on the way?)');
  if (ctx.keys.length === 0) return refuse(`cannot be checked: host ${job.host} has no pinned agent key`);
  let cert: DecodedCertificate;
  try {
    const current = ctx.keys.filter((k) => !k.retiredAt);
    cert = verifyCertificate(jws, toKnownKeys(current));
  } catch (err) {
    if (err instanceof CertificateError) return refuse(err.message);
    throw err;
  }
  const c = cert.claims;
  const mismatch = (field: string, got: unknown, want: unknown) =>
    refuse(`says ${field} ${JSON.stringify(got)}, but the job's is ${JSON.stringify(want)}`);
  if (c.host !== job.host) return mismatch('host', c.host, job.host);
  if (c.job_id !== job.jobId && c.job_id !== ctx.agentJobId) return mismatch('job_id', c.job_id, job.jobId);
  if (c.address !== job.address) return mismatch('address', c.address, job.address);
  if (c.action !== ctx.action) return mismatch('action', c.action, ctx.action);
  const key = mediaKeyOf(device);
  if (key && c.media.key !== key) return mismatch('media key', c.media.key, key);
  const p = ctx.proof;
  if (
    !p ||
    c.proof.method !== p.method ||
    c.proof.bytes_total !== p.bytesTotal ||
    c.proof.bytes_written !== p.bytesWritten ||
    c.proof.bytes_read !== p.bytesRead ||
    JSON.stringify(c.proof.findings) !== JSON.stringify(p.findings)
  ) {
    return refuse('states another proof than the one the cleanup reported');
  }
  const broken = chainBreak(cert, ctx.last ? decodeStored(ctx.last) : null);
  if (broken) return refuse(broken);
  return { ok: true, cert };
}

/**
 * Checks a certificate an agent re-supplies (at registration): its
 * signature against a key of the host valid when it was issued, that it is
 * the host's, and its link to the media's last certificate here.
 */
export function checkSuppliedCertificate(
  jws: string,
  ctx: {
    host: string;
    keys: readonly AgentKeyRecord[];
    last: CertificateRecord | null;
    /** The link after this one, when held: a certificate it names fills the gap before it. */
    next?: CertificateRecord | null;
  },
): { ok: true; cert: DecodedCertificate } | { ok: false; reason: string } {
  try {
    const pre = decodeCertificate(jws);
    const cert = verifyCertificate(jws, toKnownKeys(keysAt(ctx.keys, pre.claims.iat)));
    if (cert.claims.host !== ctx.host) {
      return { ok: false, reason: `is host ${cert.claims.host}'s, not ${ctx.host}'s` };
    }
    // An earlier link the agent still holds (this scheduler started from a later one): the link after it names it.
    if (
      ctx.next &&
      ctx.next.seq === cert.claims.seq + 1 &&
      decodeStored(ctx.next).claims.prev === cert.hash
    ) {
      return { ok: true, cert };
    }
    const broken = chainBreak(cert, ctx.last ? decodeStored(ctx.last) : null);
    return broken ? { ok: false, reason: broken } : { ok: true, cert };
  } catch (err) {
    if (err instanceof CertificateError) return { ok: false, reason: err.message };
    throw err;
  }
}

const decodeStored = (r: CertificateRecord): DecodedCertificate => decodeCertificate(r.jws);
