/**
 * Drives cleanups on the agents. A job is dispatched with CleanupDevice under
 * its job id and its progress stream followed into the store; the store's
 * transitions decide the device state (invariant 2: only a reported success
 * makes a device available). A stream that breaks leaves the job where it was;
 * when the agent comes back the same job id re-attaches (the agent's journal
 * answers "running", "finished: …", or "interrupted"), so nothing is started
 * twice and no outcome is lost. An agent without cleanup.v1 cannot clean: the
 * device goes to error with AGENT_CANNOT_CLEAN.
 *
 * What starts a dispatch: a committed change that queued cleanups on a host
 * (`committed`: a release, an operator's clean, a media found dirty, …), a
 * link that (re)connects, and on a shared database a change committed by
 * another scheduler or a lease look (`dispatchFollowed`).
 */
import type { Logger } from 'pino';
import type { CleanupEvent as AgentEvent, CleanupDeviceResponse } from '../../../gen/berth/agent/v1/agent.js';
import type { HostName } from '../../../identifiers.js';
import { cleanupPhaseFromProto, proofFromProto } from '../../cleanup-event-proto.js';
import type { Metrics } from '../../metrics.js';
import { CLEANUP_FEATURE } from '../app/agent-port.js';
import type { CleanupEvent, CleanupJob } from '../domain/cleanup.js';
import type { DeviceRecord } from '../domain/device-state.js';
import { mediaKeyOf } from '../domain/media.js';
import type { Change, UseCases } from '../usecases/use-cases.js';
import { isUnreachable } from './agent-link.js';
import type { AgentLinks } from './agent-links.js';

/** How often a cleanup held back by its gate (placement/: Nova may use the device) is looked at again. */
const GATE_RETRY_MS = 5_000;

export function eventFromAgent(e: AgentEvent): CleanupEvent | null {
  const phase = cleanupPhaseFromProto(e.phase);
  if (!phase) return null;
  return {
    jobId: e.jobId,
    address: e.address,
    action: e.action,
    phase,
    step: e.step,
    percent: e.percent,
    bytesDone: e.bytesDone,
    bytesTotal: e.bytesTotal,
    message: e.message,
    time: (e.time ?? new Date()).toISOString(),
    sequence: e.sequence,
    proof: proofFromProto(e.proof),
    ...(e.certificate ? { certificate: e.certificate } : {}),
  };
}

export class CleanupDispatcher {
  private readonly following = new Set<string>();
  private stopped = false;

  constructor(
    private readonly useCases: UseCases,
    private readonly links: AgentLinks,
    private readonly logger: Logger,
    private readonly metrics?: Metrics,
    /** Schedulers share the database: a host not followed here is another's to clean. */
    private readonly followedElsewhere = false,
  ) {}

  /**
   * Dispatches every pending job of a host (or of all hosts). Never throws: it
   * runs unawaited (a link that just connected), and a backlog it cannot read
   * now (the store closing under a stopping scheduler, a database out of
   * reach) is read again at the link's next connect or the next look.
   */
  dispatchBacklog(host?: HostName): Promise<void> {
    return this.dispatchPending(host, () => true);
  }

  /**
   * Dispatches the pending jobs of the hosts this scheduler follows (when
   * several share a database, a job another one queued — a release made
   * through it — is dispatched by the host's follower). Never throws.
   */
  dispatchFollowed(): Promise<void> {
    return this.dispatchPending(undefined, (job) => this.links.has(job.host));
  }

  private async dispatchPending(
    host: HostName | undefined,
    wanted: (job: CleanupJob) => boolean,
  ): Promise<void> {
    if (this.stopped) return;
    try {
      const backlog = await this.useCases.cleanupBacklog(host);
      const now = backlog.filter(({ job }) => wanted(job));
      for (const { job, waitsFor } of now) {
        if (waitsFor && !this.following.has(job.jobId)) {
          this.logger.info(
            { jobId: job.jobId, host: job.host, address: job.address, waitsFor },
            'cleanup waits: another device holds its media (the device stays reserved)',
          );
        }
      }
      await Promise.all(
        now.filter(({ waitsFor }) => !waitsFor).map(({ device, job }) => this.dispatch(device, job)),
      );
    } catch (err) {
      if (!this.stopped) {
        this.logger.warn(
          { host, err: (err as Error).message },
          'cannot read the cleanup backlog; next look soon',
        );
      }
    }
  }

  private wakeTimer: NodeJS.Timeout | null = null;
  private gate: ((device: DeviceRecord) => Promise<string | null>) | null = null;
  private readonly gated = new Map<string, NodeJS.Timeout>();

  /**
   * Cleanups Berth starts on its own (origin `media` or `agent`: a media
   * never cleaned, or reported dirty) first ask `gate` whether someone outside
   * Berth may be using the device (Nova, placement/); while it says why, the
   * job waits and is looked at again every GATE_RETRY_MS. Cleanups a release
   * or an operator asked for are not gated: Berth itself let go of the device.
   */
  setGate(gate: (device: DeviceRecord) => Promise<string | null>): void {
    this.gate = gate;
  }

  /**
   * A change committed: the hosts it queued cleanups on are dispatched now; a
   * change another scheduler committed (what it was is not known) wakes a
   * look at the backlog of the hosts followed here.
   */
  committed(change: Change): void {
    if (change.cleanupsOn === null) this.wake();
    else for (const host of change.cleanupsOn) void this.dispatchBacklog(host);
  }

  /** Something changed in the database: look at the backlog soon (changes in a burst coalesce into one look). */
  wake(delayMs = 100): void {
    if (this.stopped || this.wakeTimer || this.links.size === 0) return;
    this.wakeTimer = setTimeout(() => {
      this.wakeTimer = null;
      void this.dispatchFollowed();
    }, delayMs);
  }

  /** Dispatches one job, unless it is already being followed. Never throws. */
  async dispatch(device: DeviceRecord, job: CleanupJob): Promise<void> {
    if (this.stopped || this.following.has(job.jobId)) return;
    const log = this.logger.child({ jobId: job.jobId, host: job.host, address: job.address });
    const link = this.links.get(job.host);
    if (!link && this.followedElsewhere) {
      log.debug('another scheduler follows this host: it dispatches the cleanup');
      return;
    }
    if (!link?.isConnected) {
      log.info('agent not connected; the cleanup waits for it (the device stays reserved)');
      return;
    }
    if (!link.has(CLEANUP_FEATURE)) {
      await this.useCases
        .failCleanup(
          job.jobId,
          `AGENT_CANNOT_CLEAN: the agent on ${job.host} does not support ${CLEANUP_FEATURE}`,
        )
        .catch((err) => log.error({ err }, 'cannot record the cleanup failure'));
      log.error('agent cannot clean; device moved to error');
      return;
    }
    if (this.gate && job.state === 'queued' && (job.origin === 'media' || job.origin === 'agent')) {
      const why = await this.gate(device).catch((err: Error) => `cannot tell who uses it (${err.message})`);
      if (why) {
        log.info({ waitsFor: why }, 'cleanup waits: the device may be in use outside Berth');
        if (!this.gated.has(job.jobId) && !this.stopped) {
          const t = setTimeout(() => {
            this.gated.delete(job.jobId);
            void this.dispatchBacklog(job.host);
          }, GATE_RETRY_MS);
          t.unref();
          this.gated.set(job.jobId, t);
        }
        return;
      }
    }
    this.following.add(job.jobId);
    try {
      if (job.state === 'queued') await this.useCases.markCleanupDispatched(job.jobId);
      // The cleanup's certificate continues the media's chain from the last link held here, any host's.
      const mediaKey = mediaKeyOf(device);
      const last = mediaKey ? await this.useCases.lastCertificate(mediaKey) : null;
      const stream = link.cleanupDevice(
        device.address,
        job.jobId,
        last ? { mediaKey: last.mediaKey, hash: last.hash, seq: last.seq, host: last.host } : null,
      );
      let terminal = false;
      let adopted = false;
      for await (const msg of stream as AsyncIterable<CleanupDeviceResponse>) {
        if (!msg.event) continue;
        let ev = eventFromAgent(msg.event);
        if (!ev) continue;
        if (ev.jobId !== job.jobId) {
          // The agent was already cleaning this device under another job id (one
          // a lost or restored database no longer knows) and re-attached this job
          // to it. Its outcome is this job's: a device being cleaned accepts no
          // binding, so that cleanup started after the device's last tenant.
          if (!adopted) {
            log.warn(
              { agentJobId: ev.jobId },
              'the agent re-attached this job to its running cleanup of the device (another job id); following it as this job',
            );
            adopted = true;
          }
          ev = { ...ev, jobId: job.jobId, agentJobId: ev.jobId };
        }
        const applied = await this.useCases.applyCleanupEvent(ev);
        if (
          applied.applied &&
          (ev.phase === 'succeeded' || ev.phase === 'failed' || ev.phase === 'interrupted')
        ) {
          const started = Date.parse(applied.job.dispatchedAt ?? applied.job.createdAt);
          this.metrics?.observeCleanup(
            ev.action,
            ev.phase,
            Math.max(0, Date.parse(ev.time) - started) / 1000,
          );
        }
        if (ev.phase === 'succeeded' || ev.phase === 'failed' || ev.phase === 'interrupted') terminal = true;
      }
      if (!terminal)
        log.warn('cleanup stream ended without an outcome; will re-attach when the agent returns');
    } catch (err) {
      if (this.stopped) {
        log.info('the scheduler is stopping: the cleanup is followed again at its next start');
      } else if (isUnreachable(err)) {
        log.warn(
          { err: (err as Error).message },
          'lost the cleanup stream; will re-attach when the agent returns',
        );
      } else {
        // The agent refused the job (device gone, cannot clean): fail closed.
        const message = (err as { details?: string; message?: string }).details ?? (err as Error).message;
        log.error({ err: message }, 'agent refused the cleanup');
        this.metrics?.observeCleanup(job.action, 'failed', 0);
        await this.useCases
          .failCleanup(job.jobId, `the agent refused the cleanup: ${message}`)
          .catch((e) => log.error({ err: e }, 'cannot record the cleanup failure'));
      }
    } finally {
      this.following.delete(job.jobId);
    }
  }

  stop(): void {
    this.stopped = true;
    if (this.wakeTimer) clearTimeout(this.wakeTimer);
    for (const t of this.gated.values()) clearTimeout(t);
    this.gated.clear();
  }
}
