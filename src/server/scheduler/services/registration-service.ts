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
import { callerOf } from '../../grpc/caller.js';
import { unary } from '../../grpc/handlers.js';
import type { ServiceBinding } from '../../grpc/server.js';
import { mediaRecordFromProto } from '../../media-proto.js';
import type { SchedulerCore } from '../core.js';
import { type Caller, checkHostPrincipal } from '../host-identity.js';
import { MAX_MEDIA_RECORDS } from '../usecases/hosts.js';
import { dispatchReleased } from './arq-service.js';
import { maxItems, requireHost } from './validate.js';

const ENDPOINT = /^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9a-fA-F:]{2,39}\]):(\d{1,5})$/;
const TOKEN = /^[A-Za-z0-9._:/@+-]{1,128}$/;
const PCI_ADDRESS = /^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$/;
/**
 * A media key (docs/media-identity.md): a kind prefix, then printable ASCII, spaces included (the
 * kernel's fallback NQN holds the space-padded serial and model), at most 512 characters in all,
 * as the agent accepts from its drivers (src/plugins/pci/media-identity.ts).
 */
const MEDIA_KEY = /^(?=[\x20-\x7e]{1,512}$)[a-z][a-z0-9-]*:[\x21-\x7e][\x20-\x7e]*$/;

function checkRequest(req: RegisterRequest): void {
  requireHost('host', req.host);
  const port = Number(ENDPOINT.exec(req.endpoint)?.[1] ?? Number.NaN);
  if (!(port >= 1 && port <= 65535)) {
    throw invalidArgument('endpoint', `${JSON.stringify(req.endpoint)} is not host:port with a port 1-65535`);
  }
  if (!TOKEN.test(req.bootId))
    throw invalidArgument('boot_id', `${JSON.stringify(req.bootId)} is not a boot id`);
  if (!TOKEN.test(req.epoch))
    throw invalidArgument('epoch', `${JSON.stringify(req.epoch)} is not an agent epoch`);
  maxItems('held_devices', req.heldDevices, 4096);
  req.heldDevices.forEach((h, i) => {
    if (!PCI_ADDRESS.test(h.address)) {
      throw invalidArgument(
        `held_devices[${i}].address`,
        `${JSON.stringify(h.address)} is not a PCI address`,
      );
    }
  });
  maxItems('media_records', req.mediaRecords, MAX_MEDIA_RECORDS);
  req.mediaRecords.forEach((m, i) => {
    if (!MEDIA_KEY.test(m.key)) {
      throw invalidArgument(
        `media_records[${i}].key`,
        `${JSON.stringify(m.key.slice(0, 300))} is not a media key (a kind prefix, then 1-512 printable ASCII characters in all)`,
      );
    }
  });
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
  caller: Caller = { subject: 'anonymous', roles: [] },
): Promise<RegisterResponse> {
  checkRequest(req);
  const { store } = core;
  const existing = await store.getHost(req.host).catch(() => null);
  let principal: string | undefined;
  try {
    principal = checkHostPrincipal(caller, req.host, existing?.principal, core.hostPrincipals);
  } catch (err) {
    logger.warn(
      { host: req.host, principal: caller.subject, pinned: existing?.principal, endpoint: req.endpoint },
      'registration refused: the principal may not speak for this host',
    );
    throw err;
  }
  const changed = !existing || existing.agentEpoch !== req.epoch || existing.endpoint !== req.endpoint;
  // With several schedulers on one database, the one holding the host's lease
  // follows it (a new host's lease is taken once the host is stored, below). A
  // plain heartbeat to the follower costs no lease write: its keeper renews the
  // lease, and drops the link at its next look if another scheduler took it.
  const follows = existing
    ? (!changed && core.links.has(req.host)) || (await core.claimLink(req.host))
    : true;
  if (!follows) dropLink(core, req.host, logger);
  const fresh = changed || (follows && !core.links.has(req.host));
  if (!fresh) {
    const link = core.links.get(req.host);
    if (link && !link.isConnected) link.poke();
    await store.touchHost(req.host);
    await reconcileHeld(core, req, logger);
    await reconcileMedia(core, req, logger);
    return { schedulerId: core.schedulerId, heartbeatIntervalSeconds: core.heartbeatSeconds };
  }
  const agentRestarted = existing !== null && existing.agentEpoch !== req.epoch;
  await store.registerHost({
    ...(principal ? { principal } : {}),
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
  logger.info(
    { host: req.host, endpoint: req.endpoint, features: req.features, principal: caller.subject },
    'agent registered',
  );
  if (follows && (existing || (await core.claimLink(req.host)))) {
    core.connectAgent(req.host, req.endpoint, req.features);
  } else {
    // Another scheduler follows this host; it dials the new endpoint at its next look.
    dropLink(core, req.host, logger);
  }
  await reconcileHeld(core, req, logger);
  await reconcileMedia(core, req, logger);
  core.hub.notify();
  return { schedulerId: core.schedulerId, heartbeatIntervalSeconds: core.heartbeatSeconds };
}

/** Another scheduler holds the host's lease: a link this one still has is closed. */
function dropLink(core: SchedulerCore, host: string, logger: Logger): void {
  const link = core.links.get(host);
  if (!link) return;
  logger.info({ host }, 'another scheduler follows this host: link closed here');
  link.stop();
  core.links.delete(host);
}

/**
 * Invariant 9: the devices the agent's journal records as holding tenant data
 * are never offered; one this database thinks available is queued for cleanup.
 */
async function reconcileHeld(core: SchedulerCore, req: RegisterRequest, logger: Logger): Promise<void> {
  if (req.heldDevices.length === 0) return;
  const moved = await core.store.reconcileHeldDevices(
    req.host,
    req.heldDevices.map((h) => ({
      address: h.address,
      arqUuid: h.arqUuid,
      instanceUuid: h.instanceUuid,
      ...(h.since ? { since: h.since.toISOString() } : {}),
    })),
  );
  if (moved.length === 0) return;
  logger.warn(
    {
      host: req.host,
      devices: moved.map((d) => d.address),
      held: req.heldDevices.filter((h) => moved.some((d) => d.address === h.address)),
    },
    "its agent reports devices holding tenant data that this scheduler's database thought available (a lost or restored database?); they are cleaned before they are offered",
  );
  core.hub.notify();
  dispatchReleased(core, moved);
}

/**
 * Invariants 11 and 13: the agent's journal records of media (present on the
 * host or not) add their dirt and burns to the scheduler's records, so a
 * media shows up dirty or burned wherever it is seen next, even after this
 * database was lost or restored.
 */
async function reconcileMedia(core: SchedulerCore, req: RegisterRequest, logger: Logger): Promise<void> {
  const records = req.mediaRecords.flatMap((r) => mediaRecordFromProto(r) ?? []);
  const changed = await core.store.reconcileMediaRecords(req.host, records);
  if (changed.length === 0) return;
  logger.warn(
    { host: req.host, media: changed },
    "its agent's journal records media as holding tenant data or burned that this scheduler's database did not (a lost or restored database, or media moved from elsewhere); they are cleaned or kept burned wherever they show up",
  );
  core.hub.notify();
}

export function registrationServiceBinding(core: SchedulerCore): ServiceBinding {
  const impl: RegistrationServiceServer = {
    register: unary('Register', core.logger, (req: RegisterRequest, ctx) =>
      register(core, req, core.logger, callerOf(ctx.metadata)),
    ),
  };
  return {
    name: 'berth.scheduler.v1.RegistrationService',
    definition: RegistrationServiceService,
    implementation: impl,
  };
}
