/**
 * Who may read erasure certificates (docs/erasure-certificates.md): a tenant's
 * orchestration layer (the service role) reads those of its own instances —
 * the instances it was the first to bind ARQs to — and no one else's; admin
 * and reader read all; only admin rotates a key. Real scheduler and agent,
 * static tokens, on loopback.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type BerthClientError, SchedulerClient } from '../../src/client/sdk.js';
import { createLogger } from '../../src/logging.js';
import { generateStaticToken } from '../../src/server/grpc/auth/tokens.js';
import { demoHostDefinition } from '../../src/sim/host.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import {
  createAndBind,
  createNvmeProfile,
  settledDevice,
  stateName,
  uuidRef,
} from '../helpers/invariants.js';
import { eventually } from '../helpers/wait.js';

const HOST = 'access-host';
const quiet = () => createLogger({ level: process.env.BERTH_LOG_LEVEL ?? 'silent' });

describe('reading erasure certificates', () => {
  const token = {
    agent: generateStaticToken(),
    admin: generateStaticToken(),
    tenantA: generateStaticToken(),
    tenantB: generateStaticToken(),
    reader: generateStaticToken(),
  };
  let c: Cluster;
  const clients: SchedulerClient[] = [];
  const as = (t: string) => {
    const client = new SchedulerClient({
      endpoint: c.scheduler.address,
      token: t,
      timeoutMs: 15_000,
      retries: 1,
    });
    clients.push(client);
    return client;
  };
  let deviceUuid = '';

  beforeAll(async () => {
    c = await startCluster([demoHostDefinition(HOST)], {
      scheduler: {
        logger: quiet(),
        auth: {
          mode: 'token',
          staticTokens: [
            { token: token.agent, roles: ['agent'], subject: HOST },
            { token: token.admin, roles: ['admin'], subject: 'operator' },
            { token: token.tenantA, roles: ['service'], subject: 'tenant-a' },
            { token: token.tenantB, roles: ['service'], subject: 'tenant-b' },
            { token: token.reader, roles: ['reader'], subject: 'auditor' },
          ],
        },
      },
      agent: { logger: quiet(), schedulerToken: token.agent, auth: { mode: 'none' } },
    });
    const admin = as(token.admin);
    await eventually(
      () => admin.hosts.getHost({ name: HOST }).catch(() => null),
      (r) => r?.host?.connected === true,
      15_000,
    );
    await createNvmeProfile(admin, 'nvme2');
    const tenant = as(token.tenantA);
    const bound = await createAndBind(tenant, 'pick-nvme2', 'vm-of-a', HOST);
    deviceUuid = bound.deviceUuid;
    const address = (await admin.devices.getDevice({ device: uuidRef(deviceUuid) })).device!.address;
    await tenant.arqs.deleteAcceleratorRequests({ uuids: [bound.uuid], instanceUuid: '' });
    const d = await settledDevice(admin, HOST, address, 60_000);
    expect(stateName(d.deviceState), d.errorReason).toBe('DEVICE_STATE_AVAILABLE');
  }, 90_000);

  afterAll(async () => {
    for (const client of clients) client.close();
    await c?.stop();
  });

  const list = (client: SchedulerClient, of: { instanceUuid: string } | { device: string }) =>
    client.certificates
      .listErasureCertificates({
        of:
          'device' in of
            ? { $case: 'device', value: uuidRef(of.device) }
            : { $case: 'instanceUuid', value: of.instanceUuid },
      })
      .then(
        (r) => r.certificates.map((x) => x.instanceUuid),
        (e: BerthClientError) => `${e.codeName} ${e.reason ?? ''}`.trim(),
      );

  it('the tenant that bound the instance reads its certificates; another tenant does not; admin and reader read all', async () => {
    expect(await list(as(token.tenantA), { instanceUuid: 'vm-of-a' })).toEqual(['vm-of-a']);
    expect(await list(as(token.tenantA), { device: deviceUuid })).toEqual(['vm-of-a']);
    expect(await list(as(token.tenantB), { instanceUuid: 'vm-of-a' })).toBe(
      'PERMISSION_DENIED NOT_INSTANCE_OWNER',
    );
    // A device's list is filtered to the caller's instances.
    expect(await list(as(token.tenantB), { device: deviceUuid })).toEqual([]);
    expect(await list(as(token.reader), { instanceUuid: 'vm-of-a' })).toEqual(['vm-of-a']);
    expect(await list(as(token.admin), { device: deviceUuid })).toEqual(['vm-of-a']);
  });

  it('only an admin rotates a key; everyone who reads may list the keys', async () => {
    const rotate = (t: string) =>
      as(t)
        .certificates.rotateAgentKey({ host: HOST, publicKey: '{}' })
        .then(
          () => 'OK',
          (e: BerthClientError) => e.codeName,
        );
    expect(await rotate(token.tenantA)).toBe('PERMISSION_DENIED');
    expect(await rotate(token.reader)).toBe('PERMISSION_DENIED');
    // The admin passes the role check and is refused for the key itself, naming the field.
    expect(await rotate(token.admin)).toBe('INVALID_ARGUMENT');
    const keys = await as(token.tenantB).certificates.listAgentKeys({ host: HOST });
    expect(keys.keys).toHaveLength(1);
  });
});
