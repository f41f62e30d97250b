/**
 * The Cyborg API over TLS (docs/cyborg.md "TLS"), with the real clients:
 * - served directly: HTTPS with the scheduler's own certificate and key (the
 *   gRPC side's files; gRPC here is mutual TLS, the Cyborg API asks for no
 *   client certificate), reached by `openstack accelerator …` with
 *   --os-cacert and by openstacksdk with the CA; the version document's links
 *   say https, and X-Forwarded-* headers are ignored (no proxy is trusted);
 * - behind a TLS-terminating proxy (node https → http, adding
 *   X-Forwarded-Proto and X-Forwarded-Host, as HAProxy or nginx do): the
 *   scheduler restarted with `plaintext` and `trustProxyHeaders`; the links
 *   name the proxy in https, so keystoneauth's version discovery from the
 *   proxy's root, and the CLI, go on through it.
 * A real Placement (noauth2), noauth callers, no Nova.
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { createServer as createHttpsServer, request as httpsRequest, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logging.js';
import { demoHostDefinition } from '../../src/sim/host.js';
import { tempDir } from '../helpers/agent.js';
import { makeCa } from '../helpers/certs.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import {
  type PlacementServer,
  providerView,
  startPlacementServer,
  testPlacementOptions,
} from '../helpers/placement.js';
import {
  available,
  OPENSTACK_CLI,
  openssl,
  openstackAccelerator,
  PYTHON,
  placementApi,
} from '../helpers/prerequisites.js';
import { eventually } from '../helpers/wait.js';

const HOST = 'tls-host';
const NVME0 = '0000:3d:00.0';
const RC = 'CUSTOM_PCI_144D_A824';
const PROFILE = 'nvme-tls';
const run = promisify(execFile);
const quiet = () => createLogger({ level: process.env.BERTH_LOG_LEVEL ?? 'silent' });
const have =
  available(openssl(), 'the Cyborg API over TLS') &&
  available(placementApi(), 'the Cyborg API over TLS') &&
  available(openstackAccelerator(), 'the Cyborg API over TLS');

type Outcome = { stdout: string; stderr: string; code: number };
const outcome = (p: Promise<{ stdout: string; stderr: string }>): Promise<Outcome> =>
  p.then(
    (r) => ({ ...r, code: 0 }),
    (e: { stdout?: string; stderr?: string; code?: number }) => ({
      stdout: e.stdout ?? '',
      stderr: e.stderr ?? String(e),
      code: typeof e.code === 'number' ? e.code : 1,
    }),
  );

describe.skipIf(!have)('the Cyborg API over TLS, and behind a TLS-terminating proxy', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let ca = '';
  let placement: PlacementServer;
  let c: Cluster;
  let proxy: Server | undefined;

  /** `openstack … accelerator …` with noauth's admin, verifying the server with the CA unless told not to. */
  const osc = (endpoint: string, args: string[], o: { cacert?: boolean } = {}) =>
    outcome(
      run(
        OPENSTACK_CLI,
        [
          ...(o.cacert === false ? [] : ['--os-cacert', ca]),
          '--os-auth-type',
          'admin_token',
          '--os-token',
          'admin',
          '--os-endpoint',
          endpoint,
          'accelerator',
          ...args,
        ],
        { timeout: 60_000 },
      ),
    );
  const python = (script: string, args: string[]) =>
    outcome(
      run(PYTHON, [join(import.meta.dirname, 'python', script), ...args], {
        env: { ...process.env, OS_CACERT: ca },
        timeout: 60_000,
      }),
    );
  const json = <T>(o: Outcome): T => {
    expect(o.code, o.stderr).toBe(0);
    return JSON.parse(o.stdout) as T;
  };

  beforeAll(async () => {
    dir = await tempDir('berth-cyborg-tls-');
    const authority = await makeCa(dir.path, 'cyborg-ca');
    ca = authority.ca;
    const schedulerCert = await authority.leaf('berth-scheduler');
    const agentCert = await authority.leaf(HOST);
    placement = await startPlacementServer();
    c = await startCluster([demoHostDefinition(HOST)], {
      scheduler: {
        logger: quiet(),
        // gRPC in mutual TLS, agents known by their certificates.
        tls: schedulerCert,
        auth: { mode: 'token', certRoles: { '*': 'agent' } },
        placement: testPlacementOptions(placement.url),
        cyborg: {
          listen: '127.0.0.1:0',
          auth: { type: 'noauth' },
          nova: null,
          timeoutSeconds: 3,
          retryMaxSeconds: 0.5,
        },
      },
      agent: { logger: quiet() },
      agentConfig: (config) => ({
        ...config,
        tls: { cert: agentCert.cert, key: agentCert.key, ca },
        auth: { cert_roles: { 'berth-scheduler': 'scheduler' } },
      }),
    });
    await eventually(
      () => providerView(placement, `${HOST}_${NVME0.toUpperCase()}`),
      (p) => p?.inventories[RC]?.reserved === 0,
      60_000,
    );
  }, 180_000);

  afterAll(async () => {
    await new Promise((r) => (proxy ? proxy.close(r) : r(null)));
    await c?.stop();
    await placement?.stop();
    await dir?.cleanup();
  });

  it('serves HTTPS with the scheduler’s certificate: the openstack CLI and openstacksdk with the CA, links in https', async () => {
    const cyborg = c.scheduler.cyborg!;
    expect(cyborg.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+\/v2$/);
    const endpoint = cyborg.url;
    // The CLI verifies the certificate: without the CA it refuses, with it it works.
    const unverified = await osc(endpoint, ['device', 'profile', 'list', '-f', 'json'], { cacert: false });
    expect(unverified.code).not.toBe(0);
    // (keystoneauth words the refused handshake as a discovery failure of the https URL.)
    expect(unverified.stderr).toMatch(
      /CERTIFICATE_VERIFY_FAILED|certificate verify failed|Unable to find a version discovery document at https:/i,
    );
    json(
      await osc(endpoint, [
        'device',
        'profile',
        'create',
        PROFILE,
        JSON.stringify([{ [`resources:${RC}`]: '1' }]),
        '-f',
        'json',
      ]),
    );
    const profiles = json<Array<{ name: string }>>(
      await osc(endpoint, ['device', 'profile', 'list', '-f', 'json']),
    );
    expect(profiles.map((p) => p.name)).toContain(PROFILE);
    const made = json<{ uuid: string; state: string }>(
      await osc(endpoint, ['arq', 'create', PROFILE, '-f', 'json']),
    );
    expect(made.state).toBe('Initial');
    // openstacksdk binds and unbinds it over HTTPS (the CA from $OS_CACERT); noauth: any service token is Nova's.
    const rp = (await providerView(placement, `${HOST}_${NVME0.toUpperCase()}`))!.uuid;
    const instance = randomUUID();
    const bound = json<{ uuid: string; error?: number; message?: string }>(
      await python('sdk_arq_patch.py', [endpoint, 'admin', 'nova', made.uuid, 'bind', HOST, instance, rp]),
    );
    expect(bound.error, bound.message).toBeUndefined();
    await eventually(
      async () => json<{ state: string }>(await osc(endpoint, ['arq', 'show', made.uuid, '-f', 'json'])),
      (a) => a.state === 'Bound',
      60_000,
    );
    const unbound = json<{ state: string; error?: number; message?: string }>(
      await python('sdk_arq_patch.py', [endpoint, 'admin', 'nova', made.uuid, 'unbind']),
    );
    expect(unbound.error, unbound.message).toBeUndefined();
    expect(unbound.state).toBe('Initial');
    expect((await osc(endpoint, ['arq', 'delete', made.uuid])).code).toBe(0);
    // The version document names https; no proxy is trusted, so forwarded headers change nothing.
    const found = json<{ endpoint: string; arqs: number }>(
      await python('cyborg_discover.py', [`https://${cyborg.address}/`, 'admin']),
    );
    expect(found.endpoint).toBe(`https://${cyborg.address}/v2/`);
    const spoofed = await fetchVia(cyborg.address, ca, {
      'X-Forwarded-Proto': 'http',
      'X-Forwarded-Host': 'evil.example',
    });
    expect(spoofed.links).toEqual([{ href: `https://${cyborg.address}/v2/`, rel: 'self' }]);
    // Plain HTTP to the TLS port gets no API.
    const plain = await fetch(`http://${cyborg.address}/v2`).then(
      (r) => `HTTP ${r.status}`,
      (e: Error) => e.message,
    );
    expect(plain).not.toBe('HTTP 200');
  }, 300_000);

  it('behind a TLS-terminating proxy (plaintext, trusted X-Forwarded-*): links name the proxy in https, clients follow them', async () => {
    await c.restartScheduler({
      cyborg: {
        listen: '127.0.0.1:0',
        auth: { type: 'noauth' },
        nova: null,
        timeoutSeconds: 3,
        retryMaxSeconds: 0.5,
        plaintext: true,
        trustProxyHeaders: true,
      },
    });
    const backend = c.scheduler.cyborg!;
    expect(backend.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/v2$/);
    const pem = (f: string) => readFile(f);
    const leaf = await makeCa(dir.path, 'proxy-ca').then((a) => a.leaf('proxy'));
    ca = leaf.ca;
    proxy = createHttpsServer({ cert: await pem(leaf.cert), key: await pem(leaf.key) }, (req, res) => {
      const [host, port] = backend.address.split(':');
      const out = httpRequest(
        {
          host,
          port: Number(port),
          method: req.method,
          path: req.url,
          headers: { ...req.headers, 'x-forwarded-proto': 'https', 'x-forwarded-host': req.headers.host },
        },
        (answer) => {
          res.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(res);
        },
      );
      out.on('error', () => res.writeHead(502).end());
      req.pipe(out);
    });
    await new Promise<void>((r) => proxy!.listen(0, '127.0.0.1', () => r()));
    const front = `127.0.0.1:${(proxy.address() as AddressInfo).port}`;
    // keystoneauth's discovery from the proxy's root follows the v2 link: https, through the proxy.
    const found = json<{ endpoint: string; arqs: number }>(
      await python('cyborg_discover.py', [`https://${front}/`, 'admin']),
    );
    expect(found.endpoint).toBe(`https://${front}/v2/`);
    // The CLI through the proxy.
    json(
      await osc(`https://${front}/v2`, [
        'device',
        'profile',
        'create',
        `${PROFILE}-proxied`,
        JSON.stringify([{ [`resources:${RC}`]: '1' }]),
        '-f',
        'json',
      ]),
    );
    const made = json<{ uuid: string }>(
      await osc(`https://${front}/v2`, ['arq', 'create', `${PROFILE}-proxied`, '-f', 'json']),
    );
    const listed = json<Array<{ uuid: string }>>(
      await osc(`https://${front}/v2`, ['arq', 'list', '-f', 'json']),
    );
    expect(listed.map((a) => a.uuid)).toContain(made.uuid);
    // Under /accelerator (as a proxy often maps it) the links keep the prefix.
    const prefixed = await fetchVia(front, ca, {}, '/accelerator/');
    expect(prefixed.links).toEqual([{ href: `https://${front}/accelerator/v2/`, rel: 'self' }]);
    // Straight to the backend, no forwarded headers: its own http links; a malformed header: 400 naming it.
    const direct = (await (await fetch(`http://${backend.address}/`)).json()) as {
      default_version: { links: unknown };
    };
    expect(direct.default_version.links).toEqual([{ href: `http://${backend.address}/v2/`, rel: 'self' }]);
    const bad = await fetch(`http://${backend.address}/v2`, { headers: { 'X-Forwarded-Proto': 'gopher' } });
    expect(bad.status).toBe(400);
    expect(JSON.parse(((await bad.json()) as { error_message: string }).error_message).faultstring).toBe(
      'X-Forwarded-Proto: "gopher": expected http or https',
    );
    const badHost = await fetch(`http://${backend.address}/v2`, {
      headers: { 'X-Forwarded-Host': 'a/b@c' },
    });
    expect(badHost.status).toBe(400);
    expect((await osc(`https://${front}/v2`, ['arq', 'delete', made.uuid])).code).toBe(0);
  }, 300_000);
});

/** GET `path` (default /) over HTTPS with the CA and extra headers: the default version's links. */
async function fetchVia(
  address: string,
  ca: string,
  headers: Record<string, string>,
  path = '/',
): Promise<{ links: unknown }> {
  const [host, port] = address.split(':');
  const caPem = await readFile(ca);
  const text = await new Promise<string>((resolve, reject) => {
    const req = httpsRequest({ host, port: Number(port), path, ca: caPem, headers }, (res) => {
      let body = '';
      res.on('data', (b: Buffer) => {
        body += b.toString();
      });
      res.on('end', () => resolve(body));
    });
    req.on('error', reject);
    req.end();
  });
  return { links: (JSON.parse(text) as { default_version: { links: unknown } }).default_version.links };
}
