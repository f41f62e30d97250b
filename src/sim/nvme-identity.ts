/**
 * The identifiers a simulated NVM subsystem and its namespaces report, shared
 * by the sysfs builder (what the kernel shows) and the nvme-cli simulator (what
 * `id-ctrl` / `id-ns` print), so the two always agree. Node built-ins only: the
 * nvme-cli simulator imports it on its hot path.
 *
 * The kernel's rules (drivers/nvme/host/core.c nvme_init_subnqn, sysfs.c, 6.1):
 * - `subsysnqn` is the controller's SUBNQN, unless it reports none (or the
 *   model is on the NVME_QUIRK_IGNORE_DEV_SUBNQN list): then
 *   `nqn.2014.08.org.nvmexpress:<vid><ssvid><serial, 20 bytes><model, 40 bytes>`.
 * - `nguid` (`%pU`, 8-4-4-4-12 hex) and `eui` (`%8ph`, bytes with spaces) are
 *   shown only when non-zero; `uuid` shows the namespace UUID, or (for old
 *   user space) the NGUID when there is no UUID, and is hidden when neither is.
 * - `wwid`: `uuid.<uuid>`, else `eui.<nguid>`, else `eui.<eui64>`, else
 *   `nvme.<vid>-<serial hex>-<model hex>-<nsid>`.
 */

/** A namespace's identifiers as hex (nguid 32 digits, eui64 16, uuid with dashes); '' = none. */
export interface SimNamespaceIds {
  nguid: string;
  eui64: string;
  uuid: string;
}

/** A stable 32-bit FNV-1a hash, for deterministic identifiers. */
export function fnv(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

const hex8 = (n: number) => n.toString(16).padStart(8, '0');

/**
 * What a simulated namespace reports unless its spec says otherwise: an NGUID
 * and an EUI-64 derived from the drive's serial and the nsid (an enterprise
 * drive reports both), no UUID.
 */
export function defaultNamespaceIds(serial: string, nsid: number): SimNamespaceIds {
  const s = serial.trimEnd();
  return {
    nguid: [0, 1, 2, 3].map((i) => hex8(fnv(`${s}/${nsid}/nguid/${i}`))).join(''),
    eui64: (hex8(fnv(s)) + hex8(fnv(`${s}/${nsid}`))).slice(0, 16),
    uuid: '',
  };
}

/** Overrides (any field, '' = none) over the defaults; each checked. */
export function namespaceIds(
  serial: string,
  nsid: number,
  given: Partial<SimNamespaceIds> | undefined,
): SimNamespaceIds {
  const ids = { ...defaultNamespaceIds(serial, nsid), ...given };
  if (ids.nguid !== '' && !/^[0-9a-f]{32}$/.test(ids.nguid))
    throw new Error(`nguid: ${JSON.stringify(ids.nguid)}`);
  if (ids.eui64 !== '' && !/^[0-9a-f]{16}$/.test(ids.eui64))
    throw new Error(`eui64: ${JSON.stringify(ids.eui64)}`);
  if (ids.uuid !== '' && !/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(ids.uuid)) {
    throw new Error(`uuid: ${JSON.stringify(ids.uuid)}`);
  }
  return ids;
}

const isZero = (hex: string) => /^0*$/.test(hex);

/** 32 hex digits as the kernel's `%pU`. */
function asUuid(hex32: string): string {
  return `${hex32.slice(0, 8)}-${hex32.slice(8, 12)}-${hex32.slice(12, 16)}-${hex32.slice(16, 20)}-${hex32.slice(20)}`;
}

/** The printable bytes of a space-padded identify string, as `%*phN` prints them after the kernel trims the padding. */
function trimmedHex(s: string): string {
  return Buffer.from(s.replace(/[ \0]+$/, ''), 'latin1').toString('hex');
}

/**
 * The namespace attributes the kernel shows, each with its newline; an
 * attribute the kernel hides is absent.
 */
export function namespaceSysfsAttributes(
  ids: SimNamespaceIds,
  subsystem: { vendorId: string; serial: string; model: string },
  nsid: number,
): { nguid?: string; eui?: string; uuid?: string; wwid: string } {
  const out: { nguid?: string; eui?: string; uuid?: string; wwid: string } = { wwid: '' };
  const hasNguid = ids.nguid !== '' && !isZero(ids.nguid);
  const hasEui = ids.eui64 !== '' && !isZero(ids.eui64);
  const hasUuid = ids.uuid !== '' && !isZero(ids.uuid.replaceAll('-', ''));
  if (hasNguid) out.nguid = `${asUuid(ids.nguid)}\n`;
  if (hasEui) out.eui = `${ids.eui64.match(/../g)!.join(' ')}\n`;
  if (hasUuid) out.uuid = `${ids.uuid}\n`;
  else if (hasNguid) out.uuid = `${asUuid(ids.nguid)}\n`;
  if (hasUuid) out.wwid = `uuid.${ids.uuid}\n`;
  else if (hasNguid) out.wwid = `eui.${ids.nguid}\n`;
  else if (hasEui) out.wwid = `eui.${ids.eui64}\n`;
  else {
    out.wwid = `nvme.${subsystem.vendorId}-${trimmedHex(subsystem.serial)}-${trimmedHex(subsystem.model)}-${nsid.toString(16).padStart(8, '0')}\n`;
  }
  return out;
}

/** The kernel's fallback NQN for a controller that reports none (serial and model at their fixed widths). */
export function fallbackNqn(
  vendorId: string,
  subsystemVendorId: string,
  serial: string,
  model: string,
): string {
  return `nqn.2014.08.org.nvmexpress:${vendorId}${subsystemVendorId}${serial.slice(0, 20).padEnd(20)}${model.slice(0, 40).padEnd(40)}`;
}

/** What the kernel shows as `subsysnqn`: the controller's own SUBNQN, or the fallback. */
export function kernelSubsysNqn(c: {
  vendorId: string;
  subsystemVendorId: string;
  serial: string;
  model: string;
  /** The SUBNQN the controller reports ('' = none). */
  subnqn: string;
  /** The model is on the kernel's NVME_QUIRK_IGNORE_DEV_SUBNQN list. */
  ignoreDeviceSubnqn?: boolean;
}): string {
  if (c.subnqn !== '' && c.subnqn.length < 256 && !c.ignoreDeviceSubnqn) return c.subnqn;
  return fallbackNqn(c.vendorId, c.subsystemVendorId, c.serial, c.model);
}
