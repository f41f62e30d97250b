/**
 * The write counters an NVMe controller keeps (SMART / Health log, log page
 * 02h: Data Units Written, Host Write Commands, Power Cycles, Power On Hours),
 * read with `nvme smart-log <ctrl> -o json` (decision 64,
 * docs/media-identity.md). Discovery reads them once per controller per pass,
 * beside `id-ctrl`; the agent's census reads them right after every cleanup
 * it accepts. The agent, not the driver, judges them against its journal.
 */
import type { WriteCounters } from '../types.js';
import { parseSmartLog } from './nvme-output.js';

/**
 * Runs `smart-log` on the controller's device through `run` (which throws on
 * any failure, with the NVMe status) and returns the counters, stamped with
 * the controller they are the counters of.
 */
export async function readWriteCounters(
  run: (args: string[]) => Promise<string>,
  ctrlDev: string,
  controller: { name: string; cntlid: number },
  now = Date.now(),
): Promise<WriteCounters> {
  const log = parseSmartLog(await run(['smart-log', ctrlDev, '-o', 'json']));
  return {
    controller: controller.name,
    cntlid: controller.cntlid,
    dataUnitsWritten: log.dataUnitsWritten.toString(),
    hostWriteCommands: log.hostWriteCommands.toString(),
    powerCycles: log.powerCycles.toString(),
    powerOnHours: log.powerOnHours.toString(),
    at: now,
  };
}
