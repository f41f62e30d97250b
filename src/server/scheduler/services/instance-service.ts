/**
 * InstanceService: what the hypervisor and the guest need for an instance's
 * passthrough devices (app/instances.ts) — the libvirt `<hostdev>` elements,
 * and the device-role metadata document with the guest addresses Berth assigned.
 */

import type { Logger } from 'pino';
import {
  type GetDeviceMetadataRequest,
  type GetInstanceXmlRequest,
  type Hostdev as HostdevPb,
  type InstanceServiceServer,
  InstanceServiceService,
  type SetInstanceDevicesRequest,
} from '../../../gen/berth/scheduler/v1/instance.js';
import { unary } from '../../grpc/handlers.js';
import type { ServiceBinding } from '../../grpc/server.js';
import type { Instances } from '../app/instances.js';
import { instanceDevices } from '../domain/instance.js';
import type { Hostdev } from '../guest/hostdev-xml.js';
import type { UseCases } from '../usecases/use-cases.js';
import { maxItems, requireInstance } from './validate.js';

/** Most NICs / disks one registration may carry (a libvirt guest has far fewer). */
const MAX_INSTANCE_DEVICES = 256;

export const hostdevToProto = (h: Hostdev): HostdevPb => ({
  arqUuid: h.arqUuid,
  deviceUuid: h.deviceUuid,
  source: { ...h.source },
  guest: { ...h.guest },
  managed: h.managed,
  alias: h.alias,
  tag: h.tag,
});

export function instanceServiceBinding(
  { useCases, instances }: { useCases: UseCases; instances: Instances },
  logger: Logger,
): ServiceBinding {
  const impl: InstanceServiceServer = {
    getInstanceXml: unary('GetInstanceXml', logger, async (req: GetInstanceXmlRequest) => {
      const { xml, hostdevs } = await instances.xml(requireInstance('instance_uuid', req.instanceUuid));
      return { xml, hostdevs: hostdevs.map(hostdevToProto) };
    }),

    setInstanceDevices: unary('SetInstanceDevices', logger, async (req: SetInstanceDevicesRequest) => {
      const instance = requireInstance('instance_uuid', req.instanceUuid);
      maxItems('nics', req.nics, MAX_INSTANCE_DEVICES);
      maxItems('disks', req.disks, MAX_INSTANCE_DEVICES);
      await useCases.registerInstanceDevices(instance, instanceDevices(req));
      return {};
    }),

    getDeviceMetadata: unary('GetDeviceMetadata', logger, async (req: GetDeviceMetadataRequest) => ({
      json: await instances.metadata(requireInstance('instance_uuid', req.instanceUuid)),
    })),
  };
  return {
    name: 'berth.scheduler.v1.InstanceService',
    definition: InstanceServiceService,
    implementation: impl,
  };
}
