/**
 * NVM subsystems with several controllers (dual-port drives, QEMU's
 * `nvme-subsys`): two or more PCI functions whose controllers reach one set of
 * namespaces on one media. In the state file the first controller of the
 * subsystem *holds* what belongs to the subsystem — namespaces, media, NVM
 * capacity, NN, capabilities, identify strings, sanitize state — and every
 * other controller names it in `shares` and keeps only its own name, device
 * path, PCI address, controller id and faults. A namespace's attachment is
 * per controller (`attachedTo`, controller ids), as the Namespace Attachment
 * command's controller list is.
 *
 * So a namespace created, deleted, attached or detached through one
 * controller is seen through the other, and a sanitize through one erases the
 * whole subsystem, because there is only one copy of each.
 */
import { kernelSubsysNqn } from '../nvme-identity.js';
import type { NvmeSimState, SimControllerState, SimFault, SimNamespaceState } from './state.js';

/** What belongs to a controller itself; everything else belongs to its NVM subsystem. */
const OWN_FIELDS: ReadonlySet<string> = new Set([
  'name',
  'devPath',
  'pciAddress',
  'cntlid',
  'faults',
  'shares',
]);

/** The controller that holds the subsystem `ctrl` belongs to (itself when it shares with nobody). */
export function holderOf(state: NvmeSimState, ctrl: SimControllerState): SimControllerState {
  if (ctrl.shares === undefined) return ctrl;
  const holder = state.controllers.find((c) => c.name === ctrl.shares);
  if (!holder || holder.shares !== undefined) {
    throw new Error(`controller ${ctrl.name} shares with ${ctrl.shares}, which does not hold a subsystem`);
  }
  return holder;
}

/** Faults of the controller, over faults set on the subsystem's holder (those apply to every controller). */
function faultsOf(own: SimControllerState, holder: SimControllerState): { [command: string]: SimFault } {
  return { ...(holder.faults ?? {}), ...(own.faults ?? {}) };
}

/**
 * The controller as commands see it: its own fields, and its subsystem's
 * everything else — reads and writes both go where they belong, so the
 * commands need not know whether a subsystem has one controller or several.
 */
export function controllerView(state: NvmeSimState, ctrl: SimControllerState): SimControllerState {
  if (ctrl.shares === undefined) return ctrl;
  const holder = holderOf(state, ctrl);
  return new Proxy(ctrl, {
    get(own, key) {
      if (key === 'faults') return faultsOf(own, holder);
      return typeof key === 'string' && OWN_FIELDS.has(key)
        ? Reflect.get(own, key)
        : Reflect.get(holder, key);
    },
    set(own, key, value) {
      return typeof key === 'string' && OWN_FIELDS.has(key)
        ? Reflect.set(own, key, value)
        : Reflect.set(holder, key, value);
    },
    has(own, key) {
      return Reflect.has(own, key) || Reflect.has(holder, key);
    },
  });
}

/** A plain copy of the controller as commands see it (read-only uses: identify, list). */
export function snapshotOf(state: NvmeSimState, ctrl: SimControllerState): SimControllerState {
  if (ctrl.shares === undefined) return structuredClone(ctrl);
  const holder = holderOf(state, ctrl);
  return structuredClone({
    ...holder,
    name: ctrl.name,
    devPath: ctrl.devPath,
    pciAddress: ctrl.pciAddress,
    cntlid: ctrl.cntlid,
    faults: faultsOf(ctrl, holder),
    shares: holder.name,
  });
}

/** Every controller of the subsystem `holder` holds, the holder first. */
export function controllersOf(state: NvmeSimState, holder: SimControllerState): SimControllerState[] {
  return [holder, ...state.controllers.filter((c) => c.shares === holder.name)];
}

/** Whether the namespace is attached to (active on) the controller. */
export function isAttached(ns: SimNamespaceState, ctrl: Pick<SimControllerState, 'cntlid'>): boolean {
  return ns.attachedTo ? ns.attachedTo.includes(ctrl.cntlid) : ns.attached;
}

/** Attaches or detaches the namespace to or from one controller; `attached` says whether any controller has it. */
export function setAttached(
  ns: SimNamespaceState,
  ctrl: Pick<SimControllerState, 'cntlid'>,
  on: boolean,
): void {
  if (!ns.attachedTo) {
    ns.attached = on;
    return;
  }
  const rest = ns.attachedTo.filter((id) => id !== ctrl.cntlid);
  ns.attachedTo = on ? [...rest, ctrl.cntlid].sort((a, b) => a - b) : rest;
  ns.attached = ns.attachedTo.length > 0;
}

/**
 * The kernel's `subsysnqn` of the controller's subsystem (what `nvme list -v` shows): the SUBNQN it
 * reports, else the kernel's fallback (src/sim/nvme-identity.ts). Give it the holder, or a view.
 */
export function subnqnOf(ctrl: SimControllerState): string {
  const hex4 = (n: number) => n.toString(16).padStart(4, '0');
  return kernelSubsysNqn({
    vendorId: hex4(ctrl.vid),
    subsystemVendorId: hex4(ctrl.ssvid),
    serial: ctrl.sn,
    model: ctrl.mn,
    subnqn: ctrl.subnqn ?? '',
    ignoreDeviceSubnqn: ctrl.ignoreDeviceSubnqn ?? false,
  });
}
