/** Use cases: an instance's NICs and disks, and the guest addresses of its passthrough devices. */

import { invalidArgument } from '../../../errors.js';
import { type GuestBinding, type InstanceDevices, instanceDevices } from '../domain/instance.js';
import { formatPciAddress, planGuestAddresses, type TakenAddress } from '../guest/guest-address.js';
import { aliasFor } from '../guest/hostdev-xml.js';
import { devicesInput, registeredAddresses, validateInstanceDevices } from '../guest/metadata.js';
import { read, type UseCaseDeps } from './context.js';
import { mustDevice, writeArq } from './records.js';
import { write } from './unit.js';
import { FOR_UPDATE } from './unit-of-work.js';

const noDevices = (): InstanceDevices => ({ nics: [], disks: [] });

function requireInstance(instanceUuid: string): void {
  if (!instanceUuid) throw invalidArgument('instance_uuid', 'is required');
}

export async function setInstanceDevices(
  deps: UseCaseDeps,
  instanceUuid: string,
  devices: InstanceDevices,
): Promise<void> {
  requireInstance(instanceUuid);
  await write(deps, (tx) => tx.uow.putInstanceDevices(instanceUuid, devices));
}

export async function getInstanceDevices(deps: UseCaseDeps, instanceUuid: string): Promise<InstanceDevices> {
  return read(deps, async (r) => (await r.instanceDevices(instanceUuid)) ?? noDevices());
}

/**
 * Replace the instance's NICs and disks after checking them, in the same unit,
 * against the guest addresses already assigned to its bound ARQs: one
 * INVALID_ARGUMENT naming every bad field. Returns what was stored (normalised).
 */
export async function registerInstanceDevices(
  deps: UseCaseDeps,
  instanceUuid: string,
  devices: InstanceDevices,
): Promise<InstanceDevices> {
  requireInstance(instanceUuid);
  return write(deps, async (tx) => {
    await tx.uow.lockInstance(instanceUuid);
    // Only addresses already handed out bind the NICs/disks; a hostdev still
    // without one will be placed around them.
    const hostdevs: TakenAddress[] = (await tx.uow.arqs({ instanceUuid })).flatMap((a) =>
      a.state === 'bound' && a.guestAddress
        ? [{ owner: `hostdev ${aliasFor({ tag: a.tag, arqUuid: a.uuid })}`, address: a.guestAddress }]
        : [],
    );
    const stored = instanceDevices(validateInstanceDevices(devicesInput(devices), hostdevs));
    await tx.uow.putInstanceDevices(instanceUuid, stored);
    return stored;
  });
}

/**
 * The instance's bound ARQs (creation order) with their devices, each with a
 * guest PCI address: stored addresses are kept, ARQs without one get the
 * lowest free Berth slot avoiding the registered NICs and disks, in one unit.
 */
export async function assignGuestAddresses(deps: UseCaseDeps, instanceUuid: string): Promise<GuestBinding[]> {
  requireInstance(instanceUuid);
  return write(deps, async (tx) => {
    await tx.uow.lockInstance(instanceUuid);
    const bound = (await tx.uow.arqs({ instanceUuid }, FOR_UPDATE)).filter(
      (a) => a.state === 'bound' && a.deviceUuid,
    );
    const others = registeredAddresses(
      devicesInput((await tx.uow.instanceDevices(instanceUuid)) ?? noDevices()),
    );
    const plan = planGuestAddresses(
      bound.map((a) => ({ id: a.uuid, guest: a.guestAddress ?? null })),
      others,
    );
    const out: GuestBinding[] = [];
    for (const a of bound) {
      const guest = formatPciAddress(plan.get(a.uuid)!);
      const arq = a.guestAddress === guest ? a : await writeArq(tx, { ...a, guestAddress: guest });
      out.push({ arq, device: await mustDevice(tx.uow, { uuid: a.deviceUuid! }) });
    }
    return out;
  });
}
