/** GetAgentInfo's answer: what the agent is, runs and has seen of hotplug. */
import { type GetAgentInfoResponse, HotplugState } from '../../gen/berth/agent/v1/agent.js';
import { DRIVER_API_VERSION } from '../../plugins/driver.js';
import { BERTH_VERSION } from '../../version.js';
import type { AgentConfig } from './config.js';
import type { DiscoveryLoop } from './discovery-loop.js';
import type { SourceStatus } from './hotplug.js';
import type { PluginHost } from './plugin-host.js';

/** What GetAgentInfo reads of a running agent. */
export interface AgentInfoSource {
  readonly config: AgentConfig;
  readonly bootId: string;
  readonly inventory: { readonly epoch: string };
  readonly host: PluginHost;
  readonly features: string[];
  readonly startedAt: Date;
  readonly discovery: DiscoveryLoop;
}

export function agentInfo(agent: AgentInfoSource): GetAgentInfoResponse {
  const { sourceStatus, counts } = agent.discovery;
  return {
    host: agent.config.host,
    agentVersion: BERTH_VERSION,
    bootId: agent.bootId,
    epoch: agent.inventory.epoch,
    drivers: agent.host.loaded.map((l) => ({
      name: l.driver.name,
      apiVersion: l.driver.apiVersion ?? DRIVER_API_VERSION,
      supportsCleaning: l.driver.supportsCleaning,
      source: l.source,
    })),
    features: agent.features,
    startedAt: agent.startedAt,
    hotplug: {
      source: agent.config.hotplug.source,
      state: HOTPLUG_STATES[sourceStatus.state],
      message: sourceStatus.message,
      since: sourceStatus.since,
      fullRescanIntervalSeconds: agent.discovery.fullRescanInterval,
      events: counts.events,
      partialPasses: counts.partialPasses,
      fullPasses: counts.fullPasses,
      functionsReread: counts.functionsReread,
      sourceRestarts: sourceStatus.restarts,
    },
  };
}

const HOTPLUG_STATES: Record<SourceStatus['state'], HotplugState> = {
  off: HotplugState.HOTPLUG_STATE_OFF,
  starting: HotplugState.HOTPLUG_STATE_STARTING,
  following: HotplugState.HOTPLUG_STATE_FOLLOWING,
  failed: HotplugState.HOTPLUG_STATE_FAILED,
};
