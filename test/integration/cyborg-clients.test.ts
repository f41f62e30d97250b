/**
 * Every client's bind against Berth's Cyborg API (docs/cyborg.md), and the
 * tenant's certificates of what Nova bound for it. Real clients:
 * openstacksdk's `update_accelerator_request` (test/integration/python/
 * sdk_arq_patch.py) and `openstack accelerator arq bind|unbind|delete`
 * (python3-cyborgclient) send the patch to one ARQ's own URL,
 * `PATCH /accelerator_requests/{uuid}` with the body `{uuid: [ops]}`. A
 * scheduler with Berth's own tokens (`--cyborg-auth berth`, a tenant's token
 * whose subject is its project), a simulated host, a real Placement, and no
 * Nova (no events: a lab).
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type BerthClientError, SchedulerClient } from '../../src/client/sdk.js';
import { parseKeySet, publishedKeySet, verifyOffline } from '../../src/erasure/verify.js';
import { DeviceState } from '../../src/gen/berth/scheduler/v1/device.js';
import { createLogger } from '../../src/logging.js';
import { generateStaticToken } from '../../src/server/grpc/auth/tokens.js';
import { demoHostDefinition } from '../../src/sim/host.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import { getDevice, knownDevice } from '../helpers/invariants.js';
import {
  type PlacementServer,
  providerView,
  startPlacementServer,
  testPlacementOptions,
} from '../helpers/placement.js';
import {
  available,
  OPENSTACK_CLI,
  openstackAccelerator,
  PYTHON,
  placementApi,
} from '../helpers/prerequisites.js';
import { eventually } from '../helpers/wait.js';

const HOST = 'clients-host';
const NVME0 = '0000:3d:00.0';
const NVME1 = '0000:3e:00.0';
const RC = 'CUSTOM_PCI_144D_A824';
const PROFILE = 'nvme-one';
const run = promisify(execFile);
// Each run of the openstack CLI or openstacksdk is a Python start (seconds on a loaded machine).
const quiet = () => createLogger({ level: process.env.BERTH_LOG_LEVEL ?? 'silent' });
const have =
  available(placementApi(), "every client's bind") &&
  available(openstackAccelerator(), "every client's bind");

interface ArqDoc {
  uuid: string;
  state: string;
  instance_uuid: string | null;
  project_id: string | null;
  [field: string]: unknown;
}

describe.skipIf(!have)("every client's bind through one ARQ's URL; the tenant's certificates", () => {
  const token = {
    agent: generateStaticToken(),
    admin: generateStaticToken(),
    projA: generateStaticToken(),
    projB: generateStaticToken(),
    nova: generateStaticToken(),
  };
  let placement: PlacementServer;
  let c: Cluster;
  let url = '';
  let admin: SchedulerClient;
  const clients: SchedulerClient[] = [];

  /** One HTTP call to Berth's Cyborg API. */
  async function http(
    method: string,
    path: string,
    o: { token?: string; service?: boolean; body?: unknown } = {},
  ): Promise<{ status: number; body: Record<string, unknown> & { error_message?: string } }> {
    const headers: Record<string, string> = { 'X-Auth-Token': o.token ?? token.projA };
    if (o.service) headers['X-Service-Token'] = token.nova;
    if (o.body !== undefined) headers['Content-Type'] = 'application/json';
    const res = await fetch(`${url}${path}`, {
      method,
      headers,
      ...(o.body !== undefined ? { body: JSON.stringify(o.body) } : {}),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : {} };
  }
  const fault = (body: { error_message?: string }): string => JSON.parse(body.error_message!).faultstring;
  const newArq = async (t = token.projA): Promise<string> => {
    const r = await http('POST', '/v2/accelerator_requests', {
      token: t,
      body: { device_profile_name: PROFILE },
    });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    return (r.body.arqs as ArqDoc[])[0]!.uuid;
  };
  const arq = async (uuid: string): Promise<ArqDoc> =>
    (await http('GET', `/v2/accelerator_requests/${uuid}`, { token: token.admin })).body as ArqDoc;
  const provider = async (address: string) =>
    (await providerView(placement, `${HOST}_${address.toUpperCase()}`))!;
  const available_ = (address: string) =>
    eventually(
      async () => [
        // Not known yet (the agent registered, its inventory not applied yet): undefined.
        (await knownDevice(admin, HOST, address))?.deviceState,
        (await providerView(placement, `${HOST}_${address.toUpperCase()}`))?.inventories[RC]?.reserved,
      ],
      ([s, reserved]) => s === DeviceState.DEVICE_STATE_AVAILABLE && reserved === 0,
      60_000,
    );
  const sdk = async (t: string, service: string, uuid: string, ...action: string[]) => {
    const r = await run(PYTHON, [
      join(import.meta.dirname, 'python/sdk_arq_patch.py'),
      `${url}/v2`,
      t,
      service,
      uuid,
      ...action,
    ]).catch((e: { stdout: string; stderr: string }) => e);
    if (!r.stdout.trim()) throw new Error(`sdk_arq_patch.py ${action.join(' ')}: ${r.stderr}`);
    return JSON.parse(r.stdout) as ArqDoc & { error?: number; message?: string };
  };
  const osc = (args: string[], t = token.admin) =>
    run(OPENSTACK_CLI, [
      '--os-auth-type',
      'admin_token',
      '--os-token',
      t,
      '--os-endpoint',
      `${url}/v2`,
      'accelerator',
      ...args,
    ]);
  const grpcAs = (t: string) => {
    const client = new SchedulerClient({
      endpoint: c.scheduler.address,
      token: t,
      timeoutMs: 15_000,
      retries: 1,
    });
    clients.push(client);
    return client;
  };

  beforeAll(async () => {
    placement = await startPlacementServer();
    c = await startCluster([demoHostDefinition(HOST)], {
      scheduler: {
        logger: quiet(),
        auth: {
          mode: 'token',
          staticTokens: [
            { token: token.agent, roles: ['agent'], subject: HOST },
            { token: token.admin, roles: ['admin'], subject: 'operator' },
            { token: token.projA, roles: ['service'], subject: 'proj-a' },
            { token: token.projB, roles: ['service'], subject: 'proj-b' },
            { token: token.nova, roles: ['service'], subject: 'nova' },
          ],
        },
        placement: testPlacementOptions(placement.url),
        cyborg: {
          listen: '127.0.0.1:0',
          auth: { type: 'berth' },
          nova: null,
          timeoutSeconds: 3,
          retryMaxSeconds: 0.5,
        },
      },
      agent: { logger: quiet(), schedulerToken: token.agent, auth: { mode: 'none' } },
    });
    url = `http://${c.scheduler.cyborg!.address}`;
    admin = grpcAs(token.admin);
    await available_(NVME0);
    await available_(NVME1);
    const made = await http('POST', '/v2/device_profiles', {
      token: token.admin,
      body: [{ name: PROFILE, groups: [{ [`resources:${RC}`]: '1' }] }],
    });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
  }, 180_000);

  afterAll(async () => {
    for (const client of clients) client.close();
    await c?.stop();
    await placement?.stop();
  });

  it("openstacksdk binds and unbinds a tenant's ARQ (Nova's service token); the project owns the instance and reads its certificates", async () => {
    const uuid = await newArq();
    const rp = (await provider(NVME0)).uuid;
    const instance = randomUUID();
    const bound = await sdk(token.projA, token.nova, uuid, 'bind', HOST, instance, rp);
    expect(bound.error, bound.message).toBeUndefined();
    // 202: the bind runs after the answer (Cyborg's asynchronous bind).
    expect(bound.uuid).toBe(uuid);
    const done = await eventually(
      () => arq(uuid),
      (a) => a.state === 'Bound' && a.instance_uuid === instance,
      30_000,
    );
    expect(done.project_id).toBe('proj-a');
    // No Nova: nothing is owed.
    expect((await c.scheduler.useCases.getArq(uuid as never)).novaEvent ?? null).toBeNull();
    // Without the service token the tenant may not (as through the collection).
    const user = await sdk(token.projA, '', uuid, 'unbind');
    expect(user.error).toBe(403);
    const unbound = await sdk(token.projA, token.nova, uuid, 'unbind');
    expect(unbound.error, unbound.message).toBeUndefined();
    expect(unbound).toMatchObject({ state: 'Initial', instance_uuid: null });
    // The device was scrubbed; the certificate is the tenant's, through either credential path.
    await available_(NVME0);
    const certificates = (t: string) =>
      grpcAs(t)
        .certificates.listErasureCertificates({ of: { $case: 'instanceUuid', value: instance } })
        .then(
          (r) => r.certificates.map((x) => x.instanceUuid),
          (e: BerthClientError) => `${e.codeName} ${e.reason ?? ''}`.trim(),
        );
    expect(await certificates(token.projA)).toEqual([instance]);
    expect(await certificates(token.projB)).toBe('PERMISSION_DENIED NOT_INSTANCE_OWNER');
    const mine = await http('GET', `/v2/erasure_certificates?instance=${instance}`);
    expect(mine.status, JSON.stringify(mine.body)).toBe(200);
    const list = mine.body.erasure_certificates as Array<{
      instance_uuid: string;
      arq_uuid: string;
      jws: string;
    }>;
    expect(list).toHaveLength(1);
    expect(list[0]).toMatchObject({ instance_uuid: instance, arq_uuid: uuid });
    // The certificate names the project, and verifies offline against the host's published keys.
    const keys = parseKeySet(publishedKeySet((await admin.certificates.listAgentKeys({ host: HOST })).keys));
    const verified = verifyOffline(list[0]!.jws, keys, { host: HOST });
    expect(verified.certificate.claims.tenant).toEqual({
      arq_uuid: uuid,
      instance_uuid: instance,
      project_id: 'proj-a',
    });
    const theirs = await http('GET', `/v2/erasure_certificates?instance=${instance}`, { token: token.projB });
    expect(theirs.status).toBe(403);
    expect(fault(theirs.body)).toContain('own instances only');
    expect((await http('GET', '/v2/erasure_certificates')).status).toBe(400);
    expect((await http('DELETE', `/v2/accelerator_requests/${uuid}`)).status).toBe(204);
  }, 240_000);

  it("one ARQ's URL takes a body keyed by that uuid alone: another uuid, several keys → 400 naming it", async () => {
    const uuid = await newArq();
    const other = await newArq();
    const remove = [{ path: '/hostname', op: 'remove' }];
    const cases: Array<[unknown, string]> = [
      [{ [other]: remove }, `not by "${other}"`],
      [{ [uuid]: remove, [other]: remove }, '2 keys'],
      [remove, 'body'],
    ];
    for (const [body, says] of cases) {
      const r = await http('PATCH', `/v2/accelerator_requests/${uuid}`, { service: true, body });
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(fault(r.body)).toContain(says);
    }
    // Another project's ARQ by its URL: 404, as if it did not exist.
    const r = await http('PATCH', `/v2/accelerator_requests/${uuid}`, {
      token: token.projB,
      service: true,
      body: { [uuid]: remove },
    });
    expect(r.status).toBe(404);
    expect((await http('DELETE', `/v2/accelerator_requests?arqs=${uuid},${other}`)).status).toBe(204);
  }, 60_000);

  it('`openstack accelerator arq bind|unbind|delete`: the operator (an admin, no service token)', async () => {
    await available_(NVME1);
    const made = JSON.parse((await osc(['arq', 'create', PROFILE, '-f', 'json'])).stdout) as ArqDoc;
    const rp = (await provider(NVME1)).uuid;
    const instance = randomUUID();
    // The CLI's last argument (project_id) is not sent below microversion 2.1.
    await osc(['arq', 'bind', made.uuid, HOST, instance, rp, 'operator', '-f', 'json']);
    await eventually(
      () => arq(made.uuid),
      (a) => a.state === 'Bound' && a.instance_uuid === instance,
      30_000,
    );
    expect((await getDevice(admin, HOST, NVME1)).deviceState).toBe(DeviceState.DEVICE_STATE_ALLOCATED);
    const unbound = JSON.parse((await osc(['arq', 'unbind', made.uuid, '-f', 'json'])).stdout) as ArqDoc;
    expect(unbound.state).toBe('Initial');
    await osc(['arq', 'delete', made.uuid]);
    expect((await http('GET', `/v2/accelerator_requests/${made.uuid}`, { token: token.admin })).status).toBe(
      404,
    );
    await available_(NVME1);
  }, 240_000);

  it("binding a project's ARQ to another project's instance is refused without naming that project's ARQs", async () => {
    const theirs = await newArq(token.projB);
    const instance = randomUUID();
    const rp = (await provider(NVME1)).uuid;
    const bind = (uuid: string, t: string) =>
      http('PATCH', `/v2/accelerator_requests/${uuid}`, {
        token: t,
        service: true,
        body: {
          [uuid]: [
            { path: '/hostname', op: 'add', value: HOST },
            { path: '/device_rp_uuid', op: 'add', value: rp },
            { path: '/instance_uuid', op: 'add', value: instance },
          ],
        },
      });
    expect((await bind(theirs, token.projB)).status).toBe(202);
    await eventually(
      () => arq(theirs),
      (a) => a.state === 'Bound',
      30_000,
    );
    const mine = await newArq();
    const refused = await bind(mine, token.projA);
    expect(refused.status).toBe(400);
    expect(fault(refused.body)).toContain('already has accelerator requests');
    expect(fault(refused.body)).not.toContain(theirs);
    // Its own project is told which.
    const more = await newArq(token.projB);
    const own = await bind(more, token.projB);
    expect(own.status).toBe(400);
    expect(fault(own.body)).toContain(theirs);
    expect(
      (
        await http('DELETE', `/v2/accelerator_requests?instance=${instance}`, {
          token: token.projB,
          service: true,
        })
      ).status,
    ).toBe(204);
    expect((await http('DELETE', `/v2/accelerator_requests?arqs=${mine}`)).status).toBe(204);
    expect(
      (await http('DELETE', `/v2/accelerator_requests?arqs=${more}`, { token: token.projB })).status,
    ).toBe(204);
    await available_(NVME1);
  }, 240_000);
});
