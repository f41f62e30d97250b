/**
 * Runs cleanups on the agent: one job per device at a time (a second request
 * attaches to the running job) and one per media (two controllers of one NVM
 * subsystem are never cleaned at once), the device's locked-in action only, a
 * timeout that aborts the driver and its children, and every step journaled so
 * a restart reports the job as interrupted instead of forgetting it. It keeps
 * the journal's record of media (media-ledger.ts) in step: a binding makes
 * the media held (and burns a one-time-use device), a cleanup the agent judged
 * clean makes it clean, one that failed or was cut short makes it dirty.
 */
import type { Logger } from 'pino';
import {
  certificateHash,
  decodeCertificate,
  type ErasureClaims,
  nistMapping,
  type SanitizeLogClaim,
  signCertificate,
  type WriteCountersClaim,
} from '../../erasure/certificate.js';
import { type ChainLink, chainPosition } from '../../erasure/chain.js';
import { BerthError, failedPrecondition, invalidArgument, notFound } from '../../errors.js';
import { parsePciAddress } from '../../identifiers.js';
import type { CleanupEvidence, CleanupProof, SanitizeLogSnapshot } from '../../plugins/cleanup-evidence.js';
import type { DiscoveredDevice, WriteCounters } from '../../plugins/types.js';
import { CleanupJob, type JobEvent } from './cleanup-job.js';
import type { CleanupJournal, HeldDevice } from './cleanup-journal.js';
import { judgeEvidence } from './cleanup-judge.js';
import type { HostedDriver } from './driver-registry.js';
import type { StoredMedia } from './media-ledger.js';
import type { PluginHost } from './plugin-host.js';
import type { SigningKey } from './signing-key.js';

const JOB_ID = /^[A-Za-z0-9._:-]{1,128}$/;
const BINDING_ID = /^[A-Za-z0-9._:-]{1,255}$/;
/** Progress events are journaled at most this often (phase changes and outcomes always). */
const JOURNAL_PROGRESS_EVERY_MS = 1_000;

/** How long a driver gets to return after its abort signal fired. */
const ABORT_GRACE_MS = 10_000;

function abortedAfterGrace(signal: AbortSignal, graceMs: number): Promise<never> {
  return new Promise((_, reject) => {
    const fire = () => {
      const t = setTimeout(() => reject(signal.reason ?? new Error('cleanup aborted')), graceMs);
      t.unref();
    };
    if (signal.aborted) fire();
    else signal.addEventListener('abort', fire, { once: true });
  });
}

export interface CleanupRunnerOptions {
  /** Used when the driver does not say (`cleanupTimeoutMs`); 900 s. */
  defaultTimeoutMs: number;
  /** Told of every job that ends: action, outcome, seconds. */
  onOutcome?: (action: string, outcome: 'succeeded' | 'failed' | 'interrupted', seconds: number) => void;
  /** Told of every change of a media record (the inventory shows the new one). */
  onMediaChanged?: (record: StoredMedia) => void;
  /**
   * Signs an erasure certificate for every cleanup the judge accepts
   * (docs/erasure-certificates.md); without it (tests of other concerns) none is made.
   */
  signer?: { key: () => SigningKey; host: string };
  /** Told of every certificate signed (its hash). */
  onCertificate?: (hash: string) => void;
}

const logClaim = (s: SanitizeLogSnapshot): SanitizeLogClaim => ({
  status: s.status,
  global_data_erased: s.globalErased,
  sprog: s.sprog,
  scdw10: s.scdw10,
  at: new Date(s.at).toISOString(),
});

const writeCountersClaim = (c: WriteCounters): WriteCountersClaim => ({
  controller: c.controller,
  cntlid: c.cntlid,
  data_units_written: c.dataUnitsWritten,
  host_write_commands: c.hostWriteCommands,
  power_cycles: c.powerCycles,
  power_on_hours: c.powerOnHours,
  at: new Date(c.at).toISOString(),
});

export class CleanupRunner {
  private readonly running = new Map<string, { job: CleanupJob; abort: AbortController; mediaKey: string }>();
  private readonly jobsById = new Map<string, CleanupJob>();
  private stopping = false;

  constructor(
    private readonly journal: CleanupJournal,
    private readonly host: PluginHost,
    private readonly lookup: (address: string) => DiscoveredDevice | undefined,
    private readonly logger: Logger,
    private readonly options: CleanupRunnerOptions = { defaultTimeoutMs: 900_000 },
  ) {}

  /**
   * Start of day: jobs that were running when the agent died become
   * interrupted, and the media they cleaned dirty.
   */
  recover(): CleanupJob[] {
    const jobs = this.journal.recoverInterrupted();
    for (const j of jobs) {
      const mediaKey = this.journal.jobMediaKey(j.jobId);
      this.logger.warn(
        { jobId: j.jobId, address: j.address, media: mediaKey || undefined },
        'cleanup job was interrupted by an agent restart',
      );
      if (mediaKey) this.mediaDirty(mediaKey, j.address, 'its cleanup was interrupted by an agent restart');
    }
    return jobs;
  }

  private mediaChanged(r: StoredMedia): void {
    this.options.onMediaChanged?.(r);
  }

  private mediaDirty(key: string, address: string, reason: string): void {
    try {
      this.mediaChanged(this.journal.media.markDirty(key, address, reason));
    } catch (err) {
      // Not recorded dirty: it is not recorded clean either (the last record stands, and the scheduler's holds).
      this.logger.error({ err, media: key, address }, `cannot record media ${key} as dirty (${reason})`);
    }
  }

  /**
   * RecordBinding: the device is handed to a guest for `arqUuid`. Recorded in
   * the journal (durably) before the scheduler acknowledges the bind, by the
   * device's media: cleaned media becomes held, cleared only by a cleanup
   * judged clean; a one-time-use device's media is burned, cleared only by an
   * operator's release. Refused for media held for another binding (through
   * any address or controller), media not known clean (dirty, or never
   * cleaned by Berth), media burned for another binding, and media being
   * cleaned; and for a device that is neither cleaned nor one-time-use (there
   * is nothing to record).
   */
  recordBinding(address: string, arqUuid: string, instanceUuid: string, projectId = ''): StoredMedia {
    parsePciAddress('address', address);
    for (const [field, value] of [
      ['arq_uuid', arqUuid],
      ['instance_uuid', instanceUuid],
      ...(projectId ? [['project_id', projectId] as const] : []),
    ] as const) {
      if (!BINDING_ID.test(value)) {
        throw invalidArgument(field, `${JSON.stringify(value)} must be 1-255 characters of [A-Za-z0-9._:-]`);
      }
    }
    const device = this.lookup(address);
    if (!device) throw notFound('device', address);
    if (!device.supportsCleaning && !device.oneTimeUse) {
      throw failedPrecondition(
        'CLEANING_NOT_SUPPORTED',
        `device ${address} (driver ${device.driver}) is neither cleaned nor one-time-use, so its bindings are not recorded`,
        { address },
      );
    }
    const key = device.media?.key;
    if (!key) {
      throw failedPrecondition(
        'MEDIA_UNKNOWN',
        `device ${address} has no media identity yet; rediscover it`,
        {
          address,
        },
      );
    }
    const cleaning = this.cleaningMedia(key);
    if (cleaning) {
      throw failedPrecondition(
        'CLEANUP_IN_PROGRESS',
        `device ${address} is being cleaned (job ${cleaning.job.jobId}${cleaning.job.address === address ? '' : ` through ${cleaning.job.address}, which reaches the same media ${key}`})`,
        { address, job_id: cleaning.job.jobId },
      );
    }
    const rec = this.journal.media.get(key);
    const at = (ms: number) => new Date(ms).toISOString();
    if (rec?.burned && rec.arqUuid !== arqUuid) {
      throw failedPrecondition(
        'DEVICE_BURNED',
        `device ${address} is one-time-use and its media ${key} was burned${rec.arqUuid ? ` by ARQ ${rec.arqUuid}` : ''} at ${at(rec.since)}; only an operator's release (ReleaseDevice) clears it`,
        { address, media_key: key },
      );
    }
    if (device.supportsCleaning) {
      if (rec?.condition === 'held' && rec.arqUuid !== arqUuid) {
        throw failedPrecondition(
          'DEVICE_HOLDS_TENANT_DATA',
          `device ${address} still holds the data of ARQ ${rec.arqUuid} (instance ${rec.instanceUuid}), ` +
            `handed to it at ${at(rec.since)}${rec.lastAddress === address ? '' : ` through ${rec.lastAddress}`} and not cleaned since (media ${key})`,
          { address, arq_uuid: rec.arqUuid, instance_uuid: rec.instanceUuid, media_key: key },
        );
      }
      if (!rec || rec.condition === 'dirty' || rec.condition === 'not_cleanable') {
        const why =
          rec?.condition === 'dirty'
            ? rec.reason || 'its last cleanup was not proven'
            : 'never cleaned by Berth';
        throw failedPrecondition(
          'MEDIA_NOT_CLEAN',
          `device ${address}'s media ${key} is not known clean (${why}); it is cleaned before it is handed out`,
          { address, media_key: key },
        );
      }
    }
    const r = this.journal.media.hold(
      key,
      address,
      { arqUuid, instanceUuid, projectId },
      {
        cleanable: device.supportsCleaning,
        oneTimeUse: device.oneTimeUse,
      },
    );
    if (r !== rec) this.mediaChanged(r);
    return r;
  }

  /** The running job cleaning `key`'s media through any address, if any. */
  /** Whether a cleanup of media `key` runs now (through any of its devices). */
  isCleaning(key: string): boolean {
    return this.cleaningMedia(key) !== undefined;
  }

  private cleaningMedia(key: string): { job: CleanupJob } | undefined {
    for (const r of this.running.values()) if (r.mediaKey === key) return r;
    return undefined;
  }

  /**
   * The media the journal records as held, at the address this host reaches
   * it now (reported at every registration as held_devices), and holds
   * recorded by address no discovery has found media for yet.
   */
  heldDevices(): HeldDevice[] {
    const out: HeldDevice[] = [];
    for (const r of this.journal.media.all()) {
      if (r.condition !== 'held' || this.lookup(r.lastAddress)?.media?.key !== r.key) continue;
      out.push({
        address: r.lastAddress,
        arqUuid: r.arqUuid,
        instanceUuid: r.instanceUuid,
        since: r.since,
        mediaKey: r.key,
      });
    }
    for (const h of this.journal.legacyHolds()) out.push({ ...h, mediaKey: '' });
    return out.sort((a, b) => (a.address < b.address ? -1 : a.address > b.address ? 1 : 0));
  }

  /**
   * Returns the job for (address, jobId): the same job id re-attaches (running
   * or finished, from the journal); a device already being cleaned re-attaches
   * to its running job; otherwise a new job starts.
   */
  startOrAttach(address: string, jobId: string, previous: ChainLink | null = null): CleanupJob {
    parsePciAddress('address', address);
    if (!JOB_ID.test(jobId)) {
      throw invalidArgument('job_id', `${JSON.stringify(jobId)} must be 1-128 characters of [A-Za-z0-9._:-]`);
    }
    const known = this.jobsById.get(jobId) ?? this.journal.load(jobId);
    if (known) {
      if (known.address !== address) {
        throw invalidArgument('job_id', `job ${jobId} belongs to device ${known.address}, not ${address}`);
      }
      return known;
    }
    const current = this.running.get(address);
    if (current) return current.job;
    if (this.stopping) throw new BerthError('UNAVAILABLE', 'the agent is shutting down');

    const device = this.lookup(address);
    if (!device) throw notFound('device', address);
    const driver = this.host.driver(device.driver);
    if (!driver || !this.host.cleaner(driver) || !device.supportsCleaning || !device.cleanupAction) {
      throw failedPrecondition(
        'CLEANING_NOT_SUPPORTED',
        `device ${address} (driver ${device.driver}) cannot be cleaned`,
        {
          address,
        },
      );
    }
    const mediaKey = device.media?.key ?? '';
    const other = mediaKey ? this.cleaningMedia(mediaKey) : undefined;
    if (other) {
      throw failedPrecondition(
        'CLEANUP_IN_PROGRESS',
        `device ${address} reaches media ${mediaKey}, which is being cleaned through ${other.job.address} (job ${other.job.jobId}); one cleanup of a media at a time`,
        { address, job_id: other.job.jobId, media_key: mediaKey },
      );
    }
    const job = new CleanupJob(jobId, address, device.cleanupAction);
    this.journal.begin(jobId, address, job.action, mediaKey);
    this.jobsById.set(jobId, job);
    const abort = new AbortController();
    this.running.set(address, { job, abort, mediaKey });
    const timeoutMs =
      (driver as { cleanupTimeoutMs?: number }).cleanupTimeoutMs ?? this.options.defaultTimeoutMs;
    void this.run(job, device, mediaKey, abort, timeoutMs, previous);
    return job;
  }

  private record(job: CleanupJob, e: Parameters<CleanupJob['push']>[0], force: boolean): JobEvent {
    const prev = job.last;
    const ev = job.push(e);
    const phaseChanged = !prev || prev.phase !== ev.phase || prev.step !== ev.step;
    if (
      force ||
      phaseChanged ||
      ev.time - (this.lastJournaled.get(job.jobId) ?? 0) >= JOURNAL_PROGRESS_EVERY_MS
    ) {
      this.journal.append(ev);
      this.lastJournaled.set(job.jobId, ev.time);
    }
    return ev;
  }

  private readonly lastJournaled = new Map<string, number>();

  private async run(
    job: CleanupJob,
    device: DiscoveredDevice,
    mediaKey: string,
    abort: AbortController,
    timeoutMs: number,
    previous: ChainLink | null,
  ) {
    const log = this.logger.child({ jobId: job.jobId, address: job.address, action: job.action });
    const driver = this.host.driver(device.driver)!;
    // Accepted only with the capability (start()); a driver does not lose it while loaded.
    const cleanup = this.host.cleaner(driver)!;
    const timer = setTimeout(
      () => abort.abort(new Error(`cleanup timed out after ${Math.round(timeoutMs / 1000)} s`)),
      timeoutMs,
    );
    let last = { percent: 0, bytesDone: 0, bytesTotal: 0 };
    this.record(
      job,
      { phase: 'queued', step: '', ...last, message: `cleanup with ${job.action} accepted` },
      true,
    );
    // The device stays locked (running) until both the job ended and the driver returned.
    let driverSettled = true;
    let jobEnded = false;
    try {
      log.info('cleanup started');
      // The agent's own census of the media, before the driver touches it (NVMe).
      const before = await this.takeCensus(job, driver, device, abort.signal, 'before', last);
      driverSettled = false;
      const work = cleanup(
        device,
        this.host.cleanupCtx(driver, {
          jobId: job.jobId,
          signal: abort.signal,
          progress: (p) => {
            if (abort.signal.aborted || job.finished) return;
            last = {
              percent: Math.max(0, Math.min(100, p.percent ?? last.percent)),
              bytesDone: p.bytesDone ?? last.bytesDone,
              bytesTotal: p.bytesTotal ?? last.bytesTotal,
            };
            this.record(
              job,
              { phase: p.phase, step: p.step ?? '', ...last, message: p.message ?? '' },
              false,
            );
          },
        }),
      );
      // A driver that ignores the abort must not hold the outcome hostage: after
      // the grace period the job fails; the device lock stays until it returns.
      const settled = work.finally(() => {
        driverSettled = true;
        if (jobEnded) this.running.delete(job.address);
      });
      const evidence = await Promise.race([settled, abortedAfterGrace(abort.signal, ABORT_GRACE_MS)]);
      if (abort.signal.aborted) throw abort.signal.reason ?? new Error('cleanup aborted');
      // The driver reported; the agent takes its own census of what the proof must cover, and decides.
      const after = await this.takeCensus(job, driver, device, abort.signal, 'after', last);
      const verdict = judgeEvidence(
        evidence,
        job.action,
        this.host.policy(driver),
        after ? { before, after } : null,
      );
      if (!verdict.ok) throw new Error(verdict.reason);
      const { proof } = verdict;
      // The media holds no tenant data in the agent's own record, durably, before
      // the job says so (a crash in between leaves the job interrupted: dirty),
      // and the certificate that says so is kept in the same transaction.
      // The write counters right after the proven scrub: the clean record and the certificate name them.
      const counters = after?.writeCounters;
      const { cleaned, certificate } = this.journal.transaction(() => ({
        certificate: mediaKey
          ? this.certify(job, device, mediaKey, evidence, proof, previous, counters)
          : null,
        cleaned: mediaKey ? this.journal.media.markClean(mediaKey, job.address, Date.now(), counters) : null,
      }));
      this.record(
        job,
        {
          phase: 'succeeded',
          step: '',
          percent: 100,
          bytesDone: last.bytesTotal,
          bytesTotal: last.bytesTotal,
          message: `device is clean: ${proof.findings.join('; ')}`,
          proof,
          ...(certificate ? { certificate } : {}),
        },
        true,
      );
      if (cleaned) this.mediaChanged(cleaned);
      log.info({ proof, media: mediaKey }, 'cleanup succeeded');
      this.options.onOutcome?.(
        job.action,
        'succeeded',
        (Date.now() - (job.events[0]?.time ?? Date.now())) / 1000,
      );
    } catch (err) {
      const reason = abort.signal.aborted ? (abort.signal.reason as Error | undefined) : undefined;
      const message = reason?.message ?? (err as Error).message ?? String(err);
      const phase = this.stopping ? 'interrupted' : 'failed';
      this.record(job, { phase, step: job.last?.step ?? '', ...last, message }, true);
      if (mediaKey) this.mediaDirty(mediaKey, job.address, `its cleanup ${phase}: ${message}`);
      log.error({ err, media: mediaKey }, `cleanup ${phase}: ${message}`);
      this.options.onOutcome?.(job.action, phase, (Date.now() - (job.events[0]?.time ?? Date.now())) / 1000);
    } finally {
      clearTimeout(timer);
      this.lastJournaled.delete(job.jobId);
      jobEnded = true;
      if (driverSettled) this.running.delete(job.address);
    }
  }

  /**
   * Signs the erasure certificate of an accepted cleanup and keeps it in the
   * journal, chained after the link the dispatch stated (`previous`, the
   * scheduler's last of the media, any host's), or after the agent's own
   * when none was stated, or as an unknown-history link (chainPosition,
   * decision 63). Called inside the transaction that marks the media clean.
   * Null without a signer.
   */
  private certify(
    job: CleanupJob,
    device: DiscoveredDevice,
    mediaKey: string,
    evidence: CleanupEvidence,
    proof: CleanupProof,
    previous: ChainLink | null,
    counters: WriteCounters | undefined,
  ): string | null {
    const signer = this.options.signer;
    if (!signer) return null;
    const key = signer.key();
    const held = this.journal.media.get(mediaKey);
    const own = this.journal.mediaCertificates(mediaKey).map((c) => ({
      hash: c.hash,
      seq: c.seq,
      prev: decodeCertificate(c.jws).claims.prev,
    }));
    const { continues, ...position } = chainPosition(mediaKey, previous, own);
    if (continues !== 'scheduler' && previous?.mediaKey === mediaKey) {
      this.logger.warn(
        { jobId: job.jobId, media: mediaKey, stated: previous, seq: position.seq },
        "the scheduler stated an older link of this media's chain than the agent holds (a restored database): the certificate continues the agent's later links, which it re-supplies",
      );
    }
    const now = Date.now();
    const media = device.media;
    const san = evidence.sanitize;
    const claims: ErasureClaims = {
      v: 1,
      iss: `berth-agent:${signer.host}`,
      host: signer.host,
      kid: key.kid,
      iat: Math.floor(now / 1000),
      job_id: job.jobId,
      address: job.address,
      media: {
        key: mediaKey,
        kind: media?.kind ?? '',
        subsystem_nqn: media?.subsystemNqn ?? '',
        serial: media?.serial ?? '',
        model: media?.model ?? '',
        namespaces: (media?.namespaces ?? []).map((n) => ({
          nsid: n.nsid,
          nguid: n.nguid,
          eui64: n.eui64,
          uuid: n.uuid,
        })),
        device_serial_number: media?.deviceSerialNumber ?? '',
      },
      tenant:
        held?.condition === 'held' && held.arqUuid
          ? { arq_uuid: held.arqUuid, instance_uuid: held.instanceUuid, project_id: held.projectId ?? '' }
          : null,
      action: job.action,
      proof: {
        method: proof.method,
        read_back: proof.readBack,
        bytes_written: proof.bytesWritten,
        bytes_read: proof.bytesRead,
        bytes_total: proof.bytesTotal,
        findings: [...proof.findings],
        census: proof.census ?? null,
        sanitize: san
          ? {
              sanact: san.sanact,
              command_sent: san.commandSent,
              before: logClaim(san.before),
              after: san.after.length > 0 ? logClaim(san.after[san.after.length - 1]!) : null,
              polls: san.polls,
            }
          : null,
      },
      nist_800_88: nistMapping(job.action),
      ...(counters ? { write_counters: writeCountersClaim(counters) } : {}),
      started_at: new Date(job.events[0]?.time ?? now).toISOString(),
      ended_at: new Date(now).toISOString(),
      ...position,
    };
    const jws = signCertificate(claims, key.privateKey, key.kid);
    const hash = certificateHash(jws);
    this.journal.storeCertificate({ hash, mediaKey, seq: claims.seq, jobId: job.jobId, issuedAt: now, jws });
    this.options.onCertificate?.(hash);
    return jws;
  }

  /**
   * The agent's census of the device's media (src/plugins/nvme/census.ts),
   * null for a device whose media has none. Any failure fails the job: a
   * cleanup is never judged against a census that could not be taken.
   */
  private async takeCensus(
    job: CleanupJob,
    driver: HostedDriver,
    device: DiscoveredDevice,
    signal: AbortSignal,
    when: 'before' | 'after',
    last: { percent: number; bytesDone: number; bytesTotal: number },
  ) {
    if (!this.host.hasCensus(device)) return null;
    this.record(
      job,
      {
        phase: when === 'before' ? 'preparing' : 'verifying',
        step: 'census',
        ...last,
        message: `the agent lists every namespace and the capacity of the media ${when} the cleanup`,
      },
      true,
    );
    try {
      return await this.host.takeCensus(driver, device, signal, when === 'after');
    } catch (err) {
      signal.throwIfAborted();
      throw new Error(
        `the agent's census of the media ${when} the cleanup failed, so nothing can be proven: ${(err as Error).message}`,
        { cause: err },
      );
    }
  }

  /** Whether a device has a cleanup running now. */
  isRunning(address: string): boolean {
    return this.running.has(address);
  }

  /** Stops every running job (agent shutdown): they end as interrupted. */
  async stop(): Promise<void> {
    this.stopping = true;
    const jobs = [...this.running.values()];
    for (const r of jobs) r.abort.abort(new Error('the agent is shutting down'));
    await Promise.all(
      jobs.map(async (r) => {
        for await (const _ of r.job.follow(0)) {
          // drain until terminal
        }
      }),
    );
  }
}
