/** Starting real agents on simulated hosts for integration tests. */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, type AgentOptions } from '../../src/server/agent/agent.js';
import { parseAgentConfig } from '../../src/server/agent/config.js';
import { buildSysfs, type SimHostSpec, type SysfsBuilder } from '../../src/sim/sysfs/index.js';

export async function tempDir(
  prefix = 'berth-test-',
): Promise<{ path: string; cleanup: () => Promise<void> }> {
  const path = await mkdtemp(join(tmpdir(), prefix));
  return { path, cleanup: () => rm(path, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 }) };
}

export interface SimAgent {
  agent: Agent;
  sysfs: SysfsBuilder;
  root: string;
  stop(): Promise<void>;
}

/** Builds a simulated host and starts an agent on it, listening on 127.0.0.1:0. */
export async function startSimAgent(
  spec: SimHostSpec,
  config: Record<string, unknown>,
  options: Partial<AgentOptions> & { root?: string } = {},
): Promise<SimAgent> {
  const dir = options.root ? { path: options.root, cleanup: async () => {} } : await tempDir();
  const sysfs = await buildSysfs(join(dir.path, 'sys'), spec);
  const cfg = parseAgentConfig(
    {
      host: 'sim-host',
      listen: '127.0.0.1:0',
      sysfs_root: join(dir.path, 'sys'),
      dev_root: join(dir.path, 'dev'),
      state_dir: join(dir.path, 'state'),
      discovery_interval: 3600,
      auth: { mode: 'none' },
      ...config,
    },
    {},
    process.cwd(),
  );
  const agent = await Agent.start({ ...options, config: cfg });
  return {
    agent,
    sysfs,
    root: dir.path,
    stop: async () => {
      await agent.stop();
      await dir.cleanup();
    },
  };
}

/** A small SR-IOV host: one Intel PF with 2 of 8 VFs enabled, one plain NIC, one GPU. */
export const SMALL_HOST: SimHostSpec = {
  pfs: [
    {
      address: '0000:3b:00.0',
      vendorId: '8086',
      productId: '1572',
      driver: 'i40e',
      numaNode: 0,
      totalVfs: 8,
      numVfs: 2,
      vf: { productId: '154c', driver: 'vfio-pci' },
    },
  ],
  functions: [
    { address: '0000:5e:00.0', vendorId: '8086', productId: '10fb', driver: 'ixgbe', numaNode: 1 },
    {
      address: '0000:af:00.0',
      vendorId: '10de',
      productId: '25b6',
      classCode: '030200',
      driver: 'vfio-pci',
      numaNode: 1,
    },
  ],
};
