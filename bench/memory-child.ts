/**
 * One memory measurement in its own process (run by bench/memory.ts with
 * --expose-gc): `bare` (an idle Node process with the same imports),
 * `scheduler <dir> <hosts>` (a scheduler serving a store of hosts × 8
 * devices), `agent <config file>` (an agent that discovered and serves a
 * large simulated host, configured by the file). Prints one JSON line: RSS
 * after a full GC and the peak (VmHWM from /proc/self/status), in MiB.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';

/**
 * Berth's modules come from the build (dist/, $BERTH_DIST), loaded one file at
 * a time as the installed package runs them — not from this bundle.
 */
const fromDist = <T>(path: string): Promise<T> => {
  const dist = process.env.BERTH_DIST;
  if (!dist) throw new Error('BERTH_DIST (the dist/ directory) is not set');
  return import(pathToFileURL(join(dist, path)).href) as Promise<T>;
};

const MiB = 1024 * 1024;

function vmHwmMiB(): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'));
  return m ? Number(m[1]) / 1024 : Number.NaN;
}

async function settle(): Promise<number> {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run with --expose-gc');
  for (let i = 0; i < 3; i++) {
    gc();
    await new Promise((r) => setTimeout(r, 50));
  }
  return process.memoryUsage().rss / MiB;
}

async function main() {
  const [role, a, b] = process.argv.slice(2);
  // Role modules load lazily (the bundle is split), so each process holds only
  // what that component needs, as it would in production.
  const { pino } = await import('pino');
  const silent = pino({ level: 'silent' });
  if (role === 'bare') {
    process.stdout.write(`${JSON.stringify({ rss: await settle(), peak: vmHwmMiB() })}\n`);
    return;
  }
  if (role === 'scheduler') {
    const { dbFile, loadStore } = await import('./bind-harness.js');
    const { Scheduler } = await fromDist<typeof import('../src/server/scheduler/scheduler.js')>(
      'server/scheduler/scheduler.js',
    );
    const { SchedulerClient } = await fromDist<typeof import('../src/client/sdk.js')>('client/sdk.js');
    const hosts = Number(b);
    const { store } = await loadStore(dbFile(a!), hosts);
    const scheduler = await Scheduler.start({
      store,
      listen: '127.0.0.1:0',
      logger: silent,
      auth: { mode: 'none' },
    });
    const client = new SchedulerClient({ endpoint: scheduler.address, timeoutMs: 60_000 });
    try {
      // Serve something: one full page of devices, and the host list.
      const page = await client.devices.listDevices({
        filter: { host: '', type: 0, state: 0, resourceClass: '' },
        pageSize: 5000,
        pageToken: '',
      });
      const hostList = await client.hosts.listHosts({});
      const rss = await settle();
      process.stdout.write(
        `${JSON.stringify({ rss, peak: vmHwmMiB(), devices: hosts * 8, listed: page.devices.length, hosts: hostList.hosts.length })}\n`,
      );
    } finally {
      client.close();
      await scheduler.stop();
    }
    return;
  }
  if (role === 'agent') {
    // As `berth agent` does before it loads the agent (src/client/cli/main.ts).
    const { keepYoungGenerationSmall } = await fromDist<typeof import('../src/server/agent/heap-tuning.js')>(
      'server/agent/heap-tuning.js',
    );
    keepYoungGenerationSmall();
    const { Agent } = await fromDist<typeof import('../src/server/agent/agent.js')>('server/agent/agent.js');
    const { loadAgentConfig } =
      await fromDist<typeof import('../src/server/agent/config.js')>('server/agent/config.js');
    const config = await loadAgentConfig(a!, { insecureNoAuth: true });
    const agent = await Agent.start({ config, logger: silent });
    try {
      // The client lives in the parent (bench/memory.ts): the agent's RSS is
      // measured after it served ListDevices, without a client's decoded copy.
      process.stdout.write(
        `${JSON.stringify({ address: agent.address, devices: agent.inventory.list().length })}\n`,
      );
      const lines = createInterface({ input: process.stdin });
      for await (const _ of lines) break;
      const rss = await settle();
      process.stdout.write(
        `${JSON.stringify({ rss, peak: vmHwmMiB(), devices: agent.inventory.list().length })}\n`,
      );
    } finally {
      await agent.stop();
    }
    return;
  }
  throw new Error(`unknown role ${role}`);
}

await main();
