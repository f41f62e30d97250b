/**
 * AcceleratorRequestService: ARQs from a profile, bound atomically to devices
 * (app/binding.ts), deleted into the release path (cleanup or burn).
 */

import type { Logger } from 'pino';
import { invalidArgument } from '../../../errors.js';
import {
  type AcceleratorRequestServiceServer,
  AcceleratorRequestServiceService,
  type BindAcceleratorRequestsRequest,
  type CreateAcceleratorRequestsRequest,
  type DeleteAcceleratorRequestsRequest,
  type GetAcceleratorRequestRequest,
  type ListAcceleratorRequestsRequest,
} from '../../../gen/berth/scheduler/v1/accelerator_request.js';
import { parseTag } from '../../../identifiers.js';
import { callerOf } from '../../grpc/caller.js';
import { unary } from '../../grpc/handlers.js';
import type { ServiceBinding } from '../../grpc/server.js';
import type { Binding } from '../app/binding.js';
import { arqToProto } from '../convert.js';
import { hostClientOf, requireOwnHost } from '../domain/host.js';
import { PROFILE_NAME } from '../domain/profile.js';
import type { UseCases } from '../usecases/use-cases.js';
import { maxItems, optionalRequestId, requireHost, requireInstance, requireUuid } from './validate.js';

/** The roles that write ARQs on any host; a `host-client` without one of them only on its own (decision 90). */
const ANY_HOST: readonly string[] = ['admin', 'service'];

export function arqServiceBinding(
  app: { useCases: UseCases; binding: Binding; hostPrincipals: ReadonlyMap<string, string> },
  logger: Logger,
): ServiceBinding {
  const { useCases, binding, hostPrincipals } = app;
  const impl: AcceleratorRequestServiceServer = {
    createAcceleratorRequests: unary(
      'CreateAcceleratorRequests',
      logger,
      async (req: CreateAcceleratorRequestsRequest) => {
        if (!PROFILE_NAME.test(req.profileName)) {
          throw invalidArgument(
            'profile_name',
            req.profileName === ''
              ? 'is required'
              : `${JSON.stringify(req.profileName.slice(0, 80))} is not a profile name ([A-Za-z0-9_.-], 1-255)`,
          );
        }
        maxItems('tags', req.tags, 64);
        const tags = req.tags.map((t, i) => parseTag(`tags[${i}]`, t));
        const arqs = await useCases.createArqs({
          profileName: req.profileName,
          requestId: optionalRequestId('request_id', req.requestId),
          tags,
        });
        return { acceleratorRequests: arqs.map(arqToProto) };
      },
    ),

    bindAcceleratorRequests: unary(
      'BindAcceleratorRequests',
      logger,
      async (req: BindAcceleratorRequestsRequest, ctx) => {
        if (req.bindings.length === 0) throw invalidArgument('bindings', 'at least one binding is required');
        maxItems('bindings', req.bindings, 64);
        const bindings = req.bindings.map((b, i) => ({
          arqUuid: requireUuid(`bindings[${i}].arq_uuid`, b.arqUuid),
          instanceUuid: requireInstance(`bindings[${i}].instance_uuid`, b.instanceUuid),
          host: requireHost(`bindings[${i}].host`, b.host),
          tag: b.tag === '' ? undefined : parseTag(`bindings[${i}].tag`, b.tag),
          ...(b.deviceUuids.length > 0
            ? { devices: b.deviceUuids.map((u, j) => requireUuid(`bindings[${i}].device_uuids[${j}]`, u)) }
            : {}),
        }));
        const caller = callerOf(ctx.metadata);
        const own = hostClientOf(caller, ANY_HOST, hostPrincipals);
        for (const [i, b] of bindings.entries()) {
          requireOwnHost(caller.subject, own, b.host, `bindings[${i}].host`);
        }
        return {
          acceleratorRequests: (await binding.bind(bindings, caller.subject)).map(arqToProto),
        };
      },
    ),

    getAcceleratorRequest: unary(
      'GetAcceleratorRequest',
      logger,
      async (req: GetAcceleratorRequestRequest) => ({
        acceleratorRequest: arqToProto(await useCases.getArq(requireUuid('uuid', req.uuid))),
      }),
    ),

    listAcceleratorRequests: unary(
      'ListAcceleratorRequests',
      logger,
      async (req: ListAcceleratorRequestsRequest) => {
        const instance =
          req.instanceUuid === '' ? undefined : requireInstance('instance_uuid', req.instanceUuid);
        return { acceleratorRequests: (await useCases.listArqs(instance)).map(arqToProto) };
      },
    ),

    deleteAcceleratorRequests: unary(
      'DeleteAcceleratorRequests',
      logger,
      async (req: DeleteAcceleratorRequestsRequest, ctx) => {
        if (req.uuids.length === 0 && req.instanceUuid === '') {
          throw invalidArgument('uuids', 'give uuids or instance_uuid');
        }
        if (req.uuids.length > 0 && req.instanceUuid !== '') {
          throw invalidArgument('instance_uuid', 'give uuids or instance_uuid, not both');
        }
        maxItems('uuids', req.uuids, 256);
        const caller = callerOf(ctx.metadata);
        const own = hostClientOf(caller, ANY_HOST, hostPrincipals);
        // The released devices' cleanups are dispatched once the unit commits.
        const result = await useCases.deleteArqs(
          req.instanceUuid !== ''
            ? { instanceUuid: requireInstance('instance_uuid', req.instanceUuid) }
            : { uuids: req.uuids.map((u, i) => requireUuid(`uuids[${i}]`, u)) },
          // An unbound ARQ (no host) holds no device: a host-client may delete it.
          (arq) => requireOwnHost(caller.subject, own, arq.host, `ARQ ${arq.uuid} is bound there`),
        );
        return { deletedUuids: result.deletedUuids };
      },
    ),
  };
  return {
    name: 'berth.scheduler.v1.AcceleratorRequestService',
    definition: AcceleratorRequestServiceService,
    implementation: impl,
  };
}
