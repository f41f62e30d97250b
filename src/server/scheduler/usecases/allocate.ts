/** Allocation inside a unit of work: one host's candidates handed to a pick function. */

import { candidateQuery, type PickFn } from '../domain/allocation.js';
import type { RequestGroup } from '../domain/profile.js';
import type { ReadUnit } from './unit-of-work.js';

/**
 * Pick among the host's available devices of the group's class or
 * vendor/product. The caller has locked the host (`FOR_UPDATE`): allocations
 * on one host are serialised, since a pick also reads the host's busy IOMMU
 * groups. The picked device is written under the generation check, so the
 * candidates need no row locks.
 */
export async function pickOnHost(r: ReadUnit, host: string, group: RequestGroup, pick: PickFn) {
  // Asked for together: one round trip where the backend can (decision 95).
  const [candidates, busy] = await Promise.all([
    r.allocationCandidates(candidateQuery(host, group)),
    r.busyIommuGroups(host),
  ]);
  return { result: pick(group, candidates, { busyIommuGroups: new Set(busy) }), candidates };
}
