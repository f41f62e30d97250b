/**
 * libvirt `<hostdev>` elements for Berth's bound PCI devices, and the source
 * address rewrite a live migration needs (specs/pci-managed-mode.txt,
 * specs/live-migration-variant-drivers.txt).
 *
 * The output is exactly libvirt's own form (what `virsh dumpxml` prints), so a
 * caller can paste it into a domain's `<devices>` and libvirt's schema accepts
 * it; the tests run `virt-xml-validate` on it. Everything that reaches the XML
 * is validated first and escaped anyway, so a hostile tag cannot break out of
 * an attribute.
 */

import { createHash } from 'node:crypto';
import { BerthError, invalidArgument } from '../../../errors.js';
import type { Arq } from '../domain/arq.js';
import type { DeviceRecord } from '../domain/device-state.js';
import { formatPciAddress, type PciAddress, parsePciAddress, rootBusSlot } from './guest-address.js';

/** What is needed to render one hostdev. */
export interface HostdevInput {
  arqUuid: string;
  deviceUuid: string;
  /** Host address of the device. */
  source: PciAddress;
  /** Guest address Berth assigned (guest-address.ts). */
  guest: PciAddress;
  /** From the device record (host configuration), never from a request. */
  managed: boolean;
  /** Role tag, '' when untagged. */
  tag: string;
  /** A resolved alias (renderInstanceXml sets it); derived from tag / ARQ when absent. */
  alias?: string;
}

/** The proto's Hostdev, for callers that build XML themselves. */
export interface Hostdev {
  arqUuid: string;
  deviceUuid: string;
  source: PciAddress;
  guest: PciAddress;
  managed: boolean;
  alias: string;
  tag: string;
}

/** libvirt's rule for user aliases (virDomainDeviceAliasIsUserAlias + the schema's charset). */
export const USER_ALIAS = /^ua-[a-zA-Z0-9_-]+$/;

const ALIAS_SAFE = /^[a-zA-Z0-9_-]+$/;
const shortHash = (s: string): string => createHash('sha256').update(s, 'utf8').digest('hex').slice(0, 8);

/**
 * The alias for a device: `ua-<tag>` when the tag is made of libvirt's alias
 * characters; otherwise every other character becomes `_` and a short hash of
 * the original tag is appended, because sanitising alone maps `db.1` and `db:1`
 * to the same name. Untagged devices use the ARQ uuid, which is unique.
 */
export function aliasFor(h: Pick<HostdevInput, 'tag' | 'arqUuid'>): string {
  if (h.tag === '') {
    const id = ALIAS_SAFE.test(h.arqUuid)
      ? h.arqUuid
      : `${h.arqUuid.replace(/[^a-zA-Z0-9_-]/g, '_')}-${shortHash(h.arqUuid)}`;
    return `ua-${id}`;
  }
  if (ALIAS_SAFE.test(h.tag)) return `ua-${h.tag}`;
  // Array.from splits by code point, so a surrogate pair becomes one `_`.
  const sanitised = Array.from(h.tag, (c) => (ALIAS_SAFE.test(c) ? c : '_')).join('');
  return `ua-${sanitised}-${shortHash(h.tag)}`;
}

/**
 * Aliases for all hostdevs of an instance, unique within it. Tags are unique
 * per (instance, device type) only, so a PCI and an NVMe device may share a
 * tag; the first in the given order (bind order) keeps `ua-<tag>` and each
 * later one gets the ARQ's hash appended. Keeping the first stable matters:
 * libvirt addresses a device by alias for hot-unplug.
 */
export function uniqueAliases(hostdevs: readonly Pick<HostdevInput, 'tag' | 'arqUuid'>[]): string[] {
  const used = new Set<string>();
  return hostdevs.map((h) => {
    let alias = aliasFor(h);
    if (used.has(alias)) alias = `${alias}-${shortHash(`arq:${h.arqUuid}`)}`;
    for (let n = 2; used.has(alias); n++) alias = `${aliasFor(h)}-${shortHash(`arq:${h.arqUuid}:${n}`)}`;
    used.add(alias);
    return alias;
  });
}

/** Escape for an XML attribute value or text. */
export const escapeXml = (s: string): string =>
  s
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/'/g, '&apos;')
    .replace(/"/g, '&quot;');

const HEX = (width: number) => new RegExp(`^[0-9a-f]{${width}}$`);
const WIDTHS: Record<keyof PciAddress, RegExp> = {
  domain: HEX(4),
  bus: HEX(2),
  slot: HEX(2),
  function: /^[0-7]$/,
};

function checkAddress(field: string, a: PciAddress): void {
  for (const k of ['domain', 'bus', 'slot', 'function'] as const) {
    if (!WIDTHS[k].test(a[k])) {
      throw invalidArgument(`${field}.${k}`, `"${a[k]}" is not a lower-case hex PCI ${k}`);
    }
  }
  if (Number.parseInt(a.slot, 16) > 0x1f) throw invalidArgument(`${field}.slot`, `"${a.slot}" is above 1f`);
}

const addressAttrs = (a: PciAddress): string =>
  `domain='0x${escapeXml(a.domain)}' bus='0x${escapeXml(a.bus)}' slot='0x${escapeXml(a.slot)}' function='0x${escapeXml(a.function)}'`;

/** One `<hostdev>` element in libvirt's form, two-space indented, no trailing newline. */
export function renderHostdev(h: HostdevInput): string {
  checkAddress('source', h.source);
  checkAddress('guest', h.guest);
  const alias = h.alias ?? aliasFor(h);
  if (!USER_ALIAS.test(alias))
    throw invalidArgument('alias', `"${alias}" does not match ${USER_ALIAS.source}`);
  return [
    `<hostdev mode='subsystem' type='pci' managed='${h.managed ? 'yes' : 'no'}'>`,
    `  <driver name='vfio'/>`,
    `  <source>`,
    `    <address ${addressAttrs(h.source)}/>`,
    `  </source>`,
    `  <alias name='${escapeXml(alias)}'/>`,
    `  <address type='pci' ${addressAttrs(h.guest)}/>`,
    `</hostdev>`,
  ].join('\n');
}

/**
 * The structured form of an instance's hostdevs: unique aliases resolved,
 * addresses checked, no two devices on one guest slot and no host device twice.
 */
export function buildHostdevs(inputs: readonly HostdevInput[]): Hostdev[] {
  const aliases = uniqueAliases(inputs);
  const slots = new Map<number, string>();
  const sources = new Map<string, string>();
  return inputs.map((h, i) => {
    checkAddress(`hostdevs[${i}].source`, h.source);
    checkAddress(`hostdevs[${i}].guest`, h.guest);
    const slot = rootBusSlot(h.guest);
    if (slot !== null) {
      const prev = slots.get(slot);
      if (prev !== undefined) {
        throw invalidArgument(
          `hostdevs[${i}].guest`,
          `${formatPciAddress(h.guest)} is on the same guest slot as ${prev}`,
        );
      }
      slots.set(slot, `hostdevs[${i}].guest`);
    }
    const src = formatPciAddress(h.source);
    const prevSource = sources.get(src);
    if (prevSource !== undefined) {
      throw invalidArgument(`hostdevs[${i}].source`, `host device ${src} is already ${prevSource}`);
    }
    sources.set(src, `hostdevs[${i}].source`);
    return {
      arqUuid: h.arqUuid,
      deviceUuid: h.deviceUuid,
      source: { ...h.source },
      guest: { ...h.guest },
      managed: h.managed,
      alias: aliases[i]!,
      tag: h.tag,
    };
  });
}

/** The hostdev elements of an instance, one element after another (newline separated). */
export function renderInstanceXml(hostdevs: readonly HostdevInput[]): string {
  return renderInstance(hostdevs).xml;
}

/** XML and structured data together, as GetInstanceXmlResponse carries them. */
export function renderInstance(hostdevs: readonly HostdevInput[]): { xml: string; hostdevs: Hostdev[] } {
  const built = buildHostdevs(hostdevs);
  return { xml: built.map((h) => renderHostdev(h)).join('\n'), hostdevs: built };
}

/**
 * The hostdev input for a bound ARQ and its device. The source address comes
 * from the device record and `managed` from the ARQ's attach handle — the
 * device's setting when it was bound (pci-managed-mode.txt: a changed
 * `managed` applies from the next bind), so the XML and the ARQ always agree;
 * never from a request. An ARQ that is not bound to this device is a
 * FAILED_PRECONDITION.
 */
export function hostdevFromBinding(arq: Arq, device: DeviceRecord, guest: PciAddress): HostdevInput {
  if (arq.state !== 'bound' || arq.deviceUuid !== device.uuid) {
    throw new BerthError(
      'FAILED_PRECONDITION',
      `ARQ ${arq.uuid} (${arq.state}) is not bound to device ${device.uuid}`,
      { reason: 'ARQ_NOT_BOUND', metadata: { arq_uuid: arq.uuid, device_uuid: device.uuid } },
    );
  }
  return {
    arqUuid: arq.uuid,
    deviceUuid: device.uuid,
    source: parsePciAddress('device.address', device.address),
    guest,
    managed: arq.attachHandle?.managed ?? device.managed,
    tag: arq.tag,
  };
}

// The live-migration rewrite lives next to its scanner; re-exported so callers find all hostdev XML here.
export { rewriteSourceAddresses } from './migration-xml.js';
