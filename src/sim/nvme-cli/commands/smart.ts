/**
 * `smart-log`: the SMART / Health log (log page 02h) as nvme-cli 2.3 prints it
 * with `-o json` (`json_smart_log` in nvme-print.c@v2.3): one unwrapped
 * object, int32 numbers for the one-byte and 32-bit fields, and every 128-bit
 * counter a string from `uint128_t_to_string()` (grouped with the locale's
 * thousands separator).
 *
 * The counters live in the state file (`smart`, on the subsystem's holder:
 * one set per subsystem where real controllers each keep their own) and move
 * with writes to the media, whoever made them: the simulator cannot see who
 * wrote a file, so each look compares every media file's mtime with the one
 * it saw at the previous look, and counts a file that changed as written
 * whole, in 128 KiB write commands (an upper bound, never less than what was
 * written). The first look at a file records it without counting: what a
 * drive counted before Berth first asked is its history (`smart` in the
 * spec). A test simulates a tenant's writes by writing the files
 * (plantTenantData), a firmware reset or another drive by changing `smart`
 * (setSmartCounters).
 */
import { statSync } from 'node:fs';
import {
  applyFault,
  type CliEnv,
  type CliResult,
  isDevice,
  Out,
  onController,
  openDevice,
  parseOrFail,
} from '../context.js';
import { jsonPrint, uint128String } from '../json-print.js';
import { mediaMtimes } from '../sanitize-engine.js';
import { NEW_SMART, type SimControllerState, type SimSmartState } from '../state.js';
import { NAMESPACE_ID, OUTPUT_FORMAT, outputFormat } from './identify.js';

/** One Data Unit: 1,000 units of 512 bytes. */
const DATA_UNIT = 512_000n;
/** The size of one write command the simulator counts for a changed file. */
const WRITE_COMMAND_BYTES = 128n * 1024n;

const ceilDiv = (a: bigint, b: bigint) => (a + b - 1n) / b;

/**
 * The counters now: those of the state, plus the writes each media file shows
 * since the previous look (see the module comment). Returns whether the state
 * changed.
 */
export function lookAtCounters(ctrl: SimControllerState): boolean {
  const smart: SimSmartState = ctrl.smart ?? { ...NEW_SMART };
  const seen = { ...(smart.seen ?? {}) };
  let units = BigInt(smart.dataUnitsWritten);
  let commands = BigInt(smart.hostWriteCommands);
  for (const [file, mtime] of Object.entries(mediaMtimes(ctrl))) {
    const before = seen[file];
    if (before !== undefined && before !== mtime) {
      const size = BigInt(statSync(file).size);
      units += ceilDiv(size, DATA_UNIT);
      commands += ceilDiv(size, WRITE_COMMAND_BYTES);
    }
    seen[file] = mtime;
  }
  const next: SimSmartState = {
    ...smart,
    dataUnitsWritten: units.toString(),
    hostWriteCommands: commands.toString(),
    seen,
  };
  const changed = JSON.stringify(next) !== JSON.stringify(ctrl.smart);
  ctrl.smart = next;
  return changed;
}

export async function smartLog(argv: string[], env: CliEnv): Promise<CliResult> {
  const o = new Out();
  const p = parseOrFail(o, 'smart-log', argv, [
    NAMESPACE_ID,
    OUTPUT_FORMAT,
    { long: 'raw-binary', short: 'b', kind: 'flag' },
    { long: 'human-readable', short: 'H', kind: 'flag' },
  ]);
  if ('result' in p) return p.result;
  const dev = openDevice(o, 'smart-log', p.args, env);
  if (!isDevice(dev)) return dev;
  const fmt = outputFormat(p.args.opts.get('output-format'));
  if (fmt === undefined) return o.done(1);
  const outcome = await onController<CliResult | SimSmartState>(env, dev, (ctrl) => {
    const fault = applyFault(o, 'smart-log', ctrl);
    if (fault && fault !== 'noop') return { changed: false, result: fault };
    const changed = lookAtCounters(ctrl);
    return { changed, result: ctrl.smart as SimSmartState };
  });
  if ('code' in outcome) return outcome;
  if (fmt !== 'json' || p.args.opts.get('raw-binary') === true) {
    o.err('nvme-sim: smart-log is simulated with -o json only\n');
    return o.done(1);
  }
  const s = outcome;
  const u128 = (v: string) => uint128String(BigInt(v), env.env);
  const critical: number = 0;
  o.out(
    jsonPrint({
      critical_warning:
        p.args.opts.get('human-readable') === true
          ? {
              value: 0,
              available_spare: 0,
              temp_threshold: 0,
              reliability_degraded: 0,
              ro: 0,
              vmbu_failed: 0,
              pmr_ro: 0,
            }
          : critical,
      // 313 K (40 °C) on the composite sensor and the first; QEMU reports 323 K.
      temperature: 313,
      avail_spare: 100,
      spare_thresh: 10,
      percent_used: 0,
      endurance_grp_critical_warning_summary: 0,
      data_units_read: u128(s.dataUnitsRead),
      data_units_written: u128(s.dataUnitsWritten),
      host_read_commands: u128(s.hostReadCommands),
      host_write_commands: u128(s.hostWriteCommands),
      controller_busy_time: u128('0'),
      power_cycles: u128(s.powerCycles),
      power_on_hours: u128(s.powerOnHours),
      unsafe_shutdowns: u128(s.unsafeShutdowns),
      media_errors: u128('0'),
      num_err_log_entries: u128('0'),
      warning_temp_time: 0,
      critical_comp_time: 0,
      temperature_sensor_1: 313,
      thm_temp1_trans_count: 0,
      thm_temp2_trans_count: 0,
      thm_temp1_total_time: 0,
      thm_temp2_total_time: 0,
    }),
  );
  return o.done(0);
}
