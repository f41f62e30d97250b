/**
 * Drift: another writer changed a provider Berth owns (an operator's
 * `openstack resource provider inventory set` put `reserved` back to 0, a
 * trait was added by hand, the provider was deleted). Between full resyncs
 * (reporter.ts, 300 s by default) the reporter trusts what it last read or
 * wrote, so until then Nova could schedule onto a device Berth holds back.
 *
 * The check is cheap and bounded. Placement bumps a provider's generation on
 * every inventory and trait change, so a check lists the providers of a few
 * compute node trees (`GET /resource_providers?in_tree=<root>`, one call per
 * tree, at most DRIFT_TREES_PER_CHECK trees per check, the next trees at the
 * next check, round robin) and compares each provider's generation with the
 * one Berth knows. Only a provider whose generation moved (or that appeared or
 * went) is read again in full and written back by the reporter; the rest costs
 * nothing more. A generation that moved for an allocation (Nova's claim) is
 * re-read and found in step: no write.
 */
import type { PlacementApi } from './api.js';

/** Trees (compute nodes) looked at per check: bounds one check's calls. */
export const DRIFT_TREES_PER_CHECK = 50;

/** One compute node's tree, and the generation Berth knows of each of its providers (null: absent). */
export interface DriftTree {
  /** The compute node provider's uuid. */
  root: string;
  known: ReadonlyMap<string, number | null>;
}

/** A provider whose generation is not the one Berth knows (null: absent). */
export interface Drift {
  name: string;
  was: number | null;
  now: number | null;
}

export class DriftCheck {
  private cursor = 0;

  constructor(
    private readonly api: PlacementApi,
    private readonly perCheck = DRIFT_TREES_PER_CHECK,
  ) {}

  /** Lists the next `perCheck` trees (in root order) and returns what moved. */
  async check(trees: readonly DriftTree[]): Promise<Drift[]> {
    if (trees.length === 0) return [];
    const sorted = [...trees].sort((a, b) => a.root.localeCompare(b.root));
    const n = Math.min(this.perCheck, sorted.length);
    const start = this.cursor % sorted.length;
    const out: Drift[] = [];
    for (let i = 0; i < n; i++) {
      const tree = sorted[(start + i) % sorted.length]!;
      const listed = new Map(
        (await this.api.providers({ in_tree: tree.root })).map((p) => [p.name, p.generation]),
      );
      for (const [name, was] of tree.known) {
        const now = listed.get(name) ?? null;
        if (now !== was) out.push({ name, was, now });
      }
    }
    this.cursor = (start + n) % sorted.length;
    return out;
  }
}
