/**
 * The NVMe driver's memory of each function's last identify (`nvme id-ctrl`
 * and the media identity read with it), kept in the agent's state dir.
 *
 * While a guest owns a device it is bound to vfio-pci and has no controller to
 * ask, yet it must stay in the inventory with its locked-in action, so
 * discovery reports it from here; and a guest may hold the device across an
 * agent restart, so the cache survives one (`<driver>-identities.json`).
 */
import { readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { isValidPciAddress } from '../device-spec/index.js';
import type { HostContext } from '../driver.js';
import { mediaIdentityProblem } from '../pci/media-identity.js';
import type { MediaIdentity, PciFunction } from '../types.js';
import type { IdCtrl } from './nvme-output.js';

export interface CachedIdentity {
  vendorId: string;
  productId: string;
  controller: string;
  id: IdCtrl;
  /** The media identity read with it (absent in a file written before media identities). */
  media?: MediaIdentity;
  /**
   * The function's PCIe Device Serial Number then ('' = none; absent in an
   * older file). A function whose serial differs now is another card: the
   * cached identity is not its.
   */
  dsn?: string;
}

export class IdentityCache {
  private readonly identities = new Map<string, CachedIdentity>();
  /** Whether the identities kept in the state dir were read (once, at the first discovery). */
  private loaded = false;

  /**
   * `driverName`: asked when the file is first named, not at construction: a
   * vendor driver's `name` field is set after the NVMe driver's constructor runs.
   */
  constructor(private readonly driverName: () => string) {}

  /** Where identities survive an agent restart: a guest may hold the device across it. */
  private file(ctx: HostContext): string {
    return join(ctx.stateDir, `${this.driverName()}-identities.json`);
  }

  /**
   * The identity cached for `fn`, when it is still this card's: the same
   * vendor and product, and the same Device Serial Number when one was kept.
   */
  usableFor(fn: PciFunction, dsn: string): CachedIdentity | null {
    const cached = this.identities.get(fn.address);
    return cached &&
      cached.vendorId === fn.vendorId &&
      cached.productId === fn.productId &&
      (cached.dsn === undefined || cached.dsn === dsn)
      ? cached
      : null;
  }

  set(address: string, identity: CachedIdentity): void {
    this.identities.set(address, identity);
  }

  delete(address: string): void {
    this.identities.delete(address);
  }

  addresses(): string[] {
    return [...this.identities.keys()];
  }

  async load(ctx: HostContext): Promise<void> {
    if (this.loaded) return;
    this.loaded = true;
    try {
      const raw = JSON.parse(await readFile(this.file(ctx), 'utf8')) as Record<
        string,
        Omit<CachedIdentity, 'id'> & { id: Omit<IdCtrl, 'tnvmcap'> & { tnvmcap: string } }
      >;
      for (const [address, c] of Object.entries(raw)) {
        if (!isValidPciAddress(address) || this.identities.has(address)) continue;
        const { media, ...rest } = c;
        // A media identity the file holds but that is not one is dropped, not trusted.
        const usable =
          media && typeof media === 'object' && mediaIdentityProblem(media) === null ? { media } : {};
        this.identities.set(address, { ...rest, ...usable, id: { ...c.id, tnvmcap: BigInt(c.id.tnvmcap) } });
      }
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
        ctx.logger.warn(
          { err },
          'cannot read the NVMe identities kept in the state dir; starting without them',
        );
      }
    }
  }

  /** The cache as the file holds it, sorted by address: compared to tell whether it changed. */
  serialize(): string {
    const out: Record<string, unknown> = {};
    for (const [address, c] of [...this.identities].sort(([a], [b]) => a.localeCompare(b))) {
      out[address] = { ...c, id: { ...c.id, tnvmcap: c.id.tnvmcap.toString() } };
    }
    return JSON.stringify(out);
  }

  /** Writes the identities to the state dir when they differ from `known` (never in the dry run). */
  async keep(ctx: HostContext, known: string): Promise<void> {
    const now = this.serialize();
    if (now !== known && !ctx.readOnly) await this.save(ctx, now);
  }

  private async save(ctx: HostContext, text: string): Promise<void> {
    const path = this.file(ctx);
    try {
      await writeFile(`${path}.tmp`, text);
      await rename(`${path}.tmp`, path);
    } catch (err) {
      ctx.logger.warn({ err }, 'cannot keep the NVMe identities in the state dir');
    }
  }
}
