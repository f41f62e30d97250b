/** HostService: the hosts whose agents registered. */
import {
  type DeleteHostRequest,
  type GetHostRequest,
  type Host,
  type HostServiceServer,
  HostServiceService,
} from '../../../gen/berth/scheduler/v1/host.js';
import { callerOf } from '../../grpc/caller.js';
import { unary } from '../../grpc/handlers.js';
import type { ServiceBinding } from '../../grpc/server.js';
import type { SchedulerCore } from '../core.js';
import type { HostRecord } from '../store/store.js';
import { requireHost } from './validate.js';

export function hostToProto(h: HostRecord, followedBy = ''): Host {
  return {
    name: h.name,
    endpoint: h.endpoint,
    bootId: h.bootId,
    agentVersion: h.agentVersion,
    features: h.features,
    drivers: h.drivers,
    connected: h.connected,
    registeredAt: new Date(h.registeredAt),
    lastSeen: new Date(h.lastSeen),
    deviceCount: h.deviceCount,
    followedBy,
  };
}

/** Who follows each host: the lease holders on a shared database, else this scheduler's connected links. */
async function followers(core: SchedulerCore): Promise<(host: string) => string> {
  if (core.store.leases) {
    const live = await core.store.leases.live();
    return (host) => live.get(host) ?? '';
  }
  return (host) => (core.links.get(host)?.isConnected ? core.schedulerId : '');
}

export function hostServiceBinding(core: SchedulerCore): ServiceBinding {
  const impl: HostServiceServer = {
    listHosts: unary('ListHosts', core.logger, async () => {
      const hosts = await core.store.listHosts();
      const follower = await followers(core);
      return { hosts: hosts.map((h) => hostToProto(h, follower(h.name))) };
    }),
    getHost: unary('GetHost', core.logger, async (req: GetHostRequest) => {
      const h = await core.store.getHost(requireHost('name', req.name));
      return { host: hostToProto(h, (await followers(core))(h.name)) };
    }),
    deleteHost: unary('DeleteHost', core.logger, async (req: DeleteHostRequest, ctx) => {
      const name = requireHost('name', req.name);
      const removed = await core.store.deleteHost(name);
      core.links.get(name)?.stop();
      core.links.delete(name);
      core.hub.notify();
      core.logger.warn(
        { host: name, devices: removed.length, by: callerOf(ctx.metadata).subject },
        'host deleted by an operator, with its devices',
      );
      return { removedDeviceUuids: removed.map((d) => d.uuid) };
    }),
  };
  return { name: 'berth.scheduler.v1.HostService', definition: HostServiceService, implementation: impl };
}
