/**
 * `berth up`: a scheduler and the agents of this machine in one process, on
 * simulated hosts unless pointed at a real sysfs. The quick start and the demo
 * run on it; nothing is shared with a real deployment except the code.
 */
import { mkdir, rm } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type { Logger } from 'pino';
import { createLogger } from '../../logging.js';
import { Agent } from '../../server/agent/agent.js';
import { parseAgentConfig } from '../../server/agent/config.js';
import { type AuthOptions, generateStaticToken } from '../../server/grpc/auth.js';
import { Scheduler } from '../../server/scheduler/scheduler.js';
import { buildSimHost, demoHostDefinition, type SimHost } from '../../sim/host.js';

export interface UpOptions {
  listen: string;
  stateDir: string;
  /** A real (or prepared) sysfs tree: one agent on it with `agentConfig`, no simulated hosts. */
  sysfsRoot?: string;
  /** Agent config file for the real-sysfs mode. */
  agentConfig?: Record<string, unknown>;
  /** Number of simulated hosts (2: migrations need a destination). */
  hosts?: number;
  logger?: Logger;
}

export interface Up {
  /** The admin bearer token berth up generated (written to the client config by the CLI). */
  adminToken: string;
  scheduler: Scheduler;
  agents: Agent[];
  sims: SimHost[];
  endpoint: string;
  stateDir: string;
  stop(): Promise<void>;
}

async function followed(
  scheduler: Scheduler,
  host: string,
  devices: number,
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const h = await scheduler.store.getHost(host).catch(() => null);
    if (h?.connected && h.deviceCount >= devices) return;
    if (Date.now() > deadline) {
      throw new Error(`the scheduler did not receive ${host}'s inventory within ${timeoutMs / 1000} s`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

export async function startUp(options: UpOptions): Promise<Up> {
  const logger = options.logger ?? createLogger({ level: process.env.BERTH_LOG_LEVEL ?? 'warn' });
  const stateDir = resolve(options.stateDir);
  await mkdir(stateDir, { recursive: true });
  // Every RPC stays authenticated: fresh tokens at every start, one per role.
  const adminToken = generateStaticToken();
  const agentToken = generateStaticToken();
  const schedulerToken = generateStaticToken();
  const agentAuth: AuthOptions = {
    mode: 'token',
    staticTokens: [
      { token: schedulerToken, roles: ['scheduler'], subject: 'berth-up-scheduler' },
      { token: adminToken, roles: ['admin'], subject: 'berth-up-admin' },
    ],
  };
  const scheduler = await Scheduler.start({
    auth: {
      mode: 'token',
      staticTokens: [
        { token: adminToken, roles: ['admin'], subject: 'berth-up-admin' },
        { token: agentToken, roles: ['agent'], subject: 'berth-up-agents' },
      ],
    },
    agentToken: schedulerToken,
    db: join(stateDir, 'scheduler.db'),
    listen: options.listen,
    logger,
    heartbeatSeconds: 5,
  });
  const agents: Agent[] = [];
  const sims: SimHost[] = [];
  try {
    if (options.sysfsRoot) {
      const config = parseAgentConfig(
        {
          state_dir: join(stateDir, 'agent'),
          ...options.agentConfig,
          sysfs_root: options.sysfsRoot,
          listen: '127.0.0.1:0',
          scheduler: scheduler.address,
        },
        {},
        process.cwd(),
      );
      agents.push(await Agent.start({ config, logger, auth: agentAuth, schedulerToken: agentToken }));
    } else {
      const n = options.hosts ?? 2;
      for (let i = 1; i <= n; i++) {
        const def = demoHostDefinition(`sim-host-${i}`, 0x3b + (i - 1) * 0x20);
        // The simulated hardware is rebuilt at every start (fresh media); the
        // scheduler's database and the agents' journals persist beside it.
        const simRoot = join(stateDir, 'sim', def.host);
        await rm(simRoot, { recursive: true, force: true });
        const sim = await buildSimHost(simRoot, def);
        sims.push(sim);
        const config = parseAgentConfig(
          {
            ...sim.agentConfig,
            state_dir: join(stateDir, 'agents', def.host),
            scheduler: scheduler.address,
            register_interval: 5,
          },
          {},
          process.cwd(),
        );
        agents.push(
          await Agent.start({
            config,
            logger,
            bootIdFile: sim.bootIdFile,
            auth: agentAuth,
            schedulerToken: agentToken,
          }),
        );
      }
    }
    await Promise.all(agents.map((a) => a.registered));
    // Registered is not followed: wait until the scheduler holds every host's
    // inventory, so "Berth is up" means the devices are there to be bound.
    await Promise.all(agents.map((a) => followed(scheduler, a.config.host, a.inventory.list().length)));
  } catch (err) {
    for (const a of agents) await a.stop();
    await scheduler.stop();
    throw err;
  }
  return {
    adminToken,
    scheduler,
    agents,
    sims,
    endpoint: scheduler.address,
    stateDir,
    async stop() {
      for (const a of agents) await a.stop();
      await scheduler.stop();
    },
  };
}
