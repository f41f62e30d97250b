/**
 * Erasure certificates through the API (docs/erasure-certificates.md): who
 * may read which, the published keys, and an admin's key rotation (logged).
 *
 * Whose certificates a service principal may read: those of instances it
 * owns — the instances whose ARQs it was the first to bind (recorded at bind,
 * kept after the ARQs are gone, under the certificates' retention). Admin and
 * reader see all (reader: auditors and dashboards; auth off: everything).
 */
import type { Logger } from 'pino';
import type { PublicJwk } from '../../../erasure/certificate.js';
import { permissionDenied } from '../../../errors.js';
import type { AgentKeyRecord, CertificateRecord } from '../domain/certificate.js';
import type { Caller } from '../domain/host.js';
import type { DeviceRef } from '../domain/inventory.js';
import type { UseCases } from '../usecases/use-cases.js';

export type CertificateQuery = { device: DeviceRef } | { jobId: string } | { instanceUuid: string };

/** Whether the caller reads every certificate (admin, reader), not only its instances'. */
const seesAll = (c: Caller): boolean => c.roles.includes('admin') || c.roles.includes('reader');

export class Certificates {
  constructor(private readonly deps: { useCases: UseCases; logger: Logger }) {}

  async list(q: CertificateQuery, caller: Caller): Promise<CertificateRecord[]> {
    const { useCases } = this.deps;
    if ('instanceUuid' in q && !seesAll(caller)) {
      const owner = await useCases.instanceOwner(q.instanceUuid);
      if (owner !== caller.subject) {
        throw permissionDenied(
          'NOT_INSTANCE_OWNER',
          `${caller.subject} may read the erasure certificates of its own instances only; instance ${q.instanceUuid} is not one of them`,
          { instance_uuid: q.instanceUuid },
        );
      }
    }
    const filter =
      'device' in q
        ? { deviceUuid: (await useCases.getDevice(q.device)).uuid }
        : 'jobId' in q
          ? { jobId: q.jobId }
          : { instanceUuid: q.instanceUuid };
    const all = await useCases.listCertificates(filter);
    if (seesAll(caller)) return all;
    const owners = new Map<string, string | null>();
    const out: CertificateRecord[] = [];
    for (const c of all) {
      if (!c.instanceUuid) continue;
      if (!owners.has(c.instanceUuid))
        owners.set(c.instanceUuid, await useCases.instanceOwner(c.instanceUuid));
      if (owners.get(c.instanceUuid) === caller.subject) out.push(c);
    }
    return out;
  }

  async rotate(
    host: string,
    jwk: PublicJwk,
    caller: Caller,
  ): Promise<{ key: AgentKeyRecord; retired: AgentKeyRecord | null }> {
    const r = await this.deps.useCases.rotateAgentKey(host, jwk);
    if (r.retired) {
      this.deps.logger.warn(
        { host, keyId: r.key.kid, retired: r.retired.kid, by: caller.subject },
        "agent's certificate signing key rotated: certificates are now accepted from the new key only; the old one stays published for the certificates it signed",
      );
    } else {
      this.deps.logger.info(
        { host, keyId: r.key.kid, by: caller.subject },
        "agent's certificate signing key pinned by an admin",
      );
    }
    return r;
  }
}
