/**
 * A read-write unit as the use cases run it: the use case's own work, then
 * what every unit owes before it ends — settling each media whose devices it
 * wrote (./media.ts), so no use case can leave a media half-followed — in the
 * same transaction; and once it committed, the word that something changed.
 */

import type { HostName } from '../../../identifiers.js';
import { type Tx, Tx as UnitTx, type UseCaseDeps } from './context.js';
import { settleTouchedMedia } from './media.js';
import { upgrading } from './upgrade.js';

/** Run `fn` as one read-write unit; resolves once it committed (and the change listeners heard of it). */
export async function write<T>(deps: UseCaseDeps, fn: (tx: Tx) => Promise<T>): Promise<T> {
  let queued: HostName[] = [];
  const out = await deps.db.run(async (uow) => {
    // Its records are up to date (./upgrade.ts).
    const tx = new UnitTx(upgrading(uow), deps.clock);
    const result = await fn(tx);
    await settleTouchedMedia(tx);
    // A backend may run the unit again: only the attempt that committed counts.
    queued = [...tx.queuedOn];
    return result;
  });
  deps.committed?.({ cleanupsOn: queued });
  return out;
}
