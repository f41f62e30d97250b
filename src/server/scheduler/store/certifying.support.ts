/**
 * For the contract suites: the use cases as an agent with a signing key
 * drives them. Every registration carries the test agent's public key (pinned
 * at the host's first), and every success that carries no certificate gets
 * one, signed with that key for the job's device, its media and the proof
 * the event states, chained onto the last certificate of the media the store
 * holds — what Berth's agent sends (docs/erasure-certificates.md). A suite of
 * the certificate rules themselves passes its own certificates.
 */
import { generateKeyPairSync } from 'node:crypto';
import {
  type ErasureClaims,
  jwkThumbprint,
  nistMapping,
  publicJwkOf,
  signCertificate,
} from '../../../erasure/certificate.js';
import type { CleanupEvent } from '../domain/cleanup.js';
import type { UseCases } from '../usecases/use-cases.js';

const KEY = generateKeyPairSync('ed25519').privateKey;
export const TEST_AGENT_JWK = publicJwkOf(KEY);
const KID = jwkThumbprint(TEST_AGENT_JWK);

async function certify(store: UseCases, ev: CleanupEvent): Promise<string> {
  const job = await store.getCleanupJob(ev.jobId);
  const device = await store.getDevice({ uuid: job.deviceUuid });
  const mediaKey = device.media?.key || `pci-slot:${job.host}:${job.address}`;
  const last = await store.db.read((u) => u.lastCertificate(mediaKey));
  const p = ev.proof;
  const claims: ErasureClaims = {
    v: 1,
    iss: `berth-agent:${job.host}`,
    host: job.host,
    kid: KID,
    iat: Math.floor(Date.parse(ev.time) / 1000),
    job_id: ev.jobId,
    address: ev.address,
    media: {
      key: mediaKey,
      kind: device.media?.kind ?? 'PCI_SLOT',
      subsystem_nqn: '',
      serial: '',
      model: '',
      namespaces: [],
      device_serial_number: '',
    },
    tenant: null,
    action: ev.action,
    proof: {
      method: p?.method ?? '',
      read_back: p?.readBack ?? '',
      bytes_written: p?.bytesWritten ?? 0,
      bytes_read: p?.bytesRead ?? 0,
      bytes_total: p?.bytesTotal ?? 0,
      findings: p?.findings ?? [],
      census: null,
      sanitize: null,
    },
    nist_800_88: nistMapping(ev.action),
    started_at: ev.time,
    ended_at: ev.time,
    seq: (last?.seq ?? 0) + 1,
    prev: last?.hash ?? null,
  };
  return signCertificate(claims, KEY, KID);
}

/** `store`, with registrations that carry the test agent's key and successes that carry its certificates. */
export function certifying(store: UseCases): UseCases {
  return new Proxy(store, {
    get(target, prop, receiver) {
      if (prop === 'registerHost') {
        return (
          reg: Parameters<UseCases['registerHost']>[0],
          opts: Parameters<UseCases['registerHost']>[1] = {},
        ) => target.registerHost(reg, { signingKey: TEST_AGENT_JWK, ...opts });
      }
      if (prop === 'applyCleanupEvent') {
        return async (ev: CleanupEvent) => {
          if (ev.phase !== 'succeeded' || ev.certificate !== undefined || !ev.proof) {
            return target.applyCleanupEvent(ev);
          }
          let certificate: string;
          try {
            certificate = await certify(target, ev);
          } catch {
            // An event of a job or device the store does not know: the use case says why.
            return target.applyCleanupEvent(ev);
          }
          return target.applyCleanupEvent({ ...ev, certificate });
        };
      }
      return Reflect.get(target, prop, receiver);
    },
  });
}
