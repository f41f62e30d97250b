/**
 * The media identity of an NVMe controller, read the way the kernel gives it
 * (drivers/nvme/host/core.c and sysfs.c, Linux 6.1):
 *
 * - the NVM subsystem's NQN from `/sys/class/nvme/nvmeX/subsysnqn`: the
 *   controller's SUBNQN, or, when it reports none (or its model is on the
 *   kernel's NVME_QUIRK_IGNORE_DEV_SUBNQN list), the kernel's fallback
 *   `nqn.2014.08.org.nvmexpress:<vid><ssvid><serial><model>`. Every controller
 *   of one subsystem shows the same NQN, so the key `nvme:<nqn>` names the
 *   media, not the controller;
 * - each namespace's identifiers from its block device: `nguid` (printed
 *   8-4-4-4-12), `eui` (bytes separated by spaces), `uuid` (which shows the
 *   NGUID when the namespace has no UUID), and `wwid` when a kernel lacks
 *   those (`uuid.<uuid>`, `eui.<nguid or eui64>`, `nvme.<vid>-…`). They are
 *   given as `nvme id-ns -o json` prints them (nguid 32 hex digits, eui64 16)
 *   and the UUID lower case with dashes; an all-zero value is none ('').
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { isUuid } from '../../identifiers.js';
import type { MediaIdentity, NamespaceIdentity } from '../types.js';

const NVME_CTRL_RE = /^nvme\d+$/;
const NVME_NS_RE = /^nvme\d+n\d+$/;

function attr(file: string): string | undefined {
  try {
    return readFileSync(file, 'latin1').trim();
  } catch {
    return undefined;
  }
}

const nonZero = (hex: string) => (/^0*$/.test(hex) ? '' : hex);

/** `01234567-89ab-…` (the kernel's %pU) → 32 hex digits; '' for anything else or all zeros. */
function hexOfUuidForm(text: string | undefined): string {
  const t = text?.toLowerCase() ?? '';
  return isUuid(t) ? nonZero(t.replaceAll('-', '')) : '';
}

/** `00 25 38 …` (the kernel's %8ph) → 16 hex digits; '' otherwise. */
function hexOfSpacedBytes(text: string | undefined): string {
  const t = text?.toLowerCase() ?? '';
  return /^[0-9a-f]{2}(?: [0-9a-f]{2}){7}$/.test(t) ? nonZero(t.replaceAll(' ', '')) : '';
}

/** A namespace's identifiers from `/sys/class/block/<name>`. */
export function readNamespaceIdentity(sysfsRoot: string, name: string, nsid: number): NamespaceIdentity {
  if (!NVME_NS_RE.test(name)) throw new Error(`${JSON.stringify(name)} is not an NVMe namespace name`);
  const dir = path.join(sysfsRoot, 'class', 'block', name);
  let nguid = hexOfUuidForm(attr(path.join(dir, 'nguid')));
  let eui64 = hexOfSpacedBytes(attr(path.join(dir, 'eui')));
  const uuidText = attr(path.join(dir, 'uuid'))?.toLowerCase() ?? '';
  // With no UUID the kernel shows the NGUID here (backward compatibility): that is no UUID.
  let uuid =
    isUuid(uuidText) && hexOfUuidForm(uuidText) !== '' && hexOfUuidForm(uuidText) !== nguid ? uuidText : '';
  if (nguid === '' && eui64 === '' && uuid === '') {
    // A kernel without those attributes: the wwid carries the strongest one.
    const wwid = attr(path.join(dir, 'wwid'))?.toLowerCase() ?? '';
    const eui = /^eui\.([0-9a-f]{32}|[0-9a-f]{16})$/.exec(wwid)?.[1];
    if (eui?.length === 32) nguid = nonZero(eui);
    else if (eui) eui64 = nonZero(eui);
    const u = /^uuid\.(.+)$/.exec(wwid)?.[1] ?? '';
    if (isUuid(u) && hexOfUuidForm(u) !== '') uuid = u;
  }
  return { nsid, nguid, eui64, uuid };
}

/** The kernel's subsysnqn of a controller; '' when sysfs does not show it. */
export function readSubsysNqn(sysfsRoot: string, controller: string): string {
  if (!NVME_CTRL_RE.test(controller))
    throw new Error(`${JSON.stringify(controller)} is not an NVMe controller name`);
  return attr(path.join(sysfsRoot, 'class', 'nvme', controller, 'subsysnqn')) ?? '';
}

/**
 * The kernel's fallback NQN from identify data (serial and model are given
 * trimmed; the kernel keeps them at 20 and 40 bytes), trimmed as sysfs reads it.
 */
export function fallbackNqn(id: { vid: number; ssvid: number; sn: string; mn: string }): string {
  const h = (n: number) => n.toString(16).padStart(4, '0');
  return `nqn.2014.08.org.nvmexpress:${h(id.vid)}${h(id.ssvid)}${id.sn.padEnd(20)}${id.mn.padEnd(40)}`.trimEnd();
}

export function nvmeMediaIdentity(m: {
  subsystemNqn: string;
  serial: string;
  model: string;
  namespaces: NamespaceIdentity[];
  deviceSerialNumber: string | null;
}): MediaIdentity {
  return {
    key: `nvme:${m.subsystemNqn}`,
    kind: 'NVME_SUBSYSTEM',
    subsystemNqn: m.subsystemNqn,
    serial: m.serial,
    model: m.model,
    namespaces: [...m.namespaces].sort((a, b) => a.nsid - b.nsid),
    deviceSerialNumber: m.deviceSerialNumber ?? '',
  };
}
