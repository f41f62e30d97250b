/** CertificateService: erasure certificates and the agents' keys (app/certificates.ts). */
import type { Logger } from 'pino';
import { parsePublicJwk } from '../../../erasure/certificate.js';
import { invalidArgument } from '../../../errors.js';
import {
  type AgentKey,
  type CertificateServiceServer,
  CertificateServiceService,
  type ErasureCertificate,
  type ListAgentKeysRequest,
  type ListErasureCertificatesRequest,
  type RotateAgentKeyRequest,
} from '../../../gen/berth/scheduler/v1/certificate.js';
import { callerOf } from '../../grpc/caller.js';
import { unary } from '../../grpc/handlers.js';
import type { ServiceBinding } from '../../grpc/server.js';
import type { CertificateQuery, Certificates } from '../app/certificates.js';
import type { AgentKeyRecord, CertificateRecord } from '../domain/certificate.js';
import type { UseCases } from '../usecases/use-cases.js';
import { deviceRef, optionalHost, requireHost, requireInstance } from './validate.js';

const JOB_ID = /^[A-Za-z0-9._:-]{1,128}$/;

export function certificateToProto(c: CertificateRecord): ErasureCertificate {
  return {
    jws: c.jws,
    hash: c.hash,
    mediaKey: c.mediaKey,
    seq: c.seq,
    host: c.host,
    keyId: c.kid,
    jobId: c.jobId,
    deviceUuid: c.deviceUuid,
    instanceUuid: c.instanceUuid,
    arqUuid: c.arqUuid,
    issuedAt: new Date(c.issuedAt),
    receivedAt: new Date(c.receivedAt),
  };
}

export function agentKeyToProto(k: AgentKeyRecord): AgentKey {
  return {
    host: k.host,
    keyId: k.kid,
    jwk: JSON.stringify(k.jwk),
    pinnedAt: new Date(k.pinnedAt),
    retiredAt: k.retiredAt ? new Date(k.retiredAt) : undefined,
  };
}

function query(req: ListErasureCertificatesRequest): CertificateQuery {
  const of = req.of;
  switch (of?.$case) {
    case 'device':
      return { device: deviceRef('device', of.value) };
    case 'jobId':
      if (!JOB_ID.test(of.value)) {
        throw invalidArgument('job_id', `${JSON.stringify(of.value)} is not a cleanup job id`);
      }
      return { jobId: of.value };
    case 'instanceUuid':
      return { instanceUuid: requireInstance('instance_uuid', of.value) };
    default:
      throw invalidArgument('of', 'give device, job_id or instance_uuid');
  }
}

export function certificateServiceBinding(
  { useCases, certificates }: { useCases: UseCases; certificates: Certificates },
  logger: Logger,
): ServiceBinding {
  const impl: CertificateServiceServer = {
    listErasureCertificates: unary(
      'ListErasureCertificates',
      logger,
      async (req: ListErasureCertificatesRequest, ctx) => ({
        certificates: (await certificates.list(query(req), callerOf(ctx.metadata))).map(certificateToProto),
      }),
    ),
    listAgentKeys: unary('ListAgentKeys', logger, async (req: ListAgentKeysRequest) => ({
      keys: (await useCases.agentKeys(optionalHost('host', req.host))).map(agentKeyToProto),
    })),
    rotateAgentKey: unary('RotateAgentKey', logger, async (req: RotateAgentKeyRequest, ctx) => {
      const host = requireHost('host', req.host);
      let jwk: ReturnType<typeof parsePublicJwk>;
      try {
        jwk = parsePublicJwk(req.publicKey);
      } catch (err) {
        throw invalidArgument(
          'public_key',
          `${JSON.stringify(req.publicKey.slice(0, 200))} ${(err as Error).message}`,
        );
      }
      const r = await certificates.rotate(host, jwk, callerOf(ctx.metadata));
      return { key: agentKeyToProto(r.key), retired: r.retired ? agentKeyToProto(r.retired) : undefined };
    }),
  };
  return {
    name: 'berth.scheduler.v1.CertificateService',
    definition: CertificateServiceService,
    implementation: impl,
  };
}
