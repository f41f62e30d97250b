/**
 * One certificate chain per media, across hosts (docs/erasure-certificates.md,
 * decision 63). A cleanup's certificate continues the last link the scheduler
 * accepted for the media, whichever host signed it; where no link is known it
 * is an unknown-history link (`history: "unknown"`, `prev` null, `seq` 1),
 * never a first link as if the history were complete. A verifier reading a
 * chain sees each host handover and each gap as what it is.
 */
import type { ErasureClaims } from './certificate.js';

/** One link of a media's chain, as a cleanup's dispatch states it (CleanupDeviceRequest.previous_certificate). */
export interface ChainLink {
  mediaKey: string;
  /** sha256:<hex> of the certificate's compact form. */
  hash: string;
  seq: number;
  /** The host that signed it. */
  host: string;
}

/** Where a certificate goes in its media's chain: its `seq`, `prev` and, for an unknown-history link, `history`. */
export type ChainPosition = Pick<ErasureClaims, 'seq' | 'prev'> & { history?: 'unknown' };

/** A link the agent's own journal holds (any host's chain it signed into). */
export interface OwnLink {
  hash: string;
  seq: number;
  prev: string | null;
}

/**
 * The position of the certificate a cleanup of `mediaKey` signs, and what it
 * continues (decision 63):
 * - `stated`, the scheduler's last link of the media, decides; the agent's
 *   own links (`own`, its journal's of this media) are information only: they
 *   are continued instead only when they descend from the stated link (the
 *   scheduler's database is behind, restored from an older copy; the agent
 *   re-supplies those links at its registration);
 * - with no stated link (the scheduler holds none, or is older than decision
 *   63), the agent's own last link of the media, which it re-supplies to that
 *   scheduler;
 * - with neither, an unknown-history link: never a first link as if the
 *   history were complete.
 */
export function chainPosition(
  mediaKey: string,
  stated: ChainLink | null,
  own: readonly OwnLink[],
): ChainPosition & { continues: 'scheduler' | 'agent' | 'nothing' } {
  // The last of the highest seq: the journal lists links by seq, then by when they were signed.
  const newest = own.reduce<OwnLink | null>((a, l) => (!a || l.seq >= a.seq ? l : a), null);
  const link = stated && stated.mediaKey === mediaKey ? stated : null;
  if (link && !(newest && newest.hash !== link.hash && descends(newest, link.hash, own))) {
    return { seq: link.seq + 1, prev: link.hash, continues: 'scheduler' };
  }
  if (newest) return { seq: newest.seq + 1, prev: newest.hash, continues: 'agent' };
  return { seq: 1, prev: null, history: 'unknown', continues: 'nothing' };
}

/** Whether `from` reaches `ancestor` by following `prev` through `links`. */
function descends(from: OwnLink, ancestor: string, links: readonly OwnLink[]): boolean {
  const byHash = new Map(links.map((l) => [l.hash, l]));
  let at: OwnLink | undefined = from;
  for (let steps = 0; at && steps <= links.length; steps++) {
    if (at.prev === ancestor) return true;
    at = at.prev ? byHash.get(at.prev) : undefined;
  }
  return false;
}

/** Whether nothing is known of the media's history before this link (an unknown-history link, or a first link signed before decision 63). */
export const unknownHistory = (c: Pick<ErasureClaims, 'prev'>): boolean => c.prev === null;

/** What a verifier sees at a link: the host handover from the link before it, a gap before it. */
export interface LinkView {
  /** The previous link was signed by another host. */
  handover: { from: string; to: string } | null;
  /** Nothing is known before this link. */
  gap: boolean;
}

/** The link's view, given the previous link of its chain when the verifier has it. */
export function linkView(
  claims: Pick<ErasureClaims, 'prev' | 'host'>,
  previous: Pick<ErasureClaims, 'host'> | null,
): LinkView {
  return {
    handover: previous && previous.host !== claims.host ? { from: previous.host, to: claims.host } : null,
    gap: unknownHistory(claims),
  };
}

/** The view as the lines `berth cleanup verify` and `berth cleanup certificate` print. */
export function linkViewLines(v: LinkView): string[] {
  return [
    ...(v.gap ? ['gap: unknown history before this link'] : []),
    ...(v.handover ? [`handover: ${v.handover.from} -> ${v.handover.to}`] : []),
  ];
}

/**
 * Views of a list of certificates (any order, any media): each link's
 * previous one is found by its hash in the list; a link whose previous one is
 * not listed shows no handover (unknown here, not a gap).
 */
export function chainViews(
  list: readonly { hash: string; claims: Pick<ErasureClaims, 'prev' | 'host'> }[],
): LinkView[] {
  const byHash = new Map(list.map((c) => [c.hash, c.claims]));
  return list.map((c) => linkView(c.claims, c.claims.prev ? (byHash.get(c.claims.prev) ?? null) : null));
}
