/**
 * SchedulerSide over the scheduler's core: the one file in placement/ that
 * knows the store, the event hub, the agent links and the cleanup dispatcher.
 */
import { isBerthError } from '../../../errors.js';
import type { SchedulerCore } from '../core.js';
import type { SchedulerSide } from './port.js';

export function schedulerSide(
  core: Pick<SchedulerCore, 'store' | 'hub' | 'links' | 'dispatcher' | 'logger'>,
): SchedulerSide {
  const { store, hub } = core;
  return {
    snapshot: () => store.snapshot(),
    async changesSince(revision, limit) {
      try {
        return await store.eventsSince(revision, limit);
      } catch (err) {
        if (isBerthError(err) && err.reason === 'REVISION_COMPACTED') return 'compacted';
        throw err;
      }
    },
    async hosts() {
      return (await store.listHosts()).map((h) => ({ name: h.name, connected: h.connected }));
    },
    get changeVersion() {
      return hub.version;
    },
    waitForChange: (seen, signal, maxWaitMs) => hub.wait(signal, seen, maxWaitMs),
    // One scheduler on its database speaks for every host; schedulers sharing a
    // PostgreSQL database each speak for the hosts whose agent link they hold.
    ownsHost: (host) => (store.leases ? host !== null && core.links.has(host) : true),
    async device(host, address) {
      try {
        return await store.getDevice({ host, address });
      } catch (err) {
        if (isBerthError(err) && err.code === 'NOT_FOUND') return null;
        throw err;
      }
    },
    async latestCleanupJob(deviceUuid) {
      const job = await store.latestCleanupJob(deviceUuid);
      return job ? { jobId: job.jobId, createdAt: job.createdAt, state: job.state } : null;
    },
    async scrubUsedOutsideBerth(ref, why) {
      const { device, job } = await store.scrubUsedOutsideBerth(ref, why);
      if (device.deviceState !== 'available') hub.notify();
      if (job) void core.dispatcher.dispatch(device, job);
      return { device, jobId: job?.jobId ?? null };
    },
  };
}
