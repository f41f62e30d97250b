/**
 * What a demo changed, written down before each change (the DemoLedger, kept
 * in the state directory by `berth demo`), and the undo that empties it: at
 * the end of every run, also an interrupted one, and before the next run when
 * a demo was killed before it could undo.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Device } from '../../gen/berth/scheduler/v1/device.js';
import { BerthClientError, type SchedulerClient } from '../sdk.js';
import { followCleanup } from './cleanup-progress.js';
import { deviceName, deviceView } from './views.js';

const state = (d: Device) => deviceView(d).device_state;

/** Sets (or clears, with null) a fault on a simulated host's controller. */
export type FaultInjector = (
  host: string,
  controller: string,
  command: string,
  fault: { mode: 'sanitize-fails' } | null,
) => Promise<void>;

/** What a demo changed and must undo (device uuids, names), written down before each change. */
export interface DemoLedger {
  run: string;
  faults: { host: string; controller: string; command: string }[];
  instances: string[];
  arqs: string[];
  profiles: string[];
  /** One-time-use devices the demo burned: released at the end. */
  burned: string[];
  /** Devices the demo's fault put in error: cleaned again at the end. */
  dirtied: string[];
}

export const emptyLedger = (run: string): DemoLedger => ({
  run,
  faults: [],
  instances: [],
  arqs: [],
  profiles: [],
  burned: [],
  dirtied: [],
});

/** Is the ledger empty: nothing left to undo. */
export const ledgerDone = (l: DemoLedger) =>
  l.faults.length +
    l.instances.length +
    l.arqs.length +
    l.profiles.length +
    l.burned.length +
    l.dirtied.length ===
  0;

/**
 * Undoes what `ledger` says a demo changed, emptying it as it goes; says
 * what it does unless there was nothing to do. A drive its fault put in
 * error is cleaned again: followed to its end with `wait`, else only
 * started (it finishes on the host).
 */
export async function undoDemo(
  client: SchedulerClient,
  injectFault: FaultInjector | undefined,
  ledger: DemoLedger,
  say: (line: string) => void,
  options: { wait: boolean },
): Promise<void> {
  // ARQs, instances and profiles are removed silently (every run does); a fault, a burn or a
  // device in error is left only by a run that failed or was stopped, so those are told.
  const tell = say;
  for (const f of [...ledger.faults]) {
    await injectFault?.(f.host, f.controller, f.command, null).then(
      () => {
        tell(`   Undo: cleared the injected ${f.command} fault of ${f.host}'s ${f.controller}.`);
        ledger.faults.splice(ledger.faults.indexOf(f), 1);
      },
      (err: Error) =>
        say(`   Undo: could not clear the fault of ${f.host}'s ${f.controller}: ${err.message}`),
    );
  }
  for (const i of [...ledger.instances]) {
    await client.arqs.deleteAcceleratorRequests({ uuids: [], instanceUuid: i }).then(
      () => ledger.instances.splice(ledger.instances.indexOf(i), 1),
      () => undefined,
    );
  }
  if (ledger.arqs.length > 0) {
    // ARQs created but never bound have no instance; a uuid already deleted is not an error.
    await client.arqs.deleteAcceleratorRequests({ uuids: ledger.arqs, instanceUuid: '' }).then(
      () => ledger.arqs.splice(0),
      () => undefined,
    );
  }
  for (const uuid of [...ledger.burned]) {
    const d = await client.devices.getDevice({ device: { ref: { $case: 'uuid', value: uuid } } }).then(
      (r) => r.device,
      () => undefined,
    );
    if (d?.burned && !d.arqUuid) {
      await client.devices.releaseDevice({ device: { ref: { $case: 'uuid', value: uuid } } }).then(
        () => tell(`   Undo: released ${deviceName(d)}, which the demo burned.`),
        (err: Error) => say(`   Undo: could not release ${deviceName(d)}: ${err.message}`),
      );
    }
    ledger.burned.splice(ledger.burned.indexOf(uuid), 1);
  }
  for (const uuid of [...ledger.dirtied]) {
    const ref = { ref: { $case: 'uuid' as const, value: uuid } };
    let d = await client.devices.getDevice({ device: ref }).then(
      (r) => r.device,
      () => undefined,
    );
    // The cleanup the fault made fail may still run (cleared in time, the fault lets it succeed).
    const until = Date.now() + (options.wait ? 60_000 : 10_000);
    while (d && ['pending_cleaning', 'cleaning'].includes(state(d)) && Date.now() < until) {
      await sleep(200);
      d = (await client.devices.getDevice({ device: ref }).catch(() => undefined))?.device ?? d;
    }
    if (d && ['pending_cleaning', 'cleaning'].includes(state(d))) {
      // Left in the ledger: the next demo looks at it again first.
      say(
        `   Undo: ${deviceName(d)} is still being cleaned (the demo's fault is cleared); the next berth demo checks it, or follow it with: berth device watch-cleanup ${deviceName(d)}`,
      );
      continue;
    }
    if (d && state(d) === 'error') {
      try {
        const job = await client.devices.cleanDevice({ device: ref, requestId: `demo-${ledger.run}-undo` });
        if (options.wait) {
          const out = await followCleanup(client, ref, job.jobId, 'json', {
            write: () => {},
            waiting: () => {},
          });
          say(
            out.succeeded
              ? `   Undo: cleaned ${deviceName(d)} again (the demo's fault had put it in error); it is available.`
              : `   Undo: cleaning ${deviceName(d)} again failed: ${out.reason}; clean it with: berth device clean ${deviceName(d)} --wait`,
          );
        } else {
          say(
            `   Undo: cleaning ${deviceName(d)} again (the demo's fault had put it in error); follow it with: berth device watch-cleanup ${deviceName(d)}`,
          );
        }
      } catch (err) {
        say(`   Undo: could not clean ${deviceName(d)} again: ${(err as Error).message}`);
      }
    }
    ledger.dirtied.splice(ledger.dirtied.indexOf(uuid), 1);
  }
  for (const p of [...ledger.profiles]) {
    await client.profiles.deleteProfile({ name: p }).then(
      () => ledger.profiles.splice(ledger.profiles.indexOf(p), 1),
      (err: unknown) => {
        // Already gone (a profile deleted earlier, or never created): nothing to undo.
        if (err instanceof BerthClientError && err.codeName === 'NOT_FOUND') {
          ledger.profiles.splice(ledger.profiles.indexOf(p), 1);
        }
      },
    );
  }
}
