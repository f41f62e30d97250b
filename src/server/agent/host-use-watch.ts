/**
 * The host-use watch: while the kernel's events are followed, what the host
 * itself uses (mounts, interface addresses) is looked at every
 * discovery_interval, and the functions whose use changed are re-read.
 */
import type { Logger } from 'pino';
import { readHostUse } from '../../plugins/host-use.js';
import type { AgentConfig } from './config.js';

export interface HostUseWatchOptions {
  config: Pick<AgentConfig, 'sysfsRoot' | 'devRoot' | 'procRoot' | 'discoveryInterval'>;
  logger: Logger;
  /** Whether to look (the agent is not stopping, and the event source is following). */
  active: () => boolean;
  /** Re-reads the functions whose use changed, like those an event names. */
  reread: (addresses: string[]) => void;
}

export class HostUseWatch {
  private readonly config: HostUseWatchOptions['config'];
  private readonly logger: Logger;

  constructor(private readonly o: HostUseWatchOptions) {
    this.config = o.config;
    this.logger = o.logger;
  }

  /** What the host used at the last look: address → its uses (null before the first look). */
  private lastHostUse: Map<string, string> | null = null;
  private hostUseTimer: NodeJS.Timeout | null = null;

  /**
   * The host starting or ceasing to use a function (a file system mounted on
   * it, an address on its interface) comes with no uevent. While events are
   * followed, it is looked at every discovery_interval instead (a few procfs
   * files, not a scan of every function), and the functions whose use changed
   * are re-read like those an event names. While polling, the full pass sees it.
   */
  async watchHostUse(): Promise<void> {
    if (this.hostUseTimer) clearTimeout(this.hostUseTimer);
    this.hostUseTimer = null;
    if (!this.o.active()) return;
    try {
      const use = await readHostUse({
        sysfsRoot: this.config.sysfsRoot,
        devRoot: this.config.devRoot,
        procRoot: this.config.procRoot,
      });
      const now = new Map([...use].map(([a, u]) => [a, u.join('; ')]));
      const last = this.lastHostUse;
      this.lastHostUse = now;
      if (last) {
        const changed = [...new Set([...now.keys(), ...last.keys()])].filter(
          (a) => now.get(a) !== last.get(a),
        );
        if (changed.length > 0) {
          this.logger.info({ changed }, 'what the host uses changed: re-reading those functions');
          this.o.reread(changed);
        }
      }
    } catch (err) {
      this.logger.warn({ err }, 'cannot read what the host uses; the full rescan will');
    }
    if (!this.o.active()) return;
    this.hostUseTimer = setTimeout(() => {
      this.hostUseTimer = null;
      void this.watchHostUse();
    }, this.config.discoveryInterval * 1000);
    this.hostUseTimer.unref();
  }

  /** The next look compares with nothing (the source began to follow: a full pass covers what came before). */
  forget(): void {
    this.lastHostUse = null;
  }

  stop(): void {
    if (this.hostUseTimer) clearTimeout(this.hostUseTimer);
    this.hostUseTimer = null;
  }
}
