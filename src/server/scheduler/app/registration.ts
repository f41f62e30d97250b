/**
 * An agent announces itself (Register: at its start, then as a heartbeat).
 *
 * One unit (usecases/hosts.ts registerHost) decides what the registration
 * is and writes it: the host's principal pin (invariant 10), a heartbeat or a
 * registration, and after a new agent epoch (the agent process restarted, or
 * the host rebooted) the restart reconcile of invariant 3. Around it, this
 * workflow decides whether this scheduler follows the host (with several
 * schedulers on one database, the one holding the host's lease does), dials
 * the agent back, and adds what the agent's journal reports — devices it
 * holds for a tenant (invariant 9) and media records (invariants 11, 13) — to
 * the scheduler's records.
 */
import type { Logger } from 'pino';
import type { PublicJwk } from '../../../erasure/certificate.js';
import { type BerthError, isBerthError, unlessNotFound } from '../../../errors.js';
import type { HostName } from '../../../identifiers.js';
import type { MediaRecord } from '../../../plugins/types.js';
import {
  type Caller,
  type HeldDeviceReport,
  type HostRegistered,
  type HostRegistration,
  principalFor,
} from '../domain/host.js';
import {
  MEDIA_RECORD_LIMITS,
  type MediaReportsTaken,
  type RefusedMediaReport,
  registrationRecordsBoundBroken,
} from '../domain/media-reports.js';
import type { UseCases } from '../usecases/use-cases.js';
import type { FollowedHosts } from './agent-port.js';

/** What a Register request says, decoded. */
export interface AgentRegistration {
  host: Omit<HostRegistration, 'principal'>;
  /** The devices the agent's journal records as holding a tenant's data. */
  held: HeldDeviceReport[];
  /** The agent's journal's records of media (present on the host or not). */
  media: MediaRecord[];
  /** The agent's certificate signing key (absent from agents older than certificates). */
  signingKey: PublicJwk | undefined;
  /** Keys it signed with before (recorded as retired only when the host's key is pinned afresh). */
  retiredSigningKeys: PublicJwk[];
  /** Erasure certificates it supplies (compact JWS). */
  certificates: string[];
}

export interface RegistrationDeps {
  useCases: UseCases;
  links: FollowedHosts;
  /**
   * Whether this scheduler may follow `host`'s agent: always with a database of
   * its own; with a shared one, when it holds (or just took) the host's lease.
   */
  claimLink: (host: string) => Promise<boolean>;
  /** Operator-written principal subject → host (invariant 10); otherwise a subject names its host. */
  hostPrincipals: ReadonlyMap<string, string>;
  /** Identifies this scheduler in RegisterResponse. */
  schedulerId: string;
  /** Seconds between agent re-registrations asked for. */
  heartbeatSeconds: number;
  /** Counts media records refused (berth_media_records_refused_total). */
  mediaRecordsRefused?: (host: string, reason: string, count: number) => void;
  logger: Logger;
}

export class Registration {
  /** The refused media records already logged, per host (by reason and key). */
  private readonly refusalsLogged = new Map<string, Set<string>>();

  constructor(private readonly deps: RegistrationDeps) {}

  async register(
    reg: AgentRegistration,
    caller: Caller,
  ): Promise<{
    schedulerId: string;
    heartbeatSeconds: number;
    storedCertificates: string[];
    sendCertificates: boolean;
    refusedMedia: RefusedMediaReport[];
  }> {
    const { useCases, links, logger } = this.deps;
    const name = reg.host.name;
    // Past the bound on media records the registration is refused whole, before anything is written.
    const tooMany = registrationRecordsBoundBroken(name, reg.media.length);
    if (tooMany) throw this.refusedAtBound(name, tooMany, reg.media.length);
    const linked = links.has(name);
    // A host known here but not followed here is followed only under its lease;
    // a new host's lease is taken once the host is stored (below). A plain
    // heartbeat to the follower costs no lease write: its keeper renews the
    // lease, and drops the link at its next look if another scheduler took it.
    // A database that does not answer fails the registration (UNAVAILABLE): it is not a new host.
    const known = !linked && (await useCases.getHost(name).catch(unlessNotFound)) !== null;
    const claimedBefore = known ? await this.deps.claimLink(name) : null;
    let r: HostRegistered;
    try {
      const principal = principalFor(caller, name, this.deps.hostPrincipals);
      r = await useCases.registerHost(
        { ...reg.host, ...(principal ? { principal } : {}) },
        {
          opensLink: !linked && (claimedBefore ?? true),
          signingKey: reg.signingKey,
          retiredSigningKeys: reg.retiredSigningKeys,
        },
      );
    } catch (err) {
      if (isBerthError(err) && (err.reason === 'AGENT_KEY_CHANGED' || err.reason === 'AGENT_KEY_RETIRED')) {
        logger.error(
          {
            host: name,
            keyId: err.metadata['key_id'],
            pinned: err.metadata['pinned'],
            endpoint: reg.host.endpoint,
          },
          "registration refused: the agent signs with another key than the host's pinned one (rotate it with berth host rotate-key if that is meant)",
        );
      }
      if (isBerthError(err) && err.code === 'PERMISSION_DENIED') {
        logger.warn(
          {
            host: name,
            principal: caller.subject,
            pinned: err.metadata['pinned'],
            endpoint: reg.host.endpoint,
          },
          'registration refused: the principal may not speak for this host',
        );
      }
      throw err;
    }
    // Before the link opens: a registration refused at a bound is not followed.
    const refusedMedia = await this.reconcileMedia(name, reg.media);
    if (r.change === 'heartbeat') {
      const link = links.get(name);
      if (link && !link.isConnected) link.poke();
    } else {
      this.logRegistered(reg, r, caller);
      if (claimedBefore ?? (await this.deps.claimLink(name))) {
        links.connect(name, reg.host.endpoint, reg.host.features);
      } else if (links.drop(name)) {
        // Another scheduler follows this host; it dials the new endpoint at its next look.
        logger.info({ host: name }, 'another scheduler follows this host: link closed here');
      }
    }
    if (r.pinnedKey) {
      logger.info({ host: name, keyId: r.pinnedKey.kid }, "agent's certificate signing key pinned");
    }
    await this.reconcileHeld(name, reg.held);
    const supplied = await useCases.importCertificates(name, reg.certificates);
    if (supplied.refused.length > 0) {
      logger.error(
        { host: name, refused: supplied.refused.slice(0, 20), count: supplied.refused.length },
        'erasure certificates the agent supplied were refused (not stored)',
      );
    }
    if (supplied.added > 0) {
      logger.info(
        { host: name, added: supplied.added },
        'erasure certificates re-supplied by the agent stored',
      );
    }
    return {
      schedulerId: this.deps.schedulerId,
      heartbeatSeconds: this.deps.heartbeatSeconds,
      storedCertificates: supplied.stored,
      // This scheduler started to follow the agent (or lost what it knew): all its certificates, please.
      sendCertificates: r.change !== 'heartbeat',
      refusedMedia,
    };
  }

  private logRegistered(reg: AgentRegistration, r: HostRegistered, caller: Caller): void {
    const { logger } = this.deps;
    const host = reg.host.name;
    if (r.change === 'restarted') {
      // Worth a warning only when the restart cut something short.
      if (r.interrupted.length > 0 || r.toDispatch.length > 0) {
        logger.warn(
          {
            host,
            interrupted: r.interrupted.map((d) => d.address),
            redispatch: r.toDispatch.map((d) => d.address),
          },
          'agent restarted: devices it was cleaning are in error, pending cleanups will be dispatched again',
        );
      } else {
        logger.info({ host }, 'agent restarted; it was cleaning nothing');
      }
    }
    logger.info(
      { host, endpoint: reg.host.endpoint, features: reg.host.features, principal: caller.subject },
      'agent registered',
    );
  }

  /**
   * Invariant 9: the devices the agent's journal records as holding tenant data
   * are never offered; one this database thinks available is queued for cleanup.
   */
  private async reconcileHeld(host: HostName, held: HeldDeviceReport[]): Promise<void> {
    if (held.length === 0) return;
    const moved = await this.deps.useCases.reconcileHeldDevices(host, held);
    if (moved.length === 0) return;
    this.deps.logger.warn(
      {
        host,
        devices: moved.map((d) => d.address),
        held: held.filter((h) => moved.some((d) => d.address === h.address)),
      },
      "its agent reports devices holding tenant data that this scheduler's database thought available (a lost or restored database?); they are cleaned before they are offered",
    );
  }

  /** A registration refused at a bound on media records: logged and counted; returns the error. */
  private refusedAtBound(host: HostName, err: BerthError, records: number): BerthError {
    this.deps.mediaRecordsRefused?.(host, `${err.metadata['bound']}_limit`, records);
    this.deps.logger.warn(
      { host, count: err.metadata['count'], limit: err.metadata['limit'], bound: err.metadata['bound'] },
      'registration refused: its media records go beyond a bound; none of them was stored',
    );
    return err;
  }

  /**
   * Invariants 11, 13 and 15: the agent's journal records of media (present
   * on the host or not) add their dirt and burns to the scheduler's records,
   * so a media shows up dirty or burned wherever it is seen next, even after
   * this database was lost or restored — but only for media this host holds
   * (domain/media-reports.ts): a record of another host's media is refused,
   * logged, counted and returned. Past a bound the registration is refused.
   */
  private async reconcileMedia(host: HostName, records: MediaRecord[]): Promise<RefusedMediaReport[]> {
    const { logger } = this.deps;
    let taken: MediaReportsTaken;
    try {
      taken = await this.deps.useCases.reconcileMediaRecords(host, records);
    } catch (err) {
      throw isBerthError(err) && err.reason === 'MEDIA_RECORDS_OVER_LIMIT'
        ? this.refusedAtBound(host, err, records.length)
        : err;
    }
    const byReason = new Map<string, number>();
    for (const f of taken.refused) byReason.set(f.reason, (byReason.get(f.reason) ?? 0) + 1);
    for (const [reason, n] of byReason) this.deps.mediaRecordsRefused?.(host, reason, n);
    // A journal that keeps a refused record sends it at every heartbeat: logged once, counted every time.
    const logged = this.refusalsLogged.get(host) ?? new Set<string>();
    const fresh = taken.refused.filter((f) => !logged.has(`${f.reason} ${f.key}`));
    if (logged.size + fresh.length > MEDIA_RECORD_LIMITS.perRegistration) logged.clear();
    for (const f of fresh) logged.add(`${f.reason} ${f.key}`);
    this.refusalsLogged.set(host, logged);
    if (fresh.length > 0) {
      logger.warn(
        {
          host,
          count: fresh.length,
          refused: fresh.slice(0, 20).map((f) => ({ key: f.key, reason: f.reason, holder: f.holder })),
        },
        "its agent reported dirt or burns of media another host holds (or an operator forgot): refused, the scheduler's records of them unchanged",
      );
    }
    if (taken.changed.length > 0) {
      logger.warn(
        { host, media: taken.changed },
        "its agent's journal records media as holding tenant data or burned that this scheduler's database did not (a lost or restored database, or media moved from elsewhere); they are cleaned or kept burned wherever they show up",
      );
    }
    return taken.refused;
  }
}
