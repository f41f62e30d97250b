/**
 * `berth up`: a scheduler and the agents of this machine in one process, on
 * simulated hosts unless pointed at a real sysfs. The quick start and the demo
 * run on it; nothing is shared with a real deployment except the code.
 *
 * What the state directory keeps across restarts: the scheduler's database,
 * the agents' journals, the credentials (`tokens.yaml`, `agent-<host>.token`, the scheduler's signing key) and the
 * agents' configurations as they run (`sim/<host>/agent.yaml`, rewritten at
 * every start with the simulated hardware, which is rebuilt fresh). One
 * `berth up` at a time per state directory: a second one refuses, naming the
 * first's pid and endpoint.
 */
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join, resolve } from 'node:path';
import type { Logger } from 'pino';
import { stringify as toYaml } from 'yaml';
import { ConfigError } from '../../errors.js';
import { parseHostName } from '../../identifiers.js';
import { createLogger } from '../../logging.js';
import { Agent } from '../../server/agent/agent.js';
import { loadAgentConfig, parseAgentConfig } from '../../server/agent/config.js';
import { InstanceLock } from '../../server/instance-lock.js';
import type { CyborgOptions } from '../../server/scheduler/cyborg/config.js';
import { type PlacementOptions, placementOptionsFromFlags } from '../../server/scheduler/placement/config.js';
import { Scheduler } from '../../server/scheduler/scheduler.js';
import { isPostgresUrl } from '../../server/scheduler/store/pg-store.js';
import { buildSimHost, demoHostDefinition, type SimHost } from '../../sim/host.js';
import { type LabPlacement, startLabPlacement } from './lab-openstack.js';
import { loadOrCreateUpTokens, type UpTokens } from './up-tokens.js';

export interface UpOptions {
  listen: string;
  stateDir: string;
  /** A real (or prepared) sysfs tree: one agent on it with `agentConfig`, no simulated hosts. */
  sysfsRoot?: string;
  /** Agent config file for the real-sysfs mode. */
  agentConfig?: Record<string, unknown>;
  /** Number of simulated hosts (2: migrations need a destination). */
  hosts?: number;
  /** Serve the scheduler's Prometheus /metrics on host:port. */
  metricsListen?: string;
  /** The scheduler's database: a postgres:// URL instead of the SQLite file in the state directory. */
  db?: string;
  /** Schedulers on that database (PostgreSQL only): the first on `listen`, the others on free ports. */
  replicas?: number;
  /** Report to OpenStack Placement (docs/operator-guide.md "Running with Nova and Placement"). */
  placement?: PlacementOptions;
  /**
   * The OpenStack side of a lab (`--openstack`, ./lab-openstack.ts): a Placement
   * started here (from these binaries, in `<state>/placement`) that the schedulers
   * report to, and the first scheduler serving the Cyborg API with `cyborg`.
   */
  openstack?: { placementBins: { api: string; manage: string }; cyborg: CyborgOptions };
  logger?: Logger;
}

export interface Up {
  /** The admin bearer token (kept in the state directory; written to the client config by the CLI). */
  adminToken: string;
  tokens: UpTokens;
  scheduler: Scheduler;
  /** Every scheduler (the first is `scheduler`); more than one with `replicas`. */
  schedulers: Scheduler[];
  agents: Agent[];
  sims: SimHost[];
  endpoint: string;
  /** host:port of the scheduler's /metrics, '' when not served. */
  metricsAddress: string;
  stateDir: string;
  /** With `openstack`: the lab Placement (its log) and the Cyborg API's v2 endpoint. */
  openstack: { placementUrl: string; placementLog: string; cyborgUrl: string } | null;
  stop(): Promise<void>;
}

async function followed(
  scheduler: Scheduler,
  host: string,
  devices: number,
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const name = parseHostName('host', host);
  for (;;) {
    const h = await scheduler.useCases.getHost(name).catch(() => null);
    if (h?.connected && h.deviceCount >= devices) return;
    if (Date.now() > deadline) {
      throw new Error(`the scheduler did not receive ${host}'s inventory within ${timeoutMs / 1000} s`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Writes the agent's configuration as it will run, and loads it back from the file. */
async function writeAgentConfig(path: string, doc: Record<string, unknown>) {
  await writeFile(
    path,
    `# Written by berth up at every start: the configuration this agent runs with.\n${toYaml(doc)}`,
  );
  return loadAgentConfig(path);
}

export async function startUp(options: UpOptions): Promise<Up> {
  const logger = options.logger ?? createLogger({ level: process.env.BERTH_LOG_LEVEL ?? 'warn' });
  const stateDir = resolve(options.stateDir);
  await mkdir(stateDir, { recursive: true });
  const lock = InstanceLock.acquire(join(stateDir, 'berth-up'), {
    what: `state directory ${stateDir}`,
    kind: 'berth up',
    hint: 'or use another --state-dir',
  });
  const replicas = options.replicas ?? 1;
  if (!Number.isInteger(replicas) || replicas < 1 || replicas > 9) {
    throw new ConfigError(
      `--replicas: ${JSON.stringify(options.replicas)} is not a number of schedulers from 1 to 9`,
    );
  }
  if (replicas > 1 && !(options.db && isPostgresUrl(options.db))) {
    throw new ConfigError(
      `--replicas ${replicas}: several schedulers share one PostgreSQL database; give --db postgres://…`,
    );
  }
  let scheduler: Scheduler | undefined;
  const schedulers: Scheduler[] = [];
  const agents: Agent[] = [];
  const sims: SimHost[] = [];
  let tokens: UpTokens | undefined;
  let lab: LabPlacement | undefined;
  try {
    let placement = options.placement;
    if (options.openstack) {
      if (placement) throw new ConfigError('--openstack starts its own Placement: give no --placement-url');
      lab = await startLabPlacement(options.openstack.placementBins, join(stateDir, 'placement'));
      placement =
        (await placementOptionsFromFlags({
          placementUrl: lab.url,
          placementAuth: 'noauth',
          placementCreateRoots: true,
        })) ?? undefined;
    }
    // Every RPC stays authenticated, with credentials that survive a restart: one
    // agent token per host (it registers that host only) and per-host scheduler
    // credentials signed with the scheduler's key (invariant 10).
    const simDefs = options.sysfsRoot
      ? []
      : Array.from({ length: options.hosts ?? 2 }, (_, k) =>
          demoHostDefinition(`sim-host-${k + 1}`, 0x3b + k * 0x20),
        );
    const realHost = options.sysfsRoot ? String(options.agentConfig?.host ?? hostname()) : null;
    tokens = await loadOrCreateUpTokens(stateDir, realHost ? [realHost] : simDefs.map((d) => d.host));
    // The agents accept the admin's token and the scheduler's per-host credentials.
    const agentAuth = { static_tokens_file: tokens.file, scheduler_public_key_file: tokens.publicKeyFile };
    for (let i = 0; i < replicas; i++) {
      schedulers.push(
        await Scheduler.start({
          auth: { mode: 'token', staticTokens: tokens.staticTokens },
          agentSigningKey: tokens.signingKey,
          db: options.db ?? join(stateDir, 'scheduler.db'),
          listen: i === 0 ? options.listen : '127.0.0.1:0',
          logger: i === 0 ? logger : logger.child({ replica: i + 1 }),
          heartbeatSeconds: 5,
          ...(options.metricsListen && i === 0 ? { metricsListen: options.metricsListen } : {}),
          ...(placement ? { placement } : {}),
          // One Cyborg API (on its own address): the first scheduler's.
          ...(options.openstack && i === 0 ? { cyborg: options.openstack.cyborg } : {}),
        }),
      );
    }
    scheduler = schedulers[0]!;
    lock.setEndpoint(scheduler.address);
    // Agents list every scheduler: each registers with the first that answers.
    const schedulerList = schedulers.length === 1 ? scheduler.address : schedulers.map((x) => x.address);
    if (realHost) {
      const config = parseAgentConfig(
        {
          state_dir: join(stateDir, 'agent'),
          ...options.agentConfig,
          host: realHost,
          sysfs_root: options.sysfsRoot,
          listen: '127.0.0.1:0',
          scheduler: schedulerList,
          auth: agentAuth,
          scheduler_token_file: tokens.agents.get(realHost)?.file,
        },
        {},
        process.cwd(),
      );
      agents.push(await Agent.start({ config, logger }));
    } else {
      for (const def of simDefs) {
        // The simulated hardware is rebuilt at every start (fresh media); the
        // scheduler's database and the agents' journals persist beside it.
        const simRoot = join(stateDir, 'sim', def.host);
        await rm(simRoot, { recursive: true, force: true });
        const sim = await buildSimHost(simRoot, def);
        sims.push(sim);
        const config = await writeAgentConfig(sim.configPath, {
          ...sim.agentConfig,
          state_dir: join(stateDir, 'agents', def.host),
          scheduler: schedulerList,
          register_interval: 5,
          auth: agentAuth,
          scheduler_token_file: tokens.agents.get(def.host)?.file,
        });
        agents.push(await Agent.start({ config, logger, bootIdFile: sim.bootIdFile }));
      }
    }
    await Promise.all(agents.map((a) => a.registered));
    // Registered is not followed: wait until the scheduler holds every host's
    // inventory, so "Berth is up" means the devices are there to be bound.
    const s = scheduler;
    await Promise.all(agents.map((a) => followed(s, a.config.host, a.inventory.list().length)));
    const made = tokens;
    return {
      adminToken: made.admin,
      tokens: made,
      scheduler,
      schedulers,
      agents,
      sims,
      endpoint: scheduler.address,
      metricsAddress: scheduler.metricsAddress,
      stateDir,
      openstack:
        lab && scheduler.cyborg
          ? { placementUrl: lab.url, placementLog: lab.logFile, cyborgUrl: scheduler.cyborg.url }
          : null,
      async stop() {
        for (const a of agents) await a.stop();
        for (const x of schedulers) await x.stop();
        await lab?.stop();
        lock.release();
      },
    };
  } catch (err) {
    for (const a of agents) await a.stop();
    for (const x of schedulers) await x.stop();
    await lab?.stop();
    // A start that failed leaves no new credentials behind (the next one makes them again).
    await tokens?.rollback();
    lock.release();
    throw err;
  }
}
