/**
 * What the hypervisor and the guest need for an instance's passthrough
 * devices: the libvirt `<hostdev>` elements, and the device-role metadata
 * document with the guest addresses Berth assigned.
 *
 * Guest addresses are assigned (and persisted) the first time an instance's
 * bindings are rendered, then kept for the life of each binding, so the XML
 * and the metadata document always agree and never move a device.
 */
import { notFound } from '../../../errors.js';
import type { GuestBinding } from '../domain/instance.js';
import { parsePciAddress } from '../guest/guest-address.js';
import { type Hostdev, hostdevFromBinding, renderInstance } from '../guest/hostdev-xml.js';
import { devicesInput, passthroughFromHostdev, renderMetadataJson } from '../guest/metadata.js';
import type { UseCases } from '../usecases/use-cases.js';

export interface RenderedInstance {
  xml: string;
  hostdevs: Hostdev[];
  bindings: GuestBinding[];
}

export class Instances {
  constructor(private readonly useCases: UseCases) {}

  /**
   * The hostdevs of an instance's bound ARQs with their (stable) guest
   * addresses. The source address comes from the device records, `managed`
   * from the ARQs (the value at bind time).
   */
  async hostdevs(instanceUuid: string): Promise<RenderedInstance> {
    const bindings = await this.useCases.assignGuestAddresses(instanceUuid);
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

  /** GetInstanceXml: NOT_FOUND for an instance without ARQs. */
  async xml(instanceUuid: string): Promise<RenderedInstance> {
    if ((await this.useCases.listArqs(instanceUuid)).length === 0) throw notFound('instance', instanceUuid);
    return this.hostdevs(instanceUuid);
  }

  /** GetDeviceMetadata: the document, validated against the schema file (renderMetadataJson). */
  async metadata(instanceUuid: string): Promise<string> {
    const registered = await this.useCases.getInstanceDevices(instanceUuid);
    const arqs = await this.useCases.listArqs(instanceUuid);
    if (arqs.length === 0 && registered.nics.length === 0 && registered.disks.length === 0) {
      throw notFound('instance', instanceUuid);
    }
    const { hostdevs, bindings } = await this.hostdevs(instanceUuid);
    const passthrough = hostdevs.map((h, i) => passthroughFromHostdev(h, bindings[i]!.device));
    return renderMetadataJson(devicesInput(registered), passthrough);
  }
}
