/**
 * InstanceService: what the hypervisor and the guest need for an instance's
 * passthrough devices — the libvirt `<hostdev>` elements, and the device-role
 * metadata document with the guest addresses Berth assigned.
 *
 * Guest addresses are assigned (and persisted) by the store the first time an
 * instance's bindings are rendered, then kept for the life of each binding, so
 * the XML and the metadata document always agree and never move a device.
 */

import { notFound } from '../../../errors.js';
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
import type { SchedulerCore } from '../core.js';
import { parsePciAddress } from '../guest/guest-address.js';
import { type Hostdev, hostdevFromBinding, renderInstance } from '../guest/hostdev-xml.js';
import { passthroughFromHostdev, renderMetadataJson } from '../guest/metadata.js';
import type { GuestBinding, Store } from '../store/store.js';
import { devicesInput } from '../usecases/instances.js';
import { maxItems, requireInstance } from './validate.js';

/** Most NICs / disks one registration may carry (a libvirt guest has far fewer). */
const MAX_INSTANCE_DEVICES = 256;

export interface RenderedInstance {
  xml: string;
  hostdevs: Hostdev[];
  bindings: GuestBinding[];
}

/**
 * The hostdevs of an instance's bound ARQs with their (stable) guest
 * addresses. The source address comes from the device records, `managed` from
 * the ARQs (the value at bind time).
 */
export async function renderInstanceHostdevs(store: Store, instanceUuid: string): Promise<RenderedInstance> {
  const bindings = await store.assignGuestAddresses(instanceUuid);
  const inputs = bindings.map((b) =>
    hostdevFromBinding(
      b.arq,
      b.device,
      parsePciAddress(`ARQ ${b.arq.uuid} guest address`, b.arq.guestAddress ?? ''),
    ),
  );
  const { xml, hostdevs } = renderInstance(inputs);
  return { xml, hostdevs, bindings };
}

export const hostdevToProto = (h: Hostdev): HostdevPb => ({
  arqUuid: h.arqUuid,
  deviceUuid: h.deviceUuid,
  source: { ...h.source },
  guest: { ...h.guest },
  managed: h.managed,
  alias: h.alias,
  tag: h.tag,
});

export function instanceServiceBinding(core: SchedulerCore): ServiceBinding {
  const { store, logger } = core;
  const impl: InstanceServiceServer = {
    getInstanceXml: unary('GetInstanceXml', logger, async (req: GetInstanceXmlRequest) => {
      const instance = requireInstance('instance_uuid', req.instanceUuid);
      if ((await store.listArqs(instance)).length === 0) throw notFound('instance', instance);
      const { xml, hostdevs } = await renderInstanceHostdevs(store, instance);
      return { xml, hostdevs: hostdevs.map(hostdevToProto) };
    }),

    setInstanceDevices: unary('SetInstanceDevices', logger, async (req: SetInstanceDevicesRequest) => {
      const instance = requireInstance('instance_uuid', req.instanceUuid);
      maxItems('nics', req.nics, MAX_INSTANCE_DEVICES);
      maxItems('disks', req.disks, MAX_INSTANCE_DEVICES);
      // Validated inside the store's transaction, against the guest slots the
      // instance's hostdevs hold at that moment (tags, MACs, buses, VLANs, slots).
      await store.registerInstanceDevices(instance, {
        nics: req.nics.map((n) => ({
          mac: n.mac,
          address: n.address,
          tag: n.tag,
          vlan: n.vlan ?? null,
          model: n.model,
          devname: n.devname ?? null,
        })),
        disks: req.disks.map((d) => ({
          serial: d.serial,
          bus: d.bus,
          address: d.address,
          path: d.path,
          tag: d.tag,
        })),
      });
      return {};
    }),

    getDeviceMetadata: unary('GetDeviceMetadata', logger, async (req: GetDeviceMetadataRequest) => {
      const instance = requireInstance('instance_uuid', req.instanceUuid);
      const registered = await store.getInstanceDevices(instance);
      const arqs = await store.listArqs(instance);
      if (arqs.length === 0 && registered.nics.length === 0 && registered.disks.length === 0) {
        throw notFound('instance', instance);
      }
      const { hostdevs, bindings } = await renderInstanceHostdevs(store, instance);
      const passthrough = hostdevs.map((h, i) => passthroughFromHostdev(h, bindings[i]!.device));
      // renderMetadataJson validates the document against the schema file.
      return { json: renderMetadataJson(devicesInput(registered), passthrough) };
    }),
  };
  return {
    name: 'berth.scheduler.v1.InstanceService',
    definition: InstanceServiceService,
    implementation: impl,
  };
}
