/**
 * AcceleratorRequestService: ARQs from a profile, bound atomically to devices,
 * deleted into the release path (cleanup or burn).
 */

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
import { unary } from '../../grpc/handlers.js';
import type { ServiceBinding } from '../../grpc/server.js';
import { arqToProto } from '../convert.js';
import type { SchedulerCore } from '../core.js';
import type { DeviceRecord } from '../domain/device-state.js';
import { PROFILE_NAME } from '../domain/profile.js';
import { validateTag } from '../domain/tags.js';
import { bindGate, confirmBindings } from '../runtime/binding-recorder.js';
import { maxItems, optionalRequestId, requireHost, requireInstance, requireUuid } from './validate.js';

/** Dispatches the cleanups a release queued, host by host. */
export function dispatchReleased(core: SchedulerCore, released: readonly DeviceRecord[]): void {
  const hosts = new Set(released.filter((d) => d.deviceState === 'pending_cleaning').map((d) => d.host));
  for (const h of hosts) void core.dispatcher.dispatchBacklog(h);
}

export function arqServiceBinding(core: SchedulerCore): ServiceBinding {
  const { store, hub, logger } = core;
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
        const tags = req.tags.map((t, i) => (t === '' ? '' : validateTag(`tags[${i}]`, t)));
        const arqs = await store.createArqs({
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
      async (req: BindAcceleratorRequestsRequest) => {
        if (req.bindings.length === 0) throw invalidArgument('bindings', 'at least one binding is required');
        maxItems('bindings', req.bindings, 64);
        const bindings = req.bindings.map((b, i) => ({
          arqUuid: requireUuid(`bindings[${i}].arq_uuid`, b.arqUuid),
          instanceUuid: requireInstance(`bindings[${i}].instance_uuid`, b.instanceUuid),
          host: requireHost(`bindings[${i}].host`, b.host),
          tag: b.tag === '' ? undefined : validateTag(`bindings[${i}].tag`, b.tag),
        }));
        const result = await store.bindArqs(bindings, undefined, bindGate(core));
        // Acknowledged only once every device's agent has recorded the binding (invariant 9).
        await confirmBindings(core, bindings, result);
        hub.notify();
        return { acceleratorRequests: result.arqs.map(arqToProto) };
      },
    ),

    getAcceleratorRequest: unary(
      'GetAcceleratorRequest',
      logger,
      async (req: GetAcceleratorRequestRequest) => ({
        acceleratorRequest: arqToProto(await store.getArq(requireUuid('uuid', req.uuid))),
      }),
    ),

    listAcceleratorRequests: unary(
      'ListAcceleratorRequests',
      logger,
      async (req: ListAcceleratorRequestsRequest) => {
        const instance =
          req.instanceUuid === '' ? undefined : requireInstance('instance_uuid', req.instanceUuid);
        return { acceleratorRequests: (await store.listArqs(instance)).map(arqToProto) };
      },
    ),

    deleteAcceleratorRequests: unary(
      'DeleteAcceleratorRequests',
      logger,
      async (req: DeleteAcceleratorRequestsRequest) => {
        if (req.uuids.length === 0 && req.instanceUuid === '') {
          throw invalidArgument('uuids', 'give uuids or instance_uuid');
        }
        if (req.uuids.length > 0 && req.instanceUuid !== '') {
          throw invalidArgument('instance_uuid', 'give uuids or instance_uuid, not both');
        }
        maxItems('uuids', req.uuids, 256);
        const result = await store.deleteArqs(
          req.instanceUuid !== ''
            ? { instanceUuid: requireInstance('instance_uuid', req.instanceUuid) }
            : { uuids: req.uuids.map((u, i) => requireUuid(`uuids[${i}]`, u)) },
        );
        hub.notify();
        dispatchReleased(core, result.released);
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
