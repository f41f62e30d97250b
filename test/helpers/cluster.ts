/** A scheduler and agents on simulated hosts, all in this process, on loopback. */
import { join } from 'node:path';
import { SchedulerClient } from '../../src/client/sdk.js';
import { Agent, type AgentOptions } from '../../src/server/agent/agent.js';
import { parseAgentConfig } from '../../src/server/agent/config.js';
import { Scheduler, type SchedulerOptions } from '../../src/server/scheduler/scheduler.js';
import { buildSimHost, type SimHost, type SimHostDefinition } from '../../src/sim/host.js';
import { tempDir } from './agent.js';
import { eventually } from './wait.js';

export interface ClusterHost {
  sim: SimHost;
  agent: Agent | null;
  start(options?: Partial<AgentOptions>): Promise<Agent>;
  stop(): Promise<void>;
}

export interface Cluster {
  root: string;
  dbPath: string;
  scheduler: Scheduler;
  client: SchedulerClient;
  hosts: Map<string, ClusterHost>;
  host(name: string): ClusterHost;
  /** Waits until the scheduler follows the host's inventory with `n` devices. */
  waitForDevices(host: string, n: number): Promise<void>;
  restartScheduler(options?: Partial<SchedulerOptions>): Promise<void>;
  stop(): Promise<void>;
}

export async function startCluster(
  defs: SimHostDefinition[],
  options: {
    /** Every agent's options, or each host's (e.g. its own token with authentication on). */
    agent?: Partial<AgentOptions> | ((host: string) => Partial<AgentOptions>);
    scheduler?: Partial<SchedulerOptions>;
    /** The token the cluster's client calls with (authentication on). */
    clientToken?: string;
    /** Rewrites each agent's configuration (as written, before parsing), e.g. to load another driver. */
    agentConfig?: (config: Record<string, unknown>) => Record<string, unknown>;
  } = {},
): Promise<Cluster> {
  const dir = await tempDir('berth-cluster-');
  const dbPath = join(dir.path, 'scheduler.db');
  let scheduler = await Scheduler.start({
    db: dbPath,
    listen: '127.0.0.1:0',
    heartbeatSeconds: 1,
    // Integration tests of other concerns run without authentication, explicitly
    // (auth has its own tests: test/integration/auth.test.ts).
    auth: { mode: 'none' },
    ...options.scheduler,
  });
  const connect = () =>
    new SchedulerClient({
      endpoint: scheduler.address,
      timeoutMs: 15_000,
      ...(options.clientToken ? { token: options.clientToken } : {}),
    });
  let client = connect();
  const hosts = new Map<string, ClusterHost>();
  for (const def of defs) {
    const sim = await buildSimHost(join(dir.path, def.host), def);
    const h: ClusterHost = {
      sim,
      agent: null,
      async start(extra = {}) {
        const raw = {
          ...sim.agentConfig,
          scheduler: scheduler.address,
          register_interval: 0.5,
          discovery_interval: 3600,
        };
        const config = parseAgentConfig(options.agentConfig ? options.agentConfig(raw) : raw, {}, dir.path);
        const own = typeof options.agent === 'function' ? options.agent(def.host) : options.agent;
        h.agent = await Agent.start({ config, bootIdFile: sim.bootIdFile, ...own, ...extra });
        await h.agent.registered;
        return h.agent;
      },
      async stop() {
        await h.agent?.stop();
        h.agent = null;
      },
    };
    hosts.set(def.host, h);
    await h.start();
  }
  const cluster: Cluster = {
    root: dir.path,
    dbPath,
    get scheduler() {
      return scheduler;
    },
    get client() {
      return client;
    },
    hosts,
    host(name) {
      const h = hosts.get(name);
      if (!h) throw new Error(`no host ${name}`);
      return h;
    },
    async waitForDevices(host, n) {
      await eventually(
        () =>
          client.devices.listDevices({
            filter: { host, type: 0, state: 0, resourceClass: '' },
            pageSize: 0,
            pageToken: '',
          }),
        (r) => r.devices.length === n,
        15_000,
      );
      await eventually(
        () => client.hosts.getHost({ name: host }),
        (r) => r.host?.connected === true,
        15_000,
      );
    },
    async restartScheduler(extra = {}) {
      const address = scheduler.address;
      client.close();
      await scheduler.stop();
      scheduler = await Scheduler.start({
        db: dbPath,
        listen: address,
        heartbeatSeconds: 1,
        auth: { mode: 'none' },
        ...options.scheduler,
        ...extra,
      });
      client = connect();
    },
    async stop() {
      client.close();
      for (const h of hosts.values()) await h.stop();
      await scheduler.stop();
      await dir.cleanup();
    },
  };
  return cluster;
}
