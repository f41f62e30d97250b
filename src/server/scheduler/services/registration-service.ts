/**
 * RegistrationService.Register: an agent announces itself (at start and then
 * as a heartbeat); the request is checked and decoded here, the registration
 * is app/registration.ts.
 */
import type { Logger } from 'pino';
import { type PublicJwk, parsePublicJwk } from '../../../erasure/certificate.js';
import { invalidArgument } from '../../../errors.js';
import {
  MediaRecordRefusal,
  type RegisterRequest,
  type RegisterResponse,
  type RegistrationServiceServer,
  RegistrationServiceService,
} from '../../../gen/berth/scheduler/v1/registration.js';
import { type HostName, type PciAddress, parsePciAddress } from '../../../identifiers.js';
import { callerOf } from '../../grpc/caller.js';
import { unary } from '../../grpc/handlers.js';
import type { ServiceBinding } from '../../grpc/server.js';
import { mediaRecordFromProto } from '../../media-proto.js';
import type { AgentRegistration, Registration } from '../app/registration.js';
import type { RefusedMediaReport } from '../domain/media-reports.js';
import { MEDIA_RECORD_LIMITS } from '../domain/media-reports.js';
import { maxItems, requireHost, requireMediaKey } from './validate.js';

const ENDPOINT = /^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9a-fA-F:]{2,39}\]):(\d{1,5})$/;
const TOKEN = /^[A-Za-z0-9._:/@+-]{1,128}$/;

/** The wire form of each reason a media record is refused for. */
const REFUSALS: Record<RefusedMediaReport['reason'], MediaRecordRefusal> = {
  other_host_presents: MediaRecordRefusal.MEDIA_RECORD_REFUSAL_OTHER_HOST_PRESENTS,
  other_host_last_saw: MediaRecordRefusal.MEDIA_RECORD_REFUSAL_OTHER_HOST_LAST_SAW,
  forgotten: MediaRecordRefusal.MEDIA_RECORD_REFUSAL_FORGOTTEN,
};

/** At most this many certificates in one registration (an agent re-supplying more sends them over several). */
const MAX_CERTIFICATES = 8192;
const MAX_CERTIFICATE_CHARS = 65_536;

function signingKeyOf(req: RegisterRequest): PublicJwk | undefined {
  if (!req.signingKey) return undefined;
  try {
    return parsePublicJwk(req.signingKey);
  } catch (err) {
    throw invalidArgument(
      'signing_key',
      `${JSON.stringify(req.signingKey.slice(0, 200))} ${(err as Error).message}`,
    );
  }
}

/** Checks the request; returns its parsed host name and held devices' addresses. */
function checkRequest(req: RegisterRequest): { host: HostName; held: PciAddress[] } {
  const host = requireHost('host', req.host);
  const port = Number(ENDPOINT.exec(req.endpoint)?.[1] ?? Number.NaN);
  if (!(port >= 1 && port <= 65535)) {
    throw invalidArgument('endpoint', `${JSON.stringify(req.endpoint)} is not host:port with a port 1-65535`);
  }
  if (!TOKEN.test(req.bootId))
    throw invalidArgument('boot_id', `${JSON.stringify(req.bootId)} is not a boot id`);
  if (!TOKEN.test(req.epoch))
    throw invalidArgument('epoch', `${JSON.stringify(req.epoch)} is not an agent epoch`);
  maxItems('held_devices', req.heldDevices, MEDIA_RECORD_LIMITS.perRegistration);
  const held = req.heldDevices.map((h, i) => parsePciAddress(`held_devices[${i}].address`, h.address));
  // Their number is bounded by the registration (app/registration.ts), before anything is written.
  req.mediaRecords.forEach((m, i) => {
    requireMediaKey(`media_records[${i}].key`, m.key);
  });
  maxItems('certificates', req.certificates, MAX_CERTIFICATES);
  maxItems('retired_signing_keys', req.retiredSigningKeys, 64);
  req.certificates.forEach((c, i) => {
    if (c.length > MAX_CERTIFICATE_CHARS || !/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/.test(c)) {
      throw invalidArgument(
        `certificates[${i}]`,
        `is not a compact JWS of at most ${MAX_CERTIFICATE_CHARS} characters (three base64url parts)`,
      );
    }
  });
  for (const [field, list] of [
    ['features', req.features],
    ['drivers', req.drivers],
  ] as const) {
    maxItems(field, list, 64);
    list.forEach((v, i) => {
      if (!TOKEN.test(v)) throw invalidArgument(`${field}[${i}]`, `${JSON.stringify(v)} is not a valid name`);
    });
  }
  return { host, held };
}

/** The registration a request says, decoded (a media record the agent could not describe is dropped). */
function decode(req: RegisterRequest, parsed: { host: HostName; held: PciAddress[] }): AgentRegistration {
  return {
    host: {
      name: parsed.host,
      endpoint: req.endpoint,
      bootId: req.bootId,
      agentEpoch: req.epoch,
      agentVersion: req.agentVersion,
      features: req.features,
      drivers: req.drivers,
    },
    held: req.heldDevices.map((h, i) => ({
      address: parsed.held[i]!,
      arqUuid: h.arqUuid,
      instanceUuid: h.instanceUuid,
      ...(h.since ? { since: h.since.toISOString() } : {}),
    })),
    media: req.mediaRecords.flatMap((r) => mediaRecordFromProto(r) ?? []),
    signingKey: signingKeyOf(req),
    retiredSigningKeys: req.retiredSigningKeys.map((k, i) => {
      try {
        return parsePublicJwk(k);
      } catch (err) {
        throw invalidArgument(
          `retired_signing_keys[${i}]`,
          `${JSON.stringify(k.slice(0, 200))} ${(err as Error).message}`,
        );
      }
    }),
    certificates: req.certificates,
  };
}

export function registrationServiceBinding(registration: Registration, logger: Logger): ServiceBinding {
  const impl: RegistrationServiceServer = {
    register: unary('Register', logger, async (req: RegisterRequest, ctx): Promise<RegisterResponse> => {
      const r = await registration.register(decode(req, checkRequest(req)), callerOf(ctx.metadata));
      return {
        schedulerId: r.schedulerId,
        heartbeatIntervalSeconds: r.heartbeatSeconds,
        storedCertificates: r.storedCertificates,
        sendCertificates: r.sendCertificates,
        refusedMediaRecords: r.refusedMedia.map((f) => ({
          mediaKey: f.key,
          reason: REFUSALS[f.reason],
        })),
      };
    }),
  };
  return {
    name: 'berth.scheduler.v1.RegistrationService',
    definition: RegistrationServiceService,
    implementation: impl,
  };
}
