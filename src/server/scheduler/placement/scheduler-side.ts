/**
 * SchedulerSide over the scheduler: the one file in placement/ that knows the
 * use cases, the event hub and the agent links.
 */
import { isBerthError } from '../../../errors.js';
import { everyRow } from '../domain/pages.js';
import type { AgentLinks } from '../runtime/agent-links.js';
import type { EventHub } from '../runtime/event-hub.js';
import type { UseCases } from '../usecases/use-cases.js';
import type { HostView } from './desired.js';
import type { SchedulerSide } from './port.js';

export interface SchedulerSideDeps {
  useCases: UseCases;
  hub: EventHub;
  links: AgentLinks;
}

export function schedulerSide({ useCases, hub, links }: SchedulerSideDeps): SchedulerSide {
  return {
    revision: () => useCases.currentRevision(),
    // One host's devices in one read-only unit: a host is ~tens of devices, whatever the fleet.
    hostDevices: async (host) => (await useCases.snapshot({ host })).devices,
    hostsPage: async (after, limit) =>
      (await useCases.hostsPage(after, limit)).map((h) => ({ name: h.name, connected: h.connected })),
    async changesSince(revision, limit) {
      try {
        return await useCases.eventsSince(revision, limit);
      } catch (err) {
        if (isBerthError(err) && err.reason === 'REVISION_COMPACTED') return 'compacted';
        throw err;
      }
    },
    async hosts() {
      // By pages of names, without device counts: a fleet of any size.
      const out: HostView[] = [];
      for await (const h of everyRow(
        (after) => useCases.hostsPage(after, 1000),
        (h) => h.name,
      )) {
        out.push({ name: h.name, connected: h.connected });
      }
      return out;
    },
    get changeVersion() {
      return hub.version;
    },
    waitForChange: (seen, signal, maxWaitMs) => hub.wait(signal, seen, maxWaitMs),
    // One scheduler on its database speaks for every host; schedulers sharing a
    // PostgreSQL database each speak for the hosts whose agent link they hold.
    ownsHost: (host) => (useCases.leases ? host !== null && links.has(host) : true),
    async device(host, address) {
      try {
        return await useCases.getDevice({ host, address });
      } catch (err) {
        if (isBerthError(err) && err.code === 'NOT_FOUND') return null;
        throw err;
      }
    },
    async latestCleanupJob(deviceUuid) {
      const job = await useCases.latestCleanupJob(deviceUuid);
      return job ? { jobId: job.jobId, createdAt: job.createdAt, state: job.state } : null;
    },
    async scrubUsedOutsideBerth(ref, why) {
      // The cleanup is dispatched once the unit commits (the use cases' change feed).
      const { device, job } = await useCases.scrubUsedOutsideBerth(ref, why);
      return { device, jobId: job?.jobId ?? null };
    },
  };
}
