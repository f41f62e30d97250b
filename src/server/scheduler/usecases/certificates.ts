/**
 * Use cases: erasure certificates (docs/erasure-certificates.md) — the keys
 * hosts' agents sign with, certificates re-supplied by an agent, the reads
 * of the API, and who may read an instance's.
 */

import { certificateHash, jwkThumbprint, type PublicJwk } from '../../../erasure/certificate.js';
import { failedPrecondition, invalidArgument, notFound } from '../../../errors.js';
import {
  type AgentKeyRecord,
  type CertificateRecord,
  certificateRecord,
  checkSuppliedCertificate,
} from '../domain/certificate.js';
import { read, type UseCaseDeps } from './context.js';
import { write } from './unit.js';
import { FOR_UPDATE, type UnitOfWork } from './unit-of-work.js';

/**
 * Inside the unit that registers a host: the agent's key is pinned at the
 * host's first registration that carries one; a different key is refused
 * (AGENT_KEY_CHANGED) until an admin rotates it. Returns the key pinned now,
 * if any (to be logged).
 */
export async function pinAgentKey(
  uow: UnitOfWork,
  host: string,
  jwk: PublicJwk | undefined,
  now: string,
  retired: readonly PublicJwk[] = [],
): Promise<AgentKeyRecord | null> {
  if (!jwk) return null;
  const kid = jwkThumbprint(jwk);
  const keys = await uow.agentKeys(host);
  const current = keys.find((k) => !k.retiredAt);
  if (current?.kid === kid) return null;
  if (current) {
    throw failedPrecondition(
      'AGENT_KEY_CHANGED',
      `host ${host}'s agent signs with key ${kid}, but the host is pinned to key ${current.kid} (since ${current.pinnedAt}); an admin pins a new key with RotateAgentKey (berth host rotate-key)`,
      { host, key_id: kid, pinned: current.kid },
    );
  }
  if (keys.some((k) => k.kid === kid)) {
    throw failedPrecondition(
      'AGENT_KEY_RETIRED',
      `host ${host}'s agent signs with key ${kid}, which an admin retired; pin a new key with RotateAgentKey`,
      { host, key_id: kid },
    );
  }
  const key: AgentKeyRecord = { host, kid, jwk, pinnedAt: now, retiredAt: null };
  await uow.putAgentKey(key);
  // Pinned afresh (a new or lost database): the agent's earlier keys, retired
  // now, verify the certificates they signed when the agent re-supplies them.
  if (keys.length === 0) {
    for (const old of retired) {
      const oldKid = jwkThumbprint(old);
      if (oldKid !== kid)
        await uow.putAgentKey({ host, kid: oldKid, jwk: old, pinnedAt: now, retiredAt: now });
    }
  }
  return key;
}

/** An admin pins a new key for a host; the old one is kept, retired. */
export async function rotateAgentKey(
  deps: UseCaseDeps,
  host: string,
  jwk: PublicJwk,
): Promise<{ key: AgentKeyRecord; retired: AgentKeyRecord | null }> {
  if (!host) throw invalidArgument('host', 'a host name is required');
  return write(deps, async (tx) => {
    await tx.uow.lockInstance(`host ${host}`);
    if (!(await tx.uow.host(host, FOR_UPDATE))) throw notFound('host', host);
    const kid = jwkThumbprint(jwk);
    const keys = await tx.uow.agentKeys(host);
    const current = keys.find((k) => !k.retiredAt) ?? null;
    if (current?.kid === kid) return { key: current, retired: null };
    if (keys.some((k) => k.kid === kid)) {
      throw failedPrecondition(
        'AGENT_KEY_RETIRED',
        `key ${kid} was host ${host}'s before and is retired; make a new one`,
        {
          host,
          key_id: kid,
        },
      );
    }
    const now = tx.now();
    const retired = current ? { ...current, retiredAt: now } : null;
    if (retired) await tx.uow.putAgentKey(retired);
    const key: AgentKeyRecord = { host, kid, jwk, pinnedAt: now, retiredAt: null };
    await tx.uow.putAgentKey(key);
    return { key, retired };
  });
}

export async function agentKeys(deps: UseCaseDeps, host?: string): Promise<AgentKeyRecord[]> {
  return read(deps, (r) => r.agentKeys(host || undefined));
}

/** What became of certificates an agent supplied. */
export interface SuppliedCertificates {
  /** Hashes stored now or before. */
  stored: string[];
  /** Refused, with the reason. */
  refused: { hash: string; reason: string }[];
  /** How many were new here. */
  added: number;
}

/**
 * Certificates an agent supplies at registration (those no scheduler took
 * yet, or all it holds after this scheduler started to follow it): each is
 * checked against the host's keys and chained onto the last certificate of
 * its media held here, oldest first, in one unit.
 */
export async function importCertificates(
  deps: UseCaseDeps,
  host: string,
  jwsList: readonly string[],
): Promise<SuppliedCertificates> {
  if (jwsList.length === 0) return { stored: [], refused: [], added: 0 };
  return write(deps, async (tx) => {
    const out: SuppliedCertificates = { stored: [], refused: [], added: 0 };
    const keys = await tx.uow.agentKeys(host);
    const now = tx.now();
    // Oldest first per media: a chain is only continued link by link.
    const decoded = jwsList.map((jws) => {
      try {
        const [, p] = jws.split('.');
        const c = JSON.parse(Buffer.from(p ?? '', 'base64url').toString('utf8')) as { seq?: number };
        return { jws, seq: typeof c.seq === 'number' ? c.seq : 0 };
      } catch {
        return { jws, seq: 0 };
      }
    });
    decoded.sort((a, b) => a.seq - b.seq);
    for (const { jws } of decoded) {
      const hash = certificateHash(jws.trim());
      if (await tx.uow.certificate(hash)) {
        out.stored.push(hash);
        continue;
      }
      const pre = checkSuppliedCertificate(jws, { host, keys, last: null });
      if (!pre.ok) {
        out.refused.push({ hash, reason: pre.reason });
        continue;
      }
      const media = pre.cert.claims.media.key;
      const last = await tx.uow.lastCertificate(media, FOR_UPDATE);
      const next = last ? await tx.uow.certificateAt(media, pre.cert.claims.seq + 1) : null;
      const r = checkSuppliedCertificate(jws, { host, keys, last, next });
      if (!r.ok) {
        out.refused.push({ hash, reason: r.reason });
        continue;
      }
      const job = await tx.uow.cleanupJob(r.cert.claims.job_id);
      await tx.uow.putCertificate(certificateRecord(r.cert, jws, job?.deviceUuid ?? '', now));
      out.stored.push(hash);
      out.added++;
    }
    return out;
  });
}

/**
 * The last certificate of a media's chain this scheduler accepted, whichever
 * host signed it: what a cleanup of the media continues (decision 63), or null.
 */
export async function lastCertificate(
  deps: UseCaseDeps,
  mediaKey: string,
): Promise<CertificateRecord | null> {
  return read(deps, (r) => r.lastCertificate(mediaKey));
}

/** The certificates of a device, a job or an instance. */
export async function listCertificates(
  deps: UseCaseDeps,
  filter: { deviceUuid?: string; jobId?: string; instanceUuid?: string },
): Promise<CertificateRecord[]> {
  return read(deps, (r) => r.certificates(filter));
}

/** Who first bound ARQs to the instance (the principal that owns it; recorded by the bind's unit), or null. */
export async function instanceOwner(deps: UseCaseDeps, instanceUuid: string): Promise<string | null> {
  return read(deps, (r) => r.instanceOwner(instanceUuid));
}
