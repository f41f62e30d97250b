/**
 * `berth demo [--endpoint ADDR]`: the narrated lifecycle (demo.ts) against a
 * running `berth up` — the endpoint from the flags or the client
 * configuration — or, when nothing answers there, against its own `berth up`
 * started in this process on a free loopback port in a temporary directory
 * (removed afterwards). Exit 0 only when every step did what it should.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Command } from 'commander';
import { createLogger } from '../../logging.js';
import { withStateLock } from '../../sim/nvme-cli/state.js';
import { type ResolvedClient, resolveClient } from '../client-config.js';
import { BerthClientError, SchedulerClient } from '../sdk.js';
import { startUp, type Up } from '../up/berth-up.js';
import { EXIT_CODE, hintFor, reportError } from './client-common.js';
import { type FaultInjector, runDemo } from './demo.js';

/** Whether a scheduler answers at `endpoint` (a quick ListHosts, no retries). */
async function answers(endpoint: string, token: string | undefined): Promise<boolean> {
  const probe = new SchedulerClient({ endpoint, token, timeoutMs: 2_000, retries: 1 });
  try {
    await probe.hosts.listHosts({});
    return true;
  } catch (err) {
    if (
      err instanceof BerthClientError &&
      (err.codeName === 'UNAVAILABLE' || err.codeName === 'DEADLINE_EXCEEDED')
    ) {
      return false;
    }
    throw err;
  } finally {
    probe.close();
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

export function registerDemoCommands(program: Command): void {
  program
    .command('demo')
    .description(
      'run the whole device lifecycle, narrated: against a running `berth up` (the client config), or its own if none answers',
    )
    .option(
      '--endpoint <addr>',
      'scheduler of a running `berth up` (default: $BERTH_ENDPOINT, the client config)',
    )
    .option('--token <token>', 'bearer token (default: $BERTH_TOKEN, the client config)')
    .action(async (o: { endpoint?: string; token?: string }) => {
      let up: Up | undefined;
      let tmp: string | undefined;
      let client: SchedulerClient | undefined;
      let resolved: ResolvedClient | undefined;
      try {
        resolved = await resolveClient({ endpoint: o.endpoint, token: o.token });
        let endpoint = resolved.endpoint;
        let injectFault: FaultInjector | undefined;
        let noFaultReason: string | undefined;
        if (await answers(endpoint, resolved.token)) {
          console.log(`Using the Berth scheduler at ${endpoint}.`);
          if (resolved.stateDir) injectFault = stateDirInjector(resolved.stateDir);
          else noFaultReason = 'the client configuration has no state_dir (is this a `berth up`?)';
        } else if (o.endpoint) {
          console.error(`berth: UNAVAILABLE: no Berth scheduler answers at ${endpoint}`);
          process.exitCode = EXIT_CODE.unavailable;
          return;
        } else {
          console.log(
            `No Berth scheduler answers at ${endpoint}; starting one here with two simulated hosts.`,
          );
          tmp = await mkdtemp(join(tmpdir(), 'berth-demo-'));
          const started = await startUp({
            listen: '127.0.0.1:0',
            stateDir: tmp,
            logger: createLogger({ level: process.env.BERTH_LOG_LEVEL ?? 'error' }),
          });
          up = started;
          endpoint = started.endpoint;
          console.log(`Berth is up at ${endpoint} (state in ${tmp}).`);
          injectFault = async (host, controller, command, fault) => {
            const sim = started.sims.find((s) => s.definition.host === host);
            if (!sim) throw new Error(`no simulated host ${host}`);
            await sim.setFault(controller, command, fault);
          };
        }
        client = new SchedulerClient({ endpoint, token: up ? up.adminToken : resolved.token });
        const ok = await runDemo({ client, injectFault, noFaultReason });
        process.exitCode = ok ? EXIT_CODE.ok : EXIT_CODE.failed;
      } catch (err) {
        const hint = err instanceof BerthClientError && resolved ? await hintFor(err, resolved) : undefined;
        process.exitCode = reportError(err, hint);
      } finally {
        client?.close();
        await up?.stop();
        if (tmp) await rm(tmp, { recursive: true, force: true });
      }
    });
}
