/** HostService: the hosts whose agents registered (app/hosts.ts). */
import type { Logger } from 'pino';
import {
  type DeleteHostRequest,
  type GetHostRequest,
  type Host,
  type HostServiceServer,
  HostServiceService,
  type ListHostsRequest,
} from '../../../gen/berth/scheduler/v1/host.js';
import { callerOf } from '../../grpc/caller.js';
import { unary } from '../../grpc/handlers.js';
import type { ServiceBinding } from '../../grpc/server.js';
import type { FollowedHost, Hosts } from '../app/hosts.js';
import { requireHost } from './validate.js';

export function hostToProto({ host: h, followedBy }: FollowedHost): Host {
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

export function hostServiceBinding(hosts: Hosts, logger: Logger): ServiceBinding {
  const impl: HostServiceServer = {
    listHosts: unary('ListHosts', logger, async (req: ListHostsRequest) => {
      const page = await hosts.list({ pageSize: req.pageSize, pageToken: req.pageToken });
      return { hosts: page.hosts.map(hostToProto), nextPageToken: page.nextPageToken };
    }),
    getHost: unary('GetHost', logger, async (req: GetHostRequest) => ({
      host: hostToProto(await hosts.get(requireHost('name', req.name))),
    })),
    deleteHost: unary('DeleteHost', logger, async (req: DeleteHostRequest, ctx) => {
      const removed = await hosts.delete(requireHost('name', req.name), callerOf(ctx.metadata).subject);
      return { removedDeviceUuids: removed.map((d) => d.uuid) };
    }),
  };
  return { name: 'berth.scheduler.v1.HostService', definition: HostServiceService, implementation: impl };
}
