/** The hosts whose agents registered, with who follows each, and an operator's deletion of one. */
import type { Logger } from 'pino';
import type { HostName } from '../../../identifiers.js';
import type { DeviceRecord } from '../domain/device-state.js';
import type { HostRecord } from '../domain/host.js';
import type { PageRequest } from '../domain/inventory.js';
import type { UseCases } from '../usecases/use-cases.js';
import type { FollowedHosts } from './agent-port.js';

export interface HostsDeps {
  useCases: UseCases;
  links: FollowedHosts;
  /** This scheduler's id, as `followedBy` names it. */
  schedulerId: string;
  logger: Logger;
}

/** A host and the scheduler following its agent ('' when none is). */
export interface FollowedHost {
  host: HostRecord;
  followedBy: string;
}

export class Hosts {
  constructor(private readonly deps: HostsDeps) {}

  async list(page: PageRequest): Promise<{ hosts: FollowedHost[]; nextPageToken: string }> {
    const { hosts, nextPageToken } = await this.deps.useCases.listHosts(page);
    const follower = await this.followers();
    return { hosts: hosts.map((host) => ({ host, followedBy: follower(host.name) })), nextPageToken };
  }

  async get(name: HostName): Promise<FollowedHost> {
    const host = await this.deps.useCases.getHost(name);
    return { host, followedBy: (await this.followers())(name) };
  }

  /** DeleteHost (see usecases/hosts.ts for what is refused); the link to it, if any, closes. */
  async delete(name: HostName, by: string): Promise<DeviceRecord[]> {
    const removed = await this.deps.useCases.deleteHost(name);
    this.deps.links.drop(name);
    this.deps.logger.warn(
      { host: name, devices: removed.length, by },
      'host deleted by an operator, with its devices',
    );
    return removed;
  }

  /** Who follows each host: the lease holders on a shared database, else this scheduler's connected links. */
  private async followers(): Promise<(host: string) => string> {
    const { useCases, links, schedulerId } = this.deps;
    if (useCases.leases) {
      const live = await useCases.leases.live();
      return (host) => live.get(host) ?? '';
    }
    return (host) => (links.get(host)?.isConnected ? schedulerId : '');
  }
}
