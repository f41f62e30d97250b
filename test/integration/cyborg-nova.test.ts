/**
 * Berth as Nova's accelerator service (docs/cyborg.md), driven by Nova's own
 * Cyborg client (python3-nova's nova/accelerator/cyborg.py `_CyborgClient`,
 * test/integration/python/nova_cyborg.py) as Nova's conductor and compute
 * drive it, against a scheduler, the agent of a simulated host and a real
 * Placement (placement-api 8.0). A small HTTP server plays Nova's API and
 * receives the accelerator-request-bound events.
 *
 * - the device profile → Nova's request groups; ARQs created; bound with the
 *   provider Placement's allocation candidates name; the event; the attach
 *   handles; deleted by instance; the media scrubbed (read from the
 *   namespace's backing file) before Placement offers the device again;
 * - while it is scrubbed, a bind to it is refused and Nova is told `failed`;
 * - Nova down: the event is kept across a scheduler restart and delivered;
 * - a double bind, another project's ARQs, a user without a service token,
 *   malformed patches, unknown microversions.
 */
import { type ChildProcessWithoutNullStreams, execFile, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeviceState } from '../../src/gen/berth/scheduler/v1/device.js';
import { parseUuid } from '../../src/identifiers.js';
import type { CyborgOptions } from '../../src/server/scheduler/cyborg/config.js';
import type { PlacementOptions } from '../../src/server/scheduler/placement/config.js';
import { demoHostDefinition } from '../../src/sim/host.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import { getDevice } from '../helpers/invariants.js';
import { type Gate, nvmeGateSync } from '../helpers/nvme-gate.js';
import { holdsTenantData, writeTenantData } from '../helpers/nvme-host.js';
import {
  type PlacementServer,
  providerView,
  startPlacementServer,
  testPlacementOptions,
} from '../helpers/placement.js';
import {
  available,
  novaCyborgClient,
  OPENSTACK_CLI,
  openstackAccelerator,
  PYTHON,
  placementApi,
} from '../helpers/prerequisites.js';
import { eventually } from '../helpers/wait.js';

const HOST = 'sim-host-1';
const NVME0 = '0000:3d:00.0';
const NVME1 = '0000:3e:00.0';
const RC = 'CUSTOM_PCI_144D_A824';
const PROFILE = 'nvme-for-nova';
const run = promisify(execFile);
const rpName = (address: string) => `${HOST}_${address.toUpperCase()}`;
const have =
  available(placementApi(), "Berth as Nova's accelerator service") &&
  available(novaCyborgClient(), "Berth as Nova's accelerator service");

/** An ARQ as Cyborg's API (and Nova's client) returns it. */
interface ArqDoc {
  uuid: string;
  state: string;
  attach_handle_info: Record<string, string> | null;
  [field: string]: unknown;
}

/** A JSON answer of the Cyborg API (the fields the tests read). */
interface Doc {
  arqs: ArqDoc[];
  error_message: string;
  default_version: Record<string, unknown>;
  device_profile: { groups: unknown };
  [field: string]: unknown;
}

/** Nova's API, as far as Cyborg talks to it: os-server-external-events. */
class FakeNovaApi {
  server: Server | null = null;
  url = '';
  /** 'ok' (200), 'down' (503), 'not-on-host' (207, every event 422). */
  mode: 'ok' | 'down' | 'not-on-host' = 'ok';
  received: Array<{ headers: IncomingHttpHeaders; events: Array<Record<string, string>>; answered: number }> =
    [];
  private waiters: Array<() => void> = [];

  async start(): Promise<void> {
    this.server = createServer((req, res) => {
      let text = '';
      req.on('data', (c) => (text += c));
      req.on('end', () => {
        const events = req.url === '/v2.1/os-server-external-events' ? JSON.parse(text).events : [];
        const answered = this.mode === 'ok' ? 200 : this.mode === 'down' ? 503 : 207;
        this.received.push({ headers: req.headers, events, answered });
        const body =
          answered === 207
            ? { events: events.map((e: object) => ({ ...e, code: 422 })) }
            : answered === 200
              ? { events: events.map((e: object) => ({ ...e, code: 200 })) }
              : { error: 'down' };
        res.writeHead(answered, { 'Content-Type': 'application/json' }).end(JSON.stringify(body));
        for (const w of this.waiters.splice(0)) w();
      });
    });
    await new Promise<void>((r) => this.server!.listen(0, '127.0.0.1', r));
    const a = this.server.address();
    this.url = `http://127.0.0.1:${typeof a === 'object' && a ? a.port : 0}/v2.1`;
  }

  /** The first taken (200) event for ARQ `tag`. */
  async event(
    tag: string,
    timeoutMs = 30_000,
  ): Promise<{ event: Record<string, string>; headers: IncomingHttpHeaders }> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      for (const r of this.received) {
        const e = r.events.find((x) => x.tag === tag);
        if (e && r.answered === 200) return { event: e, headers: r.headers };
      }
      if (Date.now() > deadline)
        throw new Error(`no event for ${tag}: ${JSON.stringify(this.received.map((r) => r.events))}`);
      await new Promise<void>((resolve) => {
        this.waiters.push(resolve);
        setTimeout(resolve, 1000);
      });
    }
  }

  /** Resolves once `n` attempts in all were answered with `status`. */
  async attempts(status: number, n: number): Promise<void> {
    await eventually(
      async () => this.received.filter((r) => r.answered === status).length,
      (k) => k >= n,
      30_000,
    );
  }

  async stop(): Promise<void> {
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
  }
}

/** Nova's `_CyborgClient`, one process: commands on stdin, answers on stdout. */
class NovaCyborg {
  private constructor(
    private readonly p: ChildProcessWithoutNullStreams,
    private readonly lines: AsyncIterator<string>,
  ) {}
  stderr = '';

  static async start(url: string, userToken: string, serviceToken: string): Promise<NovaCyborg> {
    const p = spawn(PYTHON, [
      join(import.meta.dirname, 'python/nova_cyborg.py'),
      url,
      userToken,
      serviceToken,
    ]);
    const lines = createInterface({ input: p.stdout })[Symbol.asyncIterator]();
    const n = new NovaCyborg(p, lines);
    p.stderr.on('data', (c) => (n.stderr = (n.stderr + c).slice(-20_000)));
    const first = await lines.next();
    if (first.done) throw new Error(`nova_cyborg.py did not start: ${n.stderr}`);
    return n;
  }

  async call<T = Record<string, unknown>>(
    cmd: Record<string, unknown>,
  ): Promise<T & { error?: string; message?: string }> {
    this.p.stdin.write(`${JSON.stringify(cmd)}\n`);
    const next = await this.lines.next();
    if (next.done) throw new Error(`nova_cyborg.py exited: ${this.stderr}`);
    return JSON.parse(next.value);
  }

  stop(): void {
    this.p.stdin.end();
    this.p.kill();
  }
}

describe.skipIf(!have)("Berth as Nova's accelerator service, driven by Nova's own Cyborg client", () => {
  let placement: PlacementServer;
  let nova: FakeNovaApi;
  let c: Cluster;
  let gate: Gate;
  let conductor: NovaCyborg;
  let cyborgUrl: string;

  const cyborgOptions = (): CyborgOptions => ({
    listen: '127.0.0.1:0',
    auth: { type: 'noauth' },
    nova: { url: nova.url, auth: { type: 'noauth', user: 'admin' }, claimTtlSeconds: 60 },
    timeoutSeconds: 3,
    retryMaxSeconds: 0.5,
  });

  /** One HTTP call to Berth's Cyborg API. */
  async function http(
    method: string,
    path: string,
    o: { token?: string; service?: boolean; version?: string; body?: unknown } = {},
  ): Promise<{ status: number; headers: Headers; body: Doc }> {
    const headers: Record<string, string> = { 'X-Auth-Token': o.token ?? 'alice:proj-a' };
    if (o.service) headers['X-Service-Token'] = 'nova';
    if (o.version) headers['OpenStack-API-Version'] = o.version;
    if (o.body !== undefined) headers['Content-Type'] = 'application/json';
    const res = await fetch(`${cyborgUrl}${path}`, {
      method,
      headers,
      ...(o.body !== undefined ? { body: typeof o.body === 'string' ? o.body : JSON.stringify(o.body) } : {}),
    });
    const text = await res.text();
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {
      // not JSON
    }
    return { status: res.status, headers: res.headers, body: body as Doc };
  }

  /** Cyborg's error message out of its error body. */
  const fault = (body: Doc): string => JSON.parse(body.error_message).faultstring;

  /** The provider Nova's scheduler would pick for `address`: from Placement's allocation candidates. */
  async function candidateProvider(address: string): Promise<string> {
    const { body } = await placement.call<{ provider_summaries: Record<string, unknown> }>(
      'GET',
      `/allocation_candidates?resources=${RC}:1`,
    );
    const view = await providerView(placement, rpName(address));
    expect(view, `provider ${rpName(address)}`).not.toBeNull();
    expect(Object.keys(body.provider_summaries)).toContain(view!.uuid);
    return view!.uuid;
  }

  const reserved = async (address: string) =>
    (await providerView(placement, rpName(address)))?.inventories[RC]?.reserved;

  beforeAll(async () => {
    placement = await startPlacementServer();
    nova = new FakeNovaApi();
    await nova.start();
    const placementOptions: PlacementOptions = testPlacementOptions(placement.url);
    c = await startCluster([demoHostDefinition(HOST)], {
      scheduler: { placement: placementOptions, cyborg: cyborgOptions() },
      agentConfig: (raw) => {
        const nvme = raw.nvme as Record<string, unknown>;
        gate ??= nvmeGateSync(`${String(raw.state_dir)}/../gate`, String(nvme.nvme_cli), 'sanitize');
        return { ...raw, nvme: { ...nvme, nvme_cli: gate.nvmeCli } };
      },
    });
    await c.waitForDevices(HOST, 9);
    cyborgUrl = `http://${c.scheduler.cyborg!.address}`;
    await eventually(
      () => reserved(NVME0),
      (r) => r === 0,
      30_000,
    );
    await eventually(
      () => reserved(NVME1),
      (r) => r === 0,
      30_000,
    );
    // The operator's device profile, through Cyborg's API (admins only).
    const created = await http('POST', '/v2/device_profiles', {
      token: 'admin',
      body: [{ name: PROFILE, description: 'one NVMe drive', groups: [{ [`resources:${RC}`]: '1' }] }],
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    conductor = await NovaCyborg.start(`${cyborgUrl}/v2`, 'alice:proj-a', 'nova');
  }, 180_000);

  afterAll(async () => {
    conductor?.stop();
    gate?.open();
    await c?.stop();
    await nova?.stop();
    await placement?.stop();
  });

  it('serves the version documents and the microversion headers as Cyborg does; 406 for a version it does not have', async () => {
    const root = await http('GET', '/');
    expect(root.status).toBe(200);
    expect(root.body.default_version).toMatchObject({ id: 'v2.0', min_version: '2.0', max_version: '2.3' });
    const v2 = await http('GET', '/v2', { version: 'accelerator 2.2' });
    expect(v2.status).toBe(200);
    expect(v2.headers.get('openstack-api-version')).toBe('accelerator 2.2');
    expect(v2.headers.get('openstack-api-minimum-version')).toBe('2.0');
    expect(v2.headers.get('openstack-api-maximum-version')).toBe('2.3');
    expect(v2.headers.get('vary')).toBe('OpenStack-API-Version');
    // No header: 2.0 (Nova sends none).
    expect((await http('GET', '/v2/device_profiles')).headers.get('openstack-api-version')).toBe(
      'accelerator 2.0',
    );
    expect(
      (await http('GET', '/v2', { version: 'accelerator latest' })).headers.get('openstack-api-version'),
    ).toBe('accelerator 2.3');
    for (const version of ['accelerator 2.9', 'accelerator 3.0', 'accelerator two']) {
      const r = await http('GET', '/v2/device_profiles', { version });
      expect(r.status, version).toBe(406);
      expect(fault(r.body)).toMatch(/version|Invalid value/i);
      expect(r.headers.get('openstack-api-maximum-version')).toBe('2.3');
    }
    // A profile by name needs 2.2.
    expect((await http('GET', `/v2/device_profiles/${PROFILE}`)).status).toBe(406);
    const byName = await http('GET', `/v2/device_profiles/${PROFILE}`, { version: 'accelerator 2.2' });
    expect(byName.status).toBe(200);
    expect(byName.body.device_profile.groups).toEqual([{ [`resources:${RC}`]: '1' }]);
  });

  it("profiles: only admins write them; a group that is not Berth's is refused naming the key", async () => {
    const denied = await http('POST', '/v2/device_profiles', {
      body: [{ name: 'mine', groups: [{ [`resources:${RC}`]: '1' }] }],
    });
    expect(denied.status).toBe(403);
    const accel = await http('POST', '/v2/device_profiles', {
      token: 'admin',
      body: [{ name: 'fpga', groups: [{ 'resources:FPGA': '1', 'accel:bitstream_id': 'x' }] }],
    });
    expect(accel.status).toBe(400);
    expect(fault(accel.body)).toContain('accel:bitstream_id');
    const count = await http('POST', '/v2/device_profiles', {
      token: 'admin',
      body: [{ name: 'bad', groups: [{ [`resources:${RC}`]: 'two' }] }],
    });
    expect(count.status).toBe(400);
    expect(fault(count.body)).toContain(`resources:${RC}`);
    expect((await http('GET', '/v2/device_profiles/00000000-0000-4000-8000-000000000000')).status).toBe(404);
  });

  it("Nova's conductor and compute: groups, ARQs, bind by Placement provider, the event, attach handles, delete; the media scrubbed before Placement offers the device again", async () => {
    // Conductor: the profile's request groups, as Nova merges them into the request spec.
    const groups = await conductor.call<{ groups: Array<Record<string, unknown>> }>({
      op: 'request_groups',
      profile: PROFILE,
    });
    expect(groups.error, groups.message).toBeUndefined();
    expect(groups.groups).toEqual([
      { requester_id: 'device_profile_0', resources: { [RC]: 1 }, required_traits: [], forbidden_traits: [] },
    ]);
    const created = await conductor.call<{ arqs: ArqDoc[] }>({
      op: 'create_arqs',
      profile: PROFILE,
    });
    expect(created.error, created.message).toBeUndefined();
    expect(created.arqs).toHaveLength(1);
    const arq = created.arqs[0]!;
    expect(arq).toMatchObject({
      state: 'Initial',
      device_profile_name: PROFILE,
      device_profile_group_id: 0,
      project_id: 'proj-a',
    });
    // Placement picks the provider (Nova's scheduler); the conductor binds with it.
    const rp = await candidateProvider(NVME0);
    const instance = randomUUID();
    const bound = await conductor.call({
      op: 'bind',
      bindings: { [arq.uuid]: { hostname: HOST, device_rp_uuid: rp, instance_uuid: instance } },
    });
    expect(bound.error, bound.message).toBeUndefined();
    // Compute waits for the event.
    const event = await nova.event(arq.uuid);
    expect(event.event).toMatchObject({
      name: 'accelerator-request-bound',
      server_uuid: instance,
      tag: arq.uuid,
      status: 'completed',
    });
    expect(event.headers['openstack-api-version']).toBe('compute 2.82');
    // Compute reads the attach handles.
    const resolved = await conductor.call<{ arqs: ArqDoc[] }>({
      op: 'arqs',
      instance,
      only_resolved: true,
    });
    expect(resolved.arqs).toHaveLength(1);
    expect(resolved.arqs[0]).toMatchObject({
      uuid: arq.uuid,
      state: 'Bound',
      hostname: HOST,
      device_rp_uuid: rp,
      instance_uuid: instance,
      attach_handle_type: 'PCI',
      attach_handle_info: { domain: '0000', bus: '3d', device: '00', function: '0' },
    });
    const pci = await conductor.call<{ pci: Array<Record<string, string>> }>({ op: 'pci', instance });
    expect(pci.pci[0]).toMatchObject({ pci_slot: '0000:3d:00.0', arq_uuid: arq.uuid });
    expect((await getDevice(c.client, HOST, NVME0)).deviceState).toBe(DeviceState.DEVICE_STATE_ALLOCATED);
    await eventually(
      () => reserved(NVME0),
      (r) => r === 1,
      30_000,
    );

    // The guest writes its data; then the instance is deleted, its scrub held at the gate.
    const ns = join(c.host(HOST).sim.devRoot, 'nvme0n1');
    await writeTenantData(ns, 16 * 1024 * 1024);
    gate.close();
    const deleted = await conductor.call({ op: 'delete_instance', instance });
    expect(deleted.error, deleted.message).toBeUndefined();
    await gate.reached();
    expect(await holdsTenantData(ns)).toBe(true);
    expect(await reserved(NVME0)).toBe(1);

    // Meanwhile another instance is bound to that provider: refused, and Nova is told `failed`.
    const second = await conductor.call<{ arqs: ArqDoc[] }>({
      op: 'create_arqs',
      profile: PROFILE,
    });
    const other = second.arqs[0]!;
    const otherInstance = randomUUID();
    const accepted = await conductor.call({
      op: 'bind',
      bindings: { [other.uuid]: { hostname: HOST, device_rp_uuid: rp, instance_uuid: otherInstance } },
    });
    expect(accepted.error, accepted.message).toBeUndefined();
    const failed = await nova.event(other.uuid);
    expect(failed.event).toMatchObject({ server_uuid: otherInstance, tag: other.uuid, status: 'failed' });
    const otherArq = await conductor.call<{ arq: ArqDoc }>({ op: 'arq', uuid: other.uuid });
    // BindFailed keeps its instance (as Cyborg's does): deleting the instance's ARQs removes it.
    expect(otherArq.arq).toMatchObject({
      state: 'BindFailed',
      attach_handle_info: null,
      instance_uuid: otherInstance,
    });
    expect(
      (await http('DELETE', `/v2/accelerator_requests?instance=${otherInstance}`, { service: true })).status,
    ).toBe(204);
    expect((await http('GET', `/v2/accelerator_requests/${other.uuid}`)).status).toBe(404);

    // The scrub goes on; Placement offers the device again only once the media is clean.
    gate.open();
    await eventually(
      () => reserved(NVME0),
      (r) => r === 0,
      60_000,
    );
    expect(await holdsTenantData(ns)).toBe(false);
    expect((await getDevice(c.client, HOST, NVME0)).deviceState).toBe(DeviceState.DEVICE_STATE_AVAILABLE);
    // Deleting by instance again is a no-op, as Nova expects.
    expect((await conductor.call({ op: 'delete_instance', instance })).error).toBeUndefined();
    expect((await conductor.call({ op: 'arqs', instance })).error).toBe('AcceleratorRequestOpFailed');
  }, 120_000);

  it('refuses a double bind, a bind without a service token, malformed patches and other projects', async () => {
    const created = await http('POST', '/v2/accelerator_requests', {
      body: { device_profile_name: PROFILE },
    });
    expect(created.status).toBe(201);
    const arq = created.body.arqs[0]!.uuid;
    const rp = await candidateProvider(NVME1);
    const instance = randomUUID();
    const bind = (uuid: string, inst: string, o: { service?: boolean; token?: string } = { service: true }) =>
      http('PATCH', '/v2/accelerator_requests', {
        ...o,
        body: {
          [uuid]: [
            { path: '/hostname', op: 'add', value: HOST },
            { path: '/device_rp_uuid', op: 'add', value: rp },
            { path: '/instance_uuid', op: 'add', value: inst },
          ],
        },
      });
    // A user, not Nova: no service token.
    const user = await bind(arq, instance, {});
    expect(user.status).toBe(403);
    expect(fault(user.body)).toContain('service token');
    // Malformed patches, each naming what is wrong.
    const malformed: Array<[unknown, string]> = [
      ['{not json', 'body'],
      [{ [arq]: [{ path: '/hostname', op: 'replace', value: HOST }] }, 'op'],
      [{ [arq]: [{ path: '/state', op: 'add', value: 'Bound' }] }, 'Invalid path'],
      [
        { [arq]: [{ path: '/hostname', op: 'add', value: HOST }] },
        'Fields absent in patch device_rp_uuid,instance_uuid',
      ],
      [{ 'not-a-uuid': [] }, 'not a UUID'],
      [
        {
          [arq]: [
            { path: '/hostname', op: 'add', value: HOST },
            { path: '/device_rp_uuid', op: 'add', value: randomUUID() },
            { path: '/instance_uuid', op: 'add', value: instance },
          ],
        },
        'device_rp_uuid',
      ],
    ];
    for (const [body, says] of malformed) {
      const r = await http('PATCH', '/v2/accelerator_requests', { service: true, body });
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(fault(r.body)).toContain(says);
    }
    expect((await bind(arq, instance)).status).toBe(202);
    expect((await nova.event(arq)).event.status).toBe('completed');
    // A double bind: the bound ARQ to another instance (409), another ARQ to this instance (400, as Cyborg).
    const twice = await bind(arq, randomUUID());
    expect(twice.status).toBe(409);
    expect(fault(twice.body)).toContain('already bound');
    const more = (await http('POST', '/v2/accelerator_requests', { body: { device_profile_name: PROFILE } }))
      .body.arqs[0]!.uuid;
    const extra = await bind(more, instance);
    expect(extra.status).toBe(400);
    expect(fault(extra.body)).toContain('already has accelerator requests');
    // Another project sees none of them, and deletes none.
    const bob = { token: 'bob:proj-b' };
    expect((await http('GET', `/v2/accelerator_requests/${arq}`, bob)).status).toBe(404);
    expect((await http('GET', '/v2/accelerator_requests', bob)).body.arqs).toEqual([]);
    expect((await http('DELETE', `/v2/accelerator_requests?arqs=${more}`, bob)).status).toBe(404);
    expect((await http('GET', `/v2/accelerator_requests/${more}`)).status).toBe(200);
    // The owner cannot delete a bound ARQ itself, nor delete by instance: Nova does.
    expect((await http('DELETE', `/v2/accelerator_requests/${arq}`)).status).toBe(403);
    expect((await http('DELETE', `/v2/accelerator_requests?instance=${instance}`)).status).toBe(403);
    // Unbind (remove): Nova only. The ARQ stays, back to Initial; its device goes to a scrub.
    const unbind = { [arq]: [{ path: '/hostname', op: 'remove' }] };
    expect((await http('PATCH', '/v2/accelerator_requests', { body: unbind })).status).toBe(403);
    expect((await http('PATCH', '/v2/accelerator_requests', { service: true, body: unbind })).status).toBe(
      202,
    );
    const after = (await http('GET', `/v2/accelerator_requests/${arq}`)).body as unknown as ArqDoc;
    expect(after).toMatchObject({ state: 'Initial', instance_uuid: null, attach_handle_info: null });
    expect((await getDevice(c.client, HOST, NVME1)).deviceState).not.toBe(DeviceState.DEVICE_STATE_ALLOCATED);
    // Nothing left for the instance: deleting by instance is a no-op; the unbound ARQ is the owner's to delete.
    expect(
      (await http('DELETE', `/v2/accelerator_requests?instance=${instance}`, { service: true })).status,
    ).toBe(204);
    expect((await http('DELETE', `/v2/accelerator_requests?arqs=${more},${arq}`)).status).toBe(204);
    expect((await http('GET', `/v2/accelerator_requests/${more}`)).status).toBe(404);
    await eventually(
      () => getDevice(c.client, HOST, NVME1),
      (d) => d.deviceState === DeviceState.DEVICE_STATE_AVAILABLE,
      60_000,
    );
  }, 120_000);

  it('keeps an event while Nova is down, across a scheduler restart, and delivers it when Nova is back', async () => {
    await eventually(
      () => reserved(NVME1),
      (r) => r === 0,
      30_000,
    );
    const arq = (await http('POST', '/v2/accelerator_requests', { body: { device_profile_name: PROFILE } }))
      .body.arqs[0]!.uuid;
    const rp = await candidateProvider(NVME1);
    const instance = randomUUID();
    nova.mode = 'down';
    const before = nova.received.filter((r) => r.answered === 503).length;
    const r = await http('PATCH', '/v2/accelerator_requests', {
      service: true,
      body: {
        [arq]: [
          { path: '/hostname', op: 'add', value: HOST },
          { path: '/device_rp_uuid', op: 'add', value: rp },
          { path: '/instance_uuid', op: 'add', value: instance },
        ],
      },
    });
    expect(r.status).toBe(202);
    await nova.attempts(503, before + 2);
    conductor.stop();
    await c.restartScheduler({ cyborg: cyborgOptions() });
    cyborgUrl = `http://${c.scheduler.cyborg!.address}`;
    conductor = await NovaCyborg.start(`${cyborgUrl}/v2`, 'alice:proj-a', 'nova');
    await nova.attempts(503, before + 3);
    const metric = async (name: string) =>
      (await c.scheduler.metrics.registry.getSingleMetric(name)?.get())?.values[0]?.value;
    expect(await metric('berth_cyborg_nova_events_owed')).toBe(1);
    expect(await metric('berth_cyborg_nova_events_failed_attempts')).toBeGreaterThanOrEqual(1);
    nova.mode = 'ok';
    expect((await nova.event(arq)).event).toMatchObject({ server_uuid: instance, status: 'completed' });
    // The ARQ's record no longer owes it once Nova's answer is read.
    await eventually(
      async () => c.scheduler.cyborg!.events!.delivered,
      (n) => n >= 1,
      10_000,
    );
    expect((await c.scheduler.useCases.getArq(parseUuid('arq', arq))).novaEvent).toBeNull();
    expect(await metric('berth_cyborg_nova_events_owed')).toBe(0);
    const arqs = await conductor.call<{ arqs: ArqDoc[] }>({
      op: 'arqs',
      instance,
      only_resolved: true,
    });
    expect(arqs.arqs[0]).toMatchObject({ state: 'Bound', attach_handle_info: { bus: '3e' } });
    expect((await conductor.call({ op: 'delete_instance', instance })).error).toBeUndefined();
  }, 120_000);

  it("binds by a PF's provider (Placement counts VFs on their PF): one of its free VFs", async () => {
    const vfRc = 'CUSTOM_PCI_8086_154C';
    const made = await http('POST', '/v2/device_profiles', {
      token: 'admin',
      body: [{ name: 'vf-for-nova', groups: [{ [`resources:${vfRc}`]: '2' }] }],
    });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    const pf = await providerView(placement, rpName('0000:3b:00.0'));
    expect(pf?.inventories[vfRc]?.total).toBe(4);
    const arqs = await conductor.call<{ arqs: ArqDoc[] }>({ op: 'create_arqs', profile: 'vf-for-nova' });
    expect(arqs.arqs).toHaveLength(2);
    const instance = randomUUID();
    const bindings = Object.fromEntries(
      arqs.arqs.map((a) => [a.uuid, { hostname: HOST, device_rp_uuid: pf!.uuid, instance_uuid: instance }]),
    );
    expect((await conductor.call({ op: 'bind', bindings })).error).toBeUndefined();
    for (const a of arqs.arqs) expect((await nova.event(a.uuid)).event.status).toBe('completed');
    const pci = await conductor.call<{ pci: Array<Record<string, string>> }>({ op: 'pci', instance });
    const slots = pci.pci.map((p) => p.pci_slot).sort();
    expect(slots).toHaveLength(2);
    expect(new Set(slots).size).toBe(2);
    for (const s of slots) expect(s).toMatch(/^0000:3b:02\.[0-7]$/);
    for (const s of slots) expect((await getDevice(c.client, HOST, s!)).physfn).toBe('0000:3b:00.0');
    expect((await conductor.call({ op: 'delete_instance', instance })).error).toBeUndefined();
  }, 60_000);

  it("treats Nova's 207 with every event 422 (instance not on a host yet) as Cyborg does: dropped, not retried", async () => {
    await eventually(
      () => reserved(NVME1),
      (r) => r === 0,
      30_000,
    );
    const arq = (await http('POST', '/v2/accelerator_requests', { body: { device_profile_name: PROFILE } }))
      .body.arqs[0]!.uuid;
    const instance = randomUUID();
    nova.mode = 'not-on-host';
    const delivered = c.scheduler.cyborg!.events!.delivered;
    const r = await http('PATCH', '/v2/accelerator_requests', {
      service: true,
      body: {
        [arq]: [
          { path: '/hostname', op: 'add', value: HOST },
          { path: '/device_rp_uuid', op: 'add', value: await candidateProvider(NVME1) },
          { path: '/instance_uuid', op: 'add', value: instance },
        ],
      },
    });
    expect(r.status).toBe(202);
    // Settled once the answer is read: the ARQ owes nothing more, and it was sent once.
    await eventually(
      async () => c.scheduler.cyborg!.events!.delivered,
      (n) => n > delivered,
      30_000,
    );
    nova.mode = 'ok';
    expect((await c.scheduler.useCases.getArq(parseUuid('arq', arq))).novaEvent).toBeNull();
    expect(nova.received.filter((x) => x.events.some((e) => e.tag === arq)).map((x) => x.answered)).toEqual([
      207,
    ]);
    expect(
      (await http('DELETE', `/v2/accelerator_requests?instance=${instance}`, { service: true })).status,
    ).toBe(204);
  }, 60_000);

  it.skipIf(!available(openstackAccelerator(), 'openstacksdk and openstack accelerator'))(
    'openstacksdk and `openstack accelerator …` list and create profiles and ARQs against the same server',
    async () => {
      const sdk = JSON.parse(
        (
          await run(PYTHON, [
            join(import.meta.dirname, 'python/sdk_accelerator.py'),
            `${cyborgUrl}/v2`,
            'admin',
            'by-sdk',
            RC,
          ])
        ).stdout,
      );
      expect(sdk.profile).toEqual([{ [`resources:${RC}`]: '1' }]);
      expect(sdk.profiles).toEqual(expect.arrayContaining([PROFILE, 'by-sdk']));
      expect(sdk.arq).toMatchObject({ state: 'Initial', profile: 'by-sdk' });
      expect(sdk.arqs).toContainEqual({ uuid: sdk.arq.uuid, state: 'Initial' });
      const osc = async <T>(args: string[]): Promise<T> =>
        JSON.parse(
          (
            await run(OPENSTACK_CLI, [
              '--os-auth-type',
              'admin_token',
              '--os-token',
              'admin',
              '--os-endpoint',
              `${cyborgUrl}/v2`,
              'accelerator',
              ...args,
              '-f',
              'json',
            ])
          ).stdout,
        ) as T;
      const made = await osc<{ uuid: string; name: string }>([
        'device',
        'profile',
        'create',
        'by-cli',
        JSON.stringify([{ [`resources:${RC}`]: '1' }]),
      ]);
      expect(made.name).toBe('by-cli');
      const names = (await osc<Array<{ name: string }>>(['device', 'profile', 'list'])).map((p) => p.name);
      expect(names).toEqual(expect.arrayContaining([PROFILE, 'by-sdk', 'by-cli']));
      const shown = await osc<{ groups: unknown }>(['device', 'profile', 'show', made.uuid]);
      expect(shown.groups).toEqual([{ [`resources:${RC}`]: '1' }]);
      const arq = await osc<{ uuid: string; state: string }>(['arq', 'create', 'by-cli']);
      expect(arq.state).toBe('Initial');
      const listed = await osc<Array<{ uuid: string; state: string; device_profile_name: string }>>([
        'arq',
        'list',
      ]);
      expect(listed).toContainEqual(
        expect.objectContaining({ uuid: arq.uuid, device_profile_name: 'by-cli' }),
      );
      expect(listed).toContainEqual(expect.objectContaining({ uuid: sdk.arq.uuid, state: 'Initial' }));
      // Cleaned up through the CLI too (unbound ARQs: the owner may delete them).
      await run(OPENSTACK_CLI, [
        '--os-auth-type',
        'admin_token',
        '--os-token',
        'admin',
        '--os-endpoint',
        `${cyborgUrl}/v2`,
        'accelerator',
        'arq',
        'delete',
        arq.uuid,
        sdk.arq.uuid,
      ]);
      expect((await http('GET', `/v2/accelerator_requests/${arq.uuid}`, { token: 'admin' })).status).toBe(
        404,
      );
    },
    // Seven runs of the openstack CLI (a second or more each; more on a loaded machine).
    180_000,
  );
});
