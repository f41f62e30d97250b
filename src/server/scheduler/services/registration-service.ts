/**
 * RegistrationService.Register: an agent announces itself (at start and then
 * as a heartbeat). A new agent epoch (the agent process restarted, or the host
 * rebooted) triggers the restart reconcile (invariant 3) before the scheduler
 * dials back and follows the agent's inventory.
 */
import type { Logger } from 'pino';
import { invalidArgument } from '../../../errors.js';
import {
  type RegisterRequest,
  type RegisterResponse,
  type RegistrationServiceServer,
  RegistrationServiceService,
} from '../../../gen/berth/scheduler/v1/registration.js';
import { unary } from '../../grpc/handlers.js';
import type { ServiceBinding } from '../../grpc/server.js';
import type { SchedulerCore } from '../core.js';
import { maxItems, requireHost } from './validate.js';

const ENDPOINT = /^[A-Za-z0-9.-]+:\d{1,5}$|^\[[0-9a-fA-F:]+\]:\d{1,5}$/;
const TOKEN = /^[A-Za-z0-9._:/@+-]{1,128}$/;

function checkRequest(req: RegisterRequest): void {
  requireHost('host', req.host);
  if (!ENDPOINT.test(req.endpoint))
    throw invalidArgument('endpoint', `${JSON.stringify(req.endpoint)} is not host:port`);
  if (!TOKEN.test(req.bootId))
    throw invalidArgument('boot_id', `${JSON.stringify(req.bootId)} is not a boot id`);
  if (!TOKEN.test(req.epoch))
    throw invalidArgument('epoch', `${JSON.stringify(req.epoch)} is not an agent epoch`);
  for (const [field, list] of [
    ['features', req.features],
    ['drivers', req.drivers],
  ] as const) {
    maxItems(field, list, 64);
    list.forEach((v, i) => {
      if (!TOKEN.test(v)) throw invalidArgument(`${field}[${i}]`, `${JSON.stringify(v)} is not a valid name`);
    });
  }
}

export async function register(
  core: SchedulerCore,
  req: RegisterRequest,
  logger: Logger,
): Promise<RegisterResponse> {
  checkRequest(req);
  const { store } = core;
  const existing = await store.getHost(req.host).catch(() => null);
  const fresh =
    !existing ||
    existing.agentEpoch !== req.epoch ||
    existing.endpoint !== req.endpoint ||
    !core.links.has(req.host);
  if (!fresh) {
    const link = core.links.get(req.host);
    if (link && !link.isConnected) link.poke();
    await store.touchHost(req.host);
    return { schedulerId: core.schedulerId, heartbeatIntervalSeconds: core.heartbeatSeconds };
  }
  const agentRestarted = existing !== null && existing.agentEpoch !== req.epoch;
  await store.registerHost({
    name: req.host,
    endpoint: req.endpoint,
    bootId: req.bootId,
    agentEpoch: req.epoch,
    agentVersion: req.agentVersion,
    features: req.features,
    drivers: req.drivers,
  });
  if (agentRestarted) {
    const { interrupted, toDispatch } = await store.reconcileAgentRestart(req.host);
    // Worth a warning only when the restart cut something short.
    if (interrupted.length > 0 || toDispatch.length > 0) {
      logger.warn(
        {
          host: req.host,
          interrupted: interrupted.map((d) => d.address),
          redispatch: toDispatch.map((d) => d.address),
        },
        'agent restarted: devices it was cleaning are in error, pending cleanups will be dispatched again',
      );
    } else {
      logger.info({ host: req.host }, 'agent restarted; it was cleaning nothing');
    }
  }
  logger.info({ host: req.host, endpoint: req.endpoint, features: req.features }, 'agent registered');
  core.connectAgent(req.host, req.endpoint, req.features);
  core.hub.notify();
  return { schedulerId: core.schedulerId, heartbeatIntervalSeconds: core.heartbeatSeconds };
}

export function registrationServiceBinding(core: SchedulerCore): ServiceBinding {
  const impl: RegistrationServiceServer = {
    register: unary('Register', core.logger, (req: RegisterRequest) => register(core, req, core.logger)),
  };
  return {
    name: 'berth.scheduler.v1.RegistrationService',
    definition: RegistrationServiceService,
    implementation: impl,
  };
}
