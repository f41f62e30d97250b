/**
 * The destination XML of a live migration (specs/live-migration-variant-drivers.txt,
 * Nova's get_updated_guest_xml): every PCI `<hostdev>`'s host source address is
 * replaced by the destination device's, per `pci_dev_map_src_dst`. The guest
 * address, alias and everything else stay byte for byte as they were — the
 * guest must not see its devices move.
 *
 * No XML library is available here, so this is a small scanner for libvirt's
 * own output: comments and CDATA are masked (same length, so offsets still
 * match the original) before looking for elements, and edits are spliced into
 * the original text. A mapping that names a device the XML lacks, or a PCI
 * hostdev the mapping does not cover, is INVALID_ARGUMENT: a half-rewritten
 * XML would start the guest on the destination with a source device's address.
 */

import { BerthError, type FieldViolation } from '../../../errors.js';
import { isPciAddress } from './guest-address.js';

const ATTR = /([A-Za-z_:][-\w:.]*)\s*=\s*(?:'([^']*)'|"([^"]*)")/g;

function attributes(raw: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const m of raw.matchAll(ATTR)) out.set(m[1]!, m[2] ?? m[3] ?? '');
  return out;
}

/** Comments, CDATA and processing instructions replaced by spaces of the same length. */
const mask = (xml: string): string =>
  xml.replace(/<!--[\s\S]*?-->|<!\[CDATA\[[\s\S]*?\]\]>|<\?[\s\S]*?\?>/g, (m) => ' '.repeat(m.length));

/** libvirt reads PCI address parts as 0x-hex or decimal, each defaulting to 0. */
function part(v: string | undefined): number | null {
  if (v === undefined || v === '') return 0;
  const n = /^0x[0-9a-f]+$/i.test(v)
    ? Number.parseInt(v.slice(2), 16)
    : /^[0-9]+$/.test(v)
      ? Number(v)
      : Number.NaN;
  return Number.isFinite(n) ? n : null;
}

const hex = (n: number, w: number) => n.toString(16).padStart(w, '0');

function canonical(attrs: Map<string, string>): string | null {
  const [d, b, s, f] = ['domain', 'bus', 'slot', 'function'].map((k) => part(attrs.get(k)));
  if (d == null || b == null || s == null || f == null) return null;
  return `${hex(d, 4)}:${hex(b, 2)}:${hex(s, 2)}.${f.toString(16)}`;
}

function addressElement(address: string, attrs: Map<string, string>): string {
  const [domain, bus, rest] = address.split(':') as [string, string, string];
  const [slot, fn] = rest.split('.') as [string, string];
  const extra = [...attrs]
    .filter(([k]) => !['domain', 'bus', 'slot', 'function'].includes(k))
    .map(([k, v]) => ` ${k}='${v.replace(/'/g, '&apos;')}'`)
    .join('');
  return `<address domain='0x${domain}' bus='0x${bus}' slot='0x${slot}' function='0x${fn}'${extra}/>`;
}

/**
 * Replace the source address of every PCI hostdev in `xml` using `map`
 * (source `0000:3b:02.0` → destination `0000:5e:00.1`). Throws
 * INVALID_ARGUMENT listing every mapping entry without a hostdev and every
 * hostdev without a mapping entry.
 */
export function rewriteSourceAddresses(xml: string, map: Readonly<Record<string, string>>): string {
  const violations: FieldViolation[] = [];
  const destinations = new Map<string, string>();
  for (const [src, dst] of Object.entries(map)) {
    const field = `pci_dev_map_src_dst[${JSON.stringify(src)}]`;
    if (!isPciAddress(src))
      violations.push({ field, description: `key "${src}" is not a PCI address like 0000:3b:02.0` });
    if (!isPciAddress(dst))
      violations.push({ field, description: `value "${dst}" is not a PCI address like 0000:3b:02.0` });
    const prev = destinations.get(dst);
    if (prev !== undefined) {
      violations.push({ field, description: `destination ${dst} is also the destination of ${prev}` });
    }
    destinations.set(dst, src);
  }
  if (violations.length > 0) throw failure(violations);

  const scan = mask(xml);
  const edits: { start: number; end: number; text: string }[] = [];
  const seen = new Set<string>();
  const open = /<hostdev\b([^>]*)>/g;
  for (let m = open.exec(scan); m !== null; m = open.exec(scan)) {
    const rawAttrs = m[1]!;
    if (rawAttrs.trimEnd().endsWith('/')) continue;
    const bodyStart = m.index + m[0].length;
    const close = scan.indexOf('</hostdev', bodyStart);
    if (close < 0)
      throw failure([{ field: 'xml', description: `<hostdev> at offset ${m.index} is never closed` }]);
    open.lastIndex = close;
    const hd = attributes(rawAttrs);
    if (hd.get('type') !== 'pci' || (hd.get('mode') ?? 'subsystem') !== 'subsystem') continue;
    const body = scan.slice(bodyStart, close);
    const source = /<source\b[^>]*?>([\s\S]*?)<\/source\s*>/.exec(body);
    const addr = source ? /<address\b([^>]*?)\/>/.exec(source[1]!) : null;
    if (!source || !addr) {
      violations.push({
        field: 'xml',
        description: `PCI <hostdev> at offset ${m.index} has no <source><address/>`,
      });
      continue;
    }
    const attrs = attributes(addr[1]!);
    const current = canonical(attrs);
    if (current === null) {
      violations.push({
        field: 'xml',
        description: `PCI <hostdev> at offset ${m.index} has an unreadable source address`,
      });
      continue;
    }
    const dst = map[current];
    if (dst === undefined) {
      violations.push({
        field: 'pci_dev_map_src_dst',
        description: `hostdev source ${current} in the XML has no destination in the map`,
      });
      continue;
    }
    seen.add(current);
    const start = bodyStart + source.index + source[0].indexOf('>') + 1 + addr.index;
    edits.push({ start, end: start + addr[0].length, text: addressElement(dst, attrs) });
  }
  for (const src of Object.keys(map)) {
    if (!seen.has(src)) {
      violations.push({
        field: `pci_dev_map_src_dst[${JSON.stringify(src)}]`,
        description: `source ${src} is not the source address of any PCI hostdev in the XML`,
      });
    }
  }
  if (violations.length > 0) throw failure(violations);
  let out = xml;
  for (const e of edits.sort((a, b) => b.start - a.start))
    out = out.slice(0, e.start) + e.text + out.slice(e.end);
  return out;
}

function failure(violations: FieldViolation[]): BerthError {
  return new BerthError(
    'INVALID_ARGUMENT',
    violations.map((v) => `${v.field}: ${v.description}`).join('; '),
    {
      fieldViolations: violations,
    },
  );
}
