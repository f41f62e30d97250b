/**
 * The operator's cleaning actions, and cleanups asked for from outside Berth.
 *
 * - CleanDevice: a device in error is cleaned again with its locked-in action,
 *   if its agent can clean.
 * - ReleaseDevice: a burned one-time-use device is un-burned. A burn has two
 *   records (invariant 13): the agent's journal is cleared first, so a release
 *   that stops half-way leaves the device burned, never un-burned in one
 *   record only.
 * - A device used outside Berth (Nova's one-time-use devices, placement/) is
 *   cleaned through the normal path.
 *
 * Every cleanup these (and releases, and media found dirty) queue is
 * dispatched once its unit commits: the use cases' change feed names the
 * hosts, and the dispatcher (runtime/cleanup-dispatcher.ts) follows the jobs.
 */
import { relayedReason } from '../../../error-reasons.js';
import { BerthError, failedPrecondition } from '../../../errors.js';
import type { CleanupJob } from '../domain/cleanup.js';
import type { DeviceRecord } from '../domain/device-state.js';
import type { DeviceRef } from '../domain/inventory.js';
import type { UseCases } from '../usecases/use-cases.js';
import { type AgentPort, CLEANUP_FEATURE } from './agent-port.js';

export interface CleaningDeps {
  useCases: UseCases;
  agents: AgentPort;
}

export class Cleaning {
  constructor(private readonly deps: CleaningDeps) {}

  /** CleanDevice: error → pending_cleaning under a new job (the same job for a retried request id). */
  async clean(
    ref: DeviceRef,
    requestId: string | undefined,
  ): Promise<{ device: DeviceRecord; job: CleanupJob }> {
    const { useCases, agents } = this.deps;
    const current = await useCases.getDevice(ref);
    await agents.refresh([current.host]);
    const link = agents.get(current.host);
    // An agent we have never heard of cannot be judged; the use case refuses on state alone.
    const agentCanClean = link ? link.has(CLEANUP_FEATURE) : true;
    return useCases.requestClean(ref, { requestId, agentCanClean });
  }

  /** ReleaseDevice: the agent's record of the burn first, then the scheduler's. */
  async release(ref: DeviceRef, expectedGeneration: number | undefined): Promise<DeviceRecord> {
    await this.releaseAgentBurn(await this.deps.useCases.getDevice(ref));
    return this.deps.useCases.releaseDevice(ref, expectedGeneration);
  }

  /**
   * Asks the device's agent to clear its journal's record of the burn before
   * the scheduler clears its own. A device that is not burned needs nothing; an
   * agent too old to keep burns (UNIMPLEMENTED) has no record to clear; an agent
   * that cannot be reached refuses the release (UNAVAILABLE), and one that finds
   * other media at the address refuses it (FAILED_PRECONDITION).
   */
  private async releaseAgentBurn(d: DeviceRecord): Promise<void> {
    if (!d.burned) return;
    const { agents } = this.deps;
    await agents.refresh([d.host]);
    const agent = agents.get(d.host);
    if (!agent?.isConnected) {
      throw new BerthError(
        'UNAVAILABLE',
        `the agent of host ${d.host} is not connected: it keeps the second record of device ${d.address}'s burn and must clear it first; retry when it is back`,
        { reason: 'AGENT_UNAVAILABLE', metadata: { host: d.host, address: d.address } },
      );
    }
    try {
      await agent.releaseDevice(d.address, d.media?.key ?? '');
    } catch (err) {
      const e = agents.failure(err);
      if (e.unimplemented) return;
      if (e.unreachable) {
        throw new BerthError(
          'UNAVAILABLE',
          `the agent of host ${d.host} did not clear its record of device ${d.address}'s burn (${e.message}); retry`,
          { reason: 'AGENT_UNAVAILABLE', metadata: { host: d.host, address: d.address } },
        );
      }
      throw failedPrecondition(
        relayedReason('FAILED_PRECONDITION', e.reason, 'AGENT_REFUSED_RELEASE'),
        `the agent of host ${d.host} refused to release device ${d.address}: ${e.message}`,
        { host: d.host, address: d.address },
      );
    }
  }
}
