/**
 * The erasure certificates a registration carries (docs/erasure-certificates.md):
 * at start, and when the scheduler asks, every certificate held, a share per
 * registration; otherwise those no scheduler stores yet. A registration's
 * answer names those it stored (marked delivered in the journal).
 */
import type { CleanupJournal } from './cleanup-journal.js';

/** Certificates one registration carries at most (bytes of JWS); more go in the registrations after. */
const CERTIFICATE_BYTES_PER_REGISTRATION = 1_500_000;

export class CertificateOutbox {
  /** The next registration sends every certificate held (at start, and when the scheduler asks). */
  private sendAllCertificates = true;
  /** Bytes of certificates one registration carries at most. */
  certificateShare = CERTIFICATE_BYTES_PER_REGISTRATION;
  /** While sending every certificate: where the next registration's share starts. */
  private certificateCursor = 0;
  /** The certificate lists of registrations that sent a share of every certificate held. */
  private readonly fullSends = new WeakMap<string[], { end: number; total: number }>();

  constructor(private readonly journal: CleanupJournal) {}

  /**
   * What a registration carries: a share of every certificate held (oldest
   * first per media), or those no scheduler stores yet — at most
   * CERTIFICATE_BYTES_PER_REGISTRATION of them (the scheduler takes 4 MiB a message).
   */
  certificatesToSend(): string[] {
    const all = this.sendAllCertificates;
    const list = this.journal.certificates({ undeliveredOnly: !all });
    const start = all ? Math.min(this.certificateCursor, list.length) : 0;
    const out: string[] = [];
    let bytes = 0;
    for (let i = start; i < list.length; i++) {
      const jws = list[i]!.jws;
      if (out.length > 0 && bytes + jws.length > this.certificateShare) break;
      out.push(jws);
      bytes += jws.length;
    }
    if (all) this.fullSends.set(out, { end: start + out.length, total: list.length });
    return out;
  }

  /** After a registration's answer: whether to register again at once (more certificates to send). */
  certificatesAnswered(
    res: { storedCertificates: string[]; sendCertificates: boolean },
    sent: string[],
  ): boolean {
    if (res.storedCertificates.length > 0) this.journal.markDelivered(res.storedCertificates);
    const full = this.fullSends.get(sent);
    if (full) {
      if (full.end < full.total) {
        this.certificateCursor = full.end;
        return true;
      }
      this.sendAllCertificates = false;
      this.certificateCursor = 0;
      return false;
    }
    if (res.sendCertificates && this.journal.certificates().length > 0) {
      // The scheduler started to follow us (a restart, a lost database): all of them, at once.
      this.sendAllCertificates = true;
      this.certificateCursor = 0;
      return true;
    }
    return false;
  }
}
