/**
 * A media's SMART write counters as the ledger keeps them (decision 64): read
 * back from the journal, and compared with what a discovery reads now.
 */
import type { MediaCondition, WriteCounters } from '../../plugins/types.js';

/** Counters kept as JSON: anything that is not what was written reads as none. */
export function countersFromText(text: string | undefined): WriteCounters | undefined {
  if (!text) return undefined;
  try {
    const c = JSON.parse(text) as WriteCounters;
    const digits = (v: unknown) => typeof v === 'string' && /^\d+$/.test(v);
    return typeof c.controller === 'string' &&
      Number.isInteger(c.cntlid) &&
      Number.isFinite(c.at) &&
      [c.dataUnitsWritten, c.hostWriteCommands, c.powerCycles, c.powerOnHours].every(digits)
      ? c
      : undefined;
  } catch {
    return undefined;
  }
}

const COUNTER_NAMES = [
  ['dataUnitsWritten', 'Data Units Written'],
  ['hostWriteCommands', 'Host Write Commands'],
  ['powerCycles', 'Power Cycles'],
  ['powerOnHours', 'Power On Hours'],
] as const;

/**
 * Why counters read now say a clean media may hold data it did not hold at
 * its record (null when they do not): Data Units Written or Host Write
 * Commands grew (someone wrote to it), or any counter went down (a firmware
 * reset, a wrapped counter, or another drive with a cloned identity: its
 * history is unknown). Power Cycles and Power On Hours growing are not dirt.
 */
export function writeCountersChange(recorded: WriteCounters, now: WriteCounters): string | null {
  const through = `read through ${now.controller} (cntlid ${now.cntlid})`;
  const lower = COUNTER_NAMES.filter(([f]) => BigInt(now[f]) < BigInt(recorded[f]));
  if (lower.length > 0) {
    const what = lower.map(([f, name]) => `${name} ${recorded[f]} → ${now[f]}`).join(', ');
    return `its write counters went down since it was recorded clean (${what}, ${through}): a counter reset by firmware, a wrapped counter or another drive with the same identity; its history is unknown`;
  }
  const grew = COUNTER_NAMES.slice(0, 2).filter(([f]) => BigInt(now[f]) > BigInt(recorded[f]));
  if (grew.length === 0) return null;
  const what = grew.map(([f, name]) => `${name} ${recorded[f]} → ${now[f]}`).join(', ');
  return `it was written since it was recorded clean (${what}, ${through})`;
}

/** The counters as a record's optional field. */
export const withCounters = (c: WriteCounters | undefined) => (c ? { writeCounters: c } : {});

/** Whether a record's condition is one the write counters are judged by. */
export const judgedByCounters = (c: MediaCondition) => c === 'clean' || c === 'declared_clean';
