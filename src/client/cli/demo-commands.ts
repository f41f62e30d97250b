/**
 * `berth demo [--endpoint ADDR]`: the narrated lifecycle (demo.ts) against a
 * running `berth up` — the endpoint from the flags or the client
 * configuration — or, when nothing answers there, against its own `berth up`
 * started in this process on a free loopback port in a temporary directory
 * (removed afterwards). Exit 0 only when every step did what it should.
 */
import { mkdtemp, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Command } from 'commander';
import { createLogger } from '../../logging.js';
import { InstanceLock } from '../../server/instance-lock.js';
import { withStateLock } from '../../sim/nvme-cli/state.js';
import type { ClientTls } from '../../transport/channel.js';
import type { ResolvedClient } from '../client-config.js';
import { BerthClientError, SchedulerClient } from '../sdk.js';
import { startUp, type Up } from '../up/berth-up.js';
import { EXIT_CODE } from './command-errors.js';
import { type ClientFlags, connect, connectionOptions, reportClientError } from './connection.js';
import { runDemo } from './demo.js';
import { type DemoLedger, type FaultInjector, ledgerDone, undoDemo } from './demo-ledger.js';
import { interruptible, SIGNAL_EXIT } from './interrupt.js';

/** Whether a scheduler answers (a quick ListHosts, no retries). */
async function answers(probe: SchedulerClient): Promise<boolean> {
  try {
    await probe.hosts.listHosts({ pageSize: 1, pageToken: '' }, { timeoutMs: 2_000 });
    return true;
  } catch (err) {
    if (
      err instanceof BerthClientError &&
      (err.codeName === 'UNAVAILABLE' || err.codeName === 'DEADLINE_EXCEEDED')
    ) {
      return false;
    }
    throw err;
  }
}

/** Faults through the nvme-sim state file of an external `berth up` (as `berth sim fault` does). */
function stateDirInjector(stateDir: string): FaultInjector {
  return async (host, controller, command, fault) => {
    await withStateLock(join(stateDir, 'sim', host, 'nvme-sim.json'), (state) => {
      const c = state.controllers.find((x) => x.name === controller);
      if (!c) throw new Error(`no simulated controller ${controller} on ${host}`);
      const faults = { ...(c.faults ?? {}) };
      if (fault) faults[command] = fault;
      else delete faults[command];
      c.faults = faults;
      return { changed: true, result: undefined };
    });
  };
}

/**
 * The demo's ledger in a `berth up`'s state directory: what a running (or
 * killed) demo changed and has not undone yet.
 */
function ledgerFile(stateDir: string) {
  const path = join(stateDir, 'demo-ledger.json');
  return {
    path,
    async read(): Promise<DemoLedger | null> {
      try {
        return JSON.parse(await readFile(path, 'utf8')) as DemoLedger;
      } catch {
        return null;
      }
    },
    async save(ledger: DemoLedger): Promise<void> {
      if (ledgerDone(ledger)) {
        await rm(path, { force: true });
        return;
      }
      await writeFile(`${path}.tmp`, JSON.stringify(ledger), { mode: 0o600 });
      await rename(`${path}.tmp`, path);
    },
  };
}

export function registerDemoCommands(program: Command): void {
  connectionOptions(
    program
      .command('demo')
      .description(
        'run the whole device lifecycle, narrated: against a running `berth up` (the client config), or its own if none answers; one demo at a time per berth up',
      ),
  ).action(async (o: ClientFlags) => {
    let up: Up | undefined;
    let tmp: string | undefined;
    let client: SchedulerClient | undefined;
    let resolved: ResolvedClient | undefined;
    let tls: ClientTls | undefined;
    let lock: InstanceLock | undefined;
    try {
      ({ client, resolved, tls } = await connect(o, { retries: 1 }));
      let injectFault: FaultInjector | undefined;
      let noFaultReason: string | undefined;
      let ledger: ReturnType<typeof ledgerFile> | undefined;
      if (await answers(client)) {
        console.log(`Using the Berth scheduler at ${resolved.endpoint}.`);
        if (resolved.stateDir) {
          // One demo at a time on a berth up: two would pick the same devices and faults.
          lock = InstanceLock.acquire(join(resolved.stateDir, 'demo'), {
            what: `the demo of the berth up in ${resolved.stateDir}`,
            kind: 'berth demo',
            hint: 'or wait until it is done',
          });
          injectFault = stateDirInjector(resolved.stateDir);
          ledger = ledgerFile(resolved.stateDir);
          const left = await ledger.read();
          if (left && !ledgerDone(left)) {
            console.log(
              `A demo that did not finish (run ${left.run}) left changes behind; undoing them first.`,
            );
            await undoDemo(client, injectFault, left, (line) => console.log(line), { wait: true });
            await ledger.save(left);
          }
        } else {
          noFaultReason = 'the client configuration has no state_dir (is this a `berth up`?)';
        }
      } else if (resolved.endpointSource === 'flag') {
        console.error(`berth: UNAVAILABLE: no Berth scheduler answers at ${resolved.endpoint}`);
        process.exitCode = EXIT_CODE.unavailable;
        return;
      } else {
        console.log(
          `No Berth scheduler answers at ${resolved.endpoint}; starting one here with two simulated hosts.`,
        );
        tmp = await mkdtemp(join(tmpdir(), 'berth-demo-'));
        const started = await startUp({
          listen: '127.0.0.1:0',
          stateDir: tmp,
          logger: createLogger({ level: process.env.BERTH_LOG_LEVEL ?? 'error' }),
        });
        up = started;
        console.log(`Berth is up at ${started.endpoint} (state in ${tmp}).`);
        injectFault = async (host, controller, command, fault) => {
          const sim = started.sims.find((s) => s.definition.host === host);
          if (!sim) throw new Error(`no simulated host ${host}`);
          await sim.setFault(controller, command, fault);
        };
        client.close();
        client = new SchedulerClient({ endpoint: started.endpoint, token: started.adminToken });
      }
      const demoClient = client;
      const outcome = await interruptible(
        async (interruption) => {
          const ok = await runDemo({
            client: demoClient,
            signal: interruption.signal,
            injectFault,
            noFaultReason,
            ...(ledger ? { saveLedger: (l: DemoLedger) => ledger.save(l) } : {}),
          });
          return { ok, received: interruption.received };
        },
        () =>
          console.error(
            'berth: interrupted: undoing what the demo did (press Ctrl-C again to leave it for the next demo to undo)',
          ),
      );
      process.exitCode = outcome.received
        ? SIGNAL_EXIT[outcome.received]
        : outcome.ok
          ? EXIT_CODE.ok
          : EXIT_CODE.failed;
    } catch (err) {
      process.exitCode = await reportClientError(err, resolved, tls);
    } finally {
      client?.close();
      await up?.stop();
      lock?.release();
      if (tmp) await rm(tmp, { recursive: true, force: true });
    }
  });
}
